"""Budgets (harness/budgets.py) and the verdict / baseline gate (harness/gate.py)."""
from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from harness.budgets import (Budget, Override, REGEN_CAP, default_budget, load_budget_file, lookup,
                             parse_budget_file, regen, write_budget_file)
from harness.references.errors import UsageError
from harness.gate import apply_baseline, verdict
from harness.references.exact import Inputs
from harness.references.formats import fmt_of

U32 = 2.0 ** -24
BF16, FP16, FP32 = fmt_of("bf16"), fmt_of("fp16"), fmt_of("fp32")


def small_inputs(tokens=4, hidden=16):
    x = torch.ones(tokens, hidden, dtype=torch.bfloat16)
    return Inputs(x, x.clone(), torch.ones(hidden, dtype=torch.bfloat16), x.clone(), 1e-5, False)


@pytest.mark.parametrize("rounding", ["chain", "fused"])
def test_default_model_budgets(rounding):
    inp = small_inputs()
    assert default_budget("y", "model", rounding, BF16, BF16, inp) == Budget("ulp", 0.5, "default")
    for out in ("dx", "dgate", "dweight"):
        assert default_budget(out, "model", rounding, BF16, BF16, inp) == Budget("scaled", 1.0, "default")
    # model budgets do not depend on the regime
    assert default_budget("y", "model", rounding, BF16, BF16, inp, "extreme").value == 0.5


def test_default_exact_chain_bf16():
    h, t = 16, 4
    inp = small_inputs(t, h)
    lh, lt = math.log2(h), math.log2(t)
    rho_n = (6 + lh + math.sqrt(h)) * U32
    su = BF16.u
    want = {
        "y": 0.5 + 1 + (rho_n + 8 * U32) / su,
        "dgate": 1.0 + 1 + (rho_n + 12 * U32) / su,
        "dx": 1.0 + 1 + (rho_n + 8 * U32 + (4 + lh + math.sqrt(h)) * U32) / su,
        "dweight": 1.0 + 1 + (rho_n + 8 * U32 + (4 + lt + math.sqrt(t)) * U32) / su,
    }
    for out, v in want.items():
        b = default_budget(out, "exact", "chain", BF16, BF16, inp)
        assert b.value == pytest.approx(v, rel=1e-12), out
        assert b.metric == ("ulp" if out == "y" else "scaled")


def test_default_exact_fused_has_no_intermediate_rounding_term():
    inp = small_inputs()
    chain = default_budget("y", "exact", "chain", BF16, BF16, inp).value
    fused = default_budget("y", "exact", "fused", BF16, BF16, inp).value
    assert chain - fused == pytest.approx(1.0)
    # fp32 gate output with bf16 activations: the n rounding counts act.u / out.u = 2**16
    g = default_budget("dgate", "exact", "chain", FP32, BF16, inp).value
    assert g > 2 ** 16


def test_default_exact_extreme_is_inf():
    inp = small_inputs()
    for out in ("y", "dx", "dgate", "dweight"):
        b = default_budget(out, "exact", "chain", BF16, BF16, inp, "extreme")
        assert b.value == math.inf and b.source.startswith("default")


HEADER = "impl,rounding,dtype,output,reference,regime,metric,budget\n"


def test_parse_good_file():
    text = HEADER + "# a comment\ntorch,chain,bf16,y,exact,normal,ulp,2.5\n*,*,*,dx,*,*,scaled,3\n\n"
    ov = parse_budget_file(text, "b.csv")
    assert ov == [Override("torch", "chain", "bf16", "y", "exact", "normal", "ulp", 2.5),
                  Override("*", "*", "*", "dx", "*", "*", "scaled", 3.0)]


