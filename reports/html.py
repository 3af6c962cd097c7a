"""report.html: one self-contained page (inline CSS, JS and base64 PNG plots from
harness.reports.plots; nothing fetched). Every section is reduced with vectorised pandas first and
its tables are capped before templating, so 50,000-row results render in seconds. Values reach the
page only through jinja2 with autoescape: a reason or a name is text, never markup.

"Gated" rows are the checks an implementation is judged by: against the exact value and against
its declared model at its math class (reference `model:<rounding>`). `harness identify` rows
against the other built-in models and classes feed the "which model" section only."""
from __future__ import annotations

from pathlib import Path

import jinja2
import numpy as np
import pandas as pd

from harness.references.atomic import atomic_write
from harness.reports import plots
from harness.reports.realised import by_output, least_class, model_fits, output_label, verdict_line, within
from harness.reports.schema import BACKWARD_OUTPUTS, FORWARD_ONLY, STATUSES
from harness.reports.summary import budget_ratio, gated, normalize, pair_notes, sort_keys, worst_value

TEMPLATES = Path(__file__).parent / "templates"
ALL_ROWS_CAP = 2000        # rows of the "all results" table written into the page
FAILURES_CAP = 20000       # failures are always listed; this only bounds the file size
BASELINE_CAP = 500         # rows per better / worse table
TABLE_CAP = 5000           # determinism rows
WORST_N = 20               # worst-case cards beyond the one per (impl, out dtype) with a failure
MATCH = ["case_id", "impl", "output", "reference"]
PAIR = ["case_id", "impl"]
SECTIONS = ("verdict", "models", "accuracy", "histograms", "worst", "speed", "determinism", "baseline",
            "environment")
NUMERIC = ("pair_seconds", "impl_seconds", "gpu_seconds", "bytes_moved", "floor_fraction", "differing_elements",
           "hidden", "tokens", "n_elements")


# ---------------------------------------------------------------- formatting

def _num(s: pd.Series, spec: str = ".4g") -> pd.Series:
    return s.map(lambda v: "" if v != v else format(float(v), spec))


def _table(d: pd.DataFrame, cols: dict[str, str], total: int | None = None, cap: int | None = None,
           note: str = "") -> dict:
    """A template table: header names and rows of strings (already formatted)."""
    shown = d if cap is None else d.head(cap)
    body = shown[list(cols)].astype(str).to_numpy().tolist()
    total = len(d) if total is None else total
    if cap is not None and total > len(shown):
        note = (note + " " if note else "") + f"First {len(shown):,} of {total:,} rows; all are in results.csv."
    return {"head": list(cols.values()), "rows": body, "note": note}


def _flag(s: pd.Series, words: tuple[str, ...]) -> pd.Series:
    """A boolean column as read back from CSV (True/False, 1/0 or text; blank is neither)."""
    return s.astype(str).str.strip().str.lower().isin(words)


def _truthy(s: pd.Series) -> pd.Series:
    return _flag(s, ("true", "1", "1.0", "yes"))


# ---------------------------------------------------------------- sections

def verdict(d: pd.DataFrame, exit_code: int) -> dict:
    counts = {s: int((d["status"] == s).sum()) for s in STATUSES}
    word = {0: "PASS", 1: "FAIL", 2: "ERROR"}.get(exit_code, f"EXIT {exit_code}")
    by_impl = pd.crosstab(d["impl"], d["status"]).reindex(columns=list(STATUSES), fill_value=0).reset_index()
    # checks against a model the implementation does not declare (identify rows) are counted, not listed
    bad = d[d["_gated"] & ~d["status"].isin(["pass", "skip"])].sort_values("_ratio", ascending=False,
                                                                            na_position="first")
    fails = _table(bad, {"impl": "impl", "case_id": "case id", "label": "case", "out_dtype": "out dtype",
                         "output": "output", "reference": "reference", "status": "status", "reason": "reason",
                         "replay": "replay"}, cap=FAILURES_CAP)
    skipped = d[d["status"] == "skip"]
    skipped = skipped.assign(_n=skipped.groupby(PAIR)["case_id"].transform("size")).drop_duplicates(PAIR)
    skips = _table(skipped, {"impl": "impl", "case_id": "case id", "label": "case", "reason": "reason",
                             "_n": "checks skipped"}, cap=FAILURES_CAP)
    return {"counts": counts, "total": len(d), "word": word, "exit_code": exit_code, "failures": fails,
            "other_models": int((~d["_gated"] & (d["status"] == "fail")).sum()),
            "skips": skips, "by_impl": _table(by_impl, {"impl": "impl", **{s: s for s in STATUSES}}),
            "notes": pair_notes(d)}


