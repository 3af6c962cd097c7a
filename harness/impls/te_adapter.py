"""TransformerEngine: te_ops.Sequential(te_ops.RMSNorm(...), te_ops.SiLUGate()).

TE's RMSNorm computes in the weight's dtype, so the activation dtype follows the weight
(`act_follows="weight"`); the two ops round n and dn between them: rounding model `chain`.
TE cannot be installed on the CI machines: the adapter is exercised against a stand-in with TE's
API shape in tests, and reports exactly why it is unavailable otherwise."""
from __future__ import annotations

from torch import nn

from harness.impls.base import Implementation, from_factory


class TeGatedRMSNorm(nn.Module):
    def __init__(self, te_ops, hidden_size, *, eps, zero_centered_gamma, dtype, device):
        super().__init__()
        norm = te_ops.RMSNorm(hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma,
                              device=device, dtype=dtype)
        self.seq = te_ops.Sequential(norm, te_ops.SiLUGate())
        self.weight = norm.weight

    def forward(self, x, gate):
        return self.seq(x, gate)


# The names implementations() lists (resolving a name lists only the module that has it).
NAMES = ("te",)


def implementations(te_ops=None) -> list[Implementation]:
    def unavailable(why):
        return [Implementation("te", None, act_follows="weight", devices=("cuda",), unavailable=why)]
    if te_ops is None:
        try:
            import transformer_engine.pytorch.ops as te_ops
        except Exception as e:
            return unavailable(f"transformer_engine not importable ({type(e).__name__})")
    if not hasattr(te_ops, "SiLUGate"):
        return unavailable("transformer_engine has no SiLUGate")

    def factory(hidden_size, *, eps, zero_centered_gamma, dtype, device):
        return TeGatedRMSNorm(te_ops, hidden_size, eps=eps, zero_centered_gamma=zero_centered_gamma,
                              dtype=dtype, device=device)

    return [from_factory("te", factory, "builtin", rounding="chain", act_follows="weight", devices=("cuda",),
                         notes="te_ops.Sequential(RMSNorm, SiLUGate)")]
