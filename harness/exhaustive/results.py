"""Outputs of a run: results rows (reports.schema), the histogram and worst-pair CSVs, summary text."""
from __future__ import annotations

import os
from pathlib import Path

import torch

from harness.exhaustive.accumulate import Acc, Result
from harness.exhaustive.enumerate import bits_of
from harness.exhaustive.metrics import EDGES, METRIC, budget_for
from harness.references.formats import fmt_of


def _hex_of(v: float, dt: torch.dtype) -> str:
    return f"0x{int(bits_of(torch.tensor([v], dtype=torch.float64).to(dt))[0]):04x}"


def case_id(res: Result, regime: str) -> str:
    return f"exhaustive-{res.dtype}-{res.case_hash}-{regime}"


def rows(res: Result) -> list[dict]:
    fmt = fmt_of(res.dtype)
    out = []
    for (o, regime), a in res.acc.items():
        if a.pairs == 0:
            continue
        budget = budget_for(o, regime, fmt)
        metric = METRIC[o]
        worst_list = a.worst[metric]
        w = worst_list[0] if worst_list else None
        worst_metric = a.max_ulp if metric == "ulp" else a.max_scaled
        if a.nonfinite:
            status, reason = "fail", f"{o}: {a.nonfinite} non-finite outputs where the reference is finite"
        elif not worst_metric <= budget:
            status = "fail"
            reason = f"{o} {metric} error {worst_metric:.4g} > budget {budget:.4g} ({a.over} pairs over)"
        else:
            status, reason = "pass", ""
        xr, gr = res.x_range, res.gate_range
        inputs = ""
        if w is not None:
            inputs = f"x={_hex_of(w.x, fmt.dtype)} gate={_hex_of(w.g, fmt.dtype)} dy=0x{res.dy_bits:04x}"
        out.append({
            "case_id": case_id(res, regime),
            "label": f"exhaustive {res.dtype} x[0x{xr[0]:04x}:0x{xr[1]:04x}) gate[0x{gr[0]:04x}:0x{gr[1]:04x}) "
                     f"dy={res.dy:g} ({regime})",
            "regime": regime, "impl": res.impl, "rounding": res.rounding, "device": res.device,
            "dtype": res.dtype, "gate_dtype": res.dtype, "weight_dtype": res.dtype,
            "act_dtype": res.dtype, "out_dtype": res.dtype,
            "shape": f"{res.n_x}x{res.n_gate[regime]}", "hidden": 1, "tokens": a.pairs,
            "zero_centered_gamma": False, "eps": 0.0,
            "x_dist": f"bits[0x{xr[0]:04x}:0x{xr[1]:04x})",
            "gate_dist": f"bits[0x{gr[0]:04x}:0x{gr[1]:04x}) {regime}",
            "gamma_dist": "", "seed": 0,
            "output": o, "reference": "exact",
            "max_ulp": a.max_ulp, "mean_ulp": a.sum_ulp / a.pairs, "p99_ulp": _p99(a),
            "max_abs_err": a.max_abs, "max_rel_err": a.max_rel, "max_scaled_err": a.max_scaled,
            "mean_scaled_err": a.sum_scaled / a.pairs,
            "budget_metric": metric, "budget": budget, "budget_source": "exhaustive default",
            "status": status, "reason": reason,
            "count_over": a.over, "n_elements": a.pairs, "cr_mismatch": a.mismatch,
            "certified": a.certified, "uncertified": a.uncertified,
            "worst_index": "", "worst_got": w.got if w else "", "worst_ref": w.ref if w else "",
            "worst_inputs": inputs,
            "replay": (f"harness exhaustive --dtype {res.dtype} --impl {res.impl} "
                       f"--x-range 0x{_hex_of(w.x, fmt.dtype)[2:]}:0x{int(_hex_of(w.x, fmt.dtype), 16) + 1:04x} "
                       f"--gate-range 0x{_hex_of(w.g, fmt.dtype)[2:]}:0x{int(_hex_of(w.g, fmt.dtype), 16) + 1:04x} "
                       f"--dy {res.dy!r} --device cpu") if w else "",
        })
    return out


