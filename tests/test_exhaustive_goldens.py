"""`harness exhaustive`, its golden values: where torch's SiLUGate is and is not correctly rounded,
the closed forms that replace mpmath (tiny and large gates, both activations) agreeing with it, ties
float64 cannot decide going to mpmath and counted by its answer, and the closed forms deciding before
the mpmath cap."""
from __future__ import annotations

import torch

from harness import exhaustive as E
from harness.exhaustive import certify as EC
from harness.exhaustive.accumulate import Acc
from harness.references.formats import fmt_of

BF16 = fmt_of("bf16")


def test_torch_correctly_rounded_except_identified_regions():
    """torch (SiLU in fp32, then multiply) against the certified golden values:
    - y and dn are correctly rounded away from the flush;
    - below -88.72 CPU silu flushes to -0: y off by up to 256 ULP (extreme regime, reported);
    - near silu's root (t ~ -1.2785) dgate cancels: ULP error above 0.5, scaled error small."""
    res = E.run_exhaustive("bf16", "silugate-eager", "cpu", (0x3f80, 0x3f88), (0x3f00, 0x4180))   # gates 0.5 .. 16
    assert all(res.acc[(o, "normal")].mismatch == 0 for o in ("y", "dn", "dgate"))
    fl = E.run_exhaustive("bf16", "silugate-eager", "cpu", (0x3f80, 0x3f88), (0xc2b0, 0xc300))    # gates -88 .. -128
    a = fl.acc[("y", "extreme")]
    assert a.max_ulp > 100 and a.mismatch > 0 and a.nonfinite == 0
    assert all(w.g < -88.72 and w.got == 0 for w in a.worst["ulp"])
    assert all(r["status"] == "pass" for r in E.rows(fl))
    rt = E.run_exhaustive("fp16", "silugate-eager", "cpu", (0x0400, 0x7c00), (0xbd1c, 0xbd20))
    d = rt.acc[("dgate", "normal")]
    assert d.max_ulp > 0.75 and d.mismatch > 1000 and d.max_scaled <= E.budget_for("dgate", "normal", fmt_of("fp16"))
    assert all(-1.2813 < w.g < -1.2772 for w in d.worst["ulp"])
    assert all(r["status"] == "pass" for r in E.rows(rt))


def test_closed_form_agrees_with_mpmath():
    """closed_form_golden replaces 50-digit mpmath (the closed forms in references.mp) only where
    both give the same value."""
    g = torch.tensor([2.0 ** -60, -2.0 ** -100, 3 * 2.0 ** -125, -2.0 ** -133, 2.0 ** -31, 26.0, 27.5, 31.0]).double()
    x = torch.tensor([1.0078125, -3.0, 2.0 ** -130, 1.5, 1.0 + 2 ** -7, 1.0234375, -1.0078125, 1.5]).double()
    for output, dy in (("y", 1.0), ("dn", 0.75), ("dgate", 0.75)):
        s = torch.sigmoid(g)
        v = {"y": x * g * s, "dn": dy * g * s, "dgate": dy * x * s * (1 + g * torch.sigmoid(-g))}[output]
        ok, gold = E.closed_form_golden(output, x, g, dy, v, BF16)
        assert ok.all(), output
        assert gold.tolist() == EC._mp_golden(output, x.tolist(), g.tolist(), dy, BF16), output
    ok, _ = E.closed_form_golden("y", x[:2], torch.tensor([0.25, 5.0], dtype=torch.float64), 1.0, x[:2], BF16)
    assert not ok.any()                                           # neither tiny nor large: mpmath


