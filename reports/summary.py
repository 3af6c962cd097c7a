"""summary.csv and the terminal table: one row per implementation x gate activation x output dtype x
output x reference x regime, reduced from the tidy results.csv rows with vectorised pandas. The normal and
extreme regimes are separate groups, so an extreme row's reported-only budget (inf) never sits next
to a normal row's failure; `metric` names the gated metric and `worst` its worst value."""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness.references.metrics import registry
from harness.reports.schema import CHECKED_OUTPUTS, STATUSES, columns, gated_columns, missing_columns

KEYS = ["impl", "activation", "out_dtype", "output", "reference", "regime"]
SUMMARY_COLUMNS = KEYS + ["checks", "fail", "error", "skip", "metric", "worst", "budget", "margin",
                          "max_ulp", "max_scaled_err"]
# Display orders; values not listed sort after these, alphabetically.
ORDER = {"activation": ["silu", "sigmoid"], "out_dtype": ["fp32", "bf16", "fp16"], "output": list(CHECKED_OUTPUTS),
         "reference": ["exact"], "regime": ["normal", "extreme"]}
TEXT = ("case_id", "impl", "output", "reference", "regime", "status", "budget_metric", "out_dtype", "label",
        "reason", "replay", "rounding", "dtype", "math", "activation", "fail_kind", "reference_kind",
        "reference_model", "reference_math")


def normalize(df: pd.DataFrame) -> pd.DataFrame:
    """Every schema column present (missing ones blank), metrics as numbers, text as text; error
    and skip rows carry no measurement (their metrics blank, so partial values never count)."""
    d = df.copy()
    for c in columns():
        if c not in d.columns:
            d[c] = np.nan
    if d["out_dtype"].isna().all():
        d["out_dtype"] = d["dtype"]
    text = set(TEXT) | {c for c in d.columns if d[c].dtype == object and c not in _numeric()}
    for c in d.columns:
        if c in _numeric():
            d[c] = pd.to_numeric(d[c], errors="coerce")
        elif c in text:
            d[c] = text_of(d, c)
    d.loc[d["status"] == "", "status"] = "error"
    d.loc[d["activation"] == "", "activation"] = "silu"        # rows written before the activation axis
    unmeasured = d["status"].isin(["error", "skip"]).to_numpy()
    d.loc[unmeasured, [m.column for m in registry().values()]] = np.nan
    return d


def _numeric() -> set[str]:
    num = {"budget", "p99_ulp", "count_over", "n_elements", "hidden", "tokens", "eps", "cr_mismatch", "certified",
           "uncertified", "worst_got", "worst_ref", "baseline_value", "impl_seconds", "gpu_seconds",
           "differing_elements", "group_size", "seed"}
    for m in registry().values():
        num |= {m.column} | ({m.mean_column} if m.mean_column else set())
    return num


def text_of(d: pd.DataFrame, column: str) -> pd.Series:
    """`column` as text, a blank cell (or a column the rows lack) ''."""
    if column not in d.columns:
        return pd.Series("", index=d.index)
    return d[column].astype(object).where(d[column].notna(), "").astype(str)


def gated(d: pd.DataFrame) -> pd.Series:
    """The checks an implementation is judged by: against the exact value and against its declared
    model at its declared math class (reference_model == rounding, reference_math == math);
    `harness identify`'s checks against other models and classes are not. Rows without the
    reference's kind and model (an older results.csv) all count."""
    if "reference_kind" not in d.columns or "reference_model" not in d.columns:
        return pd.Series(True, index=d.index)
    text = {c: text_of(d, c) for c in ("reference_kind", "reference_model", "rounding", "reference_math", "math")}
    own_model = (text["reference_model"] == text["rounding"]) | (text["rounding"] == "")
    own_math = (text["reference_math"] == text["math"]) | (text["reference_math"] == "") | (text["math"] == "")
    return (text["reference_kind"] != "model") | (own_model & own_math)


def pair_notes(d: pd.DataFrame) -> list[str]:
    """What pairs did besides their checks, per implementation: the inputs its calls wrote into
    (each call's own copies: no reference and no other implementation saw it) and the notes its
    pairs carry (flush-to-zero left on, ...)."""
    out = []
    if "impl" not in d.columns:
        return out
    pairs = d.drop_duplicates(["case_id", "impl"])
    for impl, g in pairs.groupby("impl", sort=False):
        for col, say in (("inputs_modified", "wrote into its own copy of {v} (the inputs are each call's own: "
                                             "no reference and no other implementation saw it)"),
                         ("notes", "{v}")):
            if col not in g.columns:
                continue
            vals = text_of(g, col)
            for v, n in vals[vals != ""].value_counts(sort=False).items():
                out.append(f"{impl}: {say.format(v=v)}, in {n} of {len(g)} pairs")
    return out


