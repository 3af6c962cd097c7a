"""A rounding model's reference, derived from its points: references.closed_forms evaluated on
intervals (references.intervals), with the model's roundings and the float32 noise of a math class
(references.mathclass) at the named steps.

The trap this handles: an implementation computes n (say) in float32 and only then rounds it. Where
the exact n lies within float32 error of a rounding boundary, either neighbour is legitimate. So at
a rounding point the interval [lo, hi] (noise included) is rounded end by end, and every later step
carries both candidates (interval arithmetic). Steps between points are exact, widened by the
noise of references.models.noise. The result is, per output, [lo, hi] before the output's own final
rounding, and the gauge.

`exact_allowance` evaluates the same steps keeping only the absolute and per-element terms
(underflow floors, half the smallest subnormal at each rounding point, a fast exp's noise that grows
with |t|, FTZ's flushed values): what the relative budgets, constant per case, cannot express.

Under FTZ a float32 operand or result below 2^-126 may be 0: every input there, and every step's
value whose interval reaches below 2^-126, may be 0 — in the model's own values too, which the
backward reuses; the floors lose a whole subnormal instead of a few quanta of one.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from harness.references.closed_forms import OUTPUTS, forward_backward
from harness.references.exact import Inputs
from harness.references.formats import Format, fmt_of, round_to
from harness.references.intervals import Interval
from harness.references.mathclass import ACCURATE, MIN_NORMAL32, MathClass
from harness.references.models import RoundingModel, promoted_format, resolve
from harness.references.models import noise

# Where each point acts: node -> (format, whether a float32 product is formed there first).
POINT_NODES = {
    "mid": {"mid": ("act", False), "dmid": ("act", False)},
    "xhat": {"norm.xhat": ("act", False), "norm.out": ("promoted", True), "norm.dout": ("promoted", False),
             "norm.dxhat": ("act", True), "norm.dweight_term": ("promoted", True)},
}


class ModelArithmetic:
    """closed_forms' arithmetic on Intervals for one model, activation format and case shape."""

    def __init__(self, model: RoundingModel, inp: Inputs, act: Format, absolute: bool = False,
                 mc: MathClass = ACCURATE):
        self.model, self.absolute, self.mc = model, absolute, mc
        self.activation = inp.activation
        self.zero_centered = bool(inp.zero_centered_gamma)
        self.formats = {"act": act, "promoted": promoted_format(fmt_of(inp.weight.dtype), act)}
        self.noise = {} if absolute else noise.node_noise(inp.group, inp.tokens, mc)

    sigmoid = staticmethod(lambda t: t.increasing(torch.sigmoid))
    rsqrt = staticmethod(lambda v: v.decreasing_positive(torch.rsqrt))

    @staticmethod
    def mean_of_squares(u: Interval, group: int) -> Interval:
        return u.square().group_mean(group)

    @staticmethod
    def group_mean(v: Interval, group: int) -> Interval:
        return v.group_mean(group)

    @staticmethod
    def token_sum(v: Interval) -> Interval:
        return v.token_sum()

    @staticmethod
    def nominal(v: Interval) -> Interval:
        return v.nominal()

    def _floor(self, node: str, v: Interval, f: dict):
        mc = self.mc
        if node in ("gate.out", "gate.dinput"):
            return noise.gate_floor(f["u"].g, f["t"].lo, mc, self.activation)
        if node == "gate.dgate":
            return noise.dgate_floor(f["d"].g, f["u"].g, f["t"].lo, mc, self.activation)
        if node == "norm.dinput":
            return noise.backward_floor(f["u"].g, f["r"].g, f["g"].g, mc)
        if node == "norm.dweight":
            return noise.dweight_floor(f["u"].g, f["r"].g, mc)
        return None

    def _per_element(self, node: str, f: dict):
        """The class's noise that depends on the step's inputs (a fast exp's |t|), absolute."""
        if not (self.mc.fast and node.startswith("gate.")):
            return None
        return noise.fast_gate_noise(node, {k: (f[k].lo if k == "t" else f[k].g) for k in f}, self.mc,
                                     self.activation)

    def _round(self, v: Interval, fmt: Format, product: bool) -> Interval:
        if product and not self.absolute:
            v = v.widen(noise.U32 * v.g)                  # the float32 product before the rounding
        if fmt.precision >= 24:                           # float32: no rounding beyond its noise
            return v
        if self.absolute:                                 # rounding's absolute (underflow) part,
            return v.widen(fmt.min_subnormal / 2, own=True)   # also in what the backward reuses
        return v.rounded(lambda z: round_to(z, fmt))

    def at(self, node: str, v: Interval, **factors) -> Interval:
        amount = self.noise.get(node, 0.0) * noise.U32 * v.g if node in self.noise else None
        floor = self._floor(node, v, factors)
        if floor is not None:
            amount = floor if amount is None else amount + floor
        if amount is not None:
            v = v.widen(amount)
        systematic = self._per_element(node, factors)
        if systematic is not None:    # the class's own function (a fast sigmoid): what the backward
            v = v.widen(systematic, own=True)      # saves or recomputes carries it too
        if node == "norm.xhat":       # uhat's own underflow: also in what the backward reuses
            v = v.widen(noise.xhat_floor(factors["r"].g, self.mc), own=True)
        if node.startswith("gate.") and bool((flush := factors["t"].lo < noise.silu_flush(self.mc)).any()):
            v = v.with_zero(flush)     # the activation may be 0 there: so may what the backward saves of it
        if self.mc.ftz:
            v = flushed(v)
        for point in self.model.points:
            where = POINT_NODES[point].get(node)
            if node == "norm.dweight_term" and self.zero_centered:
                continue      # 1 + w is formed in float32: the dweight terms are float32 products
            if where is not None:
                v = self._round(v, self.formats[where[0]], where[1])
        return v


