"""What a results.csv read back must hold before anything takes its rows at their word — a report,
a merge, a resumed sweep, a baseline: a number (or nothing) in every number column; no negative
value where an error, a budget, a timing or a count goes; each key's row once; no schema newer
than this harness's; where it records its cases, each one's parameters hashing to its case id
(harness.cases.params); and verdicts the harness could have written (summary.verdict_problem).
One home, so that no reader accepts what another refuses."""
from __future__ import annotations

import pandas as pd

from harness.cases.case import LATER_AXES, Case
from harness.cases.params import check_case_rows
from harness.references.errors import UsageError
from harness.reports.schema import BLANK_NUMBER, INT_COLUMNS, KEY, SCHEMA_VERSION, metric_columns, number_columns
from harness.reports.summary import verdict_problem

# Never below 0 as the harness writes them (NaN: not measured; inf: a budget that does not gate).
NON_NEGATIVE = ("budget", "p99_ulp", "baseline_value", "pair_seconds", "impl_seconds", "gpu_seconds", "floor_fraction",
                *(c for c in INT_COLUMNS if c not in ("seed", "group_size", "hidden", "tokens", "schema_version")))


def number_problem(df: pd.DataFrame) -> str | None:
    """The first cell of a number column that is not a number or blank, said; None where there is
    none (a baseline's "n/a" must not read as a value nothing can regress from)."""
    for c in number_columns():
        if c in df.columns and not pd.api.types.is_numeric_dtype(df[c]):
            text = df[c].astype(str).str.strip()
            bad = pd.to_numeric(text, errors="coerce").isna() & ~text.isin(BLANK_NUMBER) & df[c].notna()
            if bad.any():
                i = int(bad.to_numpy().argmax())
                return (f"row {i + 1} ({df['case_id'].iloc[i]} {df['impl'].iloc[i]}): column {c}: {df[c].iloc[i]!r} "
                        f"is not a number; a results.csv holds a number (or nothing) there")
    return None


# What a row must hold to record its case (cases.params.case_from_row: every field but the later
# axes, which may be blank): an exhaustive run's rows record no gamma, eps or seed — their ids name
# a range of bit patterns, not a Case.
CASE_FIELDS = tuple(k for k in Case.__dataclass_fields__ if k not in LATER_AXES)


def problem(df: pd.DataFrame) -> str | None:
    """Why the rows cannot be taken at their word, or None; the schema first (a later harness's
    columns may hold other things), then the numbers, then what they say."""
    if "schema_version" in df.columns:
        newest = pd.to_numeric(df["schema_version"], errors="coerce").max()
        if newest > SCHEMA_VERSION:
            return (f"schema version {int(newest)}, newer than this harness's ({SCHEMA_VERSION}): written by a "
                    f"later harness, whose columns may mean other things")
    if why := number_problem(df):
        return why
    if set(KEY) <= set(df.columns) and (twice := df.duplicated(list(KEY))).any():
        r = df[twice].iloc[0]
        return f"{r['case_id']} {r['impl']} {r['output']} vs {r['reference']} is in it twice: not one run's results.csv"
    for c in (*metric_columns(), *NON_NEGATIVE):
        if c in df.columns:
            below = pd.to_numeric(df[c], errors="coerce") < 0
            if below.any():
                i = int(below.to_numpy().argmax())
                return (f"row {i + 1} ({df['case_id'].iloc[i]} {df['impl'].iloc[i]}): column {c}: {df[c].iloc[i]} "
                        f"is negative, which no error, budget, time or count is: edited, or not written by the harness")
    if set(CASE_FIELDS) <= set(df.columns):        # rows that record their case: each is what its id says
        recorded = pd.Series(True, index=df.index)
        for c in CASE_FIELDS:
            recorded &= df[c].notna() & (df[c].astype(str).str.strip() != "")
        rows = df[recorded]
        try:                                   # every distinct set of parameters a case id is given
            given = [c for c in rows.columns if c in ("case_id", *Case.__dataclass_fields__)]
            check_case_rows(rows.drop_duplicates(given).to_dict("records"), "its rows")
        except UsageError as e:
            return str(e)
    return verdict_problem(df)
