"""How a sweep's pairs are dealt: compile keys, work items, and the queue the workers take them
from (harness.runner), and --shard's split of a suite across machines.

A worker pays a compile key's first calls once (every case of one hidden size, dtypes and op
variant: a Triton kernel's compile and autotuning, autotuned per hidden size), so one work item
holds every case of a key. torch-compile's graphs are static (harness.impls.torch_ref): one per
(compile key, zero-centred gamma, activation, eps, shape), compiled once in the sweep whichever
worker holds the key: no dealing can cut them further (docs/performance.md §9, §17)."""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass

from harness.cases.case import Case


def compile_key(case: Case) -> tuple:
    """The cases whose compiles and autotuning belong together: hidden size, dtypes and op variant
    (a group size or the other order is another graph, and another kernel specialisation)."""
    return (case.shape[-1], case.dtype, case.gate_dtype, case.weight_dtype, case.group, case.norm_before_gate)


# What a compile key costs next to each of its cases, for balancing: fitted over `full` on an H200
# (docs/performance.md: ~28-31 s a key for its first calls, 0.2-1.9 s a case), with fla's cold
# autotuning the largest part; fitted before torch-compile's graphs became static (§17).
KEY_COST_IN_CASES = 16

# A case this big is a work item of its own: its references and certification (an fp32 2048x4096
# case: ~25 s a pair warm on the H200) outweigh a compile, and a key holding several of them was the
# critical path of `full` (64 s of an 84 s warm sweep).
BIG_CASE = 1 << 22


def shard(cases: list[Case], k: int, n: int, by: str = "case") -> list[Case]:
    """Deterministic 1/n of the cases, k in 1..n: disjoint and complete over k, suite order kept.
    by="case": by case id. by="shape": every case of one compile_key in one shard, keys dealt
    costliest first to the least loaded shard (a key costs KEY_COST_IN_CASES + its cases)."""
    if by == "case":
        return [c for c in cases if int(c.case_id, 16) % n == k - 1]
    groups: dict[tuple, int] = {}
    for c in cases:
        groups[compile_key(c)] = groups.get(compile_key(c), KEY_COST_IN_CASES) + 1
    load, owner = [0] * n, {}
    for key, cost in sorted(groups.items(), key=lambda kv: (-kv[1], repr(kv[0]))):
        j = min(range(n), key=lambda i: (load[i], i))
        owner[key] = j
        load[j] += cost
    return [c for c in cases if owner[compile_key(c)] == k - 1]


@dataclass(frozen=True)
class WorkItem:
    cost: float                 # KEY_COST_IN_CASES a key's first calls, 1 + elements/2^20 a pair
    pairs: tuple                # (case, implementations) in suite order


def work_items(todo: list) -> list[WorkItem]:
    """The pairs to run as work items — every case of one compile key (each compile and autotuning
    once), except that a big case (BIG_CASE elements) is an item of its own — costliest first."""
    def pair_cost(case, impls):
        return len(impls) * (1 + math.prod(case.shape) / (1 << 20))
    items: dict[tuple, list] = {}
    for case, impls in todo:
        key = compile_key(case) + ((case.case_id,) if math.prod(case.shape) >= BIG_CASE else ())
        items.setdefault(key, []).append((case, impls))
    cost = {k: KEY_COST_IN_CASES * max(len(i) for _, i in g) + sum(pair_cost(c, i) for c, i in g)
            for k, g in items.items()}
    order = sorted(items, key=lambda k: (-cost[k], repr(k)))
    return [WorkItem(cost[k], tuple(items[k])) for k in order]


class WorkQueue:
    """Work items for workers that each take the next as they finish one, costliest first
    (longest processing time first, dynamically: first calls of different keys overlap across the
    workers, and no worker is left with a long tail that a static split guessed wrong). Every item
    is taken exactly once; safe across threads."""

    def __init__(self, items: list[WorkItem]):
        self._items = sorted(items, key=lambda it: -it.cost)[::-1]     # the costliest last, ties in order
        self._lock = threading.Lock()

    def take(self) -> WorkItem | None:
        """The costliest item left; None when none is left."""
        with self._lock:
            return self._items.pop() if self._items else None

    def pairs(self):
        """One worker's (case, implementations), item after item, until none is left."""
        while (item := self.take()) is not None:
            yield from item.pairs
