"""report.html: one self-contained page (inline CSS, JS and base64 PNG plots; nothing fetched) and
summary.csv beside it. Everything is reduced with vectorized pandas first, and tables are capped
before templating, so 50,000-row results render in seconds."""
from __future__ import annotations

import base64
import io
from pathlib import Path

import jinja2
import numpy as np
import pandas as pd
# Figure + Agg canvas directly, not pyplot: no global backend switch, no figure registry to leak.
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from harness.references.atomic import atomic_write
from harness.reports.schema import STATUSES
from harness.reports.summary import budget_ratio, normalize, sort_keys, worst_value

TEMPLATES = Path(__file__).parent / "templates"
ALL_ROWS_CAP = 2000        # rows of the "all results" table written into the page
FAILURES_CAP = 20000       # failures are always listed; this only bounds the file size
BASELINE_CAP = 500         # rows per better / worse table
WORST_N = 20
MATCH = ["case_id", "impl", "output", "reference"]
SECTIONS = ("verdict", "accuracy", "histograms", "worst", "baseline", "environment")


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


def _truthy(s: pd.Series) -> pd.Series:
    return s.astype(str).str.strip().str.lower().isin(["true", "1", "1.0", "yes"])


# ---------------------------------------------------------------- plots

def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buf)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


# right-closed ULP bins: 0 exactly, (0, .5], (.5, 1], (1, 2], ... , > 2^16
_EDGES = np.array([0.0, 0.5] + [2.0 ** k for k in range(17)] + [np.inf])
_LABELS = ["0", "≤½"] + [f"≤{2 ** k}" if k < 10 else f"≤2^{k}" for k in range(17)] + [">2^16"]


def _ulp_bins(v: np.ndarray) -> np.ndarray:
    return np.bincount(np.searchsorted(_EDGES, v, side="left"), minlength=len(_EDGES))


def plot_histograms(d: pd.DataFrame) -> list[dict]:
    """Grid of out_dtype (rows) x output (columns); in each panel one step histogram per
    implementation and reference kind (solid: exact, dotted: model) of per-row max_ulp (results.csv
    holds per-row reductions, not elements), as a fraction of those rows. Dashed red: finite ULP
    budgets. One figure, few axes: drawing axes is what costs time, not rows."""
    d = d[d["max_ulp"].notna()]
    if d.empty:
        return []
    grid = d[["out_dtype", "output"]].drop_duplicates()
    dts = list(dict.fromkeys(sort_keys(grid, ["out_dtype"])["out_dtype"]))
    outs = list(dict.fromkeys(sort_keys(grid, ["output"])["output"]))
    d = d.assign(_ref=d["reference"].str.split(":").str[0])
    lines = sort_keys(d[["impl", "_ref"]].drop_duplicates(), ["impl", "_ref"])
    colour = {impl: f"C{k % 10}" for k, impl in enumerate(dict.fromkeys(lines["impl"]))}
    counts = {k: _ulp_bins(g["max_ulp"].to_numpy()) for k, g in d.groupby(["out_dtype", "output", "impl", "_ref"])}
    nb = max(4, max(int(np.flatnonzero(c).max()) + 1 for c in counts.values()))
    # an infinite budget means "not gated": no line for it
    ulp_b = d[(d["budget_metric"] == "ulp") & np.isfinite(d["budget"])]
    budgets = ulp_b.groupby(["out_dtype", "output"])["budget"].unique()
    legend_in = 0.3 + 0.2 * -(-len(lines) // 6)            # inches the legend rows need on top
    height = 1.9 * len(dts) + 0.7 + legend_in
    fig = Figure(figsize=(2.9 * len(outs) + 0.4, height), dpi=80)
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.6 / height + 0.01, top=1 - legend_in / height,
                        hspace=0.45, wspace=0.2)
    axes = fig.subplots(len(dts), len(outs), squeeze=False, sharex=True)
    x = np.arange(nb)
    for i, dt in enumerate(dts):
        for j, out in enumerate(outs):
            ax = axes[i][j]
            for impl, ref in lines.itertuples(index=False):
                c = counts.get((dt, out, impl, ref))
                if c is not None:
                    ax.step(x, c[:nb] / c.sum(), where="mid", color=colour[impl], lw=1.3,
                            ls="-" if ref == "exact" else ":")
            for b in budgets.get((dt, out), []):
                ax.axvline(np.searchsorted(_EDGES, b, side="left"), color="#c0392b", ls="--", lw=1)
            ax.set_title(f"{dt} {out}", fontsize=9)
            ax.tick_params(labelsize=7)
    step = 1 if nb <= 10 else 2        # every other label when the axis is crowded
    for ax in axes[-1]:
        ax.set_xticks(x[::step], _LABELS[:nb:step], rotation=60)
    keys = [Line2D([], [], color=colour[impl], ls="-" if ref == "exact" else ":", label=f"{impl} vs {ref}")
            for impl, ref in lines.itertuples(index=False)]
    fig.legend(handles=keys, loc="upper center", ncols=min(len(keys), 6), fontsize=8, frameon=False)
    return [{"title": "max ULP per row, fraction of rows", "img": _png(fig)}]


