"""The metrics (harness/references/metrics/) and their reduction on hand-computed cases; compare's
verdict on special values; a toy metric registered at run time flows through budgets, the gate,
the summary and replay."""
from __future__ import annotations

import math

import pytest
import torch

from types import SimpleNamespace

from harness.analysis.compare import compare
from harness.analysis.explain import reason
from harness.references.formats import fmt_of, round_to
from harness.references.metrics import Metric, distance, kth_largest, reduce, registry, unravel


def element_errors(c, lo, hi, gauge, fmt):
    d = distance(c, lo, hi, gauge, fmt)
    e = {name: m.errors(d) for name, m in registry().items()}
    return SimpleNamespace(ulp=e["ulp"], scaled=e["scaled"], abs=e["abs"], rel=e["rel"], ref=d.ref)

INF = math.inf
NAN = math.nan

# precision p and emin per format: ulp(1) = 2**(1-p), smallest subnormal = 2**(emin-p+1)
P = {"bf16": 8, "fp16": 11, "fp32": 24}
EMIN = {"bf16": -126, "fp16": -14, "fp32": -126}


def T(*v):
    return torch.tensor(v, dtype=torch.float64)


def errs(computed, ref, fmt, gauge=None, hi=None):
    f = fmt_of(fmt)
    c = T(*computed)
    lo = T(*ref)
    hi = lo if hi is None else T(*hi)
    g = lo.abs() if gauge is None else T(*gauge)
    return element_errors(c, lo, hi, g, f)


FMTS = ["bf16", "fp16", "fp32"]


@pytest.mark.parametrize("fmt", FMTS)
def test_exact_equal_is_zero(fmt):
    e = errs([1.0, -3.5, 0.0, 1e-3], [1.0, -3.5, 0.0, 1e-3], fmt)
    assert e.ulp.tolist() == [0, 0, 0, 0]
    assert e.scaled.tolist() == [0, 0, 0, 0]
    assert e.abs.tolist() == [0, 0, 0, 0]
    assert e.rel.tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("fmt", FMTS)
def test_one_ulp_and_half_ulp(fmt):
    u1 = 2.0 ** (1 - P[fmt])                     # ulp of [1, 2)
    e = errs([1.0 + u1, 1.0, 2.0 - u1 / 2, -(1.0 + u1)],
             [1.0, 1.0 + u1 / 2, 2.0 - u1, -1.0], fmt)
    # 2 - u1 sits in [1, 2): ulp u1; the third element is off by u1/2
    assert e.ulp.tolist() == [1.0, 0.5, 0.5, 1.0]
    assert e.abs.tolist() == [u1, u1 / 2, u1 / 2, u1]
    assert e.rel[0].item() == u1


@pytest.mark.parametrize("fmt", FMTS)
def test_ulp_from_reference_binade(fmt):
    u1 = 2.0 ** (1 - P[fmt])
    # reference 8 (binade [8, 16): ulp 8*u1); computed one ulp above
    e = errs([8.0 + 8 * u1], [8.0], fmt)
    assert e.ulp.item() == 1.0
    # reference just below 8: the finer ulp of its own binade (4*u1)
    e = errs([8.0], [8.0 - 4 * u1], fmt)
    assert e.ulp.item() == 1.0


@pytest.mark.parametrize("fmt", FMTS)
def test_subnormal_range(fmt):
    s = 2.0 ** (EMIN[fmt] - P[fmt] + 1)          # smallest subnormal
    e = errs([4 * s, s, 0.0, 2.0 ** EMIN[fmt]], [3 * s, 0.0, s, 2.0 ** EMIN[fmt] - s], fmt)
    assert e.ulp.tolist() == [1.0, 1.0, 1.0, 1.0]
    e = errs([3.5 * s], [3 * s], fmt)
    assert e.ulp.item() == 0.5


@pytest.mark.parametrize("fmt", FMTS)
def test_signed_zeros_equal(fmt):
    e = errs([0.0, -0.0], [-0.0, 0.0], fmt)
    assert e.ulp.tolist() == [0, 0] and e.scaled.tolist() == [0, 0] and e.abs.tolist() == [0, 0]


@pytest.mark.parametrize("fmt", FMTS)
def test_nan(fmt):
    e = errs([NAN, NAN, 1.0], [NAN, 1.0, NAN], fmt, gauge=[1.0, 1.0, 1.0])
    assert e.ulp.tolist() == [0.0, INF, INF]
    assert e.scaled.tolist() == [0.0, INF, INF]
    assert e.abs.tolist() == [0.0, INF, INF]


