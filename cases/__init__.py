"""Test cases: frozen `Case` values, the input distributions they name, suite files (TOML),
and hypothesis strategies. Public surface listed in __all__."""
from harness.cases.case import Case
from harness.cases.suite import load_suite, list_suites


def __getattr__(name: str):
    # generate imports torch: only where it is used, so that listing and loading suites
    # (`harness cases`) do not
    if name == "generate":
        from harness.cases.generate import generate
        return generate
    raise AttributeError(f"module 'harness.cases' has no attribute {name!r}")


__all__ = ["Case", "generate", "load_suite", "list_suites"]