def flushed(v: Interval) -> Interval:
    """Under FTZ: the value may be 0 wherever it may be a float32 subnormal."""
    where = (v.lo < MIN_NORMAL32) & (v.hi > -MIN_NORMAL32) & ((v.lo != 0) | (v.hi != 0))
    return v.with_zero(where) if bool(where.any()) else v


def _evaluate(inp: Inputs, model, act: Format, absolute: bool, mc: MathClass = ACCURATE) -> dict[str, Interval]:
    A = ModelArithmetic(resolve(model), inp, act, absolute, mc)

    def ex(t):
        v = Interval.exact(t.to(torch.float64))
        return flushed(v) if mc.ftz else v            # an FTZ kernel reads a subnormal input as 0

    w = inp.weight.to(torch.float64)
    g = ex(w + 1 if inp.zero_centered_gamma else w)   # exact in float64
    if inp.zero_centered_gamma and not absolute:
        # ... but an implementation may form 1 + w in float32, once, and use it in the forward and
        # the backward alike: either value, where a rounding point after it (xhat) can tell them
        # apart (hypothesis: torch-xhat, fp16 with a float32 weight, dgate 1.2 ULP outside)
        g32 = (inp.weight.float() + 1).to(torch.float64)
        lo, hi = torch.minimum(g.lo, g32), torch.maximum(g.lo, g32)
        g = Interval(lo, hi, lo, hi, torch.maximum(lo.abs(), hi.abs()))
    op = replace(inp.op, zero_centered_gamma=False)                    # g carries the + 1 already
    return forward_backward(ex(inp.x), ex(inp.gate), g, ex(inp.dy), op, A)


def model_reference(inp: Inputs, model, act: Format, mc: MathClass = ACCURATE) -> dict[str, tuple]:
    """(lo, hi, gauge) for y, dx, dgate, dweight (and mid, dmid) under `model` with activation `act`
    and math class `mc`."""
    q = _evaluate(inp, model, act, absolute=False, mc=mc)
    return {k: (q[k].lo, q[k].hi, q[k].g) for k in (*OUTPUTS, "mid", "dmid")}


def exact_allowance(inp: Inputs, model, act: Format, mc: MathClass = ACCURATE) -> dict[str, tuple]:
    """(lo, hi) around the exact value: its absolute and per-element allowance for an implementation
    of `model` and `mc` (underflow floors; half the smallest subnormal where a point rounds into the
    subnormal range; a fast exp's noise; FTZ's flushes)."""
    q = _evaluate(inp, model, act, absolute=True, mc=mc)
    return {k: (q[k].lo, q[k].hi) for k in OUTPUTS}