def models(d: pd.DataFrame) -> dict:
    """Per implementation, out dtype and output: the models within budget (every measured check
    against model:<name> passed), each at the least permissive math class at which it is; one
    verdict line per implementation, as `harness identify` says it."""
    fit = model_fits(d)
    names = sorted(fit["model"].unique())
    firsts = d[d["rounding"] != ""].groupby("impl", sort=False)[["rounding", "math"]].first()
    impls, rows = [], []
    for impl in sorted(d["impl"].unique()):
        f = fit[fit["impl"] == impl]
        own, own_math = firsts.loc[impl].tolist() if impl in firsts.index else ("", "")
        if f.empty:
            impls.append({"impl": impl, "declared": own, "declared_math": own_math,
                          "line": f"{impl}: no model check was measured"})
            continue
        line = verdict_line(impl, f, own, own_math)
        if len(f[["model", "math"]].drop_duplicates()) == 1:
            line += " (only one model measured, at one math class; harness identify measures every built-in model at every class)"
        impls.append({"impl": impl, "declared": own, "declared_math": own_math, "line": line})
        for (act, dt, out), fits in by_output(f).items():
            cells = [_model_cell([r for r in fits if r.model == name], name == own) for name in names]
            rows.append({"key": [impl, dt, output_label(act, out)], "cells": cells, "within": within(fits)})
    return {"names": names, "impls": impls, "rows": rows}


def _model_cell(fits: list, declared: bool) -> tuple[str, str, str]:
    """One model's cell from its fits (model_fits' rows, one per math class measured): within (at
    its least class), or how many checks were over at the least class measured; text, colour
    class, tooltip."""
    star = " ★" if declared else ""
    if not fits:
        return "–" + star, "c-na", "not measured"
    ok = [r for r in fits if r.ok]
    if ok:
        mc = least_class(r.math for r in ok)
        r = next(r for r in ok if r.math == mc)
        return f"within ({mc}){star}", "c-ok", f"{r.passed} of {r.checks} passed at {mc} math"
    mc = least_class(r.math for r in fits)
    r = next(r for r in fits if r.math == mc)
    return (f"{r.checks - r.passed} of {r.checks} over{star}", "c-over",
            f"{r.passed} of {r.checks} passed at {r.math} math (no class measured fits)")


def _cell(r) -> tuple[str, str, str]:
    """Accuracy cell: text, colour class, tooltip."""
    if r.checks == r.error + r.skip:
        return ("skip" if r.skip else "error"), ("c-na" if r.skip else "c-over"), f"{r.error} errored, {r.skip} skipped"
    worst = r.worst
    text = "" if worst != worst else f"{worst:.4g}"
    ratio = worst / r.budget if r.budget and r.budget == r.budget else np.nan
    cls = ("c-over" if r.fail or r.error or ratio > 1 else "c-close" if ratio > 0.75
           else "c-ok" if ratio == ratio or worst == 0 else "c-na")
    tip = (f"{r.full_ref} ({r.regime}): budget {r.budget:.4g} {r.metric}, margin {r.margin:.4g}, "
           f"{r.fail} failed, {r.error} errored, {r.skip} skipped of {r.checks}")
    return text or "–", cls, tip


