"""Outputs of a run: results rows (reports.schema), the histogram and worst-pair CSVs, summary text.

Files go through reports.rundir.RunDir: results.csv written whole and atomically, histogram.csv and
worst.csv too. Rows of the same (case_id, impl) are replaced, others kept: runs over other ranges
of one output directory accumulate. The verdict follows harness.analysis.compare: a non-finite
output where the reference rounds to a finite value fails, then the gated metric's worst element
over the budget fails; the extreme regime's budget is inf (reported, not gated), and so is dgate's
in a sigmoid gate's saturated regime."""
from __future__ import annotations

from pathlib import Path

from harness.exhaustive.accumulate import Acc, Result
from harness.exhaustive.impls import MATH
from harness.exhaustive.metrics import EDGES, KEPT_METRICS, METRIC, budget_for
from harness.references.formats import fmt_of
from harness.references.metrics import get

_TEXT = ("case_id", "impl", "output", "regime", "metric", "x_bits", "gate_bits", "dy_bits", "got_bits")
BUDGET_SOURCE = "exhaustive default (final rounding + SiLUGate float32 noise)"


def _hex(bits: int) -> str:
    return f"0x{bits:04x}"


def _got_bits(v: float, dtype) -> str:
    import torch
    t = torch.tensor([v], dtype=torch.float64).to(dtype)
    return _hex(int(t.view(torch.int16).to(torch.int64)[0]) & 0xFFFF)


def case_id(res: Result, regime: str) -> str:
    return f"exhaustive-{res.dtype}-{res.case_hash}-{regime}"


def _maxima(a: Acc) -> dict:
    return dict(zip(KEPT_METRICS, (a.max_ulp, a.max_scaled, a.max_abs, a.max_rel)))


def verdict(output: str, a: Acc, budget: float) -> tuple[str, str]:
    metric = METRIC[output]
    worst = _maxima(a)[metric]
    if a.nonfinite:
        return "fail", f"{output}: {a.nonfinite} non-finite outputs where the reference is finite"
    if not worst <= budget:
        return "fail", f"{output} {metric} error {worst:.4g} > budget {budget:.4g} ({a.over} pairs over)"
    return "pass", ""


def rows(res: Result) -> list[dict]:
    fmt = fmt_of(res.dtype)
    out = []
    xr, gr = res.x_range, res.gate_range
    for (o, regime), a in res.acc.items():
        if a.pairs == 0:
            continue
        budget = budget_for(o, regime, fmt)
        metric = METRIC[o]
        w = a.worst[metric][0] if a.worst[metric] else None
        status, reason = verdict(o, a, budget)
        row = {
            "case_id": case_id(res, regime),
            "label": f"exhaustive {res.dtype} x[{_hex(xr[0])}:{_hex(xr[1])}) gate[{_hex(gr[0])}:{_hex(gr[1])}) "
                     f"dy={res.dy:g}{'' if res.activation == 'silu' else ' ' + res.activation} ({regime})",
            "regime": regime, "impl": res.impl, "rounding": res.rounding, "math": MATH, "device": res.device,
            "dtype": res.dtype, "gate_dtype": res.dtype, "weight_dtype": res.dtype,
            "act_dtype": res.dtype, "out_dtype": res.dtype,
            "shape": f"{res.n_x}x{res.n_gate[regime]}", "hidden": 1, "tokens": a.pairs,
            "zero_centered_gamma": False, "eps": 0.0, "group_size": 1, "norm_before_gate": True,
            "activation": res.activation,
            "x_dist": f"bits[{_hex(xr[0])}:{_hex(xr[1])})",
            "gate_dist": f"bits[{_hex(gr[0])}:{_hex(gr[1])}) {regime}",
            "gamma_dist": "", "dy_dist": f"constant {res.dy!r}", "seed": 0,
            "output": o, "reference": "exact",
            "p99_ulp": p99(a), "budget_metric": metric, "budget": budget, "budget_source": BUDGET_SOURCE,
            "status": status, "reason": reason,
            "count_over": a.over, "n_elements": a.pairs, "cr_mismatch": a.mismatch,
            "certified": a.certified, "uncertified": a.uncertified,
            "worst_index": "", "worst_got": w.got if w else "", "worst_ref": w.ref if w else "",
            "worst_inputs": (f"x={_hex(w.x_bits)} gate={_hex(w.g_bits)} dy={_hex(res.dy_bits)}" if w else ""),
            "replay": (f"harness exhaustive --dtype {res.dtype} --impl {res.impl} "
                       f"--x-range {_hex(w.x_bits)}:{_hex(w.x_bits + 1)} "
                       f"--gate-range {_hex(w.g_bits)}:{_hex(w.g_bits + 1)} "
                       f"--dy {res.dy!r} --device cpu"
                       + ("" if res.activation == "silu" else f" --activation {res.activation}")) if w else "",
            "pair_seconds": res.seconds,
        }
        for name, value in _maxima(a).items():
            m = get(name)
            row[m.column] = value
        for name, total in (("ulp", a.sum_ulp), ("scaled", a.sum_scaled)):
            if get(name).mean_column:
                row[get(name).mean_column] = total / a.pairs
        out.append(row)
    return out


