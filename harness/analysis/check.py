"""The checks of one (case, implementation) pair, typed (harness.analysis.result): one per (output,
reference), each compared (compare), budgeted and, where it fails, given a Finding; and the pair's
rows in the results.csv schema (harness.reports.schema), their reasons worded by explain. Returns
data; formatting belongs to the reports."""
from __future__ import annotations

import math

import torch

from harness.analysis.compare import compare, same_bits
from harness.analysis.explain import explain, reason, worst_flats
from harness.analysis.result import Check, Finding, Measurement, PairResult, Reference, Repeat
from harness.budgets import default_budget, lookup
from harness.cases.case import Case
from harness.cases.generate import act_format
from harness.impls.base import Implementation
from harness.references import package_version
from harness.references.bundle import CaseReferences
from harness.references.formats import fmt_of
from harness.references.metrics import registry
from harness.references.models import promoted_format
from harness.reports.schema import (BACKWARD_OUTPUTS, CHECKED_OUTPUTS, FORWARD_ONLY, INFERENCE_OUTPUT,
                                    reference_output)

REFERENCE_KINDS = ("exact", "model")
VERSION = package_version()


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
    output = reference_output(output)
    return {"y": act_name, "dx": case.dtype, "dgate": case.gate_dtype, "dweight": case.weight_dtype}[output]


def references_of(impl: Implementation, models=()) -> list[Reference]:
    """Every reference a pair is checked against: the exact value and the declared model, at the
    declared math class, and the other (model, math class) pairs asked for (harness identify
    measures against every built-in model at every class; a model given alone is at the declared
    class). A reference's label is `model:NAME`, `model:NAME@CLASS` where the class is not the
    implementation's own."""
    from harness.references.models import resolve
    out = [Reference("exact", impl.rounding, impl.math, "exact"),
           Reference("model", impl.rounding, impl.math, f"model:{impl.rounding.name}")]
    for m in models:
        name, mc = m if isinstance(m, tuple) else (m, impl.math)
        model = resolve(name)
        if (model.name, mc) != (impl.rounding.name, impl.math):
            out.append(Reference("model", model, mc,
                                 f"model:{model.name}" + ("" if mc == impl.math else f"@{mc.label}")))
    return out


def unmeasured(case: Case, impl: Implementation, act_name: str, status: str, text: str,
               models=()) -> tuple[Check, ...]:
    """Checks carrying no measurement: `error` (the implementation raised, died, hung) or `skip`."""
    return tuple(Check(out, out_format_name(case, act_name, out), ref, None, status, Finding(status, text=text))
                 for out in CHECKED_OUTPUTS for ref in references_of(impl, models))


def budget_for(case: Case, impl: Implementation, out: str, kind: str, fmt, act, overrides, override_path):
    """The budget of `out` (y_infer's is y's: the same derivation and the same budget file keys)."""
    out = reference_output(out)
    d = default_budget(out, kind, impl.rounding, fmt, act, promoted_format(fmt_of(case.weight_dtype), act),
                       case.group, case.tokens, case.norm_before_gate, case.regime, impl.math)
    return lookup(list(overrides), d, impl.name, impl.rounding.name, fmt.name, out, kind, case.regime,
                  override_path, math=impl.math.label)


def interval(refs: CaseReferences, ref: Reference, act, out: str):
    """(lo, hi, gauge) of the reference a check measures against (the exact value is widened by
    the declared model's and math class's absolute and per-element allowance)."""
    return refs.exact_for(ref.model, act, out, ref.math) if ref.kind == "exact" else \
        refs.model(ref.model, act, out, ref.math)


def repeat_finding(r: Repeat | None) -> Finding | None:
    """Why an output fails for not repeating itself on the same inputs, or None."""
    if r is None or not (r.count or r.error):
        return None
    if r.error:
        return Finding("not_repeatable", text=f"a later call on the same inputs raised {r.error}")
    return Finding("not_repeatable", r.index, r.first, r.later, count=r.count)