def accuracy(summary: pd.DataFrame, declared: dict) -> dict:
    """Implementations side by side; rows out dtype x output x reference x regime. Each
    implementation's own model shares one row ("declared model"; the tooltip names it); other
    models (identify runs) keep their names. `declared`: impl -> its declared model's reference label."""
    if summary.empty:
        return {"impls": [], "rows": []}
    is_own = summary["reference"] == summary["impl"].map(lambda i: declared.get(i, ""))
    s = summary.assign(full_ref=summary["reference"], reference=summary["reference"].where(~is_own, "declared model"))
    s = sort_keys(s, ["out_dtype", "output", "reference", "regime", "impl"])
    impls = sorted(s["impl"].unique())
    # one pass over the rows, grouped in order of first appearance (a groupby's per-group frames
    # cost ~5 ms each: half a second of a quick report on the H200, on its critical path)
    groups: dict[tuple, tuple[dict, list]] = {}
    for r in s.itertuples():
        by, metric = groups.setdefault((r.out_dtype, r.output, r.reference, r.regime), ({}, []))
        by[r.impl] = _cell(r)
        if r.metric and not metric:
            metric.append(r.metric)
    rows = [{"key": [*key, f"worst {metric[0] if metric else ''}"],
             "cells": [by.get(i, ("", "c-na", "not run")) for i in impls]} for key, (by, metric) in groups.items()]
    return {"impls": impls, "rows": rows}


def worst(d: pd.DataFrame) -> dict:
    """Cards: the worst failing check of every (impl, out dtype) that failed, then the worst
    remaining measured checks by worst/budget up to WORST_N cards. A failure without a measurement
    (wrong dtype, a NaN reference) ranks as its group's worst."""
    key = d["_ratio"].where(d["status"] != "fail", d["_ratio"].fillna(np.inf))
    cand = d.assign(_key=key)[key.notna()].sort_values("_key", ascending=False, kind="stable")
    reps = cand[cand["status"] == "fail"].drop_duplicates(["impl", "out_dtype"])
    # the rest by measured ratio only: repeats of one unmeasurable failure would crowd out the others
    rest = cand[cand["_ratio"].notna()].drop(reps.index, errors="ignore").head(max(WORST_N - len(reps), 0))
    top = pd.concat([reps, rest]).sort_values("_key", ascending=False, kind="stable")
    top = top.assign(value=_num(top["_value"]), ratio=_num(top["_ratio"], ".3g"), budget_s=_num(top["budget"]),
                     got=_num(top["worst_got"], ".9g"), ref=_num(top["worst_ref"], ".9g"))
    cases = top[["impl", "case_id", "label", "out_dtype", "output", "reference", "status", "budget_metric", "value",
                 "budget_s", "ratio", "worst_index", "worst_inputs", "got", "ref", "reason", "replay"]]
    cases = cases.astype(object).where(cases.notna(), "").astype(str).to_dict("records")
    ordered = pd.concat([d[d["_ratio"].notna()].sort_values("_ratio", ascending=False), d[d["_ratio"].isna()]])
    ordered = ordered.assign(**{c: _num(ordered[c]) for c in ["max_ulp", "mean_ulp", "max_scaled_err", "budget"]},
                             ratio=_num(ordered["_ratio"], ".3g"))
    all_rows = _table(ordered, {"impl": "impl", "case_id": "case id", "label": "case", "out_dtype": "out dtype",
                                "output": "output", "reference": "reference", "regime": "regime",
                                "status": "status", "max_ulp": "max ULP", "mean_ulp": "mean ULP",
                                "max_scaled_err": "max scaled", "budget": "budget", "ratio": "worst/budget"},
                      cap=ALL_ROWS_CAP, note="Sorted by worst/budget, highest first.")
    return {"cases": cases, "groups": len(reps), "all": all_rows}