def _hidden_bucket(h: pd.Series) -> pd.Series:
    """Exact hidden sizes when few, else power-of-two buckets so the heatmap stays readable."""
    if h.nunique() <= 16:
        return h.astype(int)
    return (2 ** np.ceil(np.log2(h.clip(lower=1)))).astype(int)


def plot_heatmap(d: pd.DataFrame) -> str | None:
    """Worst error / budget per out_dtype x hidden size, one panel per output."""
    d = d[d["hidden"].notna() & d["_ratio"].notna()]
    if d.empty:
        return None
    d = d.assign(_h=_hidden_bucket(d["hidden"]))
    outs = list(dict.fromkeys(sort_keys(d[["output"]].drop_duplicates(), ["output"])["output"]))
    fig = Figure(figsize=(min(4.5 * len(outs), 18), 3.2), dpi=72, layout="constrained")
    axes = fig.subplots(1, len(outs), squeeze=False)[0]
    im = None
    for ax, out in zip(axes, outs):
        p = d[d["output"] == out].pivot_table(index="out_dtype", columns="_h", values="_ratio", aggfunc="max")
        p = p.reindex(sort_keys(pd.DataFrame({"out_dtype": p.index}), ["out_dtype"])["out_dtype"])
        z = np.log10(np.clip(p.to_numpy(dtype=float), 1e-3, 1e3))
        im = ax.imshow(z, cmap="RdYlGn_r", vmin=-2, vmax=1, aspect="auto")
        ax.set_xticks(range(p.shape[1]), [str(c) for c in p.columns], rotation=60, fontsize=7)
        ax.set_yticks(range(p.shape[0]), list(p.index), fontsize=8)
        if p.size <= 64:
            for (i, j), v in np.ndenumerate(p.to_numpy(dtype=float)):
                if v == v:
                    ax.text(j, i, f"{v:.2g}", ha="center", va="center", fontsize=7)
        ax.set_title(f"{out}: worst / budget", fontsize=9)
        ax.set_xlabel("hidden", fontsize=8)
    fig.colorbar(im, ax=list(axes), label="log10(worst / budget)", shrink=0.8)
    return _png(fig)


def plot_gate(d: pd.DataFrame) -> str | None:
    """Worst error / budget by gate distribution (SiLUGate): one bar per output."""
    d = d[d["gate_dist"].notna() & d["_ratio"].notna()]
    if d.empty:
        return None
    p = d.pivot_table(index="gate_dist", columns="output", values="_ratio", aggfunc="max")
    p = p[[c for c in ["y", "dx", "dgate", "dweight"] if c in p.columns]
          + [c for c in p.columns if c not in ("y", "dx", "dgate", "dweight")]]
    fig = Figure(figsize=(max(5.0, 1.1 * len(p) + 2), 3.2), dpi=72, layout="constrained")
    ax = fig.subplots()
    w = 0.8 / max(p.shape[1], 1)
    x = np.arange(len(p))
    for k, out in enumerate(p.columns):
        ax.bar(x + k * w - 0.4 + w / 2, np.clip(p[out].to_numpy(dtype=float), 1e-3, 1e3), width=w, label=out)
    ax.axhline(1.0, color="#c0392b", ls="--", lw=1)
    ax.set_yscale("log")
    ax.set_xticks(x, [str(i) for i in p.index], rotation=30, fontsize=8)
    ax.set_ylabel("worst / budget", fontsize=8)
    ax.legend(fontsize=7, ncols=min(4, p.shape[1]))
    ax.set_title("worst error vs gate distribution (1 = at budget)", fontsize=9)
    return _png(fig)


# ---------------------------------------------------------------- sections

def verdict(d: pd.DataFrame, exit_code: int) -> dict:
    counts = {s: int((d["status"] == s).sum()) for s in STATUSES}
    word = {0: "PASS", 1: "FAIL", 2: "ERROR"}.get(exit_code, f"EXIT {exit_code}")
    by_impl = pd.crosstab(d["impl"], d["status"]).reindex(columns=list(STATUSES), fill_value=0)
    by_impl = by_impl.reset_index()
    bad = d[~d["status"].isin(["pass", "skip"])].sort_values(["_ratio"], ascending=False, na_position="first")
    fails = _table(bad, {"impl": "impl", "case_id": "case id", "label": "case", "out_dtype": "out dtype",
                         "output": "output", "reference": "reference", "status": "status", "reason": "reason",
                         "replay": "replay"}, cap=FAILURES_CAP)
    skipped = d[d["status"] == "skip"].drop_duplicates(["case_id", "impl"])
    skips = _table(skipped, {"impl": "impl", "case_id": "case id", "label": "case", "reason": "reason"},
                   cap=FAILURES_CAP)
    impl_tab = _table(by_impl, {"impl": "impl", **{s: s for s in STATUSES}})
    return {"counts": counts, "total": len(d), "word": word, "exit_code": exit_code,
            "failures": fails, "skips": skips, "by_impl": impl_tab}