def test_sigmoid_closed_form_agrees_with_mpmath():
    """A sigmoid gate's closed forms (tiny gates: y, dn, dgate; large gates: y, dn) give mpmath's
    correctly rounded values — also where 50 digits cannot (dgate's delta -th^2 is ~t^2); its
    large-gate dgate (dy x m (1 - m), no exact P) is left to mpmath."""
    g = torch.tensor([2.0 ** -60, -2.0 ** -100, 3 * 2.0 ** -125, -2.0 ** -133, 2.0 ** -31, 26.0, 27.5, 31.0]).double()
    x = torch.tensor([1.0078125, -3.0, 2.0 ** -130, 1.5, 1.0 + 2 ** -7, 1.0234375, -1.0078125, 1.5]).double()
    import mpmath

    from harness.references.mp import round_mpf
    s, m = torch.sigmoid(g), torch.sigmoid(-g)
    for output, dy in (("y", 1.0), ("dn", 0.75), ("dgate", 0.75)):
        v = {"y": x * s, "dn": dy * s + 0 * x, "dgate": dy * x * s * m}[output]
        ok, gold = E.closed_form_golden(output, x, g, dy, v, BF16, "sigmoid")
        assert ok.tolist() == [True] * 5 + [output != "dgate"] * 3, output
        want = []
        with mpmath.workdps(300):                   # sigmoid' = (1 - th^2) / 4 at t ~ 2^-124: th^2 ~ 2^-250
            for xi, ti in zip(x.tolist(), g.tolist()):
                si, mi = 1 / (1 + mpmath.exp(-mpmath.mpf(ti))), 1 / (1 + mpmath.exp(mpmath.mpf(ti)))
                f = {"y": mpmath.mpf(xi) * si, "dn": mpmath.mpf(dy) * si, "dgate": mpmath.mpf(dy) * xi * si * mi}
                want.append(round_mpf(f[output], BF16))
        assert gold[ok].tolist() == [w for w, k in zip(want, ok.tolist()) if k], output
        mp50 = EC._mp_golden(output, x.tolist(), g.tolist(), dy, BF16, "sigmoid")
        wrong = {2} if output == "dgate" else set()   # 50 digits see 1.5 min_subnormal (1 - 2^-250) as a tie
        assert [i for i, (a, b) in enumerate(zip(mp50, want)) if a != b] == sorted(wrong), output


def test_large_gate_ties_decided_without_mpmath(monkeypatch):
    """Gates 128..192: sigmoid(t) rounds to 1 in float64 and x*t can be an exact bf16 tie; the exact
    value lies just below it (y) or above (dgate): decided in closed form (50-digit mpmath would
    see a tie)."""
    x, t = torch.tensor([1.0078125, 1.0234375]).double(), torch.tensor([192.0, 118.0]).double()
    ok, g = E.closed_form_golden("y", x, t, 1.0, x * t, BF16)
    assert ok.all() and g.tolist() == [193.0, 121.0]              # tie 193.5 -> down; 120.77 -> 121
    calls = []
    monkeypatch.setattr(EC, "_mp_golden", lambda *a: calls.append(a) or [])
    res = E.run_exhaustive("bf16", "silugate-eager", "cpu", (0x3f80, 0x3fa0), (0x4300, 0x4340), dy=0.75)
    assert not calls and res.acc[("y", "normal")].certified > 0
    assert res.acc[("y", "normal")].uncertified == 0


def test_certification_goes_to_mpmath_and_counts(monkeypatch):
    """An exact tie float64 cannot decide (v = 1 + 2**-8 in bf16, gate 1: no closed form) goes to
    mpmath; the mismatch count follows its answer."""
    from harness.exhaustive.stats import Rows, Tile
    c = torch.tensor([[1.0, 1.0]], dtype=torch.bfloat16)
    one = torch.ones(1, dtype=torch.float64)
    T = torch.tensor([1 + 2 ** -8, 1 + 2 ** -8 + 2 ** -40], dtype=torch.float64)
    tile = Tile("y", "normal", c, Rows(one, one, one, torch.tensor([0x3f80])), 0, T, T,
                torch.ones(2, dtype=torch.float64), torch.tensor([0x3f80, 0x3f80]), 1,
                E.metrics.consts("y", "normal", BF16))
    for answer, mismatch in ((1.0, 0), (1 + 2 ** -7, 1)):
        seen, acc = [], Acc()
        monkeypatch.setattr(EC, "_mp_golden", lambda o, x, g, dy, fmt, act="silu": seen.append(g) or [answer] * len(g))
        EC.certify_tile(tile, torch.ones(1, 2, dtype=torch.bool), 1.0, BF16, acc, {})
        assert seen == [[1.0]] and (acc.flagged, acc.certified, acc.mismatch) == (1, 1, mismatch)


def test_closed_forms_decide_before_the_mpmath_cap(monkeypatch):
    """Tiny gates: every undecided y / dn pair has a closed form, so all are certified whatever
    MP_CAP is."""
    args = ("bf16", "silugate-eager", "cpu", (0x3f80, 0x3f88), (0x0000, 0x3080), 1.0, 1 << 20)
    monkeypatch.setattr(EC, "MP_CAP", 5)
    a = E.run_exhaustive(*args).acc[("y", "normal")]
    assert a.flagged > 100 and a.certified == a.flagged and a.uncertified == 0
