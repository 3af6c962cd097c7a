"""How a sweep's pairs are dealt (harness/schedule.py): --shard's split, the work items, and the
queue the workers take them from."""
from __future__ import annotations

import math
import threading

import pytest

from harness.cases.suite import load_suite
from harness.schedule import BIG_CASE, WorkItem, WorkQueue, compile_key, shard, work_items


@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("by", ["case", "shape"])
def test_shard_is_disjoint_complete_and_ordered(n, by):
    cases = list(load_suite("quick").cases)
    parts = [shard(cases, k, n, by) for k in range(1, n + 1)]
    assert sorted(c.case_id for p in parts for c in p) == sorted(c.case_id for c in cases)
    for p in parts:
        assert p == [c for c in cases if c in p]                 # suite order kept
    if by == "shape":                                            # one compile key, one part
        owner = {}
        for k, p in enumerate(parts):
            for c in p:
                assert owner.setdefault(compile_key(c), k) == k


def test_work_items_hold_every_pair_once_a_compile_key_each_big_cases_alone():
    cases = list(load_suite("full").cases)
    todo = [(c, ["a", "b"]) for c in cases]
    items = work_items(todo)
    assert sorted(c.case_id for it in items for c, _ in it.pairs) == sorted(c.case_id for c in cases)
    assert [it.cost for it in items] == sorted((it.cost for it in items), reverse=True)
    owner = {}
    for k, it in enumerate(items):
        for c, _ in it.pairs:
            if math.prod(c.shape) >= BIG_CASE:
                assert len(it.pairs) == 1
            else:
                assert owner.setdefault(compile_key(c), k) == k
    assert any(math.prod(c.shape) >= BIG_CASE for c in cases)


def _item(cost, name):
    return WorkItem(cost, ((name, cost),))


def test_the_costliest_item_first_ties_in_the_given_order():
    q = WorkQueue([_item(3, "c"), _item(10, "a"), _item(3, "d"), _item(7, "b")])
    assert [q.take().pairs[0][0] for _ in range(4)] == ["a", "b", "c", "d"]
    assert q.take() is None


def test_every_item_is_taken_exactly_once_across_threads():
    items = [_item(1 + k % 7, f"g{k}") for k in range(400)]
    q = WorkQueue(items)
    got: list = []
    raised: list = []
    lock = threading.Lock()

    def worker():
        try:
            for pair in q.pairs():
                with lock:
                    got.append(pair)
        except BaseException as e:                      # a race in take() would surface here
            raised.append(e)
    ts = [threading.Thread(target=worker) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not raised and sorted(got) == sorted(p for it in items for p in it.pairs)
