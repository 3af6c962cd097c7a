"""ULP error (glibc / Zimmermann): |computed - ref| / ulp(ref) in the output's format, ulp from
references.formats.ulp, computed once in `distance` (the smallest subnormal in the subnormal range;
a value just below a power of two gets its own binade's finer ulp). One correct rounding costs at most half an ULP, also across a
binade: distance to the interval <= ulp/2 of the nearest point."""
from harness.references.metrics import Metric, register

ULP = register(Metric("ulp", "max_ulp", "mean_ulp", 0.5, lambda d: d.dist / d.ulp, "|c - ref| / ulp(ref)"))
