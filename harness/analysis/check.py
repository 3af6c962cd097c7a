"""Compare one implementation's outputs on one case with every reference: one result row per
(output, reference), in the results.csv schema (reports/schema.py). Returns data; printing and
formatting belong to the CLI and reports."""
from __future__ import annotations

import math

import torch

from harness.cases.case import Case
from harness.analysis.metrics import element_errors, reduce
from harness.budgets import METRIC, default_budget, lookup
from harness.execute import Outcome
from harness.impls.base import Implementation
from harness.references.bundle import CaseReferences
from harness.references.exact import OUTPUTS
from harness.references.formats import fmt_of, round_to

REFERENCES = ("exact", "model")


def _hex(t: torch.Tensor) -> str:
    """Exact bits of one element: hex of the dtype's integer view, and the value."""
    bits = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16,
            torch.float64: torch.int64}[t.dtype]
    width = {torch.int32: 8, torch.int16: 4, torch.int64: 16}[bits]
    raw = int(t.reshape(1).view(bits)[0]) & ((1 << (4 * width)) - 1)
    return f"0x{raw:0{width}x}"


def worst_inputs(inp, output: str, index: tuple[int, ...]) -> str:
    if output == "dweight" or not index:
        j = index[-1] if index else 0
        return f"w[{j}]={_hex(inp.weight[j])}"
    x, g, dy = inp.x[index], inp.gate[index], inp.dy[index]
    return (f"x{list(index)}={_hex(x)} gate={_hex(g)} w[{index[-1]}]={_hex(inp.weight[index[-1]])} "
            f"dy={_hex(dy)}")


def base_row(case: Case, impl: Implementation, device: str, act_name: str) -> dict:
    return {
        "case_id": case.case_id, "label": case.label, "regime": case.regime,
        "impl": impl.name, "rounding": impl.rounding, "device": device,
        "dtype": case.dtype, "gate_dtype": case.gate_dtype, "weight_dtype": case.weight_dtype,
        "act_dtype": act_name, "shape": "x".join(map(str, case.shape)), "hidden": case.hidden,
        "tokens": case.tokens, "zero_centered_gamma": case.zero_centered_gamma, "eps": case.eps,
        "x_dist": case.x_dist, "gate_dist": case.gate_dist, "gamma_dist": case.gamma_dist,
        "seed": case.seed,
    }


def out_format_name(case: Case, act_name: str, output: str) -> str:
    return {"y": act_name, "dx": case.dtype, "dgate": case.gate_dtype, "dweight": case.weight_dtype}[output]


def error_rows(case, impl, device, act_name, reason: str, status: str = "error") -> list[dict]:
    rows = []
    for out in OUTPUTS:
        for ref in REFERENCES:
            rows.append({**base_row(case, impl, device, act_name), "output": out,
                         "out_dtype": out_format_name(case, act_name, out), "reference": ref,
                         "budget_metric": METRIC[out], "status": status, "reason": reason})
    return rows


def check(case: Case, impl: Implementation, device: str, refs: CaseReferences, outcome: Outcome,
          overrides=(), override_path: str = "") -> list[dict]:
    act = fmt_of(case.weight_dtype if impl.act_follows == "weight" else case.dtype)
    if outcome.error:
        return error_rows(case, impl, device, act.name, outcome.error)
    inp = refs.inputs
    rows = []
    for out in OUTPUTS:
        fmt = fmt_of(out_format_name(case, act.name, out))
        for ref_name in REFERENCES:
            row = {**base_row(case, impl, device, act.name), "output": out, "out_dtype": fmt.name,
                   "reference": ref_name if ref_name == "exact" else f"model:{impl.rounding}"}
            budget = lookup(list(overrides), default_budget(out, ref_name, impl.rounding, fmt, act, inp, case.regime),
                            impl.name, impl.rounding, fmt.name, out, ref_name, case.regime, override_path)
            row.update(budget_metric=budget.metric, budget=budget.value, budget_source=budget.source)
            if out in outcome.problems:
                rows.append({**row, "status": "fail", "reason": outcome.problems[out]})
                continue
            got = outcome.outputs[out]
            lo, hi, gauge = (refs.exact_for(impl.rounding, act, out) if ref_name == "exact"
                             else refs.model(impl.rounding, act, out))
            got = got.to(lo.device)
            err = element_errors(got, lo, hi, gauge, fmt)
            red = reduce(err, budget.metric, budget.value)
            idx = red.worst_index
            row.update(
                max_ulp=red.max_ulp, mean_ulp=red.mean_ulp, p99_ulp=red.p99_ulp,
                max_abs_err=red.max_abs_err, max_rel_err=red.max_rel_err,
                max_scaled_err=red.max_scaled_err, mean_scaled_err=red.mean_scaled_err,
                count_over=red.count_over, n_elements=got.numel(),
                worst_index=",".join(map(str, idx)),
                worst_got=float(got.reshape(-1)[red.worst_flat]),
                worst_ref=float(err.ref.reshape(-1)[red.worst_flat]),
                worst_inputs=worst_inputs(inp, out, idx),
            )
            if ref_name == "exact":
                cert = refs.certified(out, fmt)
                row.update(cr_mismatch=int((got.to(torch.float64) != cert.golden).sum()
                                           - ((got.isnan()) & cert.golden.isnan()).sum()),
                           certified=cert.certified, uncertified=cert.uncertified)
            worst = red.worst_metric
            # non-finite output where every value the reference allows rounds to a finite one
            # (the roundings only where something is non-finite: the common case skips them)
            nonfinite = ~torch.isfinite(got.to(torch.float64))
            if bool(nonfinite.any()):
                nonfinite &= torch.isfinite(round_to(lo, fmt)) & torch.isfinite(round_to(hi, fmt))
            if bool(nonfinite.any()):
                k = int(nonfinite.reshape(-1).nonzero()[0])
                status, reason = "fail", f"{out} non-finite ({float(got.reshape(-1)[k])}) where the reference is finite"
            elif math.isnan(worst) or not worst <= budget.value:
                status = "fail"
                reason = (f"{out} {budget.metric} error {worst:.4g} > budget {budget.value:.4g} "
                          f"at [{row['worst_index']}] vs {row['reference']}")
            else:
                status, reason = "pass", ""
            rows.append({**row, "status": status, "reason": reason})
    return rows