def p99(a: Acc) -> float:
    """Upper edge of the histogram bin holding the 99th percentile of the ULP error."""
    target, run = 0.99 * sum(a.hist_ulp), 0
    for i, n in enumerate(a.hist_ulp):
        run += n
        if run >= target:
            return EDGES[i + 1]
    return EDGES[-1]


def histogram_rows(res: Result) -> list[dict]:
    out = []
    for (o, regime), a in res.acc.items():
        if a.pairs == 0:
            continue
        for metric, h in (("ulp", a.hist_ulp), ("scaled", a.hist_scaled)):
            for i, n in enumerate(h):
                out.append({"case_id": case_id(res, regime), "impl": res.impl, "output": o, "regime": regime,
                            "metric": metric, "bin_lo": EDGES[i], "bin_hi": EDGES[i + 1], "count": int(n)})
    return out


def worst_rows(res: Result) -> list[dict]:
    dt = fmt_of(res.dtype).dtype
    out = []
    for (o, regime), a in res.acc.items():
        for metric, lst in a.worst.items():
            for rank, w in enumerate(lst):
                out.append({"case_id": case_id(res, regime), "impl": res.impl, "output": o, "regime": regime,
                            "metric": metric, "rank": rank, "x_bits": _hex(w.x_bits), "gate_bits": _hex(w.g_bits),
                            "dy_bits": _hex(res.dy_bits), "x": w.x, "gate": w.g, "dy": res.dy,
                            "got_bits": _got_bits(w.got, dt), "got": w.got, "ref": w.ref, "golden": w.golden,
                            "ulp_err": w.ulp, "scaled_err": w.scaled})
    return out


def _merged(path: Path, new: list[dict], keys=("case_id", "impl")):
    """`new` rows, plus the rows of the file at `path` whose (case_id, impl) `new` does not have."""
    import pandas as pd

    from harness.reports.rundir import read_csv
    df = pd.DataFrame(new)
    if path.exists() and path.stat().st_size:
        old = read_csv(path, text=_TEXT)
        if set(keys) <= set(old.columns) and len(df):
            mine = set(map(tuple, df[list(keys)].astype(str).values.tolist()))
            keep = [tuple(r) not in mine for r in old[list(keys)].astype(str).values.tolist()]
            df = pd.concat([old[keep], df], ignore_index=True)
    return df


def write_outputs(res: Result, out_dir: Path | str) -> list[Path]:
    """results.csv, histogram.csv, worst.csv of `out_dir` (a RunDir), each written atomically."""
    from harness.reports.rundir import RunDir
    rd = RunDir(out_dir)
    rd.write_results(_merged(rd.results, rows(res)))
    paths = [rd.results]
    for name, rs in (("histogram.csv", histogram_rows(res)), ("worst.csv", worst_rows(res))):
        paths.append(rd.write_frame(name, _merged(rd.file(name), rs)))
    return paths


def summary(res: Result) -> str:
    pairs = res.perf.get("pairs_run", res.n_x * sum(res.n_gate.values()))
    sat = res.n_gate.get("saturated", 0)
    lines = [f"exhaustive {res.dtype} impl={res.impl} ({res.rounding}, {MATH} math, {res.activation} gate) on "
             f"{res.device}: {res.n_x} x values x {res.n_gate['normal']}+{res.n_gate['extreme']}"
             + (f"+{sat} gates (normal+extreme+saturated), " if sat else " gates (normal+extreme), ") +
             f"dy={res.dy:g}, {res.seconds:.2f} s for {pairs:.4g} pairs "
             f"({pairs / max(res.seconds, 1e-9):.3g} pairs/s, tile pass {res.perf.get('backend', '?')})"]
    lines.append(f"{'output':6s} {'regime':7s} {'pairs':>12s} {'max_ulp':>10s} {'max_scaled':>10s} "
                 f"{'budget':>12s} {'not_CR':>10s} {'certified':>9s} {'uncert':>6s} {'nonfin':>6s}  status")
    for r in rows(res):
        a = res.acc[(r["output"], r["regime"])]
        lines.append(f"{r['output']:6s} {r['regime']:7s} {a.pairs:12d} {a.max_ulp:10.7g} {a.max_scaled:10.7g} "
                     f"{r['budget_metric'] + ' ' + format(r['budget'], '.6g'):>12s} {a.mismatch:10d} "
                     f"{a.certified:9d} {a.uncertified:6d} {a.nonfinite:6d}  {r['status']}")
        hist = " ".join(f"<={EDGES[i + 1]:.8g}:{n}" for i, n in enumerate(a.hist_ulp) if n)
        lines.append(f"{'':15s} ulp histogram {hist}")
        if r["status"] != "pass":
            lines.append(f"{'':15s} {r['reason']}; worst {r['worst_inputs']}")
    return "\n".join(lines)