def _p99(a: Acc) -> float:
    """Upper edge of the histogram bin holding the 99th percentile of the ULP error."""
    h = a.hist_ulp.tolist()
    target, run = 0.99 * sum(h), 0
    for i, n in enumerate(h):
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
            if h is None:
                continue
            for i, n in enumerate(h.tolist()):
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
                            "metric": metric, "rank": rank, "x_bits": _hex_of(w.x, dt),
                            "gate_bits": _hex_of(w.g, dt), "dy_bits": f"0x{res.dy_bits:04x}",
                            "x": w.x, "gate": w.g, "dy": res.dy, "got_bits": _hex_of(w.got, dt),
                            "got": w.got, "ref": w.ref, "golden": w.golden,
                            "ulp_err": w.ulp, "scaled_err": w.scaled})
    return out


def _replace_rows(path: Path, new, keys: list[str]):
    import pandas as pd
    df = pd.DataFrame(new)
    if path.exists() and path.stat().st_size:
        old = pd.read_csv(path)
        if set(keys) <= set(old.columns) and len(df):
            mine = set(map(tuple, df[keys].astype(str).values.tolist()))
            keep = [tuple(r) not in mine for r in old[keys].astype(str).values.tolist()]
            df = pd.concat([old[keep], df], ignore_index=True)
    return df


def write_outputs(res: Result, out_dir: Path) -> None:
    """results.csv: rows of the same (case_id, impl) are replaced, others kept (append);
    histogram.csv and worst.csv likewise."""
    from harness.reports.results_io import write_results
    out_dir.mkdir(parents=True, exist_ok=True)
    keys = ["case_id", "impl"]
    write_results(out_dir / "results.csv", _replace_rows(out_dir / "results.csv", rows(res), keys))
    for name, rs in (("histogram.csv", histogram_rows(res)), ("worst.csv", worst_rows(res))):
        df = _replace_rows(out_dir / name, rs, keys)
        tmp = out_dir / (name + ".tmp")
        df.to_csv(tmp, index=False)
        os.replace(tmp, out_dir / name)


def summary(res: Result) -> str:
    lines = [f"exhaustive {res.dtype} impl={res.impl} ({res.rounding}) on {res.device}: "
             f"{res.n_x} x values x {res.n_gate['normal']}+{res.n_gate['extreme']} gates (normal+extreme), "
             f"dy={res.dy:g}, {res.seconds:.2f} s, "
             f"{res.n_x * sum(res.n_gate.values()) / max(res.seconds, 1e-9):.3g} pairs/s"]
    lines.append(f"{'output':6s} {'regime':7s} {'pairs':>12s} {'max_ulp':>10s} {'max_scaled':>10s} "
                 f"{'budget':>12s} {'not_CR':>10s} {'certified':>9s} {'uncert':>6s} {'nonfin':>6s}  status")
    for r in rows(res):
        a = res.acc[(r["output"], r["regime"])]
        lines.append(f"{r['output']:6s} {r['regime']:7s} {a.pairs:12d} {a.max_ulp:10.7g} {a.max_scaled:10.7g} "
                     f"{r['budget_metric'] + ' ' + format(r['budget'], '.6g'):>12s} {a.mismatch:10d} "
                     f"{a.certified:9d} {a.uncertified:6d} {a.nonfinite:6d}  {r['status']}")
        hist = " ".join(f"<={EDGES[i + 1]:.8g}:{n}" for i, n in enumerate(a.hist_ulp.tolist()) if n)
        lines.append(f"{'':15s} ulp histogram {hist}")
        if r["status"] != "pass":
            lines.append(f"{'':15s} {r['reason']}; worst {r['worst_inputs']}")
    return "\n".join(lines)
