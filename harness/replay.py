"""`harness replay CASE_ID --impl SPEC [--cases SUITE|RESULTS_DIR|results.csv]`: rerun one case
for one implementation and show, per output and reference, the worst elements down to the bit.

The case comes from a suite (by id) or is rebuilt from a results.csv row (every Case field is a
column there); a rebuilt case must hash back to the id asked for. `replay` returns the data;
harness.commands.cmd_replay prints it and maps it to exit codes like `run`: 0 within budget,
1 over budget or errored, 2 usage or input error (a UsageError)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from harness.cases.case import Case
from harness.errors import UsageError

CASE_FIELDS = ("dtype", "gate_dtype", "weight_dtype", "shape", "zero_centered_gamma", "eps",
               "x_dist", "gate_dist", "gamma_dist", "seed")


# ---------------------------------------------------------------------------------------------
# finding the case

def _results_file(src: str) -> Path | None:
    p = Path(src)
    if p.is_dir():
        f = p / "results.csv"
        if not f.is_file():
            raise UsageError(f"--cases {src}: directory has no results.csv")
        return f
    if p.suffix == ".csv":
        if not p.is_file():
            raise UsageError(f"--cases {src}: file not found")
        return p
    return None


def _bool(v: str) -> bool:
    s = str(v).strip().lower()
    if s in ("true", "1"):
        return True
    if s in ("false", "0"):
        return False
    raise ValueError(f"zero_centered_gamma {v!r} is not true/false")


def case_from_row(row: dict) -> Case:
    """Rebuild a Case from one results.csv row (values as strings or already parsed)."""
    missing = [k for k in CASE_FIELDS if k not in row or str(row[k]).strip() in ("", "nan")]
    if missing:
        raise ValueError(f"missing column(s) {', '.join(missing)}")
    shape = tuple(int(s) for s in str(row["shape"]).strip().split("x"))
    return Case(str(row["dtype"]), str(row["gate_dtype"]), str(row["weight_dtype"]), shape,
                _bool(row["zero_centered_gamma"]), float(row["eps"]), str(row["x_dist"]),
                str(row["gate_dist"]), str(row["gamma_dist"]), int(float(row["seed"])))


def case_from_results(case_id: str, path: Path) -> Case:
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except Exception as e:
        raise UsageError(f"{path}: unreadable results.csv ({e})") from None
    if "case_id" not in df.columns:
        raise UsageError(f"{path}: no case_id column")
    hit = df[df["case_id"] == case_id]
    if hit.empty:
        raise UsageError(f"case {case_id} not found in {path} ({df['case_id'].nunique()} cases there)")
    try:
        case = case_from_row(hit.iloc[0].to_dict())
    except (ValueError, TypeError) as e:
        raise UsageError(f"{path}: case {case_id}: cannot rebuild the case: {e}") from None
    if case.case_id != case_id:
        raise UsageError(f"{path}: case {case_id}: the row's parameters hash to {case.case_id} "
                         f"(results.csv edited, or written by another case schema)")
    return case


def find_case(case_id: str, cases: str) -> Case:
    f = _results_file(cases)
    if f is not None:
        return case_from_results(case_id, f)
    from harness.cases.suite import load_suite
    suite = load_suite(cases)
    for c in suite.cases:
        if c.case_id == case_id:
            return c
    raise UsageError(f"case {case_id} not found in suite {suite.name} ({len(suite.cases)} cases; "
                     f"`harness cases {cases}` lists them)")


# ---------------------------------------------------------------------------------------------
# rerunning it

@dataclass
class Element:
    index: tuple[int, ...]
    inputs: str                 # x, gate, w, dy bit patterns
    got: float
    got_hex: str
    exact: float                # float64 exact value
    golden: float               # certified correctly rounded value in the output dtype
    golden_hex: str
    lo: float                   # reference interval of the row's reference
    hi: float
    ulp: float
    scaled: float


@dataclass
class Check:
    row: dict
    elements: list[Element] = field(default_factory=list)


@dataclass
class Replay:
    case: Case
    impl: object
    device: str
    rows: list[dict]
    checks: list[Check]
    outputs: dict[str, torch.Tensor]


def _index(flat: int, shape) -> tuple[int, ...]:
    if not len(shape):
        return ()
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(shape)))


def run_case(case: Case, impl, device: str, top: int = 5, overrides=(), override_path: str = "") -> Replay:
    """Run one case for one implementation exactly as the sweep does, then keep the `top` worst
    elements of every (output, reference) check."""
    from harness.cases.generate import act_format
    from harness.analysis.check import _hex, check, out_format_name, worst_inputs
    from harness.analysis.metrics import element_errors
    from harness.execute import run_impl
    from harness.runner import case_inputs
    from harness.references.formats import fmt_of

    act = act_format(case, impl.act_follows)
    inp, refs = case_inputs(case, impl.act_follows, device)
    outcome = run_impl(impl, inp, act.dtype, device)
    rows = check(case, impl, device, refs, outcome, list(overrides), override_path)
    checks = []
    for row in rows:
        c = Check(row)
        checks.append(c)
        out = row["output"]
        if outcome.error or out not in outcome.outputs:
            continue
        fmt = fmt_of(out_format_name(case, act.name, out))
        ref_name = "exact" if row["reference"] == "exact" else "model"
        lo, hi, gauge = (refs.exact_for(impl.rounding, act, out) if ref_name == "exact"
                         else refs.model(impl.rounding, act, out))       # exactly what check() uses
        got = outcome.outputs[out].to(lo.device)
        err = element_errors(got, lo, hi, gauge, fmt)
        metric = err.ulp if row["budget_metric"] == "ulp" else err.scaled
        key = metric.reshape(-1)
        key = torch.where(torch.isnan(key), torch.full_like(key, math.inf), key)
        k = min(max(top, 0), key.numel())
        if k == 0:
            continue
        # the sweep's worst element (argmax) first, then the next worst
        first = int(torch.argmax(key))
        order = [first] + [int(i) for i in torch.topk(key, min(k + 1, key.numel())).indices if int(i) != first]
        cert = refs.certified(out, fmt)
        exact_v = refs.values[out].reshape(-1)
        for flat in order[:k]:
            idx = _index(flat, got.shape)
            g = got.reshape(-1)[flat]
            gold = cert.golden.reshape(-1)[flat]
            c.elements.append(Element(
                index=idx, inputs=worst_inputs(inp, out, idx), got=float(g), got_hex=_hex(g.cpu()),
                exact=float(exact_v[flat]), golden=float(gold),
                golden_hex=_hex(gold.to(fmt.dtype).cpu()),
                lo=float(lo.reshape(-1)[flat]), hi=float(hi.reshape(-1)[flat]),
                ulp=float(err.ulp.reshape(-1)[flat]), scaled=float(err.scaled.reshape(-1)[flat])))
    return Replay(case, impl, device, rows, checks, dict(outcome.outputs))


def format_replay(r: Replay) -> str:
    lines = [f"case {r.case.case_id} [{r.case.regime}] {r.case.label}",
             f"impl {r.impl.name} ({r.impl.rounding}) on {r.device}"]
    for c in r.checks:
        row = c.row
        head = f"{row['output']:7s} vs {row['reference']:12s} {row['status'].upper():5s}"
        if row["status"] == "error":
            lines.append(f"{head} {row.get('reason', '')}")
            continue
        metric = row.get("budget_metric", "")
        if "max_ulp" in row:
            head += (f" max_ulp={row['max_ulp']:.4g} max_scaled={row['max_scaled_err']:.4g} "
                     f"budget={row['budget']:.4g} {metric}")
        if row.get("reason"):
            head += f"  ({row['reason']})"
        lines.append(head)
        for e in c.elements:
            lines.append(f"    [{','.join(map(str, e.index))}] {e.inputs}")
            lines.append(f"        got={e.got!r} ({e.got_hex})  exact={e.exact!r}  "
                         f"golden={e.golden!r} ({e.golden_hex})  ref=[{e.lo!r}, {e.hi!r}]  "
                         f"ulp={e.ulp:.4g} scaled={e.scaled:.4g}")
    return "\n".join(lines)


def replay(case_id: str, impl_spec: str, cases: str, device: str = "auto", top: int = 5,
           budgets: str | None = None) -> Replay:
    """Validate the arguments (UsageError naming the bad one), find the case and rerun it."""
    from harness.impls.registry import resolve
    from harness.runner import resolve_device

    device = resolve_device(device)
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device available")
    if top is None or top < 0:
        raise UsageError(f"--top {top}: must be >= 0")
    impl = resolve(impl_spec)
    reason = impl.skip_reason(device)
    if reason:
        raise UsageError(f"--impl {impl.name}: {reason}")
    case = find_case(case_id, cases)
    from harness.budgets import load_budget_file
    overrides = load_budget_file(budgets) if budgets else []
    return run_case(case, impl, device, top, overrides, budgets or "")


def write_replay_results(r: Replay, out_dir, impl_spec: str, cases: str) -> Path:
    """Write the replayed rows (each with its replay command) to OUT_DIR/results.csv; returns the path."""
    from harness.runner import replay_command
    from harness.reports.results_io import write_results
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cmd = replay_command(r.case, impl_spec, cases)
    f = out / "results.csv"
    write_results(f, pd.DataFrame([{**row, "replay": cmd} for row in r.rows]))
    return f


def status_counts(r: Replay) -> dict[str, int]:
    return {s: sum(row["status"] == s for row in r.rows) for s in ("pass", "fail", "error")}


def format_counts(r: Replay) -> str:
    counts = status_counts(r)
    return f"harness: {counts['pass']} pass, {counts['fail']} fail, {counts['error']} error"