@pytest.mark.parametrize("fmt", FMTS)
def test_infinities(fmt):
    e = errs([INF, -INF, INF, INF, 1.0, -INF], [INF, -INF, -INF, 1.0, INF, 5.0], fmt,
             gauge=[1.0] * 6)
    assert e.ulp.tolist() == [0.0, 0.0, INF, INF, INF, INF]
    assert e.scaled.tolist() == [0.0, 0.0, INF, INF, INF, INF]


def test_reference_that_rounds_to_inf():
    # 70000 is past fp16's largest finite (65504) and rounds to inf: computed inf is right
    e = errs([INF, 65504.0, -INF], [70000.0, 70000.0, -70000.0], "fp16")
    assert e.ulp.tolist() == [0.0, INF, 0.0]
    assert e.scaled[0].item() == 0.0
    # 65519 still rounds to 65504: inf is wrong there
    e = errs([INF], [65519.0], "fp16")
    assert e.ulp.item() == INF
    # in bf16 70000 is finite: inf is wrong
    assert errs([INF], [70000.0], "bf16").ulp.item() == INF


@pytest.mark.parametrize("fmt", FMTS)
def test_interval_reference(fmt):
    u1 = 2.0 ** (1 - P[fmt])
    lo = [1.0, 1.0, 1.0, 1.0]
    hi = [1.5, 1.5, 1.5, 1.5]
    e = errs([1.0, 1.25, 1.5 + 2 * u1, 1.0 - u1 / 2], lo, fmt, hi=hi, gauge=[1.0] * 4)
    # inside -> 0; above hi by 2 ulp(1.5); below lo by u1/2 = half an ulp of the nearest point (1)
    assert e.ulp.tolist() == [0.0, 0.0, 2.0, 0.5]
    assert e.ref.tolist() == [1.0, 1.25, 1.5, 1.0]
    assert e.abs.tolist() == [0.0, 0.0, 2 * u1, u1 / 2]


@pytest.mark.parametrize("fmt", FMTS)
def test_scaled_error_hand_computed(fmt):
    f = fmt_of(fmt)
    u = 2.0 ** -P[fmt]
    smin = 2.0 ** (EMIN[fmt] - P[fmt] + 1)
    assert f.u == u and f.min_subnormal == smin
    comp, ref, gauge = [0.0078125, 1.0 + 2 * u, 0.0], [0.0, 1.0, 0.0], [4.0, 2.0, 3.0]
    e = errs(comp, ref, fmt, gauge=gauge)
    want = [0.0078125 / (u * 4.0 + smin / 2), 2 * u / (u * 2.0 + smin / 2), 0.0]
    assert e.scaled.tolist() == pytest.approx(want, rel=1e-15)
    # a value cancelling to ~0: ulp error is huge, scaled error stays meaningful
    assert e.ulp[0].item() > 1000 * e.scaled[0].item()
    # zero gauge: only the underflow floor remains
    e = errs([smin / 2], [0.0], fmt, gauge=[0.0])
    assert e.scaled.item() == pytest.approx(1.0, rel=1e-15)


def test_shapes_preserved_and_float64():
    c = torch.ones(2, 3, dtype=torch.bfloat16)
    e = element_errors(c, c.double(), c.double(), c.double(), fmt_of("bf16"))
    for t in (e.ulp, e.scaled, e.abs, e.rel, e.ref):
        assert t.shape == (2, 3) and t.dtype == torch.float64


def _ee(ulp, scaled=None):
    u = torch.tensor(ulp, dtype=torch.float64)
    s = u.clone() if scaled is None else torch.tensor(scaled, dtype=torch.float64)
    return u, {"ulp": u, "scaled": s, "abs": u.clone(), "rel": u.clone()}


def red(e, metric, budget):
    u, errors = e
    d = SimpleNamespace(computed=u)
    r = reduce(d, errors, metric, budget)
    return SimpleNamespace(worst_index=r.worst_index, worst_flat=r.worst_flat, worst_metric=r.worst_value,
                           count_over=r.count_over, max_ulp=r.maxima["ulp"], mean_ulp=r.means["ulp"],
                           p99_ulp=r.p99_ulp)


def test_reduce_worst_index_and_counts():
    e = _ee([[0.1, 0.2, 0.0], [0.3, 0.9, 0.6]])
    r = red(e, "ulp", 0.5)
    assert r.worst_index == (1, 1) and r.worst_flat == 4 and r.worst_metric == 0.9
    assert r.count_over == 2
    assert r.max_ulp == 0.9
    assert r.mean_ulp == pytest.approx(2.1 / 6)


