"""The results.csv schema (SPEC section 5 plus what replay and the report need). One row per
(case, implementation, output, reference). Bump SCHEMA_VERSION when a column changes meaning."""
SCHEMA_VERSION = 1

COLUMNS = (
    # SPEC section 5, in its order
    "case_id", "impl", "rounding", "device", "dtype", "gate_dtype", "weight_dtype", "shape",
    "zero_centered_gamma", "eps", "gate_dist", "output", "reference", "max_ulp", "mean_ulp",
    "max_abs_err", "max_rel_err", "max_scaled_err", "budget_metric", "budget", "status",
    # more about the case
    "label", "regime", "act_dtype", "out_dtype", "hidden", "tokens", "x_dist", "gamma_dist", "seed",
    # more about the errors
    "p99_ulp", "mean_scaled_err", "count_over", "n_elements", "cr_mismatch", "certified",
    "uncertified", "worst_index", "worst_got", "worst_ref", "worst_inputs",
    # verdict detail
    "budget_source", "regressed", "baseline_value", "reason", "replay",
)
STATUSES = ("pass", "fail", "error")