def checks(case: Case, impl: Implementation, refs: CaseReferences, outputs: dict[str, torch.Tensor],
           problems: dict[str, Finding], repeats: dict[str, Repeat], overrides=(), override_path: str = "",
           models=(), allow_nondeterministic: bool = False, top: int = 1) -> tuple[Check, ...]:
    """Every check of a pair whose implementation ran: `outputs` (the first call's and y_infer,
    plain tensors), `problems` (findings of the implementation's side, per output), `repeats` (the
    later calls' differences; y_infer's: the no_grad call's against it). A forward-only
    implementation's backward outputs are `skip` checks. y_infer is measured as y is, against y's
    references; where its bits are y's, y's measurement is its measurement (every input of the
    comparison is the same), not computed again. `top`: elements explained per measured check."""
    act = act_format(case, impl.act_follows)
    measured: dict[tuple[str, str], tuple] = {}           # (output, reference label) -> (Measurement, finding)
    same_as_y = INFERENCE_OUTPUT in outputs and "y" in outputs and same_bits(outputs["y"], outputs[INFERENCE_OUTPUT])
    out_checks = []
    for out in CHECKED_OUTPUTS:
        fmt = fmt_of(out_format_name(case, act.name, out))
        for ref in references_of(impl, models):
            budget = budget_for(case, impl, out, ref.kind, fmt, act, overrides, override_path)
            if out in problems:
                f = problems[out]
                out_checks.append(Check(out, fmt.name, ref, budget, "error" if f.kind == "error" else "fail", f))
                continue
            if out not in outputs and out in BACKWARD_OUTPUTS and not impl.backward:
                out_checks.append(Check(out, fmt.name, ref, None, "skip", Finding("skip", text=FORWARD_ONLY)))
                continue
            if out == INFERENCE_OUTPUT and same_as_y and ("y", ref.label) in measured:
                m, finding = measured[("y", ref.label)]
            else:
                m, finding = _measure(case, refs, ref, act, out, outputs[out], fmt, budget, top)
            measured[(out, ref.label)] = (m, finding)
            if finding is None and not allow_nondeterministic:
                finding = repeat_finding(repeats.get(out))
            out_checks.append(Check(out, fmt.name, ref, budget, "pass" if finding is None else "fail", finding,
                                    m, repeats.get(out)))
    return tuple(out_checks)


def _measure(case: Case, refs: CaseReferences, ref: Reference, act, out: str, got: torch.Tensor, fmt, budget,
             top: int) -> tuple[Measurement, Finding | None]:
    """One output against one reference: its Measurement and the comparison's finding (None: within
    budget). `out` may be y_infer: measured against y's reference values."""
    src = reference_output(out)
    metrics = registry()
    lo, hi, gauge = interval(refs, ref, act, src)
    c = compare(got, lo, hi, gauge, fmt, budget.metric, budget.value,
                exact=refs.values[src] if ref.kind == "model" else None)
    red = c.reduced
    golden = refs.certified(src, fmt)
    elements = explain(c, refs.inputs, src, lo, hi, refs.values[src], golden.golden, worst_flats(c, max(top, 1)),
                       fmt.dtype)
    cert = {}
    if ref.kind == "exact":
        computed, gold = c.distance.computed, golden.golden.to(c.distance.computed.device)
        cert = dict(cr_mismatch=int((computed != gold).sum() - (computed.isnan() & gold.isnan()).sum()),
                    certified=golden.certified, uncertified=golden.uncertified)
    m = Measurement({n: red.maxima[n] for n in metrics}, {n: red.means[n] for n in metrics},
                    red.worst_value, red.worst_index,
                    float(c.distance.ref.reshape(-1)[red.worst_flat]) if elements else math.nan,
                    red.p99_ulp, red.count_over, c.distance.computed.numel(), tuple(elements), **cert)
    return m, c.finding


def rows(r: PairResult) -> list[dict]:
    """The pair's results.csv rows, one per check."""
    base = base_row(r.case, r.impl, r.device, r.act_dtype)
    base.update(replay=r.replay, suite=r.suite, harness_version=VERSION, impl_spec=r.impl_spec,
                impl_hash=r.impl_hash, inputs_modified=",".join(r.inputs_modified), notes="; ".join(r.notes),
                pair_seconds=r.pair_seconds)
    metrics = registry()
    out = []
    for c in r.checks:
        row = {**base, "output": c.output, "out_dtype": c.out_dtype, "reference": c.reference.label,
               "reference_kind": c.reference.kind, "reference_model": c.reference.model_name,
               "reference_math": c.reference.math.label,
               "budget_metric": c.budget_metric, "status": c.status, "fail_kind": c.fail_kind,
               "reason": reason(c.output, c.reference.label, c.finding)}
        if c.budget is not None:
            row.update(budget=c.budget.value, budget_source=c.budget.source)
        m = c.measured
        if m is not None:
            for name, metric in metrics.items():
                row[metric.column] = m.maxima[name]
                if metric.mean_column:
                    row[metric.mean_column] = m.means[name]
            row.update(p99_ulp=m.p99_ulp, count_over=m.count_over, n_elements=m.n_elements)
            if m.cr_mismatch is not None:
                row.update(cr_mismatch=m.cr_mismatch, certified=m.certified, uncertified=m.uncertified)
            if m.elements:
                w = m.elements[0]
                row.update(worst_index=",".join(map(str, w.index)), worst_got=w.got, worst_ref=m.worst_ref,
                           worst_inputs=w.inputs)
        if c.repeat is not None and c.status in ("pass", "fail"):
            rp = c.repeat
            row.update(repeatable=not (rp.count or rp.error), differing_elements=rp.count,
                       differing_index=",".join(map(str, rp.index)), differing_first=rp.first,
                       differing_later=rp.later, repeat_error=rp.error)
        if r.speed is not None and c.status in ("pass", "fail"):
            row.update(impl_seconds=r.speed.impl_seconds, gpu_seconds=r.speed.gpu_seconds,
                       gpu_method=r.speed.gpu_method, bytes_moved=r.speed.bytes_moved,
                       floor_fraction=r.speed.floor_fraction)
        out.append(row)
    return out
