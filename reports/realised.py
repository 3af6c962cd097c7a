"""Which rounding model and math class an implementation realises, from its rows against model
references: the one home of the rule `harness identify` prints and the report's section shows.

A model reference is a model at a math class (results.csv's `reference_model`, `reference_math`;
identify measures every built-in model at every class). A (model, class) fits an output (of an
output dtype) when every measured check against it passed; an implementation realises the (model, class) pairs that fit all its outputs, and identify names the
least permissive class at which any model does (references.mathclass.CLASSES' order)."""
from __future__ import annotations

import pandas as pd

from harness.references.mathclass import CLASSES
from harness.reports.schema import INFERENCE_OUTPUT
from harness.reports.summary import sort_keys

RANK = {c.label: k for k, c in enumerate(CLASSES)}


def model_fits(df: pd.DataFrame) -> pd.DataFrame:
    """Per (impl, activation, out_dtype, output, model, math): checks, passed, ok — from the
    pass/fail rows against model references (errors and skips measure nothing), by the reference's
    model and math class columns. The gate activation is its own key: an implementation of both
    realises one model only if it fits both."""
    m = df[(df["reference_kind"].astype(str) == "model") & df["status"].isin(["pass", "fail"])]
    act = m["activation"].astype(object).where(m["activation"].notna() & (m["activation"].astype(str) != ""),
                                               "silu") if "activation" in m.columns else "silu"
    m = m.assign(model=m["reference_model"].astype(str), math=m["reference_math"].astype(str),
                 activation=act, _pass=m["status"] == "pass")
    fit = m.groupby(["impl", "activation", "out_dtype", "output", "model", "math"], sort=False).agg(
        checks=("_pass", "size"), passed=("_pass", "sum")).reset_index()
    return fit.assign(ok=fit["checks"] == fit["passed"])


def output_label(activation: str, output: str) -> str:
    """An output as identify and the report name it: `y`, or `y (sigmoid)` for another activation."""
    return output if activation == "silu" else f"{output} ({activation})"


def least_class(labels) -> str:
    """The least permissive of these math class labels (unknown ones last)."""
    return min(labels, key=lambda c: (RANK.get(c, len(RANK)), c))


def realised(fit: pd.DataFrame) -> tuple[list[str], str, list[str]]:
    """From one implementation's fits: the models that fit every output at the least permissive
    class at which any does, that class, and the outputs ("dtype output") that no (model, class)
    fits."""
    whole = fit.groupby(["model", "math"], sort=True)["ok"].all()
    whole = whole[whole]
    per = fit.groupby(["activation", "out_dtype", "output"], sort=False)["ok"].any()
    none = [f"{dt} {output_label(act, out)}" for (act, dt, out), ok in per.items() if not ok]
    if whole.empty:
        return [], "", none
    best = least_class({mc for _, mc in whole.index})
    return sorted(name for name, mc in whole.index if mc == best), best, none


def by_output(fit: pd.DataFrame) -> dict[tuple[str, str, str], list]:
    """One implementation's fits per output, (activation, out_dtype, output) -> its rows (named
    tuples of model_fits' columns), outputs in the report's order (out dtype, then output): what
    identify prints and the report's models table shows, a line or row per output. Plain tuples:
    a frame grouped, then filtered per model and cell, was most of the report's table time."""
    groups: dict[tuple[str, str, str], list] = {}
    for r in sort_keys(fit, ["out_dtype", "output"]).itertuples(index=False):
        groups.setdefault((r.activation, r.out_dtype, r.output), []).append(r)
    return groups


def within(fits) -> str:
    """One output's fits (by_output's rows) as text: each model that fits at some class, at its
    least one."""
    classes: dict[str, list[str]] = {}
    for r in fits:
        if r.ok:
            classes.setdefault(r.model, []).append(r.math)
    if not classes:
        return "none"
    return ", ".join(f"{name} ({least_class(mcs)})" for name, mcs in sorted(classes.items()))


FORWARD = {"y", INFERENCE_OUTPUT}


def verdict_line(impl: str, fit: pd.DataFrame, declared: str = "", declared_math: str = "") -> str:
    """`IMPL realises MODEL, CLASS math`, or `IMPL realises no single declared model: ...` (SPEC §4);
    where no backward output was measured (a forward-only implementation), the line says that the
    model was named from y alone: a rounding model's backward points were not seen."""
    models, mc, none = realised(fit)
    if models:
        line = f"{impl} realises {' = '.join(models)}" + \
            (" (the models coincide on these cases)" if len(models) > 1 else "") + f", {mc} math"
        if set(fit["output"]) <= FORWARD:
            line += " (from y alone: no backward output was measured)"
        if declared and (declared not in models or (declared_math and declared_math != mc)):
            line += f"; it declares {declared}" + (f", {declared_math} math" if declared_math else "")
        return line
    return f"{impl} realises no single declared model: " + \
        (f"{', '.join(none)} fit none" if none else "each output fits some model, no one model fits all")
