"""A case from its parameters as text: the JSON object that `harness replay --case` takes, or a
results.csv row (every Case field is a column there). Both go through cases.case.from_params, so a
bad value is one line naming it and the fix (UsageError), never an internal error."""
from __future__ import annotations

import json
import math

from harness.cases.case import LATER_AXES, Case, from_params
from harness.references.errors import UsageError

_BOOLS = {"true": True, "1": True, "false": False, "0": False}


def case_from_json(text: str, where: str = "--case") -> Case:
    try:
        params = json.loads(text)
    except ValueError as e:
        raise UsageError(f"{where}: not JSON ({e}); give the case's parameters, e.g. "
                         f"'{{\"dtype\": \"bf16\", \"shape\": [4, 32], ...}}'") from None
    return from_params(params, where)


def _blank(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or str(v).strip() in ("", "nan")


def _typed(key: str, v):
    """A row's cell as the parameter's type; a cell that cannot be one is left as it is, for
    from_params to name."""
    s = str(v).strip()
    if key in ("zero_centered_gamma", "norm_before_gate"):
        return v if isinstance(v, bool) else _BOOLS.get(s.lower(), s)
    if key == "shape":
        try:
            return [int(d) for d in s.split("x")]
        except ValueError:
            return s
    if key in ("seed", "group_size"):
        try:
            return int(s)
        except ValueError:
            pass
        try:                                  # pandas reads an integer column with blanks as floats
            f = float(s)
            return int(f) if f.is_integer() else f
        except (ValueError, OverflowError):
            return s
    if key == "eps":
        try:
            return float(v)
        except ValueError:
            return s
    return s


def case_from_row(row: dict, where: str) -> Case:
    """Rebuild a Case from one results.csv row (values as strings or parsed); the later axes may
    be blank (their defaults)."""
    keys = [k for k in Case.__dataclass_fields__ if not (k in LATER_AXES and _blank(row.get(k)))]
    missing = [k for k in keys if k not in row or _blank(row[k])]
    if missing:
        raise UsageError(f"{where}: missing column(s) {', '.join(missing)}")
    return from_params({k: _typed(k, row[k]) for k in keys}, where)


def check_case_rows(rows, where: str) -> None:
    """Each row (one per case id is enough) holds a valid case whose parameters hash to its
    `case_id`: what merge and a baseline take from a results file is what its rows say."""
    for row in rows:
        cid = str(row.get("case_id", ""))
        case = case_from_row(row, f"{where}: case {cid}")
        if case.case_id != cid:
            raise UsageError(f"{where}: case {cid}: its parameters hash to {case.case_id} (the file was edited, or "
                             f"written by another case schema); rerun it with this harness")