def test_reduce_uses_the_budget_metric_for_the_worst():
    e = _ee([[5.0, 0.0]], scaled=[[0.0, 3.0]])
    r = red(e, "scaled", 1.0)
    assert r.worst_index == (0, 1) and r.worst_metric == 3.0 and r.count_over == 1
    r = red(e, "ulp", 1.0)
    assert r.worst_index == (0, 0) and r.worst_metric == 5.0 and r.count_over == 1


def test_reduce_nan_never_passes():
    e = _ee([0.1, NAN, 0.2])
    r = red(e, "ulp", 1000.0)
    assert r.count_over == 1
    assert r.worst_flat == 1 and r.worst_index == (1,)
    assert r.worst_metric == INF


def test_reduce_inf_counts_over():
    r = red(_ee([0.0, INF]), "ulp", 1e300)
    assert r.count_over == 1 and r.worst_flat == 1 and r.max_ulp == INF


def test_reduce_empty_and_scalar():
    r = red(_ee([]), "ulp", 1.0)
    assert r.count_over == 0 and r.worst_index == ()
    r = red(_ee(0.7), "ulp", 0.5)
    assert r.count_over == 1 and r.worst_index == () and r.max_ulp == 0.7 and r.p99_ulp == 0.7


@pytest.mark.parametrize("kind", ["uniform", "ties", "infs", "skewed", "sorted", "tail"])
def test_kth_largest_is_topk_exactly(kind):
    """The sampled threshold is a shortcut, never an estimate: the same order statistic as a full
    top-k, including where the strided sample misjudges the tail (sorted, a tail the sample skips)."""
    g = torch.Generator().manual_seed(7)
    n = 50_000
    u = {"uniform": torch.rand(n, generator=g, dtype=torch.float64),
         "ties": torch.full((n,), 0.25, dtype=torch.float64),
         "infs": torch.where(torch.rand(n, generator=g) < 0.02, INF, 0.5).to(torch.float64),
         "skewed": torch.rand(n, generator=g, dtype=torch.float64) ** 40,
         "sorted": torch.linspace(0, 1, n, dtype=torch.float64),
         "tail": torch.zeros(n, dtype=torch.float64)}[kind]
    if kind == "tail":                      # the top 1 % between the sample's strides
        u[1:n:49] = 2.0
    for k in (1, 17, 500, n // 10, n):
        assert kth_largest(u, k) == float(torch.topk(u, k).values[-1])


@pytest.mark.parametrize("fmt", FMTS)
def test_no_special_shortcut_gives_the_special_paths_errors(fmt):
    """Where neither side has a NaN or infinity, every metric's errors are those of the full path
    (the same tensor with one special element added, compared on the ordinary elements)."""
    f = fmt_of(fmt)
    ref = torch.linspace(-3, 3, 101, dtype=torch.float64)
    got = round_to(ref * (1 + 3 * f.u), f)
    plain = distance(got, ref, ref, ref.abs(), f)
    assert not plain.any_special
    with_nan = distance(torch.cat([got, torch.tensor([NAN], dtype=torch.float64)]),
                        torch.cat([ref, torch.tensor([1.0], dtype=torch.float64)]),
                        torch.cat([ref, torch.tensor([1.0], dtype=torch.float64)]), torch.cat([ref.abs(), ref[:1]]), f)
    assert with_nan.any_special
    for name, m in registry().items():
        assert torch.equal(m.errors(plain), m.errors(with_nan)[:-1]), name
    assert math.isinf(float(registry()["ulp"].errors(with_nan)[-1]))


def test_end_to_end_nan_in_computed_counts_over():
    f = fmt_of("bf16")
    c = torch.tensor([1.0, NAN], dtype=torch.bfloat16)
    ref = torch.tensor([1.0, 2.0], dtype=torch.float64)
    r = compare(c, ref, ref, ref, f, "ulp", 0.5)
    assert r.reduced.count_over == 1 and r.reduced.worst_flat == 1 and math.isinf(r.reduced.worst_value)
    assert r.status == "fail"


def test_nan_against_a_nan_reference_never_passes():
    """The metrics score NaN vs NaN 0 (the values agree), but compare fails any NaN reference."""
    f = fmt_of("bf16")
    c = torch.tensor([1.0, NAN], dtype=torch.bfloat16)
    ref = torch.tensor([1.0, NAN], dtype=torch.float64)
    r = compare(c, ref, ref, ref.abs(), f, "ulp", 0.5)
    assert r.errors["ulp"].tolist() == [0.0, 0.0]
    assert r.status == "fail" and r.finding.kind == "nan_reference" and r.finding.index == (1,)
    text = reason("y", "exact", r.finding)
    assert "NaN" in text and "[1]" in text and "never passes" in text


def test_non_finite_output_fails_where_the_reference_is_finite():
    f = fmt_of("fp16")
    c = torch.tensor([1.0, INF], dtype=torch.float16)
    ref = torch.tensor([1.0, 70000.0], dtype=torch.float64)         # rounds to inf in fp16: legitimate
    assert compare(c, ref, ref, ref, f, "ulp", 0.5).status == "pass"
    ref2 = torch.tensor([1.0, 2.0], dtype=torch.float64)
    r = compare(c, ref2, ref2, ref2, f, "ulp", 1e30)
    assert r.status == "fail" and r.finding.kind == "non_finite" and "non-finite" in reason("y", "exact", r.finding)


def test_a_registered_metric_is_computed_gated_summarised_and_replayed(tmp_path):
    """A new metric is one registration: every check computes it, a budget file can gate it, the
    summary and replay show it."""
    from harness.api import verify
    from harness.budgets import load_budget_file
    from harness.cases.suite import load_suite
    from harness.impls.registry import resolve
    from harness.references import metrics
    from harness.replay import format_replay, run_case
    from harness.reports.summary import summarize
    toy = metrics.register(Metric("toy", "max_toy_err", None, 0.0, lambda d: 2 * d.dist, "2 |c - ref|"))
    try:
        budgets = tmp_path / "b.csv"
        budgets.write_text("impl,rounding,dtype,output,reference,regime,metric,budget\n*,*,*,y,model,*,toy,0\n")
        suite = tmp_path / "s.toml"
        suite.write_text('[[case]]\ndtype = "bf16"\nshape = [4, 16]\n')
        r = verify("torch-fused", cases=str(suite), device="cpu", budgets=str(budgets), isolate="inline",
                   repeats=0)
        y = r.frame[(r.frame["output"] == "y") & r.frame["reference"].str.startswith("model")].iloc[0]
        assert y["budget_metric"] == "toy" and y["max_toy_err"] > 0 and y["status"] == "fail"
        s = summarize(r.frame)
        row = s[(s["output"] == "y") & s["reference"].str.startswith("model")].iloc[0]
        assert row["metric"] == "toy" and row["worst"] == y["max_toy_err"]
        case = load_suite(str(suite)).cases[0]
        # in this process: the metric registered here exists in no worker
        text = format_replay(run_case(case, resolve("torch-fused"), "cpu", 1, load_budget_file(str(budgets)),
                                      isolate="inline"))
        assert "toy=" in text
    finally:
        metrics._REGISTRY.pop(toy.name)


@pytest.mark.parametrize("shape", [(7,), (1, 5), (3, 1, 4), (2, 3, 4, 5), (1,), (4, 1)])
def test_unravel_is_torchs_row_major_index_at_every_position(shape):
    n = math.prod(shape)
    for flat in range(n):
        want = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape))
        assert unravel(flat, shape) == want
        assert all(type(i) is int for i in unravel(flat, shape))


def test_unravel_of_a_0d_shape_is_the_empty_index():
    assert unravel(0, ()) == ()
    assert unravel(0, torch.Size([])) == ()


RACE = """
import importlib, threading, time
import harness.references.metrics as M
real, started = importlib.import_module, threading.Event()

def slow_import(name, *a):           # the first thread is inside the folder's imports...
    started.set()
    time.sleep(0.05)
    return real(name, *a)

M.importlib = type("I", (), {"import_module": staticmethod(slow_import)})
got = {}
first = threading.Thread(target=lambda: got.__setitem__("first", list(M.registry())))
first.start()
assert started.wait(30), "registry() no longer imports through the package's importlib"
got["second"] = list(M.registry())   # ...when the second asks
first.join()
print(got["first"] == got["second"], len(got["second"]))
"""


def test_a_thread_asking_during_discovery_sees_every_metric():
    """A sweep's worker threads may ask for the registry first at once: the second must wait for the
    first's imports (it got a partial registry, and rendered a results.csv row one column short)."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, check=True,
                         timeout=120).stdout.split()
    assert out == ["True", str(len(registry()))]
