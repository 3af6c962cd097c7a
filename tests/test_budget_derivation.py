"""The y budget against brute force: every bf16 n in [1/4, 4) times every finite bf16 gate in
[-16, 16], through the specified SiLUGate semantics (SiLU in float32, multiply, round once).
The derived budget (0.5 ULP + the float32 noise rho_y) must hold everywhere and be attained
(it is tight), and a SiLU evaluated in bf16 must break it."""
import torch
import torch.nn.functional as F

from harness.budgets import default_budget
from harness.references.exact import Inputs, silu_parts
from harness.references.formats import fmt_of, ulp

BF16 = fmt_of("bf16")


def _all_bf16(lo, hi):
    bits = torch.arange(0, 1 << 16, dtype=torch.int32).to(torch.int16)
    v = bits.view(torch.bfloat16)
    keep = torch.isfinite(v) & (v >= lo) & (v < hi)
    return v[keep]


def _ulp_error(y, exact):
    return ((y.double() - exact).abs() / ulp(exact, BF16))


def test_y_budget_holds_and_is_attained_by_brute_force():
    n = torch.cat([_all_bf16(0.25, 4.0), -_all_bf16(0.25, 4.0)])
    g = _all_bf16(-16.0, 16.0)
    nn_, gg = torch.meshgrid(n, g, indexing="ij")
    _, silu, _, _ = silu_parts(gg.double())
    exact = nn_.double() * silu
    y = (nn_.float() * F.silu(gg.float())).to(torch.bfloat16)
    err = _ulp_error(y, exact)
    # the model budget for y with n given exactly: one final rounding plus float32 noise
    inp = Inputs(nn_, gg, torch.ones(nn_.shape[-1], dtype=torch.bfloat16), nn_, 1e-5, False)
    budget = default_budget("y", "model", "chain", BF16, BF16, inp).value
    noise = 8 * 2.0 ** -24 / BF16.u
    assert err.numel() > 1_000_000
    assert float(err.max()) <= 0.5 + noise
    assert float(err.max()) > 0.499                  # tight: the budget is reached
    assert budget == 0.5                             # the interval holds the noise; see docs
    bad = (nn_.float() * F.silu(gg.to(torch.bfloat16)).float()).to(torch.bfloat16)
    assert float(_ulp_error(bad, exact).max()) > 0.9