def worst_value(d: pd.DataFrame) -> pd.Series:
    """The value each row's budget is checked against: its gated metric's column."""
    out = pd.Series(np.nan, index=d.index, dtype=float)
    for name, m in registry().items():
        if m.column in d.columns:
            sel = d["budget_metric"] == name
            out[sel] = pd.to_numeric(d.loc[sel, m.column], errors="coerce")
    return out


def verdict_problem(d: pd.DataFrame) -> str | None:
    """Why the rows' verdicts cannot be the harness's own, or None: a status it never writes, a
    `pass` that names a fail kind, or whose gated value is not a number within its budget (compare
    passes nothing else: a NaN never passes). Whatever reads results back and gates on them — merge,
    report, resume, a baseline — must not take an edited or foreign row's word for it."""
    status = d["status"].astype(str)
    odd = ~status.isin(STATUSES)
    if odd.any():
        i = int(odd.to_numpy().argmax())
        return f"row {i + 1}: status {d['status'].iloc[i]!r} is not one of {', '.join(STATUSES)}"
    passed = status == "pass"
    if not passed.any():
        return None
    if missing := missing_columns(d, ["budget", "budget_metric", *gated_columns(d[passed])]):
        return f"no column {missing[0]!r}: its passes cannot be checked against their budgets"
    kind = text_of(d, "fail_kind")
    v, b = worst_value(d), pd.to_numeric(d["budget"], errors="coerce")
    bad = passed & ((kind != "") | ~(v <= b))
    if not bad.any():
        return None
    i = int(bad.to_numpy().argmax())
    r = d.iloc[i]
    why = f"fail kind {kind.iloc[i]!r}" if kind.iloc[i] else f"{r['budget_metric']} {v.iloc[i]} against budget {b.iloc[i]}"
    return (f"row {i + 1} ({r['case_id']} {r['impl']} {r['output']} vs {r['reference']}) says pass with {why}: "
            f"edited, or not written by the harness")


def budget_ratio(d: pd.DataFrame) -> pd.Series:
    """worst / budget (1.0 = exactly at budget); 0/0 counts as 0, x/0 as inf."""
    v, b = worst_value(d), pd.to_numeric(d["budget"], errors="coerce")
    with np.errstate(divide="ignore", invalid="ignore"):
        r = v / b
    return r.where(~((v == 0) & (b == 0)), 0.0)


def sort_keys(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Sort by keys using the display orders above (y before dx, fp32 before bf16, ...)."""
    def key(s: pd.Series) -> pd.Series:
        pref = ORDER.get(s.name, [])
        rank = s.map({v: i for i, v in enumerate(pref)}).fillna(len(pref))
        return rank.astype(int).astype(str).str.zfill(4) + "|" + s.astype(str)
    return df.sort_values(keys, key=key, kind="stable").reset_index(drop=True)


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    d = normalize(df)
    d = d.assign(_worst=worst_value(d), _fail=d["status"] == "fail", _err=d["status"] == "error",
                 _skip=d["status"] == "skip", _metric=d["budget_metric"].where(d["budget_metric"] != "", np.nan))
    g = d.groupby(KEYS, sort=False, dropna=False)
    s = g.agg(checks=("status", "size"), fail=("_fail", "sum"), error=("_err", "sum"), skip=("_skip", "sum"),
              metric=("_metric", "first"), worst=("_worst", "max"), budget=("budget", "max"),
              max_ulp=("max_ulp", "max"), max_scaled_err=("max_scaled_err", "max")).reset_index()
    s["metric"] = s["metric"].fillna("")
    s["margin"] = s["budget"] - s["worst"]
    s[["fail", "error", "skip"]] = s[["fail", "error", "skip"]].astype(int)
    return sort_keys(s[SUMMARY_COLUMNS], KEYS)


def summary_table(df: pd.DataFrame) -> str:
    """The end-of-run table `harness run` prints; `worst` is the gated metric's worst value."""
    if df.empty:
        return "(no results)"
    s = summarize(df)
    shown = ["impl", "out_dtype", "output", "reference", "regime", "checks", "fail", "error", "skip",
             "metric", "worst", "budget"]
    if set(s["activation"]) != {"silu"}:               # a sigmoid gate ran: its rows are its own groups
        shown.insert(1, "activation")
    return s[shown].to_string(index=False, float_format=lambda v: f"{v:.3g}") + \
        "\n(worst: the largest value of the gated metric; a check fails above its budget)"
