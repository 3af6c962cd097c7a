"""Test cases: frozen `Case` values, the input distributions they name, suite files (TOML),
and hypothesis strategies. Public surface listed in __all__."""
from harness.cases.case import Case
from harness.cases.generate import generate
from harness.cases.suite import load_suite, list_suites

__all__ = ["Case", "generate", "load_suite", "list_suites"]
