"""`harness exhaustive`: SiLUGate alone over every finite (x, gate) pair of a bit-pattern sub-range."""
from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from harness import exhaustive as E
from harness.cli import main
from harness.exhaustive import certify as EC, metrics as EM
from harness.references.formats import fmt_of, ulp
from harness.reports.schema import COLUMNS

BF16 = fmt_of("bf16")


def _run(tmp_path, *extra):
    return main(["exhaustive", "--device", "cpu", "--out", str(tmp_path), *extra])


def _vals(bits: int, dt=torch.bfloat16) -> torch.Tensor:
    b = bits - (1 << 16) if bits >= 1 << 15 else bits
    return torch.tensor([b], dtype=torch.int16).view(dt)


def test_cli_outputs_schema_histogram_worst(tmp_path):
    # x in [1, 1.06), gates -2 .. -3.4e38 (covers the silu' root, the saturation and the flush)
    rc = _run(tmp_path, "--dtype", "bf16", "--x-range", "0x3f80:0x3f90", "--gate-range", "0xbf80:0xff80",
              "--chunk", "20000")
    assert rc == 0
    df = pd.read_csv(tmp_path / "results.csv")
    assert set(COLUMNS) <= set(df.columns)
    assert set(df["output"]) == {"y", "dn", "dgate"} and set(df["regime"]) == {"normal", "extreme"}
    assert (df["reference"] == "exact").all() and set(df["status"]) <= {"pass", "fail", "error"}
    assert df["case_id"].str.match(r"exhaustive-bf16-[0-9a-f]{8}-(normal|extreme)$").all()
    n_x = 16
    n_g = 0x7f80 - 0x3f80                              # all finite: 0xff80 (-inf) is excluded
    hist = pd.read_csv(tmp_path / "histogram.csv")
    for out in ("y", "dn", "dgate"):
        h = hist[(hist.output == out) & (hist.metric == "ulp")]
        assert h["count"].sum() == n_x * n_g
        assert df[df.output == out]["n_elements"].sum() == n_x * n_g
    # extreme regime is report-only: budget inf
    assert (df[df.regime == "extreme"]["budget"] == math.inf).all()
    # rerunning the same range replaces its rows, a new range appends
    assert _run(tmp_path, "--dtype", "bf16", "--x-range", "0x3f80:0x3f90", "--gate-range", "0xbf80:0xff80",
                "--chunk", "20000") == 0
    assert len(pd.read_csv(tmp_path / "results.csv")) == len(df)
    assert _run(tmp_path, "--dtype", "bf16", "--x-range", "0x3f80:0x3f81", "--gate-range", "0x0:0x10") == 0
    assert len(pd.read_csv(tmp_path / "results.csv")) == len(df) + 3


def test_worst_pair_reproduces(tmp_path):
    assert _run(tmp_path, "--dtype", "bf16", "--x-range", "0x3f80:0x3fa0", "--gate-range", "0xc000:0xc2c0",
                "--dy", "0.75") == 0
    w = pd.read_csv(tmp_path / "worst.csv")
    dy = torch.tensor([0.75], dtype=torch.bfloat16)
    for out in ("y", "dn", "dgate"):
        r = w[(w.output == out) & (w.metric == "ulp") & (w["rank"] == 0)].iloc[0]
        x, g = _vals(int(r.x_bits, 16)), _vals(int(r.gate_bits, 16))
        y, dn, dgate = E.torch_autograd(x, g, dy)
        got = {"y": y, "dn": dn, "dgate": dgate}[out].double()
        t = g.double()
        s = torch.sigmoid(t)
        exact = {"y": x.double() * t * s, "dn": dy.double() * t * s,
                 "dgate": dy.double() * x.double() * s * (1 + t * torch.sigmoid(-t))}[out]
        assert float(got) == r.got and f"0x{int(E.bits_of(got.to(torch.bfloat16))[0]):04x}" == r.got_bits
        err = float((got - exact).abs() / ulp(exact, BF16))
        assert err == pytest.approx(r.ulp_err, rel=1e-9, abs=1e-12)


