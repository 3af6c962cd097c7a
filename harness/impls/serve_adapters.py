"""The serving stacks' forward-only Triton gated norms (CUDA + Triton; `backward = False`): sglang's
and vLLM's, each loaded from its installed package's file (harness/impls/modfile.py), never through
the package, whose __init__ imports the whole serving stack. Each file imports a few helpers of its
package; the stand-ins below replace exactly those, and each says why it cannot change a value.

Facts from sglang 0.5.23 and vLLM 0.26.0 that shape these adapters (read from the wheels' files):
- `sglang-gated`: sglang/kernels/ops/attention/fla/layernorm_gated.py, `RMSNorm(hidden_size, eps,
  group_size, norm_before_gate, device, dtype, activation="swish")`, `forward(x, z)`, through
  `LayerNormFn`, an autograd Function with no backward. Tri Dao's kernel with multi-row tiles
  (`_layer_norm_fwd_1pass_kernel`): x and z loaded as float32, `rstd = tl.rsqrt(var + eps)`,
  `xhat * w`, the gate `z * tl.sigmoid(z)` (or `tl.sigmoid(z)`), one store into `empty_like(x)`:
  rounding model `fused`, math class `fast` (rsqrt.approx, ex2.approx behind tl.sigmoid). Groups and
  both orders; silu ("swish") and sigmoid gates.
- `sglang-fused`: sglang/kernels/ops/attention/fla/fused_norm_gate.py, `FusedRMSNormGated(hidden_size,
  elementwise_affine, eps, activation, device, dtype)`, `forward(x, g)`: norm first, one group,
  fla's kernels (`1 / tl.sqrt(var + eps)`, `tl.sigmoid`), one store: `fused`, `fast`. Its forward
  writes y into x's own storage (`y = x` when no out dtype is given), so the harness names x among
  the inputs its call modified (its own copy: legitimate); its autograd Function has no backward.
- `vllm-gated`: vllm/third_party/flash_linear_attention/ops/layernorm_guard.py in 0.26.0
  (vllm/model_executor/layers/fla/ops/layernorm_guard.py in earlier releases), `RMSNormGated(
  hidden_size, eps, group_size, norm_before_gate=False, device, dtype, activation)` — the Mamba-2
  order by default, so the order is always passed — calling the kernel directly ("vLLM is
  inference-only so there is no backward pass"): the same kernel as sglang-gated, `fused`, `fast`.
- None has zero-centred gamma (declined); a group (sglang-fused: a row) wider than 64 KiB of x's
  dtype raises in each (declined)."""
from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from harness.impls.base import Implementation, from_factory
from harness.impls.modfile import PREFIX, load_file, package_file, stand_in

NEEDS = ("triton", "einops")