def _ms(s: pd.Series) -> pd.Series:
    return _num(s * 1e3)


def speed(d: pd.DataFrame) -> dict:
    """Per implementation: the median warm forward + backward time (the forward alone for a
    forward-only implementation, whose backward rows are skips that say so) over its timed cases and at its
    largest case — the GPU time where measured (CUDA: graph replay or the profiler's device time,
    `gpu_method`), and beside it the host-inclusive wall time — the share of the copy-bandwidth
    floor (from the GPU time), beside its worst normal-regime errors against its declared model and
    the exact value."""
    timed, has_gpu = _timed_pairs(d)
    timed = timed.assign(_size=(timed["tokens"] * timed["hidden"]).fillna(timed["n_elements"]))
    normal = d[d["regime"] != "extreme"]
    rows = []
    for impl in sorted(d["impl"].unique()):
        t, r = timed[timed["impl"] == impl], normal[normal["impl"] == impl]
        big = t.loc[t["_size"].fillna(-1).idxmax()] if len(t) else None
        own = r[r["reference"] != "exact"]
        exact = r[r["reference"] == "exact"]
        mine = d[(d["impl"] == impl) & (d["rounding"] != "")]
        model = "" if mine.empty else ", ".join(x for x in (mine["rounding"].iloc[0], mine["math"].iloc[0]) if x)
        methods = sorted(m for m in t["gpu_method"].dropna().astype(str).unique() if m and m != "nan")
        back = d[(d["impl"] == impl) & d["output"].isin(BACKWARD_OUTPUTS)]
        forward_only = len(back) > 0 and bool((back["reason"].astype(str) == FORWARD_ONLY).all())
        rows.append({"impl": impl, "model": model, "n": len(t),
                     "calls": "forward only" if forward_only else "forward + backward",
                     "gpu": t["gpu_seconds"].median(), "gpu_big": np.nan if big is None else big["gpu_seconds"],
                     "method": "/".join(methods),
                     "median": t["impl_seconds"].median(),
                     "big": np.nan if big is None else big["impl_seconds"],
                     "big_case": "" if big is None else big["label"],
                     "floor": t["floor_fraction"].median(),
                     "floor_big": np.nan if big is None else big["floor_fraction"],
                     "ulp_m": own["max_ulp"].max(), "sc_m": own["max_scaled_err"].max(),
                     "ulp_x": exact["max_ulp"].max(), "sc_x": exact["max_scaled_err"].max(),
                     "ratio": r["_ratio"].max()})
    s = pd.DataFrame(rows, columns=["impl", "model", "n", "calls", "gpu", "gpu_big", "method", "median", "big", "big_case",
                                    "floor", "floor_big", "ulp_m", "sc_m", "ulp_x", "sc_x", "ratio"])
    has_floor = bool(s["floor"].notna().any())
    s = s.assign(gpu=_ms(s["gpu"]), gpu_big=_ms(s["gpu_big"]), median=_ms(s["median"]), big=_ms(s["big"]),
                 floor=_num(s["floor"] * 100, ".1f"), floor_big=_num(s["floor_big"] * 100, ".1f"),
                 ratio=_num(s["ratio"], ".3g"), **{c: _num(s[c]) for c in ("ulp_m", "sc_m", "ulp_x", "sc_x")})
    cols = {"impl": "impl", "model": "declared model", "n": "cases timed", "calls": "timed calls"}
    if has_gpu:
        cols |= {"gpu": "median GPU time (ms)", "gpu_big": "GPU time at largest case (ms)", "method": "GPU timing"}
    cols |= {"median": "median wall time, host-inclusive (ms)", "big": "wall time at largest case (ms)",
             "big_case": "largest case"}
    if has_floor:
        cols |= {"floor": "median % of bandwidth floor", "floor_big": "% of floor at largest case"}
    cols |= {"ulp_m": "worst ULP vs model", "sc_m": "worst scaled vs model", "ulp_x": "worst ULP vs exact",
             "sc_x": "worst scaled vs exact", "ratio": "worst / budget"}
    return {"table": _table(s, cols), "has_floor": has_floor, "has_gpu": has_gpu, "timed": int(len(timed))}


