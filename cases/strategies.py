"""Hypothesis strategies over the case space, for `harness run --cases hypothesis` and for tests.

`cases()` draws a Case: every dtype (and mixed gate / weight dtypes), shapes of 1 to 4 dimensions
with small sizes (hidden 1..300, tokens 1..64), zero-centred gamma on and off, eps from
{1e-5, 1e-6, 0.3}, every x / gate / gamma / dy distribution, a group size dividing the hidden size,
both op orders, the gate activations asked for (`activations`: silu and sigmoid), and a seed. Each axis shrinks towards the
plainest value (first listed), so a shrunk failure names the smallest case that still fails.
`inputs()` maps cases to their generated Inputs (cases.generate)."""
from __future__ import annotations

from hypothesis import strategies as st

from harness.cases.case import ACTIVATIONS, DTYPES, DY_DISTS, GAMMA_DISTS, GATE_DISTS, X_DISTS, Case
from harness.cases.generate import generate

__all__ = ["cases", "shapes", "inputs", "EPS", "MAX_HIDDEN", "MAX_TOKENS"]

EPS = (1e-5, 1e-6, 0.3)
MAX_HIDDEN = 300
MAX_TOKENS = 64
SEEDS = 2 ** 16


@st.composite
def shapes(draw, max_hidden: int = MAX_HIDDEN, max_tokens: int = MAX_TOKENS):
    """[..., hidden] with 1 to 4 dimensions, hidden in 1..max_hidden, tokens in 1..max_tokens."""
    ndim = draw(st.integers(1, 4))
    lead, room = [], max_tokens
    for _ in range(ndim - 1):
        d = draw(st.integers(1, max(1, room)))
        lead.append(d)
        room //= d
    hidden = draw(st.integers(1, max_hidden))
    return (*lead, hidden)


@st.composite
def cases(draw, dtypes=DTYPES, max_hidden: int = MAX_HIDDEN, max_tokens: int = MAX_TOKENS,
          gate_dtypes=DTYPES, weight_dtypes=DTYPES, activations=ACTIVATIONS):
    """A Case. gate_dtypes / weight_dtypes: the other dtypes the gate / weight may take besides
    x's (an empty tuple keeps them equal to x's dtype); activations: the gate activations drawn
    (shrinking towards the first)."""
    dtype = draw(st.sampled_from(dtypes))
    same = st.just(dtype)
    gate_dtype = draw(st.one_of(same, st.sampled_from(gate_dtypes)) if gate_dtypes else same)
    weight_dtype = draw(st.one_of(same, st.sampled_from(weight_dtypes)) if weight_dtypes else same)
    shape = draw(shapes(max_hidden, max_tokens))
    zc = draw(st.booleans())
    eps = draw(st.sampled_from(EPS))
    x_dist = draw(st.sampled_from(X_DISTS))
    gate_dist = draw(st.sampled_from(GATE_DISTS))
    gamma_dist = draw(st.sampled_from(GAMMA_DISTS))
    seed = draw(st.integers(0, SEEDS - 1))
    hidden = shape[-1]
    group = draw(st.sampled_from([hidden] + [g for g in range(1, hidden) if hidden % g == 0]))
    norm_before_gate = draw(st.booleans().map(lambda b: not b))      # shrinks towards norm first
    dy_dist = draw(st.sampled_from(DY_DISTS))
    activation = draw(st.sampled_from(activations))
    return Case(dtype, gate_dtype, weight_dtype, tuple(shape), zc, float(eps), x_dist, gate_dist,
                gamma_dist, seed, group, norm_before_gate, dy_dist, activation)


def inputs(case=None, act_follows: str = "x"):
    """A strategy of generated Inputs: of one given Case, of a Case strategy, or of `cases()`."""
    if isinstance(case, Case):
        return st.just(case).map(lambda c: generate(c, act_follows))
    strategy = cases() if case is None else case
    return strategy.map(lambda c: generate(c, act_follows))
