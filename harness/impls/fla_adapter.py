"""flash-linear-attention's fused gated RMSNorm (PyPI `fla-core`, Triton, CUDA only).

Facts from fla-core 0.6.0 (fla/modules/norm/fused_norm_gate.py) that shape this adapter:
- `rms_norm_gated(x, g, weight, bias, activation='swish', ..., eps=1e-6)`; the module
  `FusedRMSNormGated` defaults to eps=1e-5 instead. We always pass the case's eps explicitly.
- Everything is computed in float32 and rounded once at the store: rounding model `fused`;
  y comes back in x's dtype.
- No zero-centred gamma: for zero_centered_gamma we pass `weight.float() + 1` (float32, so the
  +1 itself does not round) and autograd carries dweight back to the weight's dtype.
- The gate gradient is computed and rounded in x's dtype, not the gate's: with a float32 gate and
  a bf16 x the harness will (rightly) see dgate carry bf16 error."""
from __future__ import annotations

import torch
from torch import nn

from harness.impls.base import Implementation, from_factory


class FlaGatedRMSNorm(nn.Module):
    def __init__(self, fn, hidden_size, *, eps, zero_centered_gamma, dtype, device):
        super().__init__()
        init = torch.zeros if zero_centered_gamma else torch.ones
        self.weight = nn.Parameter(init(hidden_size, dtype=dtype, device=device))
        self.fn, self.eps, self.zero_centered_gamma = fn, eps, zero_centered_gamma

    def forward(self, x, gate):
        w = self.weight.float() + 1 if self.zero_centered_gamma else self.weight
        return self.fn(x, gate, w, None, activation="swish", eps=self.eps)


def implementations() -> list[Implementation]:
    try:
        from fla.modules.norm.fused_norm_gate import rms_norm_gated
    except Exception:
        try:
            from fla.modules.fused_norm_gate import rms_norm_gated
        except Exception as e:  # not installed, or triton missing: say so, never skip silently
            return [Implementation("fla", None, devices=("cuda",), source="builtin",
                                   unavailable=f"fla not importable ({type(e).__name__}: {e})",
                                   notes="pip install fla-core (CUDA + Triton)")]

    def factory(hidden_size, *, eps, zero_centered_gamma, dtype, device):
        return FlaGatedRMSNorm(rms_norm_gated, hidden_size, eps=eps,
                               zero_centered_gamma=zero_centered_gamma, dtype=dtype, device=device)

    return [from_factory("fla", factory, "builtin", rounding="fused", devices=("cuda",),
                         notes="fla-core rms_norm_gated, activation='swish' (norm first, one group)")]
