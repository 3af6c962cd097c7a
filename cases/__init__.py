"""Test cases: frozen `Case` values, the input distributions they name, suite files (TOML),
and hypothesis strategies. Public surface listed in __all__."""
from harness.cases.case import Case
from harness.cases.suite import load_suite, list_suites

# harness.cases.generate (the inputs of a case) is a module of its own, imported where used: it
# imports torch, which listing and loading suites (`harness cases`) do not need.
__all__ = ["Case", "load_suite", "list_suites"]