@pytest.mark.parametrize("body,needles", [
    ("impl,rounding,dtype,output\n", ("line 1", "header")),
    (HEADER + "torch,chain,bf16,y,exact,normal,ulp\n", ("line 2", "expected 8 fields, got 7")),
    (HEADER + "torch,chain,bf16,y,exact,normal,ulp,1,extra\n", ("line 2", "got 9")),
    (HEADER + "torch,chain,bf16,dz,exact,normal,ulp,1\n", ("line 2", "output", "dz")),
    (HEADER + "torch,chain,bf16,y,golden,normal,ulp,1\n", ("line 2", "reference", "golden")),
    (HEADER + "torch,chain,bf16,y,exact,normal,abs,1\n", ("line 2", "metric", "abs")),
    (HEADER + "torch,chain,bf16,y,exact,normal,scaled,1\n", ("line 2", "metric", "y is budgeted in ulp")),
    (HEADER + "torch,chain,bf16,dx,exact,normal,ulp,1\n", ("line 2", "metric", "dx is budgeted in scaled")),
    (HEADER + "torch,chain,bf16,y,exact,normal,ulp,lots\n", ("line 2", "budget", "lots")),
    (HEADER + "torch,chain,bf16,y,exact,normal,ulp,-1\n", ("line 2", "budget", ">= 0")),
    (HEADER + "torch,chain,bf16,y,exact,normal,ulp,inf\n", ("line 2", "budget")),
    (HEADER + "torch,chain,bf16,y,exact,normal,ulp,nan\n", ("line 2", "budget")),
    (HEADER + "torch,chain,bf16,y,exact,normal,ulp,1\n*,*,*,y,*,*,ulp,x\n", ("line 3", "budget")),
    ("# only a comment\n", ("empty",)),
])
def test_parse_errors_name_the_line(body, needles):
    with pytest.raises(UsageError) as ei:
        parse_budget_file(body, "my/budgets.csv")
    msg = str(ei.value)
    assert msg.startswith("my/budgets.csv: ")
    for n in needles:
        assert n in msg, (n, msg)


def test_parse_error_line_counts_comments():
    text = "# budgets\n" + HEADER + "\ntorch,chain,bf16,y,exact,normal,ulp,oops\n"
    with pytest.raises(UsageError, match="line 4:"):
        parse_budget_file(text, "b.csv")


def test_load_budget_file(tmp_path):
    with pytest.raises(UsageError, match="not found"):
        load_budget_file(str(tmp_path / "none.csv"))
    f = tmp_path / "b.csv"
    f.write_text(HEADER + "*,*,*,y,*,*,ulp,4\n")
    assert load_budget_file(str(f))[0].budget == 4.0


def test_lookup_specificity():
    ov = parse_budget_file(HEADER + "*,*,*,y,*,*,ulp,4\n"
                                    "torch,*,bf16,y,exact,*,ulp,6\n"
                                    "torch,*,*,y,*,*,ulp,5\n"
                                    "*,*,*,dx,*,*,scaled,9\n", "b.csv")
    d = Budget("ulp", 0.5, "default")
    assert lookup(ov, d, "torch", "chain", "bf16", "y", "exact", "normal", "b.csv") == Budget("ulp", 6.0, "b.csv")
    assert lookup(ov, d, "torch", "chain", "fp16", "y", "exact", "normal", "b.csv").value == 5.0
    assert lookup(ov, d, "other", "chain", "bf16", "y", "exact", "normal", "b.csv").value == 4.0
    assert lookup(ov, d, "other", "chain", "bf16", "dgate", "exact", "normal", "b.csv") == d
    assert lookup([], d, "torch", "chain", "bf16", "y", "exact", "normal") == d


def _results(rows):
    cols = ["impl", "rounding", "out_dtype", "output", "reference", "regime", "budget_metric",
            "max_ulp", "max_scaled_err", "budget", "status"]
    return pd.DataFrame([dict(zip(cols, r)) for r in rows])


def test_regen_rounds_up_grows_and_caps():
    df = _results([
        ("torch", "chain", "bf16", "y", "exact", "normal", "ulp", 1.234, 0.1, 1.0, "fail"),
        ("torch", "chain", "bf16", "y", "exact", "normal", "ulp", 0.9, 0.1, 1.0, "pass"),
        ("torch", "chain", "bf16", "y", "model:chain", "normal", "ulp", 0.4312, 0.1, 0.5, "pass"),
        ("torch", "chain", "bf16", "dx", "exact", "normal", "scaled", 99.0, 12.3, 1.0, "fail"),
        ("torch", "chain", "bf16", "dgate", "exact", "normal", "scaled", 0.0, 50.0, 2.0, "error"),
    ])
    lines, grown, refused = regen(df)
    by = {(ln["output"], ln["reference"]): ln for ln in lines}
    assert set(by) == {("y", "exact"), ("y", "model:chain"), ("dx", "exact")}    # error rows ignored
    assert by[("y", "exact")]["budget"] == pytest.approx(1.3)
    assert by[("y", "model:chain")]["budget"] == pytest.approx(0.44)
    assert by[("dx", "exact")]["budget"] == 1.0                                 # refused: kept old
    assert [(k[3], new, old) for k, new, old in grown] == [("y", pytest.approx(1.3), 1.0)]
    assert [(k[3], new, old) for k, new, old in refused] == [("dx", 13.0, 1.0)]
    assert by[("y", "exact")]["metric"] == "ulp" and by[("dx", "exact")]["metric"] == "scaled"

    lines, grown, refused = regen(df, allow_growth=True)
    by = {(ln["output"], ln["reference"]): ln for ln in lines}
    assert by[("dx", "exact")]["budget"] == 13.0 and not refused
    assert REGEN_CAP == 9.0


