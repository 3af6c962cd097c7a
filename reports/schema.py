"""The results.csv schema (SPEC §5 and what replay, the reports and the gate need). One row per
(case, implementation, output, reference); every row carries `schema_version`. Bump SCHEMA_VERSION
when a column changes meaning; the metric columns come from the metric registry
(harness.references.metrics), so a new metric adds its own."""
from __future__ import annotations

from harness.references.metrics import registry

# 2: skip rows, op variants, dy_dist, every metric vs the model in ULP, timings
# 3: math (the declared math class); fail_kind, the reference's kind, model and math class, what ran
#    (impl_spec, impl_hash), inputs_modified, notes, the first differing element of a later call
# 4: gpu_seconds and gpu_method (the GPU time of a forward + backward); floor_fraction from the GPU
#    time; impl_seconds is the host-inclusive wall time on every device (it was CUDA events on a GPU);
#    the output y_infer (y on the inference path); forward-only implementations' backward skip rows
SCHEMA_VERSION = 4
# The `output` column's values: the op's four outputs (references.exact.OUTPUTS) and y_infer, the y of
# the forward under torch.inference_mode() (its torch.no_grad() call must give the same bits), which
# is measured against y's references with y's budgets (the budget keys name `y`).
INFERENCE_OUTPUT = "y_infer"
CHECKED_OUTPUTS = ("y", INFERENCE_OUTPUT, "dx", "dgate", "dweight")
BACKWARD_OUTPUTS = ("dx", "dgate", "dweight")
# a forward-only implementation's backward rows: `skip`, with this reason
FORWARD_ONLY = "forward-only implementation (factory.backward = False)"


def reference_output(output: str) -> str:
    """The op output whose references and budgets a checked output is measured against."""
    return "y" if output == INFERENCE_OUTPUT else output

_SPEC = (
    "case_id", "impl", "rounding", "device", "dtype", "gate_dtype", "weight_dtype", "shape",
    "zero_centered_gamma", "eps", "gate_dist", "output", "reference", "max_ulp", "mean_ulp",
    "max_abs_err", "max_rel_err", "max_scaled_err", "budget_metric", "budget", "status",
    "group_size", "norm_before_gate", "activation", "math", "fail_kind",
)
_CASE = ("label", "regime", "act_dtype", "out_dtype", "hidden", "tokens", "x_dist", "gamma_dist", "dy_dist",
         "seed")
_DETAIL = ("p99_ulp", "count_over", "n_elements", "cr_mismatch", "certified", "uncertified",
           "worst_index", "worst_got", "worst_ref", "worst_inputs")
_VERDICT = ("reference_kind", "reference_model", "reference_math", "budget_source", "regressed", "baseline_value",
            "reason", "replay")
_RUN = ("suite", "harness_version", "impl_spec", "impl_hash", "pair_seconds", "impl_seconds", "gpu_seconds",
        "gpu_method", "bytes_moved", "floor_fraction", "repeatable", "differing_elements", "differing_index",
        "differing_first", "differing_later", "repeat_error", "inputs_modified", "notes", "schema_version")

STATUSES = ("pass", "fail", "error", "skip")
# Text columns stay text when read back: a case id such as "060486302023" is not a number, and an
# implementation called "NA" or "None" is a name, not a missing value.
TEXT_COLUMNS = ("case_id", "impl", "rounding", "device", "dtype", "gate_dtype", "weight_dtype", "shape",
                "gate_dist", "output", "reference", "budget_metric", "status", "label", "regime", "act_dtype",
                "out_dtype", "x_dist", "gamma_dist", "dy_dist", "worst_index", "worst_inputs", "budget_source",
                "reason", "replay", "suite", "harness_version", "math", "activation", "fail_kind", "reference_kind",
                "reference_model", "reference_math", "impl_spec", "impl_hash", "differing_index", "repeat_error",
                "inputs_modified", "notes", "gpu_method")
INT_COLUMNS = ("cr_mismatch", "certified", "uncertified", "count_over", "n_elements", "hidden", "tokens", "seed",
               "group_size", "differing_elements", "bytes_moved", "schema_version")
_NUMBERS = ("eps", "budget", "p99_ulp", "worst_got", "worst_ref", "baseline_value", "pair_seconds", "impl_seconds",
            "gpu_seconds", "floor_fraction")
REQUIRED = ("case_id", "impl", "output", "reference", "status")
BLANK_NUMBER = ("", "nan", "NaN", "-nan")          # what a blank or missing number reads as
KEY = ("case_id", "impl", "output", "reference")      # one row per key in a run


def metric_columns() -> tuple[str, ...]:
    cols = []
    for m in registry().values():
        cols += [m.column] + ([m.mean_column] if m.mean_column else [])
    return tuple(cols)


def columns() -> tuple[str, ...]:
    """Every column, in file order: SPEC §5's first, then the case, every metric's, the detail."""
    out = list(_SPEC)
    for c in _CASE + metric_columns() + _DETAIL + _VERDICT + _RUN:
        if c not in out:
            out.append(c)
    return tuple(out)


def number_columns() -> tuple[str, ...]:
    """The columns that hold numbers (blank where not measured): read back, any other text there is
    a file that is not what this harness wrote."""
    return metric_columns() + _NUMBERS + INT_COLUMNS


def missing_columns(df, needed=None) -> list[str]:
    """The columns of `needed` (default: every column this harness writes) that `df` lacks, in order:
    what a reader about to use them names instead of failing on the first (a KeyError, exit 3)."""
    return [c for c in (columns() if needed is None else needed) if c not in df.columns]


def gated_columns(df) -> list[str]:
    """The metric columns the rows' `budget_metric` names (those of registered metrics), sorted: what
    a check's budget is held against."""
    if "budget_metric" not in df.columns:
        return []
    metrics = registry()
    return sorted({metrics[m].column for m in df["budget_metric"].dropna().unique() if m in metrics})
