"""Rounding models: where an implementation rounds an intermediate to a low-precision dtype (SPEC §1).

A model is a set of *rounding points*; each point also rounds the gradient flowing back through it:

    mid    the first op's output (norm first: n = xhat * g; gate first: h = x * silu(gate)) and its
           gradient, rounded to the activation dtype;
    xhat   the norm's xhat = x * rstd and its gradient, rounded to the activation dtype; the gamma
           product is then formed in the dtype PyTorch promotes (weight, activation) to, and so are
           the gradients through it (dn, and each dweight term before the token sum) — except that
           a zero-centred 1 + w is formed in float32, so its dweight terms are float32 products.

The built-in models are one small file each in this folder, found by `builtin_models()`: a new named
model is one new file calling `register`. A plug-in may instead declare any set of points
(`factory.rounding = ("mid", "xhat")`); `resolve` turns either into a RoundingModel, and everything
else — the model reference interval (references.models.reference) and the budget terms
(`RoundingModel.relative_terms`) — is derived from the points, for both op orders, by one mechanism.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

from harness.references.errors import UsageError
from harness.references.formats import FORMATS, Format

POINTS = ("mid", "xhat")
# Relative error (in units of u of the format named, relative to the output's gauge) that each
# point adds to each output, per op order: docs/budgets.md derives every entry. "act": the activation
# format; "promoted": the gamma product's format, promote(weight, activation).
POINT_TERMS = {
    ("mid", True): {"y": {"act": 1}, "dgate": {"act": 1}, "dx": {"act": 1}, "dweight": {"act": 1}},
    ("xhat", True): {"y": {"act": 1, "promoted": 1}, "dgate": {"act": 1, "promoted": 1},
                     "dx": {"act": 1, "promoted": 1}, "dweight": {"act": 1, "promoted": 2}},
    ("mid", False): {"y": {"act": 2}, "dgate": {"act": 6}, "dx": {"act": 6}, "dweight": {"act": 2}},
    ("xhat", False): {"y": {"act": 1}, "dgate": {"act": 1}, "dx": {"act": 1},
                      "dweight": {"act": 1, "promoted": 1}},
}


@dataclass(frozen=True)
class RoundingModel:
    name: str
    points: frozenset
    description: str = ""

    def relative_terms(self, output: str, norm_before_gate: bool, act: Format, promoted: Format) -> float:
        """The declared roundings' relative error in `output`, relative to its gauge (a sum of u's)."""
        fmts = {"act": act, "promoted": promoted}
        return sum(k * fmts[f].u for p in self.points
                   for f, k in POINT_TERMS[(p, bool(norm_before_gate))][output].items())


def promoted_format(weight: Format, act: Format) -> Format:
    """The dtype PyTorch computes weight * activation in: the same dtype, else float32."""
    return act if weight.dtype == act.dtype else FORMATS["fp32"]


_REGISTRY: dict[str, RoundingModel] = {}
_DISCOVERED: list[bool] = []


def register(model: RoundingModel) -> RoundingModel:
    unknown = set(model.points) - set(POINTS)
    if unknown:
        raise ValueError(f"rounding model {model.name}: unknown point(s) {sorted(unknown)}")
    _REGISTRY[model.name] = model
    return model


def builtin_models() -> dict[str, RoundingModel]:
    """Every model defined in this folder (each module registers its own), in name order."""
    if not _DISCOVERED:
        for m in pkgutil.iter_modules(__path__):
            if m.name not in ("reference", "noise"):
                importlib.import_module(f"{__name__}.{m.name}")
        _DISCOVERED.append(True)
    return dict(sorted(_REGISTRY.items()))


def resolve(declared) -> RoundingModel:
    """A RoundingModel from a built-in name, a RoundingModel, or an iterable of points. A set of
    points equal to a built-in's is that built-in (so `("mid",)` reports as `chain`)."""
    models = builtin_models()
    if isinstance(declared, RoundingModel):
        return declared
    if isinstance(declared, str):
        if declared in models:
            return models[declared]
        if declared in POINTS:
            declared = (declared,)
        else:
            raise UsageError(f"rounding {declared!r}: not a built-in model ({', '.join(models)}) "
                             f"nor a rounding point ({', '.join(POINTS)})")
    try:
        points = frozenset(declared)
    except TypeError:
        raise UsageError(f"rounding {declared!r}: expected a model name or a set of points") from None
    bad = [p for p in points if p not in POINTS]
    if bad:
        raise UsageError(f"rounding {sorted(points, key=str)!r}: unknown point {bad[0]!r}; "
                         f"points: {', '.join(POINTS)}")
    for m in models.values():
        if m.points == points:
            return m
    return RoundingModel("+".join(p for p in POINTS if p in points), points,
                         "declared as a set of points")