def _timed_pairs(d: pd.DataFrame) -> tuple[pd.DataFrame, bool]:
    """The timed pairs, one row each, and whether any has a GPU time (then the speed section's
    table and figure read the GPU time, else the wall time): their one home."""
    pairs = d.drop_duplicates(PAIR)
    if "gpu_seconds" not in pairs:                       # results.csv written before schema 4
        pairs = pairs.assign(gpu_seconds=np.nan, gpu_method="")
    timed = pairs[pairs["impl_seconds"].notna()]
    return timed, bool(timed["gpu_seconds"].notna().any())


def speed_plot(d: pd.DataFrame) -> str | None:
    """The speed section's figure (plots.speed): each timed pair's time — the GPU time wherever one
    was measured, else the wall time — against its worst ratio to the exact value's budget."""
    timed, has_gpu = _timed_pairs(d)
    # plotted against the exact value: against its own model every correct implementation sits
    # just under 1 (its error at most half an ULP, the budget half an ULP), whatever its accuracy
    exact = d[d["reference"] == "exact"]
    ratio = exact.groupby(PAIR, sort=False)["_ratio"].max().rename("_ratio").reset_index()
    plot_pairs = timed.drop(columns="_ratio").merge(ratio, on=PAIR, how="left")
    plot_pairs = plot_pairs.assign(_seconds=plot_pairs["gpu_seconds"] if has_gpu else plot_pairs["impl_seconds"])
    return plots.speed(plot_pairs, "GPU time" if has_gpu else "wall time")


def determinism(d: pd.DataFrame) -> dict:
    """The outputs whose second call on the same inputs gave other bits (one row per case,
    implementation and output: repeatability does not depend on the reference)."""
    r = d[d["status"].isin(["pass", "fail"])].drop_duplicates(PAIR + ["output"])
    measured = r[_flag(r["repeatable"], ("true", "1", "1.0", "false", "0", "0.0"))]
    bad = measured[_flag(measured["repeatable"], ("false", "0", "0.0"))]
    bad = sort_keys(bad, ["impl", "case_id", "output"])
    diff = bad["differing_elements"].fillna(0)
    bad = bad.assign(differing=np.where(diff > 0, _num(diff, ".0f"), "second call raised"))
    table = _table(bad, {"impl": "impl", "case_id": "case id", "label": "case", "output": "output",
                         "differing": "differing elements"}, cap=TABLE_CAP)
    return {"measured": len(measured), "pairs": int(measured.drop_duplicates(PAIR).shape[0]), "bad": len(bad),
            "table": table}


