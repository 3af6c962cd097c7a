"""The sweep: for each case, inputs -> references (once per case) -> each implementation's
forward and backward on the device -> analysis rows, appended to results.csv as they complete."""
from __future__ import annotations

import csv
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd
import torch

from harness.cases.case import Case
from harness.cases.generate import act_format, generate
from harness.analysis.check import REFERENCES, check, error_rows
from harness.execute import run_impl
from harness.impls.base import Implementation
from harness.references.bundle import build
from harness.references.exact import OUTPUTS
from harness.reports.results_io import append_rows, read_results, repair_for_resume

ROWS_PER_PAIR = len(OUTPUTS) * len(REFERENCES)


@dataclass
class SweepConfig:
    impls: list[Implementation]
    cases: list[Case]
    device: str
    out_dir: Path
    impl_specs: dict[str, str] = field(default_factory=dict)   # name -> spec, for replay commands
    suite_ref: str = "quick"
    overrides: list = field(default_factory=list)
    override_path: str = ""
    resume: bool = False
    progress: bool | None = None        # None: a bar on a terminal, plain lines otherwise
    golden_dir: Path | None = None      # golden store (references/store.py); None: always rebuild
    timings: dict[str, float] = field(default_factory=dict)   # stage -> seconds, filled by the sweep


def add_time(timings: dict[str, float], stage: str, seconds: float) -> None:
    timings[stage] = timings.get(stage, 0.0) + seconds


def write_timings(path: Path, timings: dict[str, float]) -> None:
    pd.DataFrame(sorted(timings.items()), columns=["stage", "seconds"]).to_csv(path, index=False)


# one line per (case, implementation): which cases cost the time. Appended as pairs finish and kept
# across --resume (timing.csv sums only the last invocation's stages); a process killed between a
# pair's results and its timing line leaves that pair without one (timings are not results).
PAIR_TIMING = "pair-timing.csv"
PAIR_TIMING_COLUMNS = ["case_id", "label", "impl", "references", "impl_seconds", "analysis", "mpmath"]


def append_pair_timing(path: Path, row: dict) -> None:
    new = not path.exists() or path.stat().st_size == 0
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=PAIR_TIMING_COLUMNS, lineterminator="\n")
        if new:
            w.writeheader()
        w.writerow({k: (f"{v:.6f}" if isinstance(v, float) else v) for k, v in row.items()})


def read_pair_timings(path: Path) -> pd.DataFrame:
    """pair-timing.csv (case ids stay text: "060486302023" is not a number)."""
    return pd.read_csv(path, dtype={"case_id": str})


def combine_timings(parts: list[dict[str, float]]) -> dict[str, float]:
    """Stage timings of runs done side by side (shards, --jobs workers): stages summed, 'wall' the
    longest part's, 'jobs' counted (a part of one process counts as one)."""
    out: dict[str, float] = {}
    for t in parts:
        for stage, sec in t.items():
            if stage == "wall":
                out["wall"] = max(out.get("wall", 0.0), sec)
            elif stage != "jobs":
                add_time(out, stage, sec)
        add_time(out, "jobs", t.get("jobs", 1.0))
    return out


