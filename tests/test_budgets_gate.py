"""Budget files (harness/budgets.py: parsing, validation, lookup, regen) and the verdict / baseline
gate (harness/gate.py). The default budgets' derivation has its own tests (test_budget_derivation)."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.budgets import (REGEN_GROWTH_CAP, Budget, Override, budget_file_text, default_budget, load_budget_file,
                             lookup, parse_budget_file, regen)
from harness.gate import apply_baseline, verdict
from harness.references.errors import UsageError
from harness.references.formats import fmt_of
from harness.references.models import resolve

BF16, FP32 = fmt_of("bf16"), fmt_of("fp32")
HEADER = "impl,rounding,dtype,output,reference,regime,metric,budget\n"


def _default(output, reference, regime="normal", model="chain"):
    return default_budget(output, reference, resolve(model), BF16, BF16, FP32, 16, 4, True, regime)


@pytest.mark.parametrize("model", ["chain", "fused", "xhat"])
def test_model_reference_budget_is_the_final_rounding(model):
    for out in ("y", "dx", "dgate", "dweight"):
        for regime in ("normal", "extreme"):
            assert _default(out, "model", regime, model) == Budget("ulp", 0.5, "default")


def test_exact_budgets_are_finite_in_normal_and_reported_in_extreme():
    for out in ("y", "dx", "dgate", "dweight"):
        b = _default(out, "exact")
        assert b.metric == ("ulp" if out == "y" else "scaled") and 0.5 <= b.value < 10
        e = _default(out, "exact", "extreme")
        assert e.value == math.inf and e.source.startswith("default (extreme")


# ------------------------------------------------------------------------------ parsing

def test_parse_good_file():
    text = HEADER + "# a comment\ntorch,chain,bf16,y,exact,normal,ulp,2.5\n*,*,*,dx,*,*,scaled,3\n\n"
    assert parse_budget_file(text, "b.csv") == [
        Override("torch", "chain", "bf16", "y", "exact", "normal", "ulp", 2.5),
        Override("*", "*", "*", "dx", "*", "*", "scaled", 3.0)]


def test_parse_accepts_another_registered_metric_and_rounding_aliases():
    ov = parse_budget_file(HEADER + "*,*,*,dx,model,*,abs,1e-3\n", "b.csv")
    assert ov[0].metric == "abs"


def test_a_repeated_identical_line_is_one_budget():
    line = "torch,chain,bf16,y,exact,normal,ulp,0.5\n"
    assert len(parse_budget_file(HEADER + line + "*,*,*,dx,*,*,ulp,1\n" + line, "b.csv")) == 2


@pytest.mark.parametrize("body,needles", [
    ("impl,rounding,dtype,output\n", ("line 1", "header")),
    (HEADER + "torch,chain,bf16,y,exact,normal,ulp\n", ("line 2", "expected 8 fields, got 7")),
    (HEADER + "torch,chain,bf16,y,exact,normal,ulp,1,extra\n", ("line 2", "got 9")),
    (HEADER + "torch,chian,bf16,y,exact,normal,ulp,1\n", ("line 2", "chian")),
    (HEADER + "torch,chain,bf61,y,exact,normal,ulp,1\n", ("line 2", "dtype", "bf61")),
    (HEADER + "torch,chain,fp64,y,exact,normal,ulp,1\n", ("line 2", "dtype", "fp64")),
    (HEADER + "torch,chain,bf16,dz,exact,normal,ulp,1\n", ("line 2", "output", "dz")),
    (HEADER + "torch,chain,bf16,y,golden,normal,ulp,1\n", ("line 2", "reference", "golden")),
    (HEADER + "torch,chain,bf16,y,exact,normall,ulp,1\n", ("line 2", "regime", "normall")),
    (HEADER + "torch,chain,bf16,y,exact,normal,ulps,1\n", ("line 2", "metric", "ulps")),
    (HEADER + ",chain,bf16,y,exact,normal,ulp,1\n", ("line 2", "impl", "empty")),
    (HEADER + "torch,chain,bf16,y,exact,normal,ulp,lots\n", ("line 2", "budget", "lots")),
    (HEADER + "torch,chain,bf16,y,exact,normal,ulp,-1\n", ("line 2", "budget", ">= 0")),
    (HEADER + "torch,chain,bf16,y,exact,normal,ulp,inf\n", ("line 2", "budget")),
    (HEADER + "torch,chain,bf16,y,exact,normal,ulp,nan\n", ("line 2", "budget")),
    (HEADER + "torch,chain,bf16,y,exact,normal,ulp,1\n*,*,*,y,*,*,ulp,x\n", ("line 3", "budget")),
    ("# only a comment\n", ("empty",)),
    (HEADER + "torch,chain,bf16,y,exact,normal,ulp,0.1\n*,*,*,y,*,*,ulp,1\ntorch,chain,bf16,y,exact,normal,scaled,100\n",
     ("line 4", "same key as line 2", "with another budget", "one budget per key")),
])
def test_parse_errors_name_the_line(body, needles):
    with pytest.raises(UsageError) as ei:
        parse_budget_file(body, "my/budgets.csv")
    msg = str(ei.value)
    assert msg.startswith("my/budgets.csv: ") and "\n" not in msg
    for n in needles:
        assert n in msg, (n, msg)


def test_parse_error_line_counts_comments_and_blank_lines():
    text = "# budgets\n" + HEADER + "\ntorch,chain,bf16,y,exact,normal,ulp,oops\n"
    with pytest.raises(UsageError, match="line 4:"):
        parse_budget_file(text, "b.csv")


def test_load_budget_file(tmp_path):
    with pytest.raises(UsageError, match="not found"):
        load_budget_file(str(tmp_path / "none.csv"))
    with pytest.raises(UsageError, match="not found"):
        load_budget_file(str(tmp_path))                      # a directory
    f = tmp_path / "b.csv"
    f.write_text(HEADER + "*,*,*,y,*,*,ulp,4\n")
    assert load_budget_file(str(f))[0].budget == 4.0
    f.write_bytes(HEADER.encode() + b"*,*,*,y,*,*,ulp,4\n# caf\xe9\n")
    with pytest.raises(UsageError, match=r"line 3: not UTF-8 text \(byte 0xe9\)"):
        load_budget_file(str(f))


# ------------------------------------------------------------------------------ lookup

def test_lookup_specificity():
    ov = parse_budget_file(HEADER + "*,*,*,y,*,*,ulp,4\n"
                                    "torch,*,bf16,y,exact,*,ulp,6\n"
                                    "torch,*,*,y,*,*,ulp,5\n"
                                    "*,*,*,dx,*,*,scaled,9\n", "b.csv")
    d = Budget("ulp", 0.5, "default")
    assert lookup(ov, d, "torch", "chain", "bf16", "y", "exact", "normal", "b.csv", math="accurate") == Budget("ulp", 6.0, "b.csv")
    assert lookup(ov, d, "torch", "chain", "fp16", "y", "exact", "normal", "b.csv", math="accurate").value == 5.0
    assert lookup(ov, d, "other", "chain", "bf16", "y", "exact", "normal", "b.csv", math="accurate").value == 4.0
    assert lookup(ov, d, "other", "chain", "bf16", "dgate", "exact", "normal", "b.csv", math="accurate") == d
    assert lookup([], d, "torch", "chain", "bf16", "y", "exact", "normal", math="accurate") == d
    # a reference is matched by its kind: a line's `model` matches a check against any model
    assert lookup(ov, d, "torch", "chain", "bf16", "y", "model", "normal", "b.csv", math="accurate").value == 5.0


def test_a_line_may_name_the_math_class_it_applies_at():
    """`fla` judged at its declared fast class and `fla@accurate` are gated apart: a line with a math
    class applies at that class alone (its alias canonical), one without at every class; a file
    without the column (written before it existed) still reads, at every class."""
    text = ("impl,rounding,math,dtype,output,reference,regime,metric,budget\n"
            "fla,*,fast,*,y,exact,*,ulp,40\n"
            "fla,*,ftz,*,y,exact,*,ulp,3\n"
            "fla,*,*,*,y,exact,*,ulp,2\n")
    ov = parse_budget_file(text, "b.csv")
    assert [o.math for o in ov] == ["fast", "accurate+ftz", "*"]
    d = Budget("ulp", 0.5, "default")
    at = {mc: lookup(ov, d, "fla", "fused", "fp32", "y", "exact", "normal", "b.csv", math=mc).value
          for mc in ("fast", "accurate+ftz", "accurate", "fast+ftz")}
    assert at == {"fast": 40.0, "accurate+ftz": 3.0, "accurate": 2.0, "fast+ftz": 2.0}
    legacy = parse_budget_file(HEADER + "fla,*,*,y,exact,*,ulp,7\n", "b.csv")
    assert legacy[0].math == "*" and lookup(legacy, d, "fla", "fused", "fp32", "y", "exact", "normal",
                                            "b.csv", math="fast").value == 7.0
    with pytest.raises(UsageError, match="line 2: math class 'quick'"):
        parse_budget_file("impl,rounding,math,dtype,output,reference,regime,metric,budget\n"
                          "fla,*,quick,*,y,exact,*,ulp,4\n", "b.csv")


def test_regen_keeps_each_math_class_to_its_own_lines(tmp_path):
    """`fla`'s rows at its fast class and at accurate (two runs' results together; one run takes a
    name once): one line each, where one line without the class carried the fast class's larger
    budget to the accurate one — as a file regenerated at one class did to a run at another."""
    rows = [("fla", "fused", "fp32", "y", "exact", "normal", "ulp", 30.0, 0.0, 40.0, "pass"),
            ("fla", "fused", "fp32", "y", "exact", "normal", "ulp", 0.9, 0.0, 1.0, "pass")]
    df = _results(rows).assign(math=["fast", "accurate"])
    lines, grown, refused = regen(df)
    assert sorted((ln["math"], ln["budget"]) for ln in lines) == [("accurate", 1.0), ("fast", 40.0)]
    f = tmp_path / "b.csv"
    f.write_text(budget_file_text(lines))
    ov = load_budget_file(str(f))
    d = Budget("ulp", 0.5, "default")
    assert lookup(ov, d, "fla", "fused", "fp32", "y", "exact", "normal", str(f), math="accurate").value == 1.0
    assert lookup(ov, d, "fla", "fused", "fp32", "y", "exact", "normal", str(f), math="fast").value == 40.0


# ------------------------------------------------------------------------------ regen

def _results(rows):
    cols = ["impl", "rounding", "out_dtype", "output", "reference_kind", "regime", "budget_metric",
            "max_ulp", "max_scaled_err", "budget", "status"]
    return pd.DataFrame([dict(zip(cols, r)) for r in rows])


def test_regen_rounds_up_grows_and_caps():
    df = _results([
        ("torch", "chain", "bf16", "y", "exact", "normal", "ulp", 1.234, 0.1, 1.0, "fail"),
        ("torch", "chain", "bf16", "y", "exact", "normal", "ulp", 0.9, 0.1, 1.0, "pass"),
        ("torch", "chain", "bf16", "y", "model", "normal", "ulp", 0.4312, 0.1, 0.5, "pass"),
        ("torch", "chain", "bf16", "dx", "exact", "normal", "scaled", 99.0, 12.3, 1.0, "fail"),
        ("torch", "chain", "bf16", "dgate", "exact", "normal", "scaled", 0.0, 50.0, 2.0, "error"),
    ])
    lines, grown, refused = regen(df)
    by = {(ln["output"], ln["reference"]): ln for ln in lines}
    assert set(by) == {("y", "exact"), ("y", "model"), ("dx", "exact")}        # error rows ignored
    assert by[("y", "exact")]["budget"] == pytest.approx(1.3)
    assert by[("y", "model")]["budget"] == 0.5                                 # never below the default
    assert by[("dx", "exact")]["budget"] == 1.0                                # refused: kept old
    assert [(k[4], new, old) for k, new, old in grown] == [("y", pytest.approx(1.3), 1.0)]
    assert [(k[4], new, old) for k, new, old in refused] == [("dx", 13.0, 1.0)]
    lines, grown, refused = regen(df, allow_growth=True)
    by = {(ln["output"], ln["reference"]): ln for ln in lines}
    assert by[("dx", "exact")]["budget"] == 13.0 and not refused
    assert REGEN_GROWTH_CAP == 9.0


def test_regen_refuses_non_finite_and_keeps_reported_budgets_out():
    df = _results([("torch", "chain", "bf16", "y", "exact", "normal", "ulp", math.inf, 0.0, 1.0, "fail"),
                   ("torch", "chain", "bf16", "dx", "exact", "extreme", "scaled", 0.0, 5.0, math.inf, "pass")])
    lines, grown, refused = regen(df, allow_growth=True)
    assert lines == [] and len(refused) == 1


def test_regen_file_round_trips(tmp_path):
    df = _results([("torch", "chain", "bf16", "y", "exact", "normal", "ulp", 1.234, 0.1, 1.0, "fail")])
    lines, _, _ = regen(df)
    f = tmp_path / "b.csv"
    f.write_text(budget_file_text(lines))
    assert load_budget_file(str(f)) == [Override("torch", "chain", "bf16", "y", "exact", "normal", "ulp", 1.3)]


def test_regen_is_idempotent():
    for v in (0.14, 0.28, 0.56, 1.3, 0.5):
        df = _results([("torch", "chain", "bf16", "y", "exact", "normal", "ulp", v, 0.0, 0.1, "pass")])
        lines, _, _ = regen(df, allow_growth=True)
        assert float(f"{lines[0]['budget']:.6g}") == v


# ------------------------------------------------------------------------------ gate

def _gate_df(values, status="pass", budget=0.5):
    return pd.DataFrame([{"case_id": f"c{i}", "impl": "torch", "output": "y", "reference": "exact",
                          "budget_metric": "ulp", "max_ulp": v, "max_scaled_err": 0.0, "budget": budget,
                          "status": status, "label": f"case {i}", "reason": ""}
                         for i, v in enumerate(values)])


def test_apply_baseline():
    out = apply_baseline(_gate_df([0.4, 0.01, 0.1, 0.2]), _gate_df([0.1, 0.0, 0.3, 0.2]))
    assert out["status"].tolist() == ["fail", "pass", "pass", "pass"]
    assert out["regressed"].tolist() == [True, False, False, False]
    assert out.loc[0, "reason"].startswith("regressed")
    assert out["baseline_value"].tolist() == [0.1, 0.0, 0.3, 0.2]


def test_apply_baseline_zero_floor():
    # baseline 0: 25 % of the budget is allowed on top, not 25 % of 0
    assert apply_baseline(_gate_df([0.12]), _gate_df([0.0]))["status"].tolist() == ["pass"]
    assert apply_baseline(_gate_df([0.13]), _gate_df([0.0]))["status"].tolist() == ["fail"]


def test_apply_baseline_twice_does_not_stack():
    once = apply_baseline(_gate_df([0.4]), _gate_df([0.1]))
    assert once["status"].tolist() == ["fail"]
    again = apply_baseline(once, _gate_df([0.39]))          # a newer baseline: the old verdict is replaced
    assert again["status"].tolist() == ["pass"] and again["reason"].tolist() == [""]


def test_apply_baseline_missing_rows_and_existing_fails():
    now = _gate_df([0.45, 0.45])
    out = apply_baseline(now, _gate_df([0.1]))              # c1 has no baseline row: no regression
    assert out["status"].tolist() == ["fail", "pass"]
    out = apply_baseline(_gate_df([0.9], status="fail"), _gate_df([0.1]))
    assert out["status"].tolist() == ["fail"] and out["regressed"].tolist() == [False]


def test_apply_baseline_with_csv_loaded_frames(tmp_path):
    from harness.reports.rundir import read_csv
    p = tmp_path / "r.csv"
    _gate_df([0.1]).to_csv(p, index=False)
    base = read_csv(p)
    _gate_df([0.45]).to_csv(p, index=False)
    out = apply_baseline(read_csv(p), base)
    assert out["status"].tolist() == ["fail"] and "regressed" in out.loc[0, "reason"]


def test_verdict():
    assert verdict(pd.DataFrame())[0] == 1
    code, lines = verdict(_gate_df([0.1, 0.2]))
    assert code == 0 and lines[0] == "harness: 2 pass, 0 fail, 0 error, 0 skip"
    df = _gate_df([0.1, 0.2, 0.3, 0.4])
    df.loc[1, "status"], df.loc[1, "reason"] = "fail", "too big"
    df.loc[2, "status"], df.loc[2, "reason"] = "error", "raised"
    df.loc[3, "status"], df.loc[3, "reason"] = "skip", "unsupported"
    code, lines = verdict(df)
    assert code == 1 and lines[0] == "harness: 1 pass, 1 fail, 1 error, 1 skip"
    assert any("FAIL" in ln and "too big" in ln for ln in lines)
    assert any("ERROR" in ln and "raised" in ln for ln in lines)
    assert verdict(df[df["status"].isin(["pass", "skip"])])[0] == 0        # skips are neither
    # an implementation that skips every case verified nothing: it does not pass
    skips = df[df["status"] == "skip"]
    code, lines = verdict(skips)
    assert code == 1 and lines[-1] == "harness: torch: every case skipped, no check measured: nothing was verified"
    other = pd.concat([df[df["status"] == "pass"], skips.assign(impl="lazy")])
    code, lines = verdict(other)
    assert code == 1 and "harness: lazy: every case skipped" in lines[-1]


def test_each_pairs_most_severe_check_is_listed_first():
    """A marginal exact-reference failure does not hide a model reference far over its budget, nor
    an unmeasured failure; each pair's worst check comes before any pair's second."""
    rows = [("a", "exact", 1.01, 1.0, "over_budget"), ("a", "model:chain", 3.0, 0.5, "over_budget"),
            ("b", "exact", 2.0, 1.0, "over_budget"), ("b", "model:chain", 0.75, 0.5, "over_budget"),
            ("c", "exact", 0.1, 1.0, "not_repeatable"), ("c", "model:chain", float("nan"), 0.5, "contract")]
    df = pd.DataFrame([{"case_id": c, "impl": "k", "output": "y", "reference": ref, "budget_metric": "ulp",
                        "max_ulp": v, "budget": b, "status": "fail", "fail_kind": kind, "label": c, "reason": kind}
                       for c, ref, v, b, kind in rows])
    code, lines = verdict(df)
    shown = [ln.split()[2] + " " + ln.split()[5].rstrip(":") for ln in lines[1:]]
    assert code == 1 and shown == ["a model:chain", "b exact", "c model:chain", "a exact", "b model:chain",
                                   "c exact"]
    tie = df.assign(max_ulp=[1.0, 0.5, 0.2, 0.1, 0.1, 0.1], status=["fail", "fail"] + ["pass"] * 4)
    assert verdict(tie)[1][1].split()[5] == "model:chain:"          # as far over: the model reference first
