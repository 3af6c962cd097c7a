"""HF transformers' gated RMSNorm modules (the `hf` extra), each as the built-in model it realises.

Facts from transformers 5.24.0 (5.17.0 differs where noted) that shape these adapters:
- `Qwen3NextRMSNormGated(hidden_size, eps=1e-6)`: norm first, one group; x*rstd in float32, rounded
  to x's dtype, then `weight * xhat` in PyTorch's promoted dtype, times silu(gate) in float32, one
  cast to x's dtype: model `xhat`. (`Qwen3_5RMSNormGated`, `OlmoHybridRMSNormGated` and
  `Qwen4ExpTextRMSNormGated(hidden_size, eps=1e-6, activation="silu")` are the same code. Its
  `use_kernel_forward_from_hub` decoration is inert unless a model is kernelized.)
- `LaraMiniRMSNormGated(hidden_size, eps=1e-6)`: norm first, one group, the weight cast to float32
  too, one cast at the end: model `fused`; any rank. (Not in 5.17.0.)
- `KimiLinearRMSNormGated`, `BailingHybridRMSNormGated`, `Glm5NextTextRMSNormGated`
  (`cls(hidden_size, eps=1e-6, **kwargs)`, called `m(hidden_states, gate)`): the LaraMini code with
  `ACT2FN["sigmoid"]` hard-coded (`self.activation = "sigmoid"`; an `activation=` keyword would vanish
  into **kwargs): norm first, one group, float32 throughout, one cast: model `fused`, sigmoid cases
  only. `Qwen4ExpTextRMSNormGated` takes `activation=` ("silu" or "sigmoid") as a named argument and
  gets it; the others' constructors have none, and their `supports` declines the activations they
  lack.
- `FalconH1RMSNormGated(hidden_size, eps=1e-6, n_groups=1, norm_before_gate=True)`: both orders and
  groups, everything in float32 with the weight too, one cast at the end: model `fused`. It takes
  only 2-D or 3-D input (5.17.0 also squeezes a 3-D input whose second dimension is 1), so the
  adapter flattens x and the gate to 2-D and restores the shape.
- `MambaRMSNormGated(hidden_size, group_size, eps=1e-6)` (mamba2; `Zamba2RMSNormGated`,
  `BambaRMSNormGated`, `NemotronHRMSNormGated` and `GraniteMoeHybridRMSNormGated` are the same
  code; 5.17.0 has no `NemotronHRMSNormGated`): gate first always; xhat rounded to x's dtype, then
  `weight * xhat` with no final cast: model `xhat`, and y comes back in promote(weight, x) — float32
  for a float32 weight and a bf16 x, which the harness reports as a contract failure (the adapter
  does not cast to hide it). In 5.17.0 and 4.x it has no `group_size` (one group): grouped cases
  are then `Unsupported`.
- None has zero-centred gamma (declined by `supports`), and each hard-codes an eps default: the
  case's eps is always passed.

Importing a modeling module takes seconds (transformers' whole model stack; Qwen3-Next's also
starts CUDA's driver: docs/performance.md §13), and every harness process lists the built-ins, so
`implementations()` only finds the class in transformers' source tree (a missing package or class
is `unavailable`, with the reason), and the factory takes the class out of its file on first use
with only the imports it uses (`load`: torch for the Mamba family, transformers' ACT2FN and its
hub decorator for the Qwen3-Next family): the file's own code, compiled from its own source, none
of the rest of the file run (tests/test_load_class.py compares every class with the one the import gives)."""
from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from harness.impls.base import Implementation, from_factory
from harness.impls.modfile import load_class
from harness.references.errors import Unsupported


@dataclass(frozen=True)
class HfClass:
    name: str          # the implementation's name
    model: str         # transformers.models.<model>.modeling_<model>
    cls: str
    rounding: str
    order: str         # "norm" (norm first only), "gate" (gate first only), "both"
    notes: str
    findings: tuple = ()     # its known departures from the contract: reported, and known to selftest
    activations: tuple = ("silu",)    # the gate activations it computes (hard-coded or its argument)

    @property
    def module(self) -> str:
        return f"transformers.models.{self.model}.modeling_{self.model}"