def slowest_pairs(path: Path, top: int = 3) -> str:
    """The costliest case x implementation pairs of pair-timing.csv, one line ('' if none or
    unreadable): where a first call's compiles and autotuning, or a case's mpmath, went."""
    try:
        pt = read_pair_timings(path)
        stages = pt[["references", "impl_seconds", "analysis"]].astype(float)
    except (OSError, KeyError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return ""
    pt = pt.assign(total=stages.sum(axis=1)).nlargest(top, "total")
    names = {"references": "references", "impl_seconds": "implementation", "analysis": "analysis"}
    return "; ".join(f"{r.impl} {r.label}: {r.total:.1f} s (mostly {names[stages.loc[i].idxmax()]})"
                     for i, r in pt.iterrows())


def read_timings(path: Path) -> dict[str, float]:
    """timing.csv (written by `harness run`) as stage -> seconds."""
    return {str(stage): float(sec) for stage, sec in pd.read_csv(path).itertuples(index=False)}


def timing_line(timings: dict[str, float], impl_names: list[str]) -> str:
    """One line: where a sweep's time went (impl:NAME stages include compiles and autotuning)."""
    impl = {n: timings.get(f"impl:{n}", 0.0) for n in impl_names}
    parts = [f"{timings.get('wall', 0.0):.1f} s",
             f"references {timings.get('references', 0.0):.1f} s",
             f"implementations {sum(impl.values()):.1f} s (" + ", ".join(f"{n} {t:.1f}" for n, t in impl.items()) + ")",
             f"analysis {timings.get('analysis', 0.0):.1f} s (mpmath {timings.get('mpmath', 0.0):.1f} s)"]
    jobs = int(timings.get("jobs", 1))
    return "harness: time " + ", ".join(parts) + (f" (stages summed over {jobs} jobs)" if jobs > 1 else "")


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def compile_key(case: Case) -> tuple:
    """The cases whose compiles and autotuning belong together: hidden size and dtypes. (Within
    one key, zero-centred gamma still makes separate compiles — Inductor graphs, and fla's kernels
    get a float32 weight — but they stay in the same worker as the rest of the key.)"""
    return (case.shape[-1], case.dtype, case.gate_dtype, case.weight_dtype)


# What a compile key costs next to each of its cases, for --shard-by shape balancing: a heuristic.
# Fitted over `full` on an H200 (bench/RESULTS.md, runs 8a and 8d; fla + Inductor, 16 workers at
# once): ~28-31 s a key for its first calls' compiles and autotuning, plus 0.2-1.9 s a case; whole
# keys ranged 6-84 s, so no static weighting balances the workers closely.
KEY_COST_IN_CASES = 16


def shard(cases: list[Case], k: int, n: int, by: str = "case") -> list[Case]:
    """Deterministic 1/n of the cases, k in 1..n: disjoint and complete over k.

    by="case": by case id. by="shape": every case of one compile_key in one shard (so each compile
    and autotuning happens once, not once per shard); keys dealt costliest first to the least
    loaded shard, a key costing KEY_COST_IN_CASES + its number of cases. Both keep suite order
    within a shard."""
    if by == "case":
        return [c for c in cases if int(c.case_id, 16) % n == k - 1]
    groups: dict[tuple, int] = {}
    for c in cases:
        key = compile_key(c)
        groups[key] = groups.get(key, KEY_COST_IN_CASES) + 1
    load, owner = [0] * n, {}
    for key, cost in sorted(groups.items(), key=lambda kv: (-kv[1], repr(kv[0]))):
        j = min(range(n), key=lambda i: (load[i], i))
        owner[key] = j
        load[j] += cost
    return [c for c in cases if owner[compile_key(c)] == k - 1]


# Where a case's float64 references and analysis run. On a GPU, every small kernel and host sync
# of the analysis waits its turn behind the other --jobs workers' contexts: in run 9a (16 workers,
# one H200) a 32x127 case's analysis took 1.3 s there, and takes 0.02 s on one CPU core. Below this
# many elements the references are built and the outputs analysed on the CPU; bigger cases, whose
# float64 work the GPU does far faster, stay on the device.
ANALYSIS_ON_CPU_BELOW = 1 << 18


def analysis_device(case: Case, device: str) -> str:
    if device.startswith("cuda") and math.prod(case.shape) < ANALYSIS_ON_CPU_BELOW:
        return "cpu"
    return device


def case_inputs(case: Case, act_follows: str, device: str, golden_dir: Path | None = None):
    """(the inputs on the implementation's device, their references on analysis_device): what the
    sweep and `harness replay` both use. With a golden store the references are built on the CPU
    once and cached there."""
    inp = generate(case, act_follows)                       # on the CPU
    where = analysis_device(case, device)
    if golden_dir is None:
        refs = build(inp.to(where))
    else:
        from harness.references.store import cached_build, refs_to
        refs = refs_to(cached_build(inp, case.params(), golden_dir), where)
    return inp.to(device), refs


def replay_command(case: Case, spec: str, suite_ref: str, device: str = "", budgets: str = "") -> str:
    cmd = f"harness replay {case.case_id} --impl {spec} --cases {suite_ref}"
    if device:
        cmd += f" --device {device}"
    if budgets:
        cmd += f" --budgets {budgets}"
    return cmd


def case_rows(case: Case, cfg: SweepConfig, todo: list[Implementation],
              pair_times: list[dict] | None = None) -> list[list[dict]]:
    """Rows for each implementation in `todo`, one list per implementation; each pair's stage times
    go to pair_times (the references' time to the first pair that needed them)."""
    by_act: dict[str, tuple] = {}
    out = []
    for impl in todo:
        act = act_format(case, impl.act_follows)
        tm: dict[str, float] = {}
        try:
            if act.name not in by_act:
                t0 = time.perf_counter()
                by_act[act.name] = case_inputs(case, impl.act_follows, cfg.device, cfg.golden_dir)
                add_time(tm, "references", time.perf_counter() - t0)
            inp, refs = by_act[act.name]
            t0 = time.perf_counter()
            outcome = run_impl(impl, inp, act.dtype, cfg.device)
            t1 = time.perf_counter()
            add_time(tm, f"impl:{impl.name}", t1 - t0)
            mp0 = sum(c.mp_seconds for c in refs.golden.values())
            rows = check(case, impl, cfg.device, refs, outcome, cfg.overrides, cfg.override_path)
            add_time(tm, "analysis", time.perf_counter() - t1)     # certification included
            add_time(tm, "mpmath", sum(c.mp_seconds for c in refs.golden.values()) - mp0)
        except torch.cuda.OutOfMemoryError as e:
            rows = error_rows(case, impl, cfg.device, act.name, f"out of memory: {e}")
        replay = replay_command(case, cfg.impl_specs.get(impl.name, impl.name), cfg.suite_ref,
                                cfg.device, cfg.override_path)
        for r in rows:
            r["replay"] = replay
        for stage, sec in tm.items():
            add_time(cfg.timings, stage, sec)
        if pair_times is not None:
            pair_times.append({"case_id": case.case_id, "label": case.label, "impl": impl.name,
                               "references": tm.get("references", 0.0),
                               "impl_seconds": tm.get(f"impl:{impl.name}", 0.0),
                               "analysis": tm.get("analysis", 0.0), "mpmath": tm.get("mpmath", 0.0)})
        out.append(rows)
    return out


def run_sweep(cfg: SweepConfig, on_pair: Callable[[list[dict]], None] | None = None) -> pd.DataFrame:
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    path = cfg.out_dir / "results.csv"
    done: set[tuple[str, str]] = set()
    if cfg.resume:
        done = repair_for_resume(path, ROWS_PER_PAIR)
    elif path.exists():
        path.unlink()
    if not cfg.resume:
        (cfg.out_dir / PAIR_TIMING).unlink(missing_ok=True)
    pairs = [(c, [i for i in cfg.impls if (c.case_id, i.name) not in done]) for c in cfg.cases]
    pairs = [(c, todo) for c, todo in pairs if todo]
    total = sum(len(t) for _, t in pairs)
    bar = _progress(total, cfg.progress)
    t0 = time.time()
    for case, todo in pairs:
        times: list[dict] = []
        for impl, rows, t in zip(todo, case_rows(case, cfg, todo, times), times):
            append_rows(path, rows)
            append_pair_timing(cfg.out_dir / PAIR_TIMING, t)
            if on_pair:
                on_pair(rows)
            bar.step(f"{impl.name} {case.label}", rows)
    bar.close(time.time() - t0)
    add_time(cfg.timings, "wall", time.time() - t0)
    return read_results(path) if path.exists() else pd.DataFrame()


class _progress:
    """tqdm bar on a terminal; in CI (no tty) one plain line per 10% so logs stay short."""

    def __init__(self, total: int, want: bool | None):
        self.total, self.n = total, 0
        tty = sys.stderr.isatty() if want is None else want
        self.bar = None
        if tty and total:
            from tqdm import tqdm
            self.bar = tqdm(total=total, unit="pair", file=sys.stderr, leave=False)

    def step(self, what: str, rows: list[dict]) -> None:
        self.n += 1
        bad = sum(r.get("status") != "pass" for r in rows)
        if self.bar is not None:
            self.bar.set_postfix_str(what[:40])
            self.bar.update(1)
        elif self.total and (self.n == self.total or self.n % max(1, self.total // 10) == 0):
            print(f"[{self.n}/{self.total}] {what}{'  ' + str(bad) + ' not passing' if bad else ''}",
                  file=sys.stderr)

    def close(self, seconds: float) -> None:
        if self.bar is not None:
            self.bar.close()
