"""flash-linear-attention's fused gated RMSNorm (PyPI `fla-core`, Triton, CUDA only).

Facts from fla-core 0.6.0 (fla/modules/norm/fused_norm_gate.py) that shape this adapter:
- `rms_norm_gated(x, g, weight, bias, activation='swish', ..., eps=1e-6)`; the module
  `FusedRMSNormGated` defaults to eps=1e-5 instead. We always pass the case's eps explicitly.
- Everything is computed in float32 and rounded once at the store: rounding model `fused`;
  y comes back in x's dtype.
- No zero-centred gamma: for zero_centered_gamma we pass `weight.float() + 1` (float32, so the
  +1 itself does not round) and autograd carries dweight back to the weight's dtype.
- The gate gradient is computed and rounded in x's dtype, not the gate's: with a float32 gate and
  a bf16 x the harness will (rightly) see dgate carry bf16 error.
- The gate activation is its `activation` argument: "swish" (= "silu") or "sigmoid" (`y = y *
  tl.sigmoid(g)`, `dg = dy * y * s * (1 - s)`: fla's KDA, GDN2 and Comba layers), passed from the
  case's `activation`.
- Its float32 math is Triton's fast class: `tl.sigmoid` (exp as ex2.approx of the float32-rounded
  t * log2 e, then div.full), `b_rstd = 1 / tl.sqrt(b_var + eps)` (sqrt.approx, div.full), the
  variance's `/ D`: math class `fast` (docs/budgets.md).

`fla-gated` is `RMSNormGated` (fla/modules/norm/layernorm_gated.py in 0.6.0, aliased as
fla.modules.layernorm_gated; Tri Dao's mamba_ssm kernel): groups and both orders, float32 inside,
y and dgate allocated like x and the gate (`empty_like`), dweight summed in float32 before its one
cast: rounding model `fused`. Its constructor defaults are eps=1e-5 and norm_before_gate=False (the
Mamba-2 order, unlike the harness's default), so both are always passed. No zero-centred gamma:
as for `fla`, the class's own `rmsnorm_fn` gets `weight.float() + 1`. The same kernel, the same
fast math (`tl.sigmoid`, `1 / tl.sqrt(var + eps)`). Its kernels hard-code the SiLU gate (`b_g *
tl.sigmoid(b_g)`, no activation argument in 0.6.0), so its factory takes no `activation`: sigmoid cases
are `skip` rows. mamba_ssm's own copy is harness/impls/mamba_adapter.py."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from harness.impls.base import Implementation, from_factory
from harness.impls.modfile import load_file, package_file


class FlaGatedRMSNorm(nn.Module):
    def __init__(self, fn, hidden_size, *, eps, zero_centered_gamma, dtype, device, activation="silu"):
        super().__init__()
        init = torch.zeros if zero_centered_gamma else torch.ones
        self.weight = nn.Parameter(init(hidden_size, dtype=dtype, device=device))
        self.fn, self.eps, self.zero_centered_gamma = fn, eps, zero_centered_gamma
        self.activation = "swish" if activation == "silu" else activation       # fla's names

    def forward(self, x, gate):
        w = self.weight.float() + 1 if self.zero_centered_gamma else self.weight
        return self.fn(x, gate, w, None, activation=self.activation, eps=self.eps)


class FlaRMSNormGated(nn.Module):
    """fla's RMSNormGated module; zero-centred gamma through the same kernel with 1 + w."""

    def __init__(self, cls, fn, hidden_size, *, eps, zero_centered_gamma, dtype, device, group_size=None,
                 norm_before_gate=True):
        super().__init__()
        self.inner = cls(hidden_size, eps=eps, group_size=group_size, norm_before_gate=norm_before_gate,
                         device=device, dtype=dtype)
        self.weight = self.inner.weight
        with torch.no_grad():
            self.weight.fill_(0.0 if zero_centered_gamma else 1.0)
        self.fn, self.zero_centered_gamma = fn, zero_centered_gamma

    def forward(self, x, gate):
        if not self.zero_centered_gamma:
            return self.inner(x, gate)
        m = self.inner
        return self.fn(x, self.weight.float() + 1, None, z=gate, eps=m.eps, group_size=m.group_size,
                       norm_before_gate=m.norm_before_gate)


def gated_implementation(kernel: Callable[[], tuple]) -> Implementation:
    """`fla-gated` from `kernel()`: fla's RMSNormGated class and its rmsnorm_fn (tests pass stand-ins)."""
    def factory(hidden_size, *, eps, zero_centered_gamma, dtype, device, group_size=None, norm_before_gate=True):
        cls, fn = kernel()
        return FlaRMSNormGated(cls, fn, hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma,
                               dtype=dtype, device=device, group_size=group_size,
                               norm_before_gate=norm_before_gate)

    return from_factory("fla-gated", factory, "builtin", rounding="fused", math="fast", devices=("cuda",),
                        notes="fla-core RMSNormGated (groups, both orders; norm_before_gate always passed)")


