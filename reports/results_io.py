"""results.csv on disk: appended one (case, implementation) pair at a time, so a killed sweep
loses at most the pair in flight; `--resume` drops a torn tail and any incomplete pair."""
from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import pandas as pd

from harness.reports.schema import COLUMNS

PAIR = ["case_id", "impl"]


def _fmt(v):
    if isinstance(v, float):
        return repr(v)
    return v


def append_rows(path: Path, rows: list[dict]) -> None:
    new = not path.exists() or path.stat().st_size == 0
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    if new:
        w.writeheader()
    for r in rows:
        w.writerow({k: _fmt(r.get(k, "")) for k in COLUMNS})
    with open(path, "a", newline="") as f:      # one write per pair, then flushed to disk
        f.write(buf.getvalue())
        f.flush()
        os.fsync(f.fileno())


# Text columns must stay text: a case id such as "060486302023" is not a number.
TEXT_COLUMNS = ("case_id", "impl", "rounding", "device", "dtype", "gate_dtype", "weight_dtype",
                "shape", "gate_dist", "output", "reference", "budget_metric", "status", "label",
                "regime", "act_dtype", "out_dtype", "x_dist", "gamma_dist", "worst_index",
                "worst_inputs", "budget_source", "reason", "replay")
REQUIRED = ("case_id", "impl", "output", "reference", "status")


# Counts: blank on some rows (e.g. model rows carry no certification counts), integers elsewhere.
INT_COLUMNS = ("cr_mismatch", "certified", "uncertified", "count_over", "n_elements", "hidden", "tokens", "seed")


def read_results(path: Path) -> pd.DataFrame:
    """The one reader of results.csv; a missing, empty or foreign file is the user's error."""
    from harness.errors import UsageError
    try:
        df = pd.read_csv(path, dtype={c: str for c in TEXT_COLUMNS})
    except (OSError, pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: not a readable results.csv ({type(e).__name__}: {e})") from None
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise UsageError(f"{path}: not a results.csv (missing column {missing[0]!r})")
    return df


def repair_for_resume(path: Path, rows_per_pair: int) -> set[tuple[str, str]]:
    """Truncate a torn last line, drop incomplete pairs; return the finished (case_id, impl) pairs."""
    if not path.exists():
        return set()
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]
        path.write_bytes(data)
    if not data.strip():
        return set()
    df = read_results(path)
    counts = df.groupby(PAIR).size()
    complete = {k for k, n in counts.items() if n == rows_per_pair}
    if len(complete) != len(counts):
        keep = df[[(c, i) in complete for c, i in zip(df["case_id"], df["impl"])]]
        write_results(path, keep)
    return complete


def write_results(path: Path, df: pd.DataFrame) -> None:
    """Atomic rewrite (merge, resume repair): write beside, then rename."""
    tmp = path.with_suffix(".csv.tmp")
    df = df.copy()
    for c in INT_COLUMNS:           # counts stay integers where blank cells made pandas read floats
        if c in df.columns and df[c].dtype.kind == "f" and bool((df[c].dropna() % 1 == 0).all()):
            df[c] = df[c].astype("Int64")
    cols = [c for c in COLUMNS if c in df.columns] + [c for c in df.columns if c not in COLUMNS]
    df.reindex(columns=list(COLUMNS) if set(df.columns) <= set(COLUMNS) else cols).to_csv(tmp, index=False)
    os.replace(tmp, path)
