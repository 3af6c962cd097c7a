"""mamba_ssm's Triton gated RMSNorm (the `mamba` extra; CUDA + Triton), Mamba-2's reference kernel.

Facts from mamba_ssm 2.3.2.post1 (mamba_ssm/ops/triton/layernorm_gated.py) that shape this adapter:
- `RMSNorm(hidden_size, eps=1e-5, group_size=None, norm_before_gate=True, device=None, dtype=None)`,
  `forward(x, z)`: groups and both orders (norm(x) * silu(z), or norm(x * silu(z))); the weight is
  initialised to ones and there is no bias. The case's eps, group size and order are always passed.
- One forward kernel and one backward kernel compute everything in float32 and round once at the
  store, y in x's dtype and dz in the gate's (`empty_like`), dweight summed in float32 before its
  one cast to the weight's dtype: rounding model `fused`.
- Its float32 math is Triton's fast class: `tl.sigmoid` (ex2.approx of the float32-rounded
  t * log2 e, and div.full), `rstd = 1 / tl.sqrt(var + eps)` (sqrt.approx and div.full), the
  variance's `/ N`: math class `fast` (docs/budgets.md).
- No zero-centred gamma: declined through `supports`.
- PyPI has only an sdist; `MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE pip wheel --no-deps
  --no-build-isolation mamba-ssm==2.3.2.post1` builds a pure-Python wheel (torch must be installed).
  Its package __init__ imports the compiled extension `selective_scan_cuda`, which that wheel lacks,
  so the module is loaded from its file in the installed package (harness/impls/modfile.py), never
  through the package; it needs torch, triton and einops. `implementations()` only finds the file (every harness process
  lists the built-ins); the factory loads it on first use."""
from __future__ import annotations

import functools
from pathlib import Path

from torch import nn

from harness.impls.base import Implementation, from_factory
from harness.impls.modfile import load_file, package_file

PACKAGE = "mamba_ssm"
MODULE_FILE = "ops/triton/layernorm_gated.py"
NEEDS = ("triton", "einops")


def module_path() -> tuple[Path | None, str]:
    """(the installed layernorm_gated.py, "") or (None, why not)."""
    path, why = package_file(PACKAGE, (MODULE_FILE,), NEEDS)
    if path is None:
        why += " (pip install the wheel and einops as harness/impls/mamba_adapter.py says)"
    return path, why


@functools.cache
def load_rmsnorm(path: str):
    """mamba_ssm's RMSNorm class, from its file (not through the package's __init__; it imports
    only torch, triton and einops: no stand-ins)."""
    return load_file(path, "mamba_ssm_layernorm_gated").RMSNorm


class MambaGatedRMSNorm(nn.Module):
    def __init__(self, cls, hidden_size, *, eps, dtype, device, group_size=None, norm_before_gate=True):
        super().__init__()
        self.inner = cls(hidden_size, eps=eps, group_size=group_size, norm_before_gate=norm_before_gate,
                         device=device, dtype=dtype)
        self.weight = self.inner.weight

    def forward(self, x, gate):
        return self.inner(x, gate)


def no_zero_centred_gamma(case) -> str | None:
    return "mamba_ssm's RMSNorm has no zero-centred gamma" if case.zero_centered_gamma else None


def adapter(path: Path) -> Implementation:
    def factory(hidden_size, *, eps, zero_centered_gamma, dtype, device, group_size=None, norm_before_gate=True):
        return MambaGatedRMSNorm(load_rmsnorm(str(path)), hidden_size, eps=eps, dtype=dtype, device=device,
                                 group_size=group_size, norm_before_gate=norm_before_gate)

    return from_factory("mamba", factory, "builtin", rounding="fused", math="fast", devices=("cuda",),
                        supports=no_zero_centred_gamma,
                        notes="mamba_ssm RMSNorm (Triton; groups, both orders; loaded from its file)")


# The names implementations() lists (resolving a name lists only the module that has it).
NAMES = ("mamba",)


def prepare(name: str) -> None:
    """Load mamba_ssm's kernel file now (a spare worker, before its first pair)."""
    load_rmsnorm(str(module_path()[0]))


def implementations() -> list[Implementation]:
    path, why = module_path()
    if path is None:                  # never skip silently: say why
        return [Implementation("mamba", None, devices=("cuda",), source="builtin", spec="mamba", unavailable=why,
                               notes="mamba_ssm's Triton RMSNorm (the `mamba` extra)")]
    return [adapter(path)]