def baseline_diff(d: pd.DataFrame, baseline: pd.DataFrame) -> dict:
    """Match rows on (case_id, impl, output, reference) and compare the budget-metric value."""
    b = normalize(baseline)
    b = b.assign(_value=worst_value(b))[MATCH + ["status", "_value"]].drop_duplicates(MATCH)
    cur = d[MATCH + ["label", "out_dtype", "status", "budget_metric", "budget", "_value"]].drop_duplicates(MATCH)
    m = cur.merge(b, on=MATCH, how="outer", suffixes=("", "_base"), indicator=True)
    both = m[m["_merge"] == "both"]
    delta = both["_value"] - both["_value_base"]
    worse, better = both[delta > 0], both[delta < 0]
    newly_bad = both[(both["status"] != "pass") & (both["status_base"] == "pass")]
    fmt = lambda x: x.assign(now=_num(x["_value"]), before=_num(x["_value_base"]),  # noqa: E731
                             change=_num(x["_value"] - x["_value_base"], "+.3g"))
    cols = {"impl": "impl", "label": "case", "out_dtype": "out dtype", "output": "output",
            "reference": "reference", "budget_metric": "metric", "before": "baseline", "now": "now",
            "change": "change", "status_base": "was", "status": "is"}
    # order by change relative to budget, so ULP and scaled rows rank together
    rel = delta / both["budget"].where(both["budget"] > 0)
    worse = fmt(worse.assign(_k=rel[delta > 0]).sort_values("_k", ascending=False))
    better = fmt(better.assign(_k=rel[delta < 0]).sort_values("_k"))
    reg = d[_truthy(d["regressed"])].assign(now=lambda x: _num(x["_value"]),
                                               before=lambda x: _num(x["baseline_value"]))
    return {
        "counts": {"matched": len(both), "worse": len(worse), "better": len(better),
                   "unchanged": int((delta == 0).sum()), "newly failing": len(newly_bad),
                   "only now": int((m["_merge"] == "left_only").sum()),
                   "only in baseline": int((m["_merge"] == "right_only").sum())},
        "worse": _table(worse, cols, cap=BASELINE_CAP),
        "better": _table(better, cols, cap=BASELINE_CAP),
        "has_regressed": bool(d["regressed"].notna().any()),
        "regressed": _table(reg, {"impl": "impl", "label": "case", "output": "output", "reference": "reference",
                                  "budget_metric": "metric", "before": "baseline value", "now": "now",
                                  "reason": "reason"}, cap=BASELINE_CAP),
    }


# ---------------------------------------------------------------- entry points

def prepare(df: pd.DataFrame) -> pd.DataFrame:
    """Normalised rows plus `_value` (the gated metric's worst), `_ratio` (worst / budget) and
    `_gated` (a check against exact or the row's declared model; a row without a `rounding`
    counts any model as declared)."""
    d = normalize(df)
    for c in NUMERIC:
        d[c] = pd.to_numeric(d[c], errors="coerce")
    return d.assign(_value=worst_value(d), _ratio=budget_ratio(d), _gated=gated(d),
                    label=d["label"].where(d["label"] != "", d["case_id"]))


def render_report(data, path: Path) -> Path:
    """report.html from a reports.outputs.RunData, written atomically."""
    d = prepare(data.results)
    g = d[d["_gated"]]
    summary = data.summary
    own = d[(d["reference_kind"] == "model") & d["_gated"]]
    declared = own.groupby("impl")["reference"].first().to_dict()
    jenv = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                              undefined=jinja2.StrictUndefined)
    # the figures draw in children (each dtype's histograms apart: one figure of every panel was the
    # longest drawing of a report of many implementations) while this process makes the tables
    histograms = plots.histogram_jobs(g)
    drawing = plots.in_children({**histograms, "heatmap": lambda: plots.heatmap(g), "gate": lambda: plots.gate(g),
                                 "speed_plot": lambda: speed_plot(g)})
    try:
        page = dict(
            title=data.title or "Gated RMSNorm precision report",
            verdict={**verdict(d, data.exit_code), "headline": list(data.headline)},
            models=models(d), accuracy=accuracy(summary, declared),
            summary=_table(summary.assign(**{c: _num(summary[c]) for c in ["worst", "budget", "margin", "max_ulp",
                                                                             "max_scaled_err"]}),
                           {c: c for c in summary.columns}),
            worst=worst(g), speed=speed(g), determinism=determinism(d),
            baseline=None if data.baseline is None else baseline_diff(d, data.baseline),
            env={str(k): str(v) for k, v in (data.env or {}).items()},
        )
    finally:
        figures = drawing()                           # every child reaped, on every way out
    page["histograms"] = [figures.pop(k) for k in histograms]
    html = jenv.get_template("report.html").render(**page, **figures)
    with atomic_write(path, "w") as f:                # a reader never sees half a report
        f.write(html)
    return Path(path)