def cdiv(a: int, b: int) -> int:
    """Ceiling division: sglang.srt.utils' and vllm.utils.math_utils' definition."""
    return -(a // -b)


def next_power_of_2(n: int) -> int:
    """sglang.srt.utils' and vllm.utils.math_utils' definition."""
    return 1 if n < 1 else 1 << (n - 1).bit_length()


def sm_count(index=None) -> int:
    return torch.cuda.get_device_properties(index if index is not None else torch.cuda.current_device()) \
        .multi_processor_count


def device_context(device):
    """The CUDA device context a launch runs in: where the kernel runs, not what it computes."""
    return torch.cuda.device(device) if torch.device(device).type == "cuda" else contextlib.nullcontext()


def _no_arch(*_a, **_k):
    raise RuntimeError("get_jit_cuda_arch: only asked for under PDL, which the stand-in turns off")


def sglang_stand_ins(_parent: str) -> dict:
    """sglang's helper imports of both files."""
    enum = type("Enum", (), {"PREFILL": "prefill", "TC_PIECEWISE": "tc_piecewise"})
    return {
        "sglang.kernels.jit.utils": stand_in(
            "sglang.kernels.jit.utils", "PDL off: programmatic dependent launch only overlaps a launch with the "
            "previous kernel's tail (gdc_wait before the loads); the arithmetic is the same code",
            is_arch_support_pdl=lambda *a, **k: False, get_jit_cuda_arch=_no_arch),
        "sglang.srt.batch_invariant_ops": stand_in(
            "sglang.srt.batch_invariant_ops", "off: the mode only fixes the rows per tile, each row's "
            "arithmetic is its own", is_batch_invariant_mode_enabled=lambda: False),
        "sglang.srt.model_executor.cuda_graph_config": stand_in(
            "sglang.srt.model_executor.cuda_graph_config", "no CUDA-graph backend: it too only fixes the rows "
            "per tile", Backend=enum, Phase=enum, check_cuda_graph_backend=lambda *a, **k: False),
        "sglang.srt.utils": stand_in(
            "sglang.srt.utils", "integer helpers as sglang defines them; not a CPU or NPU build (the Triton "
            "path is what runs on CUDA); the device context selects where the kernel runs",
            cdiv=cdiv, next_power_of_2=next_power_of_2, cpu_has_amx_support=lambda: False,
            is_cpu=lambda: False, is_npu=lambda: False, device_context=device_context),
    }


def input_guard(fn: Callable) -> Callable:
    """vLLM's fla `input_guard`: tensor arguments made contiguous, the call run on their device."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        args = [a.contiguous() if isinstance(a, torch.Tensor) else a for a in args]
        kwargs = {k: v.contiguous() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        first = next((a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)), None)
        with device_context(first.device) if first is not None else contextlib.nullcontext():
            return fn(*args, **kwargs)
    return wrapper


def vllm_stand_ins(parent: str) -> dict:
    """vLLM's helper imports of layernorm_guard.py; `parent`: the loaded module's package, where its
    relative `from .utils import input_guard` looks."""
    return {
        "vllm.triton_utils": stand_in(
            "vllm.triton_utils", "vLLM re-exports Triton itself: the same modules",
            triton=importlib.import_module("triton"), tl=importlib.import_module("triton.language")),
        "vllm.utils.math_utils": stand_in(
            "vllm.utils.math_utils", "integer helpers as vLLM defines them", cdiv=cdiv,
            next_power_of_2=next_power_of_2),
        "vllm.utils.platform_utils": stand_in(
            "vllm.utils.platform_utils", "the SM count, as vLLM's CUDA platform reads it: it only chooses the "
            "rows per tile", num_compute_units=sm_count),
        f"{parent}.utils": stand_in(
            f"{parent}.utils", "contiguous inputs and the device context, as vLLM's own input_guard",
            input_guard=input_guard),
    }


@dataclass(frozen=True)
class Kernel:
    """One serving stack's gated norm: where its file is, what it imports, how it is built."""
    name: str
    package: str                      # the top-level package its file belongs to
    files: tuple[str, ...]            # the file, relative to the package folder (releases moved it)
    stand_ins: Callable[[str], dict]
    attr: str                         # the module class in that file
    groups: bool                      # takes group_size and norm_before_gate
    notes: str


KERNELS = (
    Kernel("sglang-gated", "sglang", ("kernels/ops/attention/fla/layernorm_gated.py",), sglang_stand_ins, "RMSNorm",
           True, "sglang's forward-only Triton RMSNorm (fla layernorm_gated; groups, both orders, silu/sigmoid)"),
    Kernel("sglang-fused", "sglang", ("kernels/ops/attention/fla/fused_norm_gate.py",), sglang_stand_ins,
           "FusedRMSNormGated", False, "sglang's forward-only FusedRMSNormGated (norm first, silu/sigmoid)"),
    Kernel("vllm-gated", "vllm", ("third_party/flash_linear_attention/ops/layernorm_guard.py",
                                  "model_executor/layers/fla/ops/layernorm_guard.py"), vllm_stand_ins,
           "RMSNormGated", True, "vLLM's forward-only Triton RMSNormGated (layernorm_guard; groups, both orders, "
           "silu/sigmoid)"),
)


def module_name(k: Kernel, path: Path, root: Path) -> str:
    """The file's dotted name under its package (its relative imports resolve beside it)."""
    return ".".join((k.package, *path.relative_to(root).with_suffix("").parts))


@functools.cache
def load_class(name: str, path: str, root: str):
    k = next(k for k in KERNELS if k.name == name)
    dotted = module_name(k, Path(path), Path(root))
    module = load_file(path, dotted, k.stand_ins(f"{PREFIX}.{dotted.rpartition('.')[0]}"))
    return getattr(module, k.attr)


class ServeGatedNorm(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.weight = inner.weight

    def forward(self, x, gate):
        return self.inner(x, gate)


def supports_for(k: Kernel) -> Callable:
    def supports(case) -> str | None:
        if case.zero_centered_gamma:
            return f"{k.name} has no zero-centred gamma"
        width = (case.group if k.groups else case.hidden) * {"fp32": 4}.get(case.dtype, 2)
        if width > 65536:
            return f"{k.name}: a {'group' if k.groups else 'row'} of {width} bytes (its kernel takes at most 64 KiB)"
        return None
    return supports


def adapter(k: Kernel, path: Path, root: Path) -> Implementation:
    def load():
        return load_class(k.name, str(path), str(root))

    if k.groups:
        def factory(hidden_size, *, eps, zero_centered_gamma, dtype, device, group_size=None, norm_before_gate=True,
                    activation="silu"):
            return ServeGatedNorm(load()(hidden_size, eps=eps, group_size=group_size, norm_before_gate=norm_before_gate,
                                         device=device, dtype=dtype, activation=_name(activation)))
    else:
        def factory(hidden_size, *, eps, zero_centered_gamma, dtype, device, activation="silu"):
            return ServeGatedNorm(load()(hidden_size, eps=eps, activation=_name(activation), device=device,
                                         dtype=dtype))
    return from_factory(k.name, factory, "builtin", rounding="fused", math="fast", devices=("cuda",), backward=False,
                        supports=supports_for(k), notes=f"{k.notes}; loaded from {k.package}'s file")


def _name(activation: str) -> str:
    return "swish" if activation == "silu" else activation          # the kernels' own names


# The names implementations() lists (resolving a name lists only the module that has it).
NAMES = tuple(k.name for k in KERNELS)


def implementations() -> list[Implementation]:
    out = []
    for k in KERNELS:
        path, why = package_file(k.package, k.files, NEEDS)
        if path is None:                                  # never skip silently: say why
            out.append(Implementation(k.name, None, devices=("cuda",), source="builtin", spec=k.name, unavailable=why,
                                      notes=k.notes, backward=False))
            continue
        root = next(Path(p) for p in importlib.util.find_spec(k.package).submodule_search_locations
                    if path.is_relative_to(p))
        out.append(adapter(k, path, root))
    return out