def _cell(r) -> tuple[str, str, str]:
    """Accuracy cell: text, colour class, tooltip."""
    if r.checks == r.error + r.skip:
        return ("skip" if r.skip else "error"), ("c-na" if r.skip else "c-over"), f"{r.error} errored, {r.skip} skipped"
    worst = r.worst
    text = "" if worst != worst else f"{worst:.4g}"
    ratio = worst / r.budget if r.budget and r.budget == r.budget else np.nan
    cls = ("c-over" if r.fail or r.error or ratio > 1 else "c-close" if ratio > 0.75
           else "c-ok" if ratio == ratio or worst == 0 else "c-na")
    tip = (f"{r.reference} ({r.regime}): budget {r.budget:.4g} {r.metric}, margin {r.margin:.4g}, "
           f"{r.fail} failed, {r.error} errored of {r.checks}")
    return text or "–", cls, tip


def accuracy(summary: pd.DataFrame) -> dict:
    """Implementations side by side; rows out_dtype x output x reference kind (the model
    reference is named per rounding, model:<rounding>, so it is grouped as 'model')."""
    s = summary.assign(ref_kind=summary["reference"].str.split(":").str[0])
    s = sort_keys(s, ["out_dtype", "output", "ref_kind", "regime", "impl"])
    impls = sorted(s["impl"].unique())
    rows = []
    for (dt, out, ref, regime), g in s.groupby(["out_dtype", "output", "ref_kind", "regime"], sort=False):
        by = {r.impl: _cell(r) for r in g.itertuples()}
        metric = next((m for m in g["metric"] if m), "")
        rows.append({"key": [dt, out, f"{ref} ({regime})", f"worst {metric}"],
                     "cells": [by.get(i, ("", "c-na", "not run")) for i in impls]})
    return {"impls": impls, "rows": rows}


def worst(d: pd.DataFrame) -> dict:
    r = d[d["_ratio"].notna()].sort_values("_ratio", ascending=False)
    top = r.head(WORST_N).assign(
        value=lambda x: _num(x["_value"]), ratio=lambda x: _num(x["_ratio"], ".3g"),
        budget_s=lambda x: _num(x["budget"]), got=lambda x: _num(x["worst_got"], ".9g"),
        ref=lambda x: _num(x["worst_ref"], ".9g"))
    cases = top[["impl", "label", "out_dtype", "output", "reference", "status", "budget_metric", "value",
                 "budget_s", "ratio", "worst_index", "worst_inputs", "got", "ref", "replay"]]
    cases = cases.astype(object).where(cases.notna(), "").astype(str).to_dict("records")
    ordered = pd.concat([r, d[d["_ratio"].isna()]])
    ordered = ordered.assign(**{c: _num(ordered[c]) for c in ["max_ulp", "mean_ulp", "max_scaled_err", "budget"]},
                             ratio=_num(ordered["_ratio"], ".3g"))
    all_rows = _table(ordered, {"impl": "impl", "label": "case", "out_dtype": "out dtype", "output": "output",
                                "reference": "reference", "status": "status", "max_ulp": "max ULP",
                                "mean_ulp": "mean ULP", "max_scaled_err": "max scaled", "budget": "budget",
                                "ratio": "worst/budget"}, cap=ALL_ROWS_CAP,
                      note="Sorted by worst/budget, highest first.")
    return {"cases": cases, "all": all_rows}


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

def _prepare(df: pd.DataFrame) -> pd.DataFrame:
    d = normalize(df)
    return d.assign(_value=worst_value(d), _ratio=budget_ratio(d),
                    label=d["label"].fillna(d["case_id"]), reason=d["reason"].fillna(""))


def render_report(data, path: Path) -> Path:
    """report.html from a reports.outputs.RunData, written atomically."""
    d = _prepare(data.results)
    summary = data.summary
    jenv = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                              undefined=jinja2.StrictUndefined)
    html = jenv.get_template("report.html").render(
        title=data.title or "Gated RMSNorm precision report",
        verdict=verdict(d, data.exit_code),
        accuracy=accuracy(summary),
        summary=_table(summary.assign(**{c: _num(summary[c]) for c in ["worst", "budget", "margin", "max_ulp",
                                                                         "max_scaled_err"]}),
                       {c: c for c in summary.columns}),
        histograms=plot_histograms(d),
        heatmap=plot_heatmap(d), gate=plot_gate(d),
        worst=worst(d),
        baseline=None if data.baseline is None else baseline_diff(d, data.baseline),
        env={str(k): str(v) for k, v in (data.env or {}).items()},
    )
    with atomic_write(path, "w") as f:                # a reader never sees half a report
        f.write(html)
    return Path(path)
