"""How a sweep's pairs are dealt (harness/schedule.py): --shard's split, the work items, and the
queue's choice of the next item for a worker."""
from __future__ import annotations

import heapq
import math
import threading

import pytest

from harness.cases.suite import load_suite
from harness.schedule import AFFINITY, BIG_CASE, WorkItem, WorkQueue, compile_key, graph_key, shard, work_items
from tests.conftest import make_case


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


def test_graph_key_drops_the_hidden_size_only_where_the_compile_is_shape_dynamic():
    a, b = make_case(shape=(4, 256)), make_case(shape=(8, 1024))
    assert compile_key(a) != compile_key(b) and graph_key(a) == graph_key(b)
    assert graph_key(make_case(shape=(4, 256), dtype="fp16")) != graph_key(a)
    assert graph_key(make_case(shape=(4, 256), norm_before_gate=False)) != graph_key(a)
    g1, g2 = make_case(shape=(4, 256), group_size=64), make_case(shape=(4, 512), group_size=64)
    assert graph_key(g1) != graph_key(g2)                       # grouped norms compile static


def test_work_items_hold_every_pair_once_a_compile_key_each_big_cases_alone():
    cases = list(load_suite("full").cases)
    todo = [(c, ["a", "b"]) for c in cases]
    items = work_items(todo)
    assert sorted(c.case_id for it in items for c, _ in it.pairs) == sorted(c.case_id for c in cases)
    assert [it.cost for it in items] == sorted((it.cost for it in items), reverse=True)
    owner = {}
    for k, it in enumerate(items):
        assert {graph_key(c) for c, _ in it.pairs} == {it.graph}
        for c, _ in it.pairs:
            if math.prod(c.shape) >= BIG_CASE:
                assert len(it.pairs) == 1
            else:
                assert owner.setdefault(compile_key(c), k) == k
    assert any(math.prod(c.shape) >= BIG_CASE for c in cases)


def _item(cost, graph):
    return WorkItem(cost, (graph,), ((graph, cost),))


def test_a_worker_keeps_to_its_graph_keys_within_the_affinity_factor():
    assert AFFINITY == 2.0                                   # the costs below are chosen around it
    q = WorkQueue([_item(10, "a"), _item(9, "b"), _item(6, "c"), _item(4, "b"), _item(3, "d")])
    assert q.take(set()).cost == 10                          # a fresh queue: the costliest
    assert q.take({("b",)}).cost == 9
    assert q.take({("b",)}).cost == 4                        # b's 4 over c's 6: within the factor
    q = WorkQueue([_item(10, "a"), _item(9, "b"), _item(4, "c")])
    assert q.take({("c",)}).cost == 10                       # c's 4 is past the factor: the costliest
    q = WorkQueue([_item(10, "a"), _item(9, "a"), _item(8, "b")])
    q.take(set())                                            # a started by one worker
    assert q.take(set()).graph == ("b",)                     # a fresh worker starts a key of its own
    assert q.take(set()).graph == ("a",)                     # then the costliest
    assert q.take(set()) is None


def test_every_item_is_taken_exactly_once_across_threads():
    items = [_item(1 + k % 7, f"g{k % 5}") for k in range(400)]
    q = WorkQueue(items)
    got: list = []
    lock = threading.Lock()

    def worker():
        for pair in q.pairs():
            with lock:
                got.append(pair)
    ts = [threading.Thread(target=worker) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert sorted(got) == sorted(p for it in items for p in it.pairs)


def _simulate(items, workers, keep_to_graphs):
    """Each worker takes an item when it finishes one, an item lasting its cost — from the queue,
    or (keep_to_graphs False) strictly costliest first: (makespan, (worker, graph key) compiles)."""
    q, left = WorkQueue(items), sorted(items, key=lambda it: -it.cost)
    free = [(0.0, w) for w in range(workers)]
    seen = [set() for _ in range(workers)]
    end, compiles = 0.0, 0
    while True:
        t, w = heapq.heappop(free)
        item = q.take(seen[w]) if keep_to_graphs else (left.pop(0) if left else None)
        if item is None:
            return max(end, t), compiles
        compiles += item.graph not in seen[w]
        seen[w].add(item.graph)
        end = max(end, t + item.cost)
        heapq.heappush(free, (t + item.cost, w))


def test_on_full_keeping_to_graph_keys_compiles_fewer_graphs_for_about_the_same_span():
    items = work_items([(c, ["torch", "torch-compile", "fla"]) for c in load_suite("full").cases])
    span, compiles = _simulate(items, 16, keep_to_graphs=True)
    blind_span, blind_compiles = _simulate(items, 16, keep_to_graphs=False)
    assert compiles <= 0.7 * blind_compiles, (compiles, blind_compiles)        # 77 against 125
    assert span <= 1.05 * blind_span, (span, blind_span)
