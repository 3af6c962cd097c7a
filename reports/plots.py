"""The report's plots, each a base64 PNG data URI (the page fetches nothing). They draw on a
Figure with an Agg canvas, not pyplot: no global backend switch, no figure registry to leak.

Every function takes the prepared frame of harness.reports.html (normalised rows with `_ratio`,
worst / budget) already narrowed to the rows it should draw, and returns None (or []) when there
is nothing to draw. Few axes per figure and fixed margins: drawing and laying out axes is what
costs time, not rows."""
from __future__ import annotations

import base64
import functools
import io
import json
import os
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from harness.reports.schema import CHECKED_OUTPUTS as OUTPUT_ORDER
from harness.reports.summary import sort_keys


# Every title is placed at the top of its axes explicitly (set_title's y): left to itself, matplotlib
# places each title on every draw by measuring its axes' tick labels (Axes._update_title_position),
# only to move it above ticks or an offset text on top, which none of these figures has: the figures
# are the same bytes either way (tests/test_reports.py), and the histograms draw in ~8 % less CPU
# time (quick's, 2026-12-02).
TITLE_Y = 1.0


def png(fig: Figure) -> str:
    buf = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buf)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


# Below this many usable cores the figures draw one after the other in this process: on the
# shared 2-core machine, drawing quick's three figures in children took 7.7-9.9 s against 5.1-7.3 s
# here (2026-12-02, load 7): there is no idle core for them to gain from.
FORK_DRAWING_CORES = 4


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def in_children(jobs: dict[str, Callable[[], object]], cores: int | None = None) -> Callable[[], dict]:
    """Start each figure's drawing in a child forked now (Linux, FORK_DRAWING_CORES or more
    `cores`), so that they draw at once on idle cores while this process goes on with the tables;
    the function returned collects what each drew (JSON through a pipe). A child that fails, or no
    fork, and the job runs here instead (its error, if any, raised here). A child ends with
    os._exit: none of this process's exit handlers run there."""
    if not hasattr(os, "fork") or (_cores() if cores is None else cores) < FORK_DRAWING_CORES:
        return lambda: {k: f() for k, f in jobs.items()}
    started = {}
    for key, job in jobs.items():
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:                                   # the child: draw, send, leave
            code = 1
            try:
                os.close(r)
                with os.fdopen(w, "w") as out:
                    json.dump(job(), out)
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        started[key] = (pid, r)

    def collect() -> dict:
        sent = {}
        for key, (pid, r) in started.items():         # every child read and reaped before a job runs here
            with os.fdopen(r) as f:
                data = f.read()
            sent[key] = data if os.waitpid(pid, 0)[1] == 0 else ""
        return {key: json.loads(data) if data else jobs[key]() for key, data in sent.items()}
    return collect


def text(v) -> str:
    """A data value as plot text: a `$` pair would start matplotlib's mathtext (and a malformed
    one raise), so every `$` is escaped."""
    return str(v).replace("$", r"\$")


def _ordered(d: pd.DataFrame, col: str) -> list:
    return list(dict.fromkeys(sort_keys(d[[col]].drop_duplicates(), [col])[col]))


# right-closed ULP bins: 0 exactly, (0, .5], (.5, 1], (1, 2], ... , > 2^16
EDGES = np.array([0.0, 0.5] + [2.0 ** k for k in range(17)] + [np.inf])
LABELS = ["0", "≤½"] + [f"≤{2 ** k}" if k < 10 else f"≤2^{k}" for k in range(17)] + [">2^16"]


def ulp_bins(v: np.ndarray) -> np.ndarray:
    return np.bincount(np.searchsorted(EDGES, v, side="left"), minlength=len(EDGES))


@dataclass(frozen=True)
class HistogramGrid:
    """What the ULP histograms' figures share — one figure per output dtype, drawn apart (each in a
    child of its own: harness.reports.html) — so that each implementation keeps one colour and every
    figure one x axis."""
    dtypes: list                 # one figure each, in report order
    outputs: list                # one panel each, in every figure
    lines: list                  # (impl, "exact" | "model"): one step line each
    colour: dict                 # impl -> matplotlib colour
    counts: dict                 # (out_dtype, output, impl, ref) -> per-bin row counts
    bins: int                    # bins shown, every panel's x axis: at least 4, through the last
                                 # non-empty one and the last budget's
    budget_bins: dict            # (out_dtype, output) -> the bins of its finite ULP budgets


