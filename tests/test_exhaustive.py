"""`harness exhaustive`, its statistics: SiLUGate alone over every finite (x, gate) pair of a
bit-pattern sub-range. The tile statistics (histograms, maxima, means, counts, worst pairs,
certification) are checked against harness.analysis.compare.compare over the whole [x, gate] grid
of each (output, regime), with the exact values and gauges evaluated independently through
references.closed_forms; they do not depend on the chunk or on the pass (eager, Triton); the fast
path's bits are autograd's; the metrics and budgets are the registered ones. The command itself:
test_exhaustive_cli.py; the golden values: test_exhaustive_goldens.py."""
from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness import exhaustive as E
from harness.analysis.compare import compare
from harness.exhaustive import certify as EC
from harness.exhaustive.metrics import F64_BOUND, INNER_EDGES, METRIC, TOPK, worst_metrics
from harness.references.closed_forms import gate_backward, gate_forward
from harness.references.exact import Float64, Gauged
from harness.references.formats import fmt_of, round_to, undecided

ROOT = Path(__file__).resolve().parents[1]
BF16 = fmt_of("bf16")
HAS_TRITON = importlib.util.find_spec("triton") is not None


def _vals(lo: int, hi: int, dt) -> tuple[torch.Tensor, torch.Tensor]:
    v = E.finite_values(lo, hi, dt, "cpu")                # finite values of patterns [lo, hi), their bits
    return v, E.bits_of(v)


class _Bits(Gauged):
    """A gate grid that remembers each element's bit pattern through negation."""

    def __init__(self, v, g, bits):
        super().__init__(v, g)
        self.bits = bits

    def __neg__(self):
        return _Bits(-self.v, self.g, self.bits)


class _Canonical(Float64):
    """FLOAT64 with each sigmoid evaluated where the harness's table evaluates it: in one vector of
    all 65536 patterns, at the gate's own pattern (float64 sigmoid on the CPU depends on an
    element's position in its vector)."""

    @staticmethod
    def sigmoid(t):
        buf = torch.zeros(1 << 16, dtype=torch.float64)
        buf[t.bits.reshape(-1)] = t.v.reshape(-1)
        s = torch.sigmoid(buf)[t.bits]
        return Gauged(s, s)


def _regime_masks(gs, activation, fmt):
    """The regimes as the docs state them: extreme below -87; a sigmoid gate's dgate saturated
    where 2 SIGMOID32 u32 / sigmoid(-t) passes half a u of the format."""
    extreme = gs.float() < -87.0
    sat = (8 * 2.0 ** -24 / torch.sigmoid(-gs.double()) > fmt.u) if activation == "sigmoid" else torch.zeros_like(extreme)
    return {"normal": ~extreme & ~sat, "extreme": extreme, "saturated": sat}


def _expected(dtype, impl, xr, gr, dy, activation="silu"):
    """Per (output, regime): compare's Comparison over the grid, the golden values (float64's
    rounding, mpmath where undecided), the undecided count and the grid's bits."""
    fmt = fmt_of(dtype)
    xs, xb = _vals(*xr, fmt.dtype)
    gs, gb = _vals(*gr, fmt.dtype)
    dy_t = torch.tensor(dy, dtype=torch.float64).to(fmt.dtype)
    fn = E.IMPLS[impl][1]
    y, dn, dgate = fn(xs, gs, dy_t, activation=activation)
    A = _Canonical()
    out = {}
    for regime, sel in _regime_masks(gs, activation, fmt).items():
        if not bool(sel.any()):
            continue
        g64 = gs[sel].double()
        for o in ("y", "dn", "dgate"):
            rows = xs[:1] if o == "dn" else xs                     # dn does not depend on x
            X = rows.double()[:, None].expand(-1, g64.numel())
            T = g64[None, :].expand(rows.numel(), -1)
            tg = _Bits(T, T.abs(), gb[sel][None, :].expand(rows.numel(), -1))
            G = lambda a: Gauged(a, a.abs())                       # noqa: E731
            if o == "y":
                ref = gate_forward(G(X), tg, A, activation)
            else:
                du, dt = gate_backward(G(torch.full_like(X, float(dy_t))), G(X), tg, A, activation)
                ref = du if o == "dn" else dt
            c = {"y": y, "dgate": dgate, "dn": dn[None, :]}[o][:, sel]
            budget = E.budget_for(o, regime, fmt)
            cmp = compare(c, ref.v, ref.v, ref.g, fmt, METRIC[o], budget)
            golden = round_to(ref.v, fmt)
            und = undecided(ref.v, F64_BOUND[o] * ref.g, fmt)
            if bool(und.any()):
                gold = EC._mp_golden(o, X[und].tolist(), T[und].tolist(), float(dy_t), fmt, activation)
                golden[und] = torch.tensor(gold, dtype=torch.float64)
            out[(o, regime)] = dict(cmp=cmp, golden=golden, c=c.double(), und=int(und.sum()),
                                    weight=xs.numel() if o == "dn" else 1, xb=xb[:rows.numel()], gb=gb[sel])
    return out


