"""Scaled error: |computed - ref| / (u * gauge + min_subnormal / 2), u = 2**-p of the output's format,
the gauge the output's formula on absolute values (references.exact). It stays meaningful where the
value cancels to ~0 (dx, dweight, dgate near silu's stationary point), where the ULP error is
unbounded for a correct implementation; min_subnormal/2 is the underflow term of one rounding, so
a single correct rounding scores <= 1 even among subnormals."""
import torch

from harness.references.metrics import Metric, register


def _scaled(d):
    den = d.fmt.u * d.gauge + d.fmt.min_subnormal / 2
    return torch.where(d.dist == 0, torch.zeros_like(d.dist), d.dist / den)


SCALED = register(Metric("scaled", "max_scaled_err", "mean_scaled_err", 1.0, _scaled,
                         "|c - ref| / (u gauge + min_subnormal/2)"))
