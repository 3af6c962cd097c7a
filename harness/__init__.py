"""Numerical verification harness for gated RMSNorm (RMSNorm -> SiLUGate).

The public surface (SPEC §6), loaded on first use so that `import harness` stays light:
verify, assert_verified, Results, Unsupported, strategies."""
from __future__ import annotations

import importlib

__all__ = ["verify", "assert_verified", "Results", "Unsupported", "strategies", "__version__"]

_LAZY = {"verify": "harness.api", "assert_verified": "harness.api", "Results": "harness.api",
         "Unsupported": "harness.references.errors"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name == "strategies":
        return importlib.import_module("harness.cases.strategies")
    if name == "__version__":
        from harness.references import package_version
        return package_version()
    raise AttributeError(f"module 'harness' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