def histogram_grid(d: pd.DataFrame) -> HistogramGrid | None:
    """The shared layout of d's rows with a max_ulp; None where there are none."""
    d = d[d["max_ulp"].notna()]
    if d.empty:
        return None
    d = d.assign(_ref=np.where(d["reference"] == "exact", "exact", "model"))
    lines = list(sort_keys(d[["impl", "_ref"]].drop_duplicates(), ["impl", "_ref"]).itertuples(index=False, name=None))
    colour = {impl: f"C{k % 10}" for k, impl in enumerate(dict.fromkeys(impl for impl, _ in lines))}
    counts = {k: ulp_bins(g["max_ulp"].to_numpy()) for k, g in d.groupby(["out_dtype", "output", "impl", "_ref"])}
    # an infinite budget means "not gated": no line for it; budgets in one bin are one line
    ulp_b = d[(d["budget_metric"] == "ulp") & np.isfinite(d["budget"])]
    budget_bins = {k: sorted({int(b) for b in np.searchsorted(EDGES, v, side="left")})
                   for k, v in ulp_b.groupby(["out_dtype", "output"])["budget"].unique().items()}
    nb = max(4, *(int(np.flatnonzero(c).max()) + 1 for c in counts.values()),
             *(b[-1] + 1 for b in budget_bins.values()))
    return HistogramGrid(_ordered(d, "out_dtype"), _ordered(d, "output"), lines, colour, counts, nb, budget_bins)


def histogram_figure(grid: HistogramGrid, dt: str) -> dict:
    """One output dtype's row of panels (one per output); in each panel one step histogram per
    implementation and reference kind (solid: exact, dotted: its declared model) of per-row max_ulp
    (results.csv holds per-row reductions, not elements), as a fraction of those rows. Dashed red:
    finite ULP budgets."""
    outs, lines, nb = grid.outputs, grid.lines, grid.bins
    legend_in = 0.3 + 0.2 * -(-len(lines) // 6)            # inches the legend rows need on top
    height = 2.6 + legend_in
    fig = Figure(figsize=(2.9 * len(outs) + 0.4, height), dpi=80)
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.6 / height + 0.01, top=1 - legend_in / height, wspace=0.2)
    axes = fig.subplots(1, len(outs), squeeze=False)[0]
    x = np.arange(nb)
    step = 1 if nb <= 10 else 2        # every other label when the axis is crowded
    for ax, out in zip(axes, outs):
        for impl, ref in lines:
            c = grid.counts.get((dt, out, impl, ref))
            if c is not None:
                ax.step(x, c[:nb] / c.sum(), where="mid", color=grid.colour[impl], lw=1.3,
                        ls="-" if ref == "exact" else ":")
        for b in grid.budget_bins.get((dt, out), []):
            ax.axvline(b, color="#c0392b", ls="--", lw=1)
        ax.set_title(text(f"{dt} {out}"), fontsize=9, y=TITLE_Y)
        ax.tick_params(labelsize=7)
        # one scale for every panel (a fraction of rows), and few ticks: making ticks is most of
        # what drawing these axes costs
        ax.set_xlim(-0.5, nb - 0.5)
        ax.set_ylim(0, 1.04)
        ax.set_yticks((0, 0.5, 1), ("0", ".5", "1"))
        ax.set_xticks(x[::step], LABELS[:nb:step], rotation=60)
    keys = [Line2D([], [], color=grid.colour[impl], ls="-" if ref == "exact" else ":", label=text(f"{impl} vs {ref}"))
            for impl, ref in lines]
    fig.legend(handles=keys, loc="upper center", ncols=min(len(keys), 6), fontsize=8, frameon=False)
    return {"title": f"{dt}: max ULP per row, fraction of rows", "img": png(fig)}


def histogram_jobs(d: pd.DataFrame) -> dict[str, Callable[[], dict]]:
    """The drawing of every output dtype's histogram figure (histogram_figure), in report order,
    each a job for in_children; none without rows."""
    grid = histogram_grid(d)
    return {f"histograms {dt}": functools.partial(histogram_figure, grid, dt) for dt in (grid.dtypes if grid else ())}


def _hidden_bucket(h: pd.Series) -> pd.Series:
    """Exact hidden sizes when few, else power-of-two buckets so the heatmap stays readable."""
    if h.nunique() <= 16:
        return h.astype(int)
    return (2 ** np.ceil(np.log2(h.clip(lower=1)))).astype(int)