def test_regen_refuses_non_finite():
    df = _results([("torch", "chain", "bf16", "y", "exact", "normal", "ulp", math.inf, 0.0, 1.0, "fail")])
    lines, grown, refused = regen(df, allow_growth=True)
    assert lines == [] and len(refused) == 1


def test_regen_file_round_trips(tmp_path):
    df = _results([("torch", "chain", "bf16", "y", "exact", "normal", "ulp", 1.234, 0.1, 1.0, "fail")])
    lines, _, _ = regen(df)
    f = tmp_path / "b.csv"
    write_budget_file(lines, f)
    ov = load_budget_file(str(f))
    assert ov == [Override("torch", "chain", "bf16", "y", "exact", "normal", "ulp", 1.3)]


def test_regen_is_idempotent():
    for v in (0.14, 0.28, 0.56, 1.3, 0.5):
        df = _results([("torch", "chain", "bf16", "y", "exact", "normal", "ulp", v, 0.0, 1.0, "pass")])
        lines, _, _ = regen(df)
        assert float(f"{lines[0]['budget']:.6g}") == v


def _gate_df(values, status="pass", budget=0.5):
    return pd.DataFrame([{"case_id": f"c{i}", "impl": "torch", "output": "y", "reference": "exact",
                          "budget_metric": "ulp", "max_ulp": v, "max_scaled_err": 0.0, "budget": budget,
                          "status": status, "label": f"case {i}", "reason": ""}
                         for i, v in enumerate(values)])


def test_apply_baseline():
    base = _gate_df([0.1, 0.0, 0.3, 0.2])
    now = _gate_df([0.4, 0.01, 0.1, 0.2])
    out = apply_baseline(now, base)
    assert out["status"].tolist() == ["fail", "pass", "pass", "pass"]
    assert out["regressed"].tolist() == [True, False, False, False]
    assert out.loc[0, "reason"].startswith("regressed")
    assert out["baseline_value"].tolist() == [0.1, 0.0, 0.3, 0.2]


def test_apply_baseline_zero_floor():
    # baseline 0: 25 % of the budget is allowed on top, not 25 % of 0
    out = apply_baseline(_gate_df([0.12], budget=0.5), _gate_df([0.0], budget=0.5))
    assert out["status"].tolist() == ["pass"]
    out = apply_baseline(_gate_df([0.13], budget=0.5), _gate_df([0.0], budget=0.5))
    assert out["status"].tolist() == ["fail"]


def test_apply_baseline_scaled_metric_and_missing_rows():
    now = _gate_df([0.0, 0.0])
    now["budget_metric"] = "scaled"
    now["max_scaled_err"] = [0.9, 0.9]
    now["budget"] = 1.0
    base = now.iloc[:1].copy()
    base["max_scaled_err"] = 0.1
    out = apply_baseline(now, base)
    assert out["status"].tolist() == ["fail", "pass"]       # case c1 has no baseline row: no regression


def test_apply_baseline_keeps_existing_fails():
    out = apply_baseline(_gate_df([0.9], status="fail"), _gate_df([0.1]))
    assert out["status"].tolist() == ["fail"] and out["regressed"].tolist() == [False]


def test_apply_baseline_with_csv_loaded_frames(tmp_path):
    """Frames read back from CSV (reason column all-NaN floats)."""
    p = tmp_path / "r.csv"
    _gate_df([0.1]).to_csv(p, index=False)
    base = pd.read_csv(p)
    _gate_df([0.45]).to_csv(p, index=False)
    now = pd.read_csv(p)
    out = apply_baseline(now, base)
    assert out["status"].tolist() == ["fail"] and "regressed" in out.loc[0, "reason"]


def test_verdict():
    assert verdict(pd.DataFrame())[0] == 1
    code, lines = verdict(_gate_df([0.1, 0.2]))
    assert code == 0 and lines[0] == "harness: 2 pass, 0 fail, 0 error"
    df = _gate_df([0.1, 0.2, 0.3])
    df.loc[1, "status"], df.loc[1, "reason"] = "fail", "too big"
    df.loc[2, "status"], df.loc[2, "reason"] = "error", "raised"
    code, lines = verdict(df)
    assert code == 1 and lines[0] == "harness: 1 pass, 1 fail, 1 error"
    assert any("FAIL" in ln and "too big" in ln for ln in lines)
    assert any("ERROR" in ln and "raised" in ln for ln in lines)
