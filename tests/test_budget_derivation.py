"""The y budget against brute force: every bf16 n in [1/4, 4) times every finite bf16 gate in
[-16, 16], through the specified SiLUGate semantics (SiLU in float32, multiply, round once).
The derived budget (0.5 ULP + the float32 noise rho_y) must hold everywhere and be attained
(it is tight), and a SiLU evaluated in bf16 must break it."""
import torch
import torch.nn.functional as F

from harness.budgets import default_budget
from harness.references.closed_forms import silu_terms
from harness.references.exact import FLOAT64, Gauged
from harness.references.formats import fmt_of, ulp
from harness.references.models import resolve

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
    t = gg.double()
    silu = silu_terms(Gauged(t, t.abs()), FLOAT64)[0].v
    exact = nn_.double() * silu
    y = (nn_.float() * F.silu(gg.float())).to(torch.bfloat16)
    err = _ulp_error(y, exact)
    # the model budget for y with n given exactly: one final rounding plus float32 noise
    budget = default_budget("y", "model", resolve("chain"), BF16, BF16, BF16, nn_.shape[-1], nn_.shape[0], True).value
    noise = 8 * 2.0 ** -24 / BF16.u
    assert err.numel() > 1_000_000
    assert float(err.max()) <= 0.5 + noise
    assert float(err.max()) > 0.499                  # tight: the budget is reached
    assert budget == 0.5                             # the interval holds the noise; see docs
    bad = (nn_.float() * F.silu(gg.to(torch.bfloat16)).float()).to(torch.bfloat16)
    assert float(_ulp_error(bad, exact).max()) > 0.9