CLASSES = (
    HfClass("hf-qwen3next", "qwen3_next", "Qwen3NextRMSNormGated", "xhat", "norm",
            "HF Qwen3NextRMSNormGated: xhat rounded to x's dtype, gamma product in the promoted dtype"),
    HfClass("hf-falconh1", "falcon_h1", "FalconH1RMSNormGated", "fused", "both",
            "HF FalconH1RMSNormGated (n_groups = hidden / group_size): float32 throughout, one cast"),
    HfClass("hf-mamba2", "mamba2", "MambaRMSNormGated", "xhat", "gate",
            "HF MambaRMSNormGated: gate first only, y = weight * xhat with no final cast",
            ("y dtype float32, expected",)),
    HfClass("hf-zamba2", "zamba2", "Zamba2RMSNormGated", "xhat", "gate",
            "HF Zamba2RMSNormGated: gate first only, y = weight * xhat with no final cast",
            ("y dtype float32, expected",)),
    HfClass("hf-qwen35", "qwen3_5", "Qwen3_5RMSNormGated", "xhat", "norm",
            "HF Qwen3_5RMSNormGated (the Qwen3-Next code): xhat rounded to x's dtype"),
    HfClass("hf-qwen4exp", "qwen4_exp", "Qwen4ExpTextRMSNormGated", "xhat", "norm",
            "HF Qwen4ExpTextRMSNormGated (the Qwen3-Next code, activation='silu' or 'sigmoid'): xhat rounded "
            "to x's dtype", activations=("silu", "sigmoid")),
    HfClass("hf-olmohybrid", "olmo_hybrid", "OlmoHybridRMSNormGated", "xhat", "norm",
            "HF OlmoHybridRMSNormGated (the Qwen3-Next code): xhat rounded to x's dtype"),
    HfClass("hf-laramini", "lara_mini", "LaraMiniRMSNormGated", "fused", "norm",
            "HF LaraMiniRMSNormGated: norm first, one group, float32 throughout (the weight too), one cast"),
    HfClass("hf-nemotronh", "nemotron_h", "NemotronHRMSNormGated", "xhat", "gate",
            "HF NemotronHRMSNormGated (the Mamba code): gate first only, y = weight * xhat with no final cast",
            ("y dtype float32, expected",)),
    HfClass("hf-granitemoehybrid", "granitemoehybrid", "GraniteMoeHybridRMSNormGated", "xhat", "gate",
            "HF GraniteMoeHybridRMSNormGated (the Mamba code): gate first only, y = weight * xhat with no final cast",
            ("y dtype float32, expected",)),
    HfClass("hf-bamba", "bamba", "BambaRMSNormGated", "xhat", "gate",
            "HF BambaRMSNormGated (the Mamba code): gate first only, y = weight * xhat with no final cast",
            ("y dtype float32, expected",)),
    HfClass("hf-kimilinear", "kimi_linear", "KimiLinearRMSNormGated", "fused", "norm",
            "HF KimiLinearRMSNormGated: sigmoid gate, norm first, float32 throughout, one cast",
            activations=("sigmoid",)),
    HfClass("hf-bailinghybrid", "bailing_hybrid", "BailingHybridRMSNormGated", "fused", "norm",
            "HF BailingHybridRMSNormGated: sigmoid gate, norm first, float32 throughout, one cast",
            activations=("sigmoid",)),
    HfClass("hf-glm5next", "glm5_next", "Glm5NextTextRMSNormGated", "fused", "norm",
            "HF Glm5NextTextRMSNormGated: sigmoid gate, norm first, float32 throughout, one cast",
            activations=("sigmoid",)),
)


def missing(c: HfClass) -> str | None:
    """Why `c` cannot be loaded here, or None; reads transformers' files without importing them."""
    path = modeling_file(c)
    if path is None:
        return "transformers not installed (pip install '.[hf]')"
    version = importlib.metadata.version("transformers")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return f"transformers {version} has no {c.module}"
    if f"class {c.cls}(" not in text:
        return f"transformers {version}'s {c.module} has no {c.cls}"
    return None


