"""The closed forms of gated RMSNorm, forward and backward, written once.

The operation is a chain of two ops over the last dimension (SPEC §1):

    norm op   N(u) = uhat * g,  uhat = u * r,  r = (mean_G(u^2) + eps)^(-1/2) per group of G channels,
              g = weight (+ 1 when zero-centred)
    gate op   S(u) = u * a(t),  a the gate activation (Op.activation): silu(t) = t s (the default)
              or sigmoid(t) = s,  s = sigmoid(t)

    norm first (norm_before_gate):  n = N(x),  y = S(n)            (TransformerEngine, Qwen3-Next)
    gate first:                     h = S(x),  y = N(h)            (Mamba-2)

and the backward of each op, for an upstream gradient d of its output:

    S:  du = d * a(t),                    dt = d * u * a'(t),  silu'(t) = s (1 + t (1 - s)),
                                                               sigmoid'(t) = s (1 - s)
    N:  duhat = d * g,  du = r (duhat - uhat * mean_G(duhat * uhat)),  dweight = sum_tokens d * uhat

(1 - s is taken as sigmoid(-t), which keeps its relative accuracy for large t.) Each activation's
pair (a, a') is one function of `ACTIVATION_TERMS`: the only place the activations differ.

Every reference path evaluates these same functions, each with its own arithmetic `A` (the LLVM
MPFRWrapper idea: one formula, one dispatcher per operation):

* references.exact: float64 tensors that carry their *gauge* — the same formula on absolute values
  (subtraction adds), the scale of any rounding error even where a value cancels to ~0;
* references.mp: mpmath at 50 digits, row by row, for certification;
* references.models: intervals holding every legitimate float32 evaluation of a declared rounding
  model (noise, underflow floors and rounding points applied at the named nodes below);
* references.accel: the same float64 arithmetic compiled by Inductor.

Values flow through Python operators (+, -, *); what is not an operator goes through `A`:
sigmoid, rsqrt, mean_of_squares, group_mean, token_sum, and two hooks:

* ``A.at(node, value, **factors)``: a named step where an implementation computes in float32
  (NODES); the exact arithmetics return `value`, the model arithmetic widens it by the float32
  noise and underflow of that step and applies a rounding point there;
* ``A.nominal(value)``: the model's value without float32 noise (what autograd saved for the
  backward); identity for the exact arithmetics.
"""
from __future__ import annotations

from dataclasses import dataclass

OUTPUTS = ("y", "dx", "dgate", "dweight")

# The named steps (hooks) of the two ops, in the order they run. `mid` is the first op's output and
# `dmid` its gradient (rounding point `mid`); norm.xhat, norm.out, norm.dout, norm.dxhat and
# norm.dweight_term are where rounding point `xhat` acts.
NODES = ("gate.out", "gate.dinput", "gate.dgate", "norm.r", "norm.xhat", "norm.out", "norm.dout",
         "norm.dxhat", "norm.dinput", "norm.dweight_term", "norm.dweight", "mid", "dmid")


@dataclass(frozen=True)
class Op:
    """The operation's parameters (everything but the tensors)."""
    eps: float
    zero_centered_gamma: bool
    group_size: int                  # G: channels per group of the mean of squares (hidden % G == 0)
    norm_before_gate: bool = True
    activation: str = "silu"         # the gate's function: one of ACTIVATIONS ("silu", "sigmoid")


def gamma(w, op: Op):
    """g = weight (+ 1 when zero-centred); exact in float64 for every 16/32-bit weight."""
    return w + 1 if op.zero_centered_gamma else w


def silu_terms(t, A):
    """silu(t) and silu'(t) = s (1 + t (1 - s)), with 1 - s = sigmoid(-t)."""
    s = A.sigmoid(t)
    return t * s, s * (1 + t * A.sigmoid(-t))


def sigmoid_terms(t, A):
    """sigmoid(t) and sigmoid'(t) = s (1 - s) = sigmoid(t) sigmoid(-t)."""
    s = A.sigmoid(t)
    return s, s * A.sigmoid(-t)


ACTIVATION_TERMS = {"silu": silu_terms, "sigmoid": sigmoid_terms}
ACTIVATIONS = tuple(ACTIVATION_TERMS)          # the gate activations, the default first


def gate_terms(t, A, activation: str = "silu"):
    """(a(t), a'(t)) of the gate activation `activation`."""
    return ACTIVATION_TERMS[activation](t, A)


def gate_forward(u, t, A, activation: str = "silu"):
    a, _ = gate_terms(t, A, activation)
    return A.at("gate.out", u * a, u=u, t=t)


def gate_backward(d, u, t, A, activation: str = "silu"):
    """(du, dt) of S(u) = u a(t) for the upstream gradient d."""
    a, da = gate_terms(t, A, activation)
    du = A.at("gate.dinput", d * a, u=d, t=t)
    dt = A.at("gate.dgate", d * u * da, d=d, u=u, t=t)
    return du, dt


def norm_forward(u, g, op: Op, A):
    """N(u) and what its backward needs: (out, (r, uhat, uhat as rounded for the gamma product))."""
    r = A.at("norm.r", A.rsqrt(A.mean_of_squares(u, op.group_size) + op.eps))
    uhat = u * r
    uhat_used = A.at("norm.xhat", uhat, r=r)
    return A.at("norm.out", uhat_used * g), (r, A.nominal(uhat), A.nominal(uhat_used), u)


def norm_backward(d, g, saved, op: Op, A):
    """(du, dweight) of N for the upstream gradient d (summed over every token for dweight)."""
    r, uhat, uhat_used, u = saved          # uhat_used: as the gamma product saw it (rounded at xhat)
    d = A.at("norm.dout", d)
    duhat = A.at("norm.dxhat", d * g)
    du = r * (duhat - uhat * A.group_mean(duhat * uhat, op.group_size))
    du = A.at("norm.dinput", du, u=u, r=r, g=g)
    term = A.at("norm.dweight_term", d * uhat_used)
    dweight = A.at("norm.dweight", A.token_sum(term), u=u, r=r)
    return du, dweight


def forward_backward(x, t, w, dy, op: Op, A) -> dict:
    """y, dx, dgate, dweight of the gated norm in op's order, plus the first op's output `mid` and
    its gradient `dmid` (n and dn norm first, h and dh gate first)."""
    g, act = gamma(w, op), op.activation
    if op.norm_before_gate:
        n, saved = norm_forward(x, g, op, A)
        n = A.at("mid", n)
        y = gate_forward(n, t, A, act)
        dn, dgate = gate_backward(dy, n, t, A, act)
        dn = A.at("dmid", dn)
        dx, dweight = norm_backward(dn, g, saved, op, A)
        return {"y": y, "dx": dx, "dgate": dgate, "dweight": dweight, "mid": n, "dmid": dn}
    h = A.at("mid", gate_forward(x, t, A, act))
    y, saved = norm_forward(h, g, op, A)
    dh, dweight = norm_backward(dy, g, saved, op, A)
    dh = A.at("dmid", dh)
    dx, dgate = gate_backward(dh, x, t, A, act)
    return {"y": y, "dx": dx, "dgate": dgate, "dweight": dweight, "mid": h, "dmid": dh}


class ExactHooks:
    """The hooks of an exact arithmetic (references.exact, references.mp): no float32 step, no
    rounding point, so `at` and `nominal` return the value as it is."""

    @staticmethod
    def at(node: str, v, **factors):
        return v

    @staticmethod
    def nominal(v):
        return v