def _check_against_compare(res, exp):
    for key, e in exp.items():
        a, cmp, w = res.acc[key], e["cmp"], e["weight"]
        err = cmp.errors
        for metric, hist in (("ulp", a.hist_ulp), ("scaled", a.hist_scaled)):
            b = torch.bucketize(err[metric].reshape(-1), torch.tensor(INNER_EDGES, dtype=torch.float64))
            assert hist == (torch.bincount(b, minlength=len(hist)) * w).tolist(), (key, metric)
        assert (a.max_ulp, a.max_scaled, a.max_abs, a.max_rel) == tuple(cmp.reduced.maxima[m]
                                                                        for m in ("ulp", "scaled", "abs", "rel")), key
        assert a.sum_ulp / a.pairs == pytest.approx(cmp.reduced.means["ulp"], rel=1e-12), key
        assert a.sum_scaled / a.pairs == pytest.approx(cmp.reduced.means["scaled"], rel=1e-12), key
        assert a.pairs == err["ulp"].numel() * w and a.over == cmp.reduced.count_over * w, key
        c, golden = e["c"], e["golden"]
        assert a.mismatch == int((c != golden).sum()) * w, key
        assert (a.flagged, a.certified, a.uncertified) == (e["und"] * w, e["und"] * w, 0), key
        assert a.nonfinite == int((~torch.isfinite(c) & torch.isfinite(golden)).sum()) * w, key
        assert [r["status"] for r in E.rows(res) if (r["output"], r["regime"]) == key] == [cmp.status], key
        # worst pairs: the TOPK largest, ties in grid order; the first is compare's worst element
        for metric in worst_metrics(key[0]):
            flat = err[metric].reshape(-1)
            order = sorted(range(flat.numel()), key=lambda i: (-float(flat[i]), i))[:TOPK]
            n_g = err[metric].shape[1]
            want = [(float(flat[i]), int(e["xb"][i // n_g]), int(e["gb"][i % n_g])) for i in order]
            assert [(w_.key, w_.x_bits, w_.g_bits) for w_ in a.worst[metric]] == want, (key, metric)
        i, n_g, first = cmp.reduced.worst_flat, err["ulp"].shape[1], a.worst[METRIC[key[0]]][0]
        assert (first.x_bits, first.g_bits) == (int(e["xb"][i // n_g]), int(e["gb"][i % n_g])), key


RANGES = [
    # dtype, impl, x_range, gate_range, dy, chunk
    ("bf16", "silugate-eager", (0x3f80, 0x3fa0), (0xbf80, 0xc000), 1.0, 700),       # silu' root: dgate cancels
    ("bf16", "silugate-eager", (0x0000, 0x0040), (0x0ff0, 0x1010), 0.75, 1 << 10),  # subnormal x, two gate blocks
    ("bf16", "silugate-eager", (0x7d00, 0x7d80), (0x4180, 0x4200), 1.0, 1 << 12),   # overflow boundary: a failing check
    ("bf16", "silugate-eager", (0x3f80, 0x3f90), (0x0000, 0x0100), 1.0, 1 << 11),   # tiny gates: ties, certification
    ("fp16", "silugate-eager", (0x3c00, 0x3c20), (0xd560, 0xd590), -1.375, 300),    # both regimes (-87 in the range)
    ("fp16", "silugate-eager", (0x3c00, 0x3d00), (0xbd1c, 0xbd20), 1.0, 1 << 9),    # silu' root in fp16
    ("bf16", "silugate-eager", (0x3f80, 0x4000), (0xc000, 0xc100), 1.0, 1 << 15),    # 32 blocks a tile: block maxima
    ("bf16", "silugate-eager", (0x3f80, 0x4000), (0x0000, 0x0100), 1.0, 1 << 14),    # ... tied maxima (0.5, 0)
    ("bf16", "silugate-silu-lowp", (0x3f80, 0x3fa0), (0x3f00, 0x4000), -1.375, 1 << 13),
    # the sigmoid gate: tiny gates (closed-form goldens), both sides of -87, large gates into the
    # saturated regime (dgate reported), and the mutant
    ("bf16", "silugate-eager", (0x3f80, 0x3f90), (0x0000, 0x0100), 1.0, 1 << 11, "sigmoid"),
    ("fp16", "silugate-eager", (0x3c00, 0x3c20), (0xd560, 0xd590), -1.375, 300, "sigmoid"),
    ("bf16", "silugate-eager", (0x3f80, 0x3f90), (0x4100, 0x4300), 0.75, 1 << 12, "sigmoid"),
    ("bf16", "silugate-silu-lowp", (0x3f80, 0x3fa0), (0x3f00, 0x4000), -1.375, 1 << 13, "sigmoid"),
]


@pytest.mark.parametrize("case", RANGES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2][0]:x}-{c[3][0]:x}-{c[6:] or 'silu'}")
def test_tile_statistics_equal_compare(case):
    dtype, impl, xr, gr, dy, chunk, *act = case
    activation = act[0] if act else "silu"
    res = E.run_exhaustive(dtype, impl, "cpu", xr, gr, dy, chunk, activation=activation)
    assert res.perf["tiles"] >= 1 and res.perf["backend"] == "eager"
    exp = _expected(dtype, impl, xr, gr, dy, activation)
    if activation == "sigmoid" and gr[0] == 0x4100:        # large gates: dgate saturates, reported
        assert exp[("dgate", "saturated")]["cmp"].reduced.maxima["scaled"] > 1
        assert ("dgate", "normal") in exp and E.budget_for("dgate", "saturated", fmt_of(dtype)) == math.inf
    _check_against_compare(res, exp)
    if gr[0] == 0 and activation == "silu":                # tiny gates: ties float64 cannot decide
        assert exp[("y", "normal")]["und"] > 0             # (x t / 2: a sigmoid's x / 2 is exact)
    assert any(r["status"] == "fail" for r in E.rows(res)) == (impl != "silugate-eager" or xr[0] == 0x7d00)


def test_results_do_not_depend_on_the_chunk():
    args = ("bf16", "silugate-eager", "cpu", (0x3f80, 0x3fa0), (0xc2a0, 0xc400), 0.75)
    a, b = E.run_exhaustive(*args, 1 << 9), E.run_exhaustive(*args, 1 << 20)
    assert a.perf["tiles"] > b.perf["tiles"]
    for key in a.acc:
        da, db = a.acc[key].to_dict(), b.acc[key].to_dict()
        for f in ("sum_ulp", "sum_scaled"):                # summed in another order
            assert da.pop(f) == pytest.approx(db.pop(f), rel=1e-12)
        assert da == db, key


_INTERP = """
import torch, harness.exhaustive as E
from harness.exhaustive import stats as S, metrics as M
from harness.exhaustive.enumerate import gate_table
from harness.references.formats import fmt_of
dev = '{dev}'
for dt, xr, gr, dy, ch, act in [('bf16', (0x3f80, 0x3f84), (0xc2a0, 0xc400), 1.0, 1 << 12, 'silu'),
                                ('bf16', (0x7d00, 0x7d10), (0x4180, 0x4220), 1.0, 1 << 12, 'silu'),
                                ('bf16', (0x0000, 0x0008), (0x0000, 0x0100), 0.75, 1 << 12, 'silu'),
                                ('fp16', (0x0400, 0x0420), (0xbd1c, 0xbd20), 0.75, 1 << 12, 'silu'),
                                ('bf16', (0x3f80, 0x3f84), (0x4100, 0x4300), 1.0, 1 << 12, 'sigmoid'),
                                ('fp16', (0x3c00, 0x3c20), (0xd560, 0xd590), -1.375, 1 << 12, 'sigmoid')]:
    a = E.run_exhaustive(dt, E.DEFAULT, dev, xr, gr, dy, ch, backend='eager', activation=act)
    b = E.run_exhaustive(dt, E.DEFAULT, dev, xr, gr, dy, ch, backend='triton', activation=act)
    assert b.perf['backend'] == 'triton'
    for k in a.acc:                                  # sums: the same terms, summed in another order
        da, db = a.acc[k].to_dict(), b.acc[k].to_dict()
        assert all(da[f] == db[f] or abs(da[f] - db[f]) <= 1e-12 * abs(da[f]) for f in da), (k, da, db)
# every bit pattern as a computed value: NaN, inf, subnormals, signed zeros (the kernel's decoding)
for name, out in (('bf16', 'y'), ('fp16', 'dgate')):
    fmt = fmt_of(name)
    c = torch.arange(1 << 16, dtype=torch.int32)
    c = torch.where(c >= 1 << 15, c - (1 << 16), c).to(torch.int16).view(fmt.dtype).reshape(256, 256).to(dev)
    xm = torch.linspace(-3, 3, 256, dtype=torch.float64, device=dev)
    tab = gate_table(fmt)[:, 0x3f00:0x4000].to(dev)
    k = M.consts(out, 'normal', fmt)
    t = S.Tile(out, 'normal', c, S.Rows(xm, xm.abs(), xm, torch.arange(256)), 0, tab[0], tab[1],
               tab[0], torch.arange(256), 1, k)
    e, tr = S.eager_stats(t, fmt), S.triton_stats(t, fmt)
    assert torch.equal(e.vec, tr.vec) and torch.equal(e.bmax, tr.bmax), (name, out)
    assert torch.equal(e.cand.to(torch.int8), tr.cand), (name, out)
print('TRITON-PASS-OK')
"""


@pytest.mark.parametrize("dev", [
    pytest.param("cpu", marks=pytest.mark.skipif(not HAS_TRITON, reason="needs Triton (its interpreter)")),
    pytest.param("cuda", marks=pytest.mark.skipif(not (HAS_TRITON and torch.cuda.is_available()),
                                                  reason="needs CUDA and Triton"))])
def test_triton_pass_equals_eager_pass(dev):
    env = dict(os.environ, PYTHONWARNINGS="ignore", **({"TRITON_INTERPRET": "1"} if dev == "cpu" else {}))
    p = subprocess.run([sys.executable, "-c", _INTERP.replace("{dev}", dev)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert "TRITON-PASS-OK" in p.stdout, p.stderr[-3000:]


@pytest.mark.parametrize("activation", ["silu", "sigmoid"])
def test_fast_path_bit_identical_to_autograd(activation):
    for dt, xr, gr in ((torch.bfloat16, (0x3f80, 0x3fa0), (0xbf00, 0xc300)),
                       (torch.bfloat16, (0x0000, 0x0040), (0x4000, 0x4400)),   # subnormal x
                       (torch.float16, (0x3c00, 0x3c20), (0xbc00, 0xc400))):
        xs, gs = E.finite_values(*xr, dt, "cpu"), E.finite_values(*gr, dt, "cpu")
        dy = torch.tensor(-1.375, dtype=dt)
        y, dn, dgate = E.torch_fast(xs, gs, dy, activation)
        ya, dxa, dga = E.torch_autograd(xs[:, None].expand(-1, len(gs)).contiguous(),
                                        gs[None, :].expand(len(xs), -1).contiguous(), dy, activation)
        assert torch.equal(E.bits_of(y), E.bits_of(ya)) and torch.equal(E.bits_of(dgate), E.bits_of(dga))
        assert torch.equal(E.bits_of(dn.expand_as(dxa)), E.bits_of(dxa))   # x.grad does not depend on x


def test_metrics_and_budgets_are_the_registered_ones(monkeypatch):
    """element_errors and budget_for read the shared Metric registry (references/metrics) and the
    sweep's exact budget (harness.budgets.exact_budget) over the gate op's float32 noise
    (references.models.noise.node_noise): a changed registration changes them."""
    from harness.budgets import exact_budget
    from harness.exhaustive import metrics as M
    from harness.references import metrics as R
    from harness.references.models.noise import node_noise
    for o, step in (("y", "gate.out"), ("dn", "gate.dinput"), ("dgate", "gate.dgate")):
        assert E.budget_for(o, "normal", BF16) == exact_budget(METRIC[o], 0.0, node_noise(1, 1)[step], BF16)
        assert E.budget_for(o, "extreme", BF16) == math.inf
    c = torch.tensor([1.0, 1.0078125, -2.0, float("inf")], dtype=torch.bfloat16)
    v = torch.tensor([1.0, 1.0, -2.0009765625, 5.0], dtype=torch.float64)
    k = M.consts("y", "normal", BF16)
    before, budget = M.element_errors(c, v, v.abs(), BF16, k), E.budget_for("y", "normal", BF16)
    assert before.err.tolist() == [0.0, 1.0, 0.0625, math.inf]      # bf16 ulp 2**-7 at 1, 2**-6 at 2
    ulp = R.get("ulp")
    monkeypatch.setitem(R._REGISTRY, "ulp", R.Metric("ulp", ulp.column, ulp.mean_column, 0.75,
                                                     lambda d: 2 * ulp.elementwise(d), ulp.description))
    after = M.element_errors(c, v, v.abs(), BF16, k)
    assert after.err.tolist() == [0.0, 2.0, 0.125, math.inf]
    assert E.budget_for("y", "normal", BF16) == budget + 0.25
