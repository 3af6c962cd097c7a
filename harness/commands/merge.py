"""`harness merge DIR... --out DIR [--cases SUITE]`: combine the outputs of `harness run --shard K/N`
(one per host, or per job of a Slurm array or Kubernetes indexed Job: docs/multi-host.md) into one
results set, verdict and report — refusing inputs that do not add up: rows of another harness
version, schema version, device or suite, a row whose case parameters are invalid or do not hash to
its case id, a key in two shards, an interrupted shard, and (given the suite) a case or
implementation that no shard ran."""
from __future__ import annotations

import pandas as pd

from harness.api import Results
from harness.commands import err
from harness.references.errors import UsageError
from harness.reports.rundir import PAIR_TIMING, RunDir, read_csv, read_results
from harness.reports.schema import KEY, SCHEMA_VERSION, missing_columns


def _one(df: pd.DataFrame, column: str, what: str, dirs, blank_ok: bool = False) -> str:
    """The one value of `column` in every row. Blank is a torn row's, unless `blank_ok` (a suite:
    cases given as a list, by the Python API or the pytest plugin, have none)."""
    values = sorted(set(df[column].dropna().astype(str))) if column in df.columns else []
    if "" in values and not blank_ok:
        raise UsageError(f"merge: a row of the inputs has no {what}: a torn or partial results.csv (rerun its "
                         f"shard with --resume first): {' '.join(dirs)}")
    if len(values) > 1:
        shown = ", ".join(v or "(none)" for v in values)
        raise UsageError(f"merge: the inputs come from different {what}s ({shown}): {' '.join(dirs)}")
    return values[0] if values else ""


def check_schema(df: pd.DataFrame, dirs) -> None:
    """Every row of this harness's schema version: rows of another are not relabelled."""
    if "schema_version" not in df.columns:
        raise UsageError(f"merge: the inputs have no schema_version column (not written by this harness): "
                         f"{' '.join(dirs)}")
    versions = sorted(set(pd.to_numeric(df["schema_version"], errors="coerce").dropna().astype(int)))
    if len(versions) > 1:
        raise UsageError(f"merge: the inputs mix schema versions {', '.join(map(str, versions))}: rerun the older "
                         f"shards with this harness (schema {SCHEMA_VERSION})")
    if versions != [SCHEMA_VERSION]:
        raise UsageError(f"merge: the inputs are of schema version {', '.join(map(str, versions)) or '(blank)'}, "
                         f"this harness writes {SCHEMA_VERSION}: rerun the shards with this harness")


def check_coverage(df: pd.DataFrame, suite_ref: str, recorded: bool = False) -> None:
    """Every case of the suite, for every implementation the shards ran, exactly once. `recorded`:
    the suite is the one the rows name (no --cases), which may not resolve from here (a relative path)."""
    from harness.cases.suite import load_suite
    try:
        suite = load_suite(suite_ref)
    except UsageError as e:
        if not recorded:
            raise
        raise UsageError(f"merge: the suite the shards recorded: {e}; give it with --cases") from None
    want = {c.case_id for c in suite.cases}
    got = set(df["case_id"])
    extra = sorted(got - want)
    if extra:
        raise UsageError(f"merge: case {extra[0]} (and {len(extra) - 1} more) is not in suite {suite.name}")
    for impl, rows in df.groupby("impl"):
        missing = sorted(want - set(rows["case_id"]))
        if missing:
            raise UsageError(f"merge: {len(missing)} of {len(want)} cases of suite {suite.name} are missing for "
                             f"{impl} (e.g. {missing[0]}): a shard did not run; run it and merge again")


def cmd_merge(args) -> int:
    from harness.commands.common import check_output_file, finish
    check_output_file("--junit", args.junit)
    frames = []
    for d in args.dirs:
        rd = RunDir(d)
        if not rd.results.is_file():
            raise UsageError(f"merge: {d}: no results.csv")
        frames.append(read_results(rd.results))           # each key once in each (reports.trust)
    df = pd.concat(frames, ignore_index=True)
    check_schema(df, args.dirs)
    if missing := missing_columns(df):
        raise UsageError(f"merge: the inputs lack column {missing[0]!r} of schema {SCHEMA_VERSION}: a results.csv "
                         f"this harness did not write whole")
    _one(df, "harness_version", "harness version", args.dirs)
    _one(df, "device", "device", args.dirs)
    suite = _one(df, "suite", "suite", args.dirs, blank_ok=True)
    dup = df[df.duplicated(list(KEY), keep=False)]
    if not dup.empty:
        r = dup.iloc[0]
        raise UsageError(f"merge: {r['case_id']} {r['impl']} {r['output']} {r['reference']} is in more than one "
                         f"input: shards must be disjoint")
    counts = df.groupby(["case_id", "impl"]).size()
    if counts.nunique() > 1:
        (cid, impl), n = counts.idxmin(), counts.min()
        raise UsageError(f"merge: {cid} {impl} has {n} of {counts.max()} rows: an interrupted shard; rerun it "
                         f"with --resume first")
    if args.cases or suite:
        check_coverage(df, args.cases or suite, recorded=not args.cases)
    out = RunDir(args.out).create()
    with out.lock():                 # a sweep running into --out keeps it (and its rows)
        parts = [read_csv(RunDir(d).file(PAIR_TIMING)) for d in args.dirs if RunDir(d).file(PAIR_TIMING).is_file()]
        if parts:
            out.write_frame(PAIR_TIMING, pd.concat(parts, ignore_index=True))
        err(f"harness: merged {len(frames)} result sets, {len(df)} rows")
        results = Results(df, suite=suite)
        device = str(df["device"].iloc[0]) if len(df) else "cpu"
        return finish(results, out.path, device, [], "merged", args.junit, False)
