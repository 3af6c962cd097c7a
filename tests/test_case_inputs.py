"""The implementation's side of a pair draws a case's inputs once for all its implementations
(harness.pipeline.call.case_inputs) and hands each pair copies of its own."""
from __future__ import annotations

import torch


def test_the_implementation_side_draws_a_case_once_and_hands_each_pair_its_own_copies(monkeypatch):
    """The next implementation of the same case gets copies of the kept inputs, bit for bit those a
    fresh draw gives; a mutated copy leaves the next pair's inputs alone; a new case draws again."""
    from harness.cases.suite import load_suite
    from harness.pipeline import call
    draws = []
    real = call.generate
    monkeypatch.setattr(call, "generate", lambda c, *rest: draws.append(c.case_id) or real(c, *rest))
    monkeypatch.setattr(call, "_LAST_CASE", {})
    a, b = load_suite("quick").cases[:2]
    first = call.case_inputs(a, "x", "cpu")
    first.x.add_(1.0)                                      # what a plug-in may do to its own copy
    second = call.case_inputs(a, "x", "cpu")
    fresh = real(a)
    assert draws == [a.case_id] and second.x is not first.x
    for name in ("x", "gate", "weight", "dy"):
        assert torch.equal(getattr(second, name), getattr(fresh, name)), name
    call.case_inputs(b, "x", "cpu")
    call.case_inputs(a, "weight", "cpu")
    assert draws == [a.case_id, b.case_id, a.case_id]