def test_fast_path_bit_identical_to_autograd():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for dt, xr, gr in ((torch.bfloat16, (0x3f80, 0x3fa0), (0xbf00, 0xc300)),
                           (torch.bfloat16, (0x0000, 0x0040), (0x4000, 0x4400)),   # subnormal x
                           (torch.float16, (0x3c00, 0x3c20), (0xbc00, 0xc400))):
            xs, gs = E.finite_values(*xr, dt, "cpu"), E.finite_values(*gr, dt, "cpu")
            dy = torch.tensor(-1.375, dtype=dt)
            y, dn, dgate = E.torch_fast(xs, gs, dy)
            X = xs[:, None].expand(len(xs), len(gs)).contiguous()
            G = gs[None, :].expand(len(xs), len(gs)).contiguous()
            ya, dxa, dga = E.torch_autograd(X, G, dy)
            assert torch.equal(E.bits_of(y), E.bits_of(ya))
            assert torch.equal(E.bits_of(dgate), E.bits_of(dga))
            assert torch.equal(E.bits_of(dn.expand_as(dxa)), E.bits_of(dxa))   # x.grad does not depend on x
    finally:
        torch.set_num_threads(threads)


def test_mutant_silu_in_bf16_caught():
    # x around 1, gates in [0.5, 2): a normal range where torch is within 0.5 ULP + float32 noise
    args = dict(dtype="bf16", device="cpu", x_range=(0x3f80, 0x3fa0), gate_range=(0x3f00, 0x4000), dy=-1.375)
    good = E.run_exhaustive(impl="torch", **args)
    bad = E.run_exhaustive(impl="mutant-silu-lowp", **args)
    for out in ("y", "dn"):
        assert good.acc[(out, "normal")].max_ulp <= E.budget_for(out, "normal", BF16)
        assert bad.acc[(out, "normal")].max_ulp > 0.6
    assert good.acc[("dgate", "normal")].max_scaled <= E.budget_for("dgate", "normal", BF16)
    assert bad.acc[("dgate", "normal")].max_scaled > E.budget_for("dgate", "normal", BF16)
    assert any(r["status"] == "fail" for r in E.rows(bad))
    assert all(r["status"] == "pass" for r in E.rows(good))


