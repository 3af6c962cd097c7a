"""Absolute error |computed - ref| (reported; gate it with a budget file line of metric `abs`)."""
from harness.references.metrics import Metric, register

ABSOLUTE = register(Metric("abs", "max_abs_err", None, 0.0, lambda d: d.dist, "|c - ref|"))
