"""Relative error |computed - ref| / |ref| (0 where both are 0; reported, gateable by a budget file)."""
import torch

from harness.references.metrics import Metric, register

RELATIVE = register(Metric("rel", "max_rel_err", None, 0.0,
                           lambda d: torch.where(d.dist == 0, torch.zeros_like(d.dist), d.dist / d.ref.abs()),
                           "|c - ref| / |ref|"))