def fused_implementation(kernel: Callable[[], tuple]) -> Implementation:
    """`fla` from `kernel()`: fla's rms_norm_gated, in a 1-tuple (tests pass stand-ins)."""
    def factory(hidden_size, *, eps, zero_centered_gamma, dtype, device, activation="silu"):
        return FlaGatedRMSNorm(kernel()[0], hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma,
                               dtype=dtype, device=device, activation=activation)
    return from_factory("fla", factory, "builtin", rounding="fused", math="fast", devices=("cuda",),
                        notes="fla-core rms_norm_gated, activation 'swish' or 'sigmoid' (norm first, one group)")


# Where fla keeps each kernel (0.6.0's layout first), and what each entry takes from it.
KERNELS = {"fla": (("fla.modules.norm.fused_norm_gate", "fla.modules.fused_norm_gate"), ("rms_norm_gated",)),
           "fla-gated": (("fla.modules.norm.layernorm_gated", "fla.modules.layernorm_gated"),
                         ("RMSNormGated", "rmsnorm_fn"))}
NEEDS = ("triton",)                    # what the kernels' files import besides torch and fla


_LOADED: dict[str, tuple | ImportError] = {}      # entry -> its objects, or why they did not load
_FOUND: dict[str, tuple[str, Path]] = {}           # entry -> (fla's name for it, the file implementations() found)


def kernel_file(name: str) -> tuple[Path | None, str, str]:
    """(the file of entry `name`'s kernels in the installed fla — the first of its layouts that
    exists —, fla's module name for it, "") or (None, "", why not). Finding executes nothing."""
    files = {m.removeprefix("fla.").replace(".", "/") + ".py": m for m in KERNELS[name][0]}
    path, why = package_file("fla", tuple(files), NEEDS)
    if path is None:
        return None, "", why
    return path, next(m for rel, m in files.items() if path.as_posix().endswith(rel)), ""


def load(name: str) -> tuple:
    """Entry `name`'s objects, from the one file that holds its kernels, executed as a module of its
    own (harness/impls/modfile.py) at its first factory call — in the implementation's process,
    never in the command that lists it — or ImportError saying why not (remembered: a broken
    install is loaded once a process, not once a pair).

    Not through fla's packages: `fla.modules`' __init__ imports every module of fla.modules (its
    convolutions, losses, rotary embeddings: dozens of Triton files, seconds of a worker's start)
    for two files that need none of them. The file's own imports (`fla.utils`, `fla.backends`,
    triton, einops) are fla's real modules; on NVIDIA no backend registers a replacement for
    these kernels (fla-core 0.6.0 registers its Ascend ones only on an NPU), so the functions run
    are the ones `from fla.modules import ...` gives. (With the whole flash-linear-attention
    package installed, fla's own __init__ imports its layers, and they fla.modules: the saving is
    fla-core's alone.) No fla release's two files import relatively, so nothing falls back to the
    package: a file that does not load is the error the factory raises."""
    if name not in _LOADED:
        module, path = _FOUND.get(name) or (None, None)
        if path is None:
            path, module, why = kernel_file(name)
        try:
            if path is None:
                raise ModuleNotFoundError(why)
            mod = load_file(path, module.replace(".", "_"))
            _LOADED[name] = tuple(getattr(mod, n) for n in KERNELS[name][1])
        except Exception as e:              # triton missing or broken, or a layout without these names
            _LOADED[name] = ImportError(f"fla not importable ({type(e).__name__}: {e})")
    got = _LOADED[name]
    if isinstance(got, ImportError):
        raise ImportError(str(got))
    return got


def prepare(name: str) -> None:
    """Import what `name` wraps now (a spare worker, before its first pair)."""
    load(name)


# The names implementations() lists (resolving a name lists only the module that has it).
NAMES = tuple(KERNELS)


def implementations() -> list[Implementation]:
    """Both entries, found without importing fla (its package __init__ imports its layers, models
    and transformers where installed: seconds): the package's kernel files located (importlib's
    finders execute nothing for a top-level name), the kernels loaded by the factory."""
    out = []
    for name, build in (("fla", fused_implementation), ("fla-gated", gated_implementation)):
        path, module, why = kernel_file(name)
        if path is None:                # never skip silently: say why
            out.append(Implementation(name, None, devices=("cuda",), source="builtin", spec=name, unavailable=why,
                                      notes="pip install fla-core (CUDA + Triton)"))
        else:                           # the file found is the one loaded: its own error, if any
            _FOUND[name] = (module, path)
            out.append(build(functools.partial(load, name)))
    return out