def heatmap(d: pd.DataFrame) -> str | None:
    """Worst error / budget per out_dtype x hidden size, one panel per output."""
    d = d[d["hidden"].notna() & d["_ratio"].notna()]
    if d.empty:
        return None
    d = d.assign(_h=_hidden_bucket(d["hidden"]))
    outs = _ordered(d, "output")
    fig = Figure(figsize=(min(4.5 * len(outs), 18) + 1.0, 3.2), dpi=72)
    fig.subplots_adjust(left=0.06, right=0.9, bottom=0.27, top=0.9, wspace=0.3)
    axes = fig.subplots(1, len(outs), squeeze=False)[0]
    im = None
    for ax, out in zip(axes, outs):
        p = d[d["output"] == out].pivot_table(index="out_dtype", columns="_h", values="_ratio", aggfunc="max")
        p = p.reindex(sort_keys(pd.DataFrame({"out_dtype": p.index}), ["out_dtype"])["out_dtype"])
        z = np.log10(np.clip(p.to_numpy(dtype=float), 1e-3, 1e3))
        im = ax.imshow(z, cmap="RdYlGn_r", vmin=-2, vmax=1, aspect="auto")
        ax.set_xticks(range(p.shape[1]), [str(c) for c in p.columns], rotation=60, fontsize=7)
        ax.set_yticks(range(p.shape[0]), [text(i) for i in p.index], fontsize=8)
        if p.size <= 64:
            for (i, j), v in np.ndenumerate(p.to_numpy(dtype=float)):
                if v == v:
                    ax.text(j, i, f"{v:.2g}", ha="center", va="center", fontsize=7)
        ax.set_title(text(f"{out}: worst / budget"), fontsize=9, y=TITLE_Y)
        ax.set_xlabel("hidden", fontsize=8)
    fig.colorbar(im, cax=fig.add_axes((0.92, 0.27, 0.015, 0.63)), label="log10(worst / budget)")
    return png(fig)


def gate(d: pd.DataFrame) -> str | None:
    """Worst error / budget by gate distribution (SiLUGate): one bar per output."""
    d = d[(d["gate_dist"] != "") & d["_ratio"].notna()]
    if d.empty:
        return None
    p = d.pivot_table(index="gate_dist", columns="output", values="_ratio", aggfunc="max")
    p = p[[c for c in OUTPUT_ORDER if c in p.columns] + [c for c in p.columns if c not in OUTPUT_ORDER]]
    fig = Figure(figsize=(max(5.0, 1.1 * len(p) + 2), 3.2), dpi=72)
    fig.subplots_adjust(left=0.12, right=0.98, bottom=0.3, top=0.9)
    ax = fig.subplots()
    w = 0.8 / max(p.shape[1], 1)
    x = np.arange(len(p))
    for k, out in enumerate(p.columns):
        ax.bar(x + k * w - 0.4 + w / 2, np.clip(p[out].to_numpy(dtype=float), 1e-3, 1e3), width=w, label=text(out))
    ax.axhline(1.0, color="#c0392b", ls="--", lw=1)
    ax.set_yscale("log")
    ax.set_xticks(x, [text(i) for i in p.index], rotation=30, fontsize=8)
    ax.set_ylabel("worst / budget", fontsize=8)
    ax.legend(fontsize=7, ncols=min(4, p.shape[1]))
    ax.set_title("worst error vs gate distribution (1 = at budget)", fontsize=9, y=TITLE_Y)
    return png(fig)


def speed(pairs: pd.DataFrame, clock: str) -> str | None:
    """Time against accuracy: one small point per (case, implementation) — its `_seconds` (the
    `clock` named: the GPU time where measured, else the wall time) and the worst worst/budget of
    its checks against the exact value — and one large point per implementation (median time,
    worst ratio). Ratios are clipped to [1e-3, 1e3] so a 0 error (or an extreme-regime check's
    infinite budget) still shows, at the bottom."""
    p = pairs[pairs["_seconds"].notna() & (pairs["_seconds"] > 0) & pairs["_ratio"].notna()]
    if p.empty:
        return None
    fig = Figure(figsize=(7.5, 3.8), dpi=72)
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.14, top=0.92)
    ax = fig.subplots()
    for k, (impl, g) in enumerate(p.groupby("impl", sort=True)):
        c = f"C{k % 10}"
        y = np.clip(g["_ratio"].to_numpy(dtype=float), 1e-3, 1e3)
        ax.scatter(g["_seconds"] * 1e3, y, s=9, color=c, alpha=0.45, linewidths=0)
        ax.scatter([g["_seconds"].median() * 1e3], [y.max()], s=90, color=c, marker="D",
                   edgecolors="black", label=text(impl))
    ax.axhline(1.0, color="#c0392b", ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"forward + backward {clock}, ms (median of warm calls)", fontsize=8)
    ax.set_ylabel("worst error / budget, vs exact", fontsize=8)
    ax.set_title("time vs worst error against the exact value (dots: cases; diamonds: median time, worst case)",
                 fontsize=9, y=TITLE_Y)
    ax.legend(fontsize=7, loc="best")
    return png(fig)
