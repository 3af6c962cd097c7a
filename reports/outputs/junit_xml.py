"""JUnit XML for CI dashboards (`harness run --junit FILE`): one <testsuite> per implementation,
named SUITE:IMPL, one <testcase> per check (case x output x reference) named `label [case_id] OUTPUT
vs REFERENCE`, its time the pair's share; a `fail` row carries <failure> (type over_budget,
regressed, or invalid_output), an `error` row <error>, a `skip` row <skipped>, each with the
failure record and the replay command."""
from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd

from harness.references.atomic import atomic_write
from harness.reports.outputs import OutputFormat, register
from harness.reports.summary import worst_value

DETAIL = ("budget_metric", "budget", "max_ulp", "max_scaled_err", "worst_index", "worst_got", "worst_ref",
          "worst_inputs", "replay")


# Characters XML 1.0 cannot carry even escaped (a plug-in's exception text may hold ANSI colour codes).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _s(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return _NOT_XML.sub("\ufffd", str(v))


def _seconds(df: pd.DataFrame) -> pd.Series:
    """Each check's share of its pair's time (pair_seconds over the pair's rows)."""
    if "pair_seconds" not in df.columns or df.empty:
        return pd.Series(0.0, index=df.index)
    t = pd.to_numeric(df["pair_seconds"], errors="coerce").fillna(0.0)
    n = df.groupby(["case_id", "impl"])["case_id"].transform("size")
    return t / n


def _failure_types(df: pd.DataFrame) -> pd.Series:
    """regressed: a baseline verdict; over_budget: a finite measured error above the budget;
    invalid_output: anything else that failed — no finite measurement (a non-finite output, a NaN
    reference, the wrong dtype or shape, a missing gradient) or a within-budget output that was not
    repeatable."""
    regressed = df.get("regressed", pd.Series("", index=df.index)).astype(str).str.lower().isin(["true", "1", "1.0"])
    regressed |= df.get("reason", pd.Series("", index=df.index)).astype(str).str.startswith("regressed: ")
    value = worst_value(df) if "budget_metric" in df.columns else pd.Series(math.nan, index=df.index)
    budget = pd.to_numeric(df.get("budget", pd.Series(math.nan, index=df.index)), errors="coerce")
    over = np.isfinite(value) & (value > budget)
    return pd.Series(np.where(regressed, "regressed", np.where(over, "over_budget", "invalid_output")), index=df.index)


def build_tree(df: pd.DataFrame, suite: str = "harness") -> ET.ElementTree:
    df = df.assign(_t=_seconds(df), _type=_failure_types(df))
    root = ET.Element("testsuites", {"name": _s(suite)})
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    elapsed = 0.0
    for impl, rows in (df.groupby("impl", sort=False) if len(df) else []):
        status = rows["status"].astype(str)
        counts = {"tests": len(rows), "failures": int((status == "fail").sum()),
                  "errors": int((status == "error").sum()), "skipped": int((status == "skip").sum())}
        t = float(rows["_t"].sum())
        ts = ET.SubElement(root, "testsuite", {"name": _s(f"{suite}:{impl}"), **{k: str(v) for k, v in counts.items()},
                                               "time": f"{t:.3f}"})
        for r in rows.to_dict("records"):
            tc = ET.SubElement(ts, "testcase", {
                "classname": _s(f"{suite}.{impl}.{_s(r.get('output'))}"),
                "name": f"{_s(r.get('label'))} [{_s(r.get('case_id'))}] {_s(r.get('output'))} vs {_s(r.get('reference'))}",
                "time": f"{float(r['_t']):.3f}"})
            st, reason = _s(r.get("status")), _s(r.get("reason"))
            detail = "\n".join(f"{k}: {_s(r.get(k))}" for k in DETAIL if _s(r.get(k)))
            if st == "fail":
                ET.SubElement(tc, "failure", {"message": reason or "over budget", "type": r["_type"]}).text = detail
            elif st == "error":
                ET.SubElement(tc, "error", {"message": reason or "error", "type": "error"}).text = detail
            elif st == "skip":
                ET.SubElement(tc, "skipped", {"message": reason or "not supported"})
            elif st != "pass":
                ET.SubElement(tc, "error", {"message": f"unknown status {st!r}", "type": "error"})
            elif detail:
                ET.SubElement(tc, "system-out").text = detail
        for k in totals:
            totals[k] += counts[k]
        elapsed += t
    root.attrib.update({k: str(v) for k, v in totals.items()}, time=f"{elapsed:.3f}")
    ET.indent(root)
    return ET.ElementTree(root)


def suite_name(data) -> str:
    """RunData.suite, else the rows' own `suite` column, else "harness"."""
    if data.suite:
        return data.suite
    names = data.results.get("suite", pd.Series(dtype=object)).dropna().astype(str)
    names = names[names != ""]
    return names.iloc[0] if len(names) else "harness"


def write(data, path) -> None:
    tree = build_tree(data.results, suite_name(data))
    with atomic_write(path) as f:
        tree.write(f, encoding="utf-8", xml_declaration=True)


JUNIT_XML = register(OutputFormat("junit", "junit.xml", write, default=False))
