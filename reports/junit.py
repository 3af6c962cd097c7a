"""JUnit XML for CI dashboards (`harness run --junit FILE`): one <testcase> per check row
(case x implementation x output x reference), classname `impl.output.reference`, name
`label [case_id]`; a `fail` row carries <failure message=reason>, an `error` row <error>."""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd

from harness.references.atomic import atomic_write

DETAIL = ("max_ulp", "max_scaled_err", "budget_metric", "budget", "worst_index", "worst_got",
          "worst_ref", "worst_inputs", "replay")


def _s(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and math.isnan(v):
        return ""
    return str(v)


def build_tree(df: pd.DataFrame, name: str = "harness") -> ET.ElementTree:
    status = df["status"].astype(str) if "status" in df.columns else pd.Series([], dtype=str)
    tests, failures, errors = len(df), int((status == "fail").sum()), int((status == "error").sum())
    counts = {"tests": str(tests), "failures": str(failures), "errors": str(errors), "skipped": "0"}
    root = ET.Element("testsuites", {"name": name, **counts})
    suite = ET.SubElement(root, "testsuite", {"name": name, **counts, "time": "0"})
    for r in df.to_dict("records"):
        tc = ET.SubElement(suite, "testcase", {
            "classname": f"{_s(r.get('impl'))}.{_s(r.get('output'))}.{_s(r.get('reference'))}",
            "name": f"{_s(r.get('label'))} [{_s(r.get('case_id'))}]",
            "time": "0",
        })
        st = _s(r.get("status"))
        reason = _s(r.get("reason"))
        detail = "\n".join(f"{k}: {_s(r.get(k))}" for k in DETAIL if _s(r.get(k)))
        if st == "fail":
            el = ET.SubElement(tc, "failure", {"message": reason or "over budget", "type": "over_budget"})
            el.text = detail
        elif st == "error":
            el = ET.SubElement(tc, "error", {"message": reason or "error", "type": "error"})
            el.text = detail
        elif st != "pass":
            el = ET.SubElement(tc, "error", {"message": f"unknown status {st!r}", "type": "error"})
        if detail and st == "pass":
            ET.SubElement(tc, "system-out").text = detail
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(df: pd.DataFrame, path: Path) -> None:
    """Atomic: written beside the target, then renamed over it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tree = build_tree(df)
    with atomic_write(path) as f:
        tree.write(f, encoding="utf-8", xml_declaration=True)