@pytest.mark.parametrize("extra", [
    ["--x-range", "0x10:0x5"], ["--x-range", "zz"], ["--gate-range", "0:0x10001"], ["--x-range", "-1:4"],
    ["--x-range", "0x7f81:0x7fc0"],                   # only NaN patterns: no finite value
    ["--impl", "bogus"], ["--device", "cuda"] if not torch.cuda.is_available() else ["--impl", "nope"],
    ["--dy", "abc"],
])
def test_bad_arguments_exit_2(tmp_path, capsys, extra):
    argv = ["exhaustive", "--dtype", "bf16", "--out", str(tmp_path), *extra]
    if "--device" not in extra:
        argv += ["--device", "cpu"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("harness: error:")


def test_torch_correctly_rounded_except_identified_regions():
    """torch (SiLU in fp32, then multiply) against the certified golden values:
    - y and dn are correctly rounded away from the flush (gates in [-87, 16) here);
    - below -88.72 CPU silu flushes to -0: y, dn, dgate off by up to 256 ULP (extreme regime);
    - near silu's root (t ~ -1.2785) dgate cancels: ULP error above 0.5, scaled error small."""
    res = E.run_exhaustive("bf16", "torch", "cpu", (0x3f80, 0x3f88), (0x3f00, 0x4180))   # gates 0.5 .. 16
    for out in ("y", "dn", "dgate"):
        assert res.acc[(out, "normal")].mismatch == 0
    neg = E.run_exhaustive("bf16", "torch", "cpu", (0x3f80, 0x3f88), (0xbf00, 0xc2ae))   # gates -0.5 .. -87
    assert neg.acc[("y", "normal")].mismatch == 0 and neg.acc[("dn", "normal")].mismatch == 0
    # flush: gates -88 .. -128 (bits 0xc2b0..0xc300); -88.72 is between 0xc2b1 and 0xc2b2
    fl = E.run_exhaustive("bf16", "torch", "cpu", (0x3f80, 0x3f88), (0xc2b0, 0xc300))
    a = fl.acc[("y", "extreme")]
    assert a.max_ulp > 100 and a.mismatch > 0 and a.nonfinite == 0
    assert all(w.g < -88.72 and w.got == 0 for w in a.worst["ulp"])
    assert all(r["status"] == "pass" for r in E.rows(fl))            # report-only there
    # silu' root t ~ -1.2785: fp16 gates -1.2773 .. -1.2812 (0xbd1c..0xbd20), all positive normal x
    rt = E.run_exhaustive("fp16", "torch", "cpu", (0x0400, 0x7c00), (0xbd1c, 0xbd20))
    d = rt.acc[("dgate", "normal")]
    assert d.max_ulp > 0.75 and d.mismatch > 1000
    assert d.max_scaled <= E.budget_for("dgate", "normal", fmt_of("fp16"))
    assert all(-1.2813 < w.g < -1.2772 for w in d.worst["ulp"])
    assert all(r["status"] == "pass" for r in E.rows(rt))


def test_fp16_and_certification_path(monkeypatch):
    res = E.run_exhaustive("fp16", "torch", "cpu", (0x3c00, 0x3c08), (0x0000, 0x0400))  # subnormal gates
    assert res.acc[("y", "normal")].pairs == 8 * 0x400
    assert all(r["status"] == "pass" for r in E.rows(res))
    # exact ties are undecidable in float64 and go to mpmath: silu(0) = 0 gives none, so force one:
    # v = 1 + 2**-8 (a bf16 midpoint) must be decided as 1 (ties to even), then 1 + 2**-8 + 2**-40 as up.
    acc = E.Acc()
    edges = torch.tensor(E.EDGES, dtype=torch.float64)
    v = torch.tensor([1 + 2 ** -8, 1 + 2 ** -8 + 2 ** -40], dtype=torch.float64)
    c = torch.tensor([1.0, 1.0], dtype=torch.bfloat16)
    seen = []
    monkeypatch.setattr(EC, "_mp_golden", lambda output, x, g, dy, fmt: seen.append(g) or [1.0] * len(g))
    E.analyse("dn", "normal", c, v, None, c, c, 1.0, BF16, acc, edges, rep_x=torch.tensor([1.0]))
    assert len(seen) == 1 and len(seen[0]) == 1        # only the tie went to mpmath
    assert acc.flagged == 1 and acc.certified == 1 and acc.mismatch == 1


def test_compile_toggle_is_eager_by_default_on_cpu():
    E.run_exhaustive("bf16", "torch", "cpu", (0x3f80, 0x3f81), (0x3f80, 0x3f81))
    assert EM._ELEMENTWISE["fn"] is E.elementwise


def test_near_exact_ties_decided_without_mpmath(monkeypatch):
    """Large gates: sigmoid(t) rounds to 1 in float64, x*t can be an exact bf16 tie; the exact value
    lies just below it (y, dn) or just above (dgate), decided analytically (agrees with 400-digit
    mpmath; 50-digit mpmath calls these ties once e**-t < 1e-50)."""
    x = torch.tensor([1.0078125, 1.0234375], dtype=torch.float64)
    t = torch.tensor([192.0, 118.0], dtype=torch.float64)
    ok, g = E.near_exact_golden("y", x, t, 1.0, x * t, BF16)
    assert ok.all() and g.tolist() == [193.0, 121.0]              # tie 193.5 -> down; 120.77 -> 121
    dy = 0.75
    ok, g = E.near_exact_golden("dgate", x[1:], t[1:], dy, dy * x[1:], BF16)
    assert ok.all() and g.tolist() == [0.76953125]                # tie 0.767578125 -> up
    ok, _ = E.near_exact_golden("y", x, torch.tensor([1.5, 3.0], dtype=torch.float64), 1.0, x, BF16)
    assert not ok.any()                                           # small gates: left to mpmath
    calls = []
    monkeypatch.setattr(EC, "_mp_golden", lambda *a: calls.append(a) or [])
    res = E.run_exhaustive("bf16", "torch", "cpu", (0x3f80, 0x3fa0), (0x4300, 0x4340), dy=0.75)
    assert not calls and res.acc[("y", "normal")].certified > 0
    assert res.acc[("y", "normal")].uncertified == 0


def _acc_view(a: E.Acc) -> dict:
    d = {f: getattr(a, f) for f in ("pairs", "max_ulp", "max_scaled", "max_abs", "max_rel", "over", "mismatch",
                                    "flagged", "certified", "uncertified", "nonfinite")}
    d["hist_ulp"] = None if a.hist_ulp is None else a.hist_ulp.tolist()
    d["hist_scaled"] = None if a.hist_scaled is None else a.hist_scaled.tolist()
    d["worst"] = {m: [vars(w) for w in lst] for m, lst in a.worst.items()}
    return d


FUSED_VS_REFERENCE = [
    # dtype, impl, x_range, gate_range, dy, chunk
    ("bf16", "torch", (0x3f80, 0x4000), (0x0000, 0x0400), 1.0, 1 << 15),      # tiny gates: ties, closed form
    ("bf16", "torch", (0x0000, 0x0100), (0xbf80, 0xc000), 1.0, 1 << 14),      # subnormal x, padded last tile
    ("bf16", "torch", (0x7d00, 0x7f80), (0x4180, 0x4220), 1.0, 1 << 13),      # overflow to inf
    ("bf16", "torch", (0x3f80, 0x3fc0), (0xc2a0, 0xc400), 1.0, 1 << 12),      # both regimes, gate blocks
    ("fp16", "torch", (0x0400, 0x1400), (0xbd1c, 0xbd20), 1.0, 1 << 12),      # silu' root
    ("bf16", "mutant-silu-lowp", (0x3f80, 0x3fa0), (0x3f00, 0x4000), -1.375, 1 << 12),
    ("bf16", "torch", (0x8000, 0x8100), (0x0000, 0x0200), 0.75, 1 << 14),     # dy 0.75: dn / dgate ties
    ("fp16", "torch", (0x7800, 0x7840), (0x4e00, 0x4fc0), 1.0, 1 << 12),      # gates 24..31: large-gate closed form
]


@pytest.mark.parametrize("case", FUSED_VS_REFERENCE, ids=lambda c: f"{c[0]}-{c[1]}-{c[2][0]:x}-{c[3][0]:x}")
def test_fused_path_equals_reference_path(case):
    """The fused per-tile path gives exactly the reference path's histograms, maxima, worst pairs and
    mismatch / certified / uncertified counts (sums only to rounding: another summation order)."""
    dtype, impl, xr, gr, dy, chunk = case
    new = E.run_exhaustive(dtype, impl, "cpu", xr, gr, dy, chunk)
    ref = E.run_exhaustive(dtype, impl, "cpu", xr, gr, dy, chunk, reference=True)
    assert new.perf["tiles"] >= 1 and not ref.perf
    for key in ref.acc:
        assert _acc_view(new.acc[key]) == _acc_view(ref.acc[key]), key
        for f in ("sum_ulp", "sum_scaled"):
            assert getattr(new.acc[key], f) == pytest.approx(getattr(ref.acc[key], f), rel=1e-12, abs=0)
    assert [r["status"] for r in E.rows(new)] == [r["status"] for r in E.rows(ref)]


def test_fused_path_compiled_equals_reference_path():
    """torch.compile of the tile function (Inductor, CPU) gives the same results bit for bit."""
    xr, gr = (0x3f80, 0x3fa0), (0x0000, 0x0100)               # y ties at tiny gates, both masks
    new = E.run_exhaustive("bf16", "torch", "cpu", xr, gr, 0.75, 1 << 12, compile=True)
    ref = E.run_exhaustive("bf16", "torch", "cpu", xr, gr, 0.75, 1 << 12, reference=True)
    for key in ref.acc:
        assert _acc_view(new.acc[key]) == _acc_view(ref.acc[key]), key


def test_closed_form_agrees_with_mpmath():
    """closed_form_golden replaces 50-digit mpmath only where both give the same value."""
    g = torch.tensor([2.0 ** -60, -2.0 ** -100, 3 * 2.0 ** -125, -2.0 ** -133, 2.0 ** -31, 26.0, 27.5, 31.0],
                     dtype=torch.float64)
    x = torch.tensor([1.0078125, -3.0, 2.0 ** -130, 1.5, 1.0 + 2 ** -7, 1.0234375, -1.0078125, 1.5],
                     dtype=torch.float64)
    for output, dy in (("y", 1.0), ("dn", 0.75), ("dgate", 0.75)):
        s = torch.sigmoid(g)
        v = {"y": x * g * s, "dn": dy * g * s, "dgate": dy * x * s * (1 + g * torch.sigmoid(-g))}[output]
        ok, gold = E.closed_form_golden(output, x, g, dy, v, BF16)
        assert ok.all(), output
        mp = EC._mp_golden(output, x.tolist(), g.tolist(), dy, BF16)
        assert gold.tolist() == mp, output
    ok, _ = E.closed_form_golden("y", x[:2], torch.tensor([0.25, 5.0], dtype=torch.float64), 1.0, x[:2], BF16)
    assert not ok.any()                                           # neither tiny nor large: mpmath


def test_fused_path_one_sync_per_tile_and_warmup_tiles():
    res = E.run_exhaustive("bf16", "torch", "cpu", (0x3f80, 0x4000), (0x3f00, 0x4000), 1.0, 1 << 12)
    # gate block 256 -> 16 x rows a tile, 128 x values: 8 tiles, + 1 sync for dn
    assert res.perf["tiles"] == 8 and res.perf["syncs"] == 9
    warm = E.run_exhaustive("bf16", "torch", "cpu", (0x3f80, 0x4000), (0x3f00, 0x4000), 1.0, 1 << 12, max_x_tiles=1)
    assert warm.perf["tiles"] == 1


def test_closed_forms_decide_before_the_mpmath_cap(monkeypatch):
    """Tiny gates: every undecided y / dn pair has a closed form, so the fused path certifies them
    all whatever MP_CAP is; the reference path (mpmath only) stops at the cap. With no cap both
    give the same counts."""
    import harness.exhaustive.fused as fused_mod
    import harness.exhaustive.reference_path as ref_mod
    args = ("bf16", "torch", "cpu", (0x3f80, 0x3f88), (0x0000, 0x3080), 1.0, 1 << 20)
    full = E.run_exhaustive(*args, reference=True).acc[("y", "normal")]
    assert full.flagged > 100 and full.uncertified == 0
    monkeypatch.setattr(fused_mod, "MP_CAP", 5)
    monkeypatch.setattr(ref_mod, "MP_CAP", 5)
    capped_ref = E.run_exhaustive(*args, reference=True).acc[("y", "normal")]
    fused = E.run_exhaustive(*args).acc[("y", "normal")]
    assert capped_ref.uncertified > 0
    assert (fused.flagged, fused.certified, fused.uncertified, fused.mismatch) == \
        (full.flagged, full.certified, 0, full.mismatch)
