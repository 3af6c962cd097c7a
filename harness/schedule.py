"""How a sweep's pairs are dealt: compile keys, work items, and the queue the workers take them
from (harness.runner), and --shard's split of a suite across machines.

Two things a worker pays once and then reuses, and the dealing is built around both:
- a compile key's first calls (every case of one hidden size, dtypes and op variant: a Triton
  kernel's compile and autotuning, an Inductor graph): one work item holds every case of a key;
- a graph key's compiled graphs: torch.compile compiles shape-dynamic graphs (one per grad mode,
  zero-centred gamma, activation and eps), which Dynamo keeps per process and reuses across token
  counts and hidden sizes. A worker that keeps to the graph keys it has run compiles each graph
  once; dealt blindly, every worker compiled every variant (a warm `full` on the H200: 203
  process-seconds of torch-compile's first calls, docs/performance.md)."""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass

from harness.cases.case import Case


def compile_key(case: Case) -> tuple:
    """The cases whose compiles and autotuning belong together: hidden size, dtypes and op variant
    (a group size or the other order is another graph, and another kernel specialisation)."""
    return (case.shape[-1], case.dtype, case.gate_dtype, case.weight_dtype, case.group, case.norm_before_gate)


def graph_key(case: Case) -> tuple:
    """What a shape-dynamic compile of the case specialises on: its compile key less the hidden
    size. A grouped norm keeps it (torch-compile compiles those static: harness.impls.torch_ref)."""
    key = compile_key(case)
    return key if case.group_size else (None, *key[1:4], None, key[5])


# What a compile key costs next to each of its cases, for balancing: fitted over `full` on an H200
# (docs/performance.md: ~28-31 s a key for its first calls, 0.2-1.9 s a case).
KEY_COST_IN_CASES = 16

# A case this big is a work item of its own: its references and certification (an fp32 2048x4096
# case: ~25 s a pair warm on the H200) outweigh a compile, and a key holding several of them was the
# critical path of `full` (64 s of an 84 s warm sweep).
BIG_CASE = 1 << 22

# A worker keeps to its graph keys only among the items within this factor of the costliest left:
# the longest-first order, which balances the workers, is kept within that factor.
AFFINITY = 2.0


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
    graph: tuple                # graph_key of its cases
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
    return [WorkItem(cost[k], graph_key(items[k][0][0]), tuple(items[k])) for k in order]


class WorkQueue:
    """Work items for workers that each take the next as they finish one: longest first,
    dynamically (first calls of different keys overlap across the workers, and no worker is left
    with a long tail that a static split guessed wrong). Among the items within AFFINITY of the
    costliest left, a worker takes, in this order of preference, one of a graph key it has run,
    one of a graph key no worker has run (a fresh worker starts a key of its own), the costliest.
    Every item is taken exactly once; safe across threads."""

    def __init__(self, items: list[WorkItem]):
        self._items = sorted(items, key=lambda it: -it.cost)
        self._started: set[tuple] = set()          # graph keys some worker has taken
        self._lock = threading.Lock()

    def take(self, seen: set[tuple]) -> WorkItem | None:
        """The next item for a worker that has run the graph keys `seen`; None when none is left."""
        with self._lock:
            if not self._items:
                return None
            near = [i for i, it in enumerate(self._items) if it.cost * AFFINITY >= self._items[0].cost]
            pick = next((i for i in near if self._items[i].graph in seen),
                        next((i for i in near if self._items[i].graph not in self._started), 0))
            item = self._items.pop(pick)
            self._started.add(item.graph)
            return item

    def pairs(self):
        """One worker's (case, implementations), item after item, until none is left."""
        seen: set[tuple] = set()
        while (item := self.take(seen)) is not None:
            seen.add(item.graph)
            yield from item.pairs
