"""The result rows of one (case, implementation) pair: one per (output, reference), in the
results.csv schema (harness.reports.schema). Returns data; formatting belongs to the reports."""
from __future__ import annotations

from harness.analysis.compare import compare
from harness.analysis.explain import explain
from harness.budgets import default_budget, lookup
from harness.cases.case import Case
from harness.cases.generate import act_format
from harness.execute import Outcome
from harness.impls.base import Implementation
from harness.references.bundle import CaseReferences
from harness.references.exact import OUTPUTS
from harness.references.formats import fmt_of
from harness.references.metrics import gated_metric, registry
from harness.references.models import promoted_format

REFERENCE_KINDS = ("exact", "model")


def base_row(case: Case, impl: Implementation, device: str, act_name: str) -> dict:
    return {
        "case_id": case.case_id, "label": case.label, "regime": case.regime,
        "impl": impl.name, "rounding": impl.rounding.name, "device": device,
        "dtype": case.dtype, "gate_dtype": case.gate_dtype, "weight_dtype": case.weight_dtype,
        "act_dtype": act_name, "shape": "x".join(map(str, case.shape)), "hidden": case.hidden,
        "tokens": case.tokens, "zero_centered_gamma": case.zero_centered_gamma, "eps": case.eps,
        "x_dist": case.x_dist, "gate_dist": case.gate_dist, "gamma_dist": case.gamma_dist,
        "dy_dist": case.dy_dist, "seed": case.seed, "group_size": case.group,
        "norm_before_gate": case.norm_before_gate, "activation": case.activation, "math": impl.math.label,
    }


def out_format_name(case: Case, act_name: str, output: str) -> str:
    return {"y": act_name, "dx": case.dtype, "dgate": case.gate_dtype, "dweight": case.weight_dtype}[output]


def references_of(impl: Implementation, models=()) -> list[tuple[str, object, object]]:
    """(reference name, rounding model, math class) of every check of a pair: the exact value, the
    declared model, and the other models asked for (harness identify measures against every built-in
    at every math class: `MODEL@CLASS`, named `model:MODEL@CLASS` where the class is not the
    implementation's own)."""
    from harness.references.mathclass import split_model_key
    from harness.references.models import resolve
    out = [("exact", impl.rounding, impl.math), (f"model:{impl.rounding.name}", impl.rounding, impl.math)]
    for m in models:
        name, mc = split_model_key(m) if isinstance(m, str) else (m, None)
        model, mc = resolve(name), mc or impl.math
        if (model.name, mc) != (impl.rounding.name, impl.math):
            out.append((f"model:{model.name}" + ("" if mc == impl.math else f"@{mc.label}"), model, mc))
    return out


def status_rows(case, impl, device, act_name, status: str, reason: str, models=()) -> list[dict]:
    """Rows carrying no measurement: `error` (the implementation raised, died, hung) or `skip`."""
    return [{**base_row(case, impl, device, act_name), "output": out,
             "out_dtype": out_format_name(case, act_name, out), "reference": ref,
             "budget_metric": gated_metric(out, ref), "status": status, "reason": reason}
            for out in OUTPUTS for ref, _, _ in references_of(impl, models)]


def budget_for(case: Case, impl: Implementation, out: str, kind: str, fmt, act, overrides, override_path):
    d = default_budget(out, kind, impl.rounding, fmt, act, promoted_format(fmt_of(case.weight_dtype), act),
                       case.group, case.tokens, case.norm_before_gate, case.regime, impl.math)
    return lookup(list(overrides), d, impl.name, impl.rounding.name, fmt.name, out, kind, case.regime,
                  override_path)


def interval(refs: CaseReferences, reference: str, model, act, out: str, mc):
    """(lo, hi, gauge) of the reference a check measures against (`model`, `mc`: its rounding model
    and math class; the exact value is widened by their absolute and per-element allowance)."""
    return refs.exact_for(model, act, out, mc) if reference == "exact" else refs.model(model, act, out, mc)


def check(case: Case, impl: Implementation, device: str, refs: CaseReferences, outcome: Outcome,
          overrides=(), override_path: str = "", models=()) -> list[dict]:
    act = act_format(case, impl.act_follows)
    early = empty_outcome_rows(case, impl, device, act.name, outcome, models)
    if early is not None:
        return early
    inp = refs.inputs
    metrics = registry()
    rows = []
    for out in OUTPUTS:
        fmt = fmt_of(out_format_name(case, act.name, out))
        for reference, model, mc in references_of(impl, models):
            kind = reference.split(":")[0]
            budget = budget_for(case, impl, out, kind, fmt, act, overrides, override_path)
            row = {**base_row(case, impl, device, act.name), "output": out, "out_dtype": fmt.name,
                   "reference": reference, "budget_metric": budget.metric,
                   "budget": budget.value, "budget_source": budget.source}
            if out in outcome.problems:
                rows.append({**row, "status": "fail", "reason": outcome.problems[out]})
                continue
            lo, hi, gauge = interval(refs, reference, model, act, out, mc)
            c = compare(outcome.outputs[out], lo, hi, gauge, fmt, budget.metric, budget.value, out, row["reference"],
                        exact=refs.values[out] if kind == "model" else None)
            red = c.reduced
            for name, m in metrics.items():
                row[m.column] = red.maxima[name]
                if m.mean_column:
                    row[m.mean_column] = red.means[name]
            worst = explain(c, inp, out, lo, hi, refs.values[out], None, [red.worst_flat], fmt.dtype)
            if worst:
                w = worst[0]
                row.update(worst_index=",".join(map(str, w.index)), worst_got=w.got,
                           worst_ref=float(c.distance.ref.reshape(-1)[red.worst_flat]), worst_inputs=w.inputs)
            row.update(p99_ulp=red.p99_ulp, count_over=red.count_over, n_elements=c.distance.computed.numel())
            if kind == "exact":
                cert = refs.certified(out, fmt)
                got = c.distance.computed
                golden = cert.golden.to(got.device)
                row.update(cr_mismatch=int((got != golden).sum() - (got.isnan() & golden.isnan()).sum()),
                           certified=cert.certified, uncertified=cert.uncertified)
            rows.append({**row, "status": c.status, "reason": c.reason})
    return rows


def empty_outcome_rows(case, impl, device, act_name, outcome: Outcome, models=()) -> list[dict] | None:
    """Rows for an outcome that needs no references (a skip or an error), else None."""
    if outcome.skip is not None:
        return status_rows(case, impl, device, act_name, "skip", outcome.skip, models)
    if outcome.error:
        return status_rows(case, impl, device, act_name, "error", outcome.error, models)
    return None

