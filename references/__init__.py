"""The trusted core (installed as harness.references): formats and correct rounding, the closed
forms of gated RMSNorm written once (closed_forms) and evaluated exactly in float64 (exact), in
mpmath (mp, certify) and on intervals for each rounding model (models), the metrics, the golden
store, and the accelerated passes of the same work (accel). The bottom layer: it imports nothing
from the rest of the harness."""


def package_version() -> str:
    """The installed harness's version (its one record is pyproject.toml)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("gated-rmsnorm-harness")
    except PackageNotFoundError:
        return "unknown"