def modeling_file(c: HfClass) -> Path | None:
    """Where transformers keeps `c`'s modeling file (found, not imported), or None without transformers."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0], "models", c.model, f"modeling_{c.model}.py")


@functools.cache
def load(c: HfClass) -> type:
    """The class, taken out of its modeling file with the imports it uses (harness.impls.modfile:
    the file's own code objects, bound to transformers' own ACT2FN and decorator, where it uses
    them); the modeling module itself imported only where the class is not self-contained."""
    path = modeling_file(c)
    if path is not None:
        try:
            return load_class(path, c.module.rsplit(".", 1)[0], c.cls)
        except Exception:            # noqa: BLE001 — NotSelfContained, or a file it cannot take apart: the import decides
            pass
    return getattr(importlib.import_module(c.module), c.cls)


def _no_zero_centred(c: HfClass, zero_centered_gamma: bool) -> None:
    if zero_centered_gamma:
        raise Unsupported(f"{c.cls} has no zero-centred gamma")


class Flat2d(nn.Module):
    """Runs a module that takes only 2-D/3-D input on x and gate flattened to [tokens, hidden]."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self.weight = inner.weight

    def forward(self, x, gate):
        shape = x.shape
        y = self.inner(x.reshape(-1, shape[-1]), gate.reshape(-1, shape[-1]))
        return y.reshape(shape)


def _activation_only(c: HfClass, activation: str) -> str | None:
    return None if activation in c.activations else f"{c.cls} gates with {' / '.join(c.activations)} only"


def _norm_first_factory(c: HfClass):
    def factory(hidden_size, *, eps, zero_centered_gamma, dtype, device, activation="silu"):
        _no_zero_centred(c, zero_centered_gamma)
        if _activation_only(c, activation):
            raise Unsupported(_activation_only(c, activation))
        cls = load(c)
        named = "activation" in inspect.signature(cls.__init__).parameters      # not swallowed by **kwargs
        kw = {"activation": activation} if named else {}
        return cls(hidden_size, eps=eps, **kw).to(device=device, dtype=dtype)
    return factory


def _falcon_factory(c: HfClass):
    def factory(hidden_size, *, eps, zero_centered_gamma, dtype, device, group_size=None, norm_before_gate=True):
        _no_zero_centred(c, zero_centered_gamma)
        module = load(c)(hidden_size, eps=eps, n_groups=hidden_size // (group_size or hidden_size),
                                       norm_before_gate=norm_before_gate)
        return Flat2d(module.to(device=device, dtype=dtype))
    return factory


def _gate_first_factory(c: HfClass):
    def factory(hidden_size, *, eps, zero_centered_gamma, dtype, device, group_size=None, norm_before_gate=True):
        _no_zero_centred(c, zero_centered_gamma)
        if norm_before_gate:
            raise Unsupported(f"{c.cls} gates first only (norm_before_gate=False)")
        cls = load(c)
        if "group_size" in inspect.signature(cls.__init__).parameters:
            module = cls(hidden_size, group_size or hidden_size, eps=eps)
        elif group_size not in (None, hidden_size):
            raise Unsupported(f"this transformers' {c.cls} has no group_size (one group only)")
        else:
            module = cls(hidden_size, eps=eps)
        return module.to(device=device, dtype=dtype)
    return factory


_FACTORIES = {"norm": _norm_first_factory, "both": _falcon_factory, "gate": _gate_first_factory}


def supports_for(c: HfClass):
    """The cases `c` declines before running (variants its factory does not take skip by signature)."""
    def supports(case) -> str | None:
        if case.zero_centered_gamma:
            return f"{c.cls} has no zero-centred gamma"
        if c.order == "gate" and case.norm_before_gate:
            return f"{c.cls} gates first only (norm_before_gate=False)"
        return _activation_only(c, case.activation)
    return supports


def factory_for(c: HfClass):
    return _FACTORIES[c.order](c)


def implementation(c: HfClass) -> Implementation:
    why = missing(c)
    if why:
        return Implementation(c.name, None, source="builtin", spec=c.name, unavailable=why, notes=c.notes)
    return from_factory(c.name, factory_for(c), "builtin", rounding=c.rounding, supports=supports_for(c),
                        notes=c.notes, findings=c.findings)


# The names implementations() lists (resolving a name lists only the module that has it).
NAMES = tuple(c.name for c in CLASSES)


def prepare(name: str) -> None:
    """Load the class `name` wraps now (a spare worker, before its first pair)."""
    c = next(c for c in CLASSES if c.name == name)
    load(c)


def implementations() -> list[Implementation]:
    return [implementation(c) for c in CLASSES]
