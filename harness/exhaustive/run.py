"""The sweep: every finite (x, gate) pair of the ranges through the implementation, against the
exact values, one gate block at a time (progress.Checkpoint after each), each block's gates by
regime, each regime's pairs in x tiles of about `chunk` pairs.

Per x tile: the implementation runs once (y and dgate [rows, gates], dn [gates]); the tile pass
(stats.TilePass) reduces y and dgate — and dn, once per gate set, weighted by the number of x
values since dn does not depend on x — to statistics vectors, read by the host in one transfer
(the tile's one sync); the host then certifies the candidates where there are any and searches
the worst pairs where the tile's maximum can enter the lists."""
from __future__ import annotations

import time
from typing import Callable

import torch

from harness.exhaustive.accumulate import Result, Ticker
from harness.exhaustive.certify import certify_tile
from harness.exhaustive.enumerate import case_hash, default_chunk, setup, x_tiles
from harness.exhaustive.impls import DEFAULT
from harness.exhaustive.metrics import consts, worst_metrics
from harness.exhaustive.progress import Checkpoint, run_key
from harness.exhaustive.stats import MAX_SC, MAX_ULP, Rows, Tile, TilePass, candidates, fold, update_worst

FULL = (0, 1 << 16)


def run_exhaustive(dtype: str, impl: str = DEFAULT, device: str = "cpu", x_range=FULL, gate_range=FULL,
                   dy: float = 1.0, chunk: int | None = None, impl_fn: Callable | None = None,
                   progress: Callable[[str], None] | None = None, backend: str = "auto",
                   max_x_tiles: int | None = None, checkpoint: Checkpoint | None = None,
                   activation: str = "silu") -> Result:
    """Every finite (x, gate) pair of the ranges (module docstring), through the gate activation
    `activation` (silu or sigmoid). chunk None: the device's
    default (enumerate.default_chunk); backend: stats.TilePass's; max_x_tiles limits the x tiles
    per gate set (a warm-up); checkpoint: the blocks already done and where to record progress."""
    su = setup(dtype, impl, device, x_range, gate_range, dy, impl_fn, activation)
    fmt, fn, dev, xs, dy_t, dy_v = su.fmt, su.fn, su.dev, su.xs, su.dy_t, su.dy_v
    chunk = default_chunk(dev) if chunk is None else max(int(chunk), 1)
    ck = checkpoint or Checkpoint(None, run_key(dtype, impl, x_range, gate_range, su.dy_bits, activation))
    acc = ck.acc
    tile_pass = TilePass(backend, dev)
    n_x = xs.numel()
    x64 = xs.to(torch.float64)
    dyx = dy_v * x64                                          # exact: two 16-bit significands
    rows = {"y": Rows(x64, x64.abs(), x64, su.x_bits), "dgate": Rows(dyx, dyx.abs(), x64, su.x_bits)}
    dy64 = dy_t.to(torch.float64).reshape(1)
    rows["dn"] = Rows(dy64, dy64.abs(), x64[:1], su.x_bits[:1])
    total = n_x * sum(su.n_gates.values())
    done = sum(a.pairs for (o, _), a in acc.items() if o == "y")
    tick = Ticker(total, progress, done)
    perf = {"tiles": 0, "syncs": 0, "topk_tiles": 0, "cand_tiles": 0}
    for block in su.blocks(skip=ck.done):
        for gset in block.sets:
            reg = gset.regime
            k = {o: consts(o, reg, fmt) for o in ("y", "dn", "dgate")}
            gv = gset.gs.to(torch.float64)
            cols = {"y": (gset.S, gset.Sg), "dn": (gset.S, gset.Sg), "dgate": (gset.D, gset.Dg)}
            for it, (x0, x1) in enumerate(x_tiles(n_x, gset.gs.numel(), chunk)):
                if max_x_tiles is not None and it >= max_x_tiles:
                    break
                y, dn, dgate = fn(xs[x0:x1], gset.gs, dy_t)
                tiles = [Tile("y", reg, y, rows["y"], x0, *cols["y"], gv, gset.bits, 1, k["y"]),
                         Tile("dgate", reg, dgate, rows["dgate"], x0, *cols["dgate"], gv, gset.bits, 1, k["dgate"])]
                if it == 0:                                   # per gate: stands for every x value
                    tiles.append(Tile("dn", reg, dn.reshape(1, -1), rows["dn"], 0, *cols["dn"], gv, gset.bits,
                                      n_x, k["dn"]))
                stats = [tile_pass(t, fmt) for t in tiles]
                host = torch.cat([s.vec for s in stats]).tolist()     # the tile's one sync
                perf["syncs"] += 1
                perf["tiles"] += 1
                for i, (t, s) in enumerate(zip(tiles, stats)):
                    st = host[i * len(s.vec):(i + 1) * len(s.vec)]
                    a = acc[(t.output, reg)]
                    fold(a, st, t.n, t.weight)
                    if candidates(st):
                        perf["cand_tiles"] += 1
                        certify_tile(t, s.cand, dy_v, fmt, a, perf, activation)
                    for metric in worst_metrics(t.output):
                        tmax = st[MAX_ULP] if metric == "ulp" else st[MAX_SC]
                        perf["topk_tiles"] += update_worst(a, metric, t, s, tmax, fmt)
                tick.add((x1 - x0) * gset.gs.numel())
        if max_x_tiles is None:
            ck.save((block.lo, block.hi))
    perf["backend"] = tile_pass.name
    perf["pairs_run"] = tick.run
    return Result(dtype, impl, su.rounding, dev.type, tuple(x_range), tuple(gate_range), dy_v, su.dy_bits, n_x,
                  dict(su.n_gates), acc, tick.seconds(dev),
                  case_hash(dtype, x_range, gate_range, su.dy_bits, activation), perf, activation)


def warm_up(dtype: str, device: str, backend: str = "auto") -> float:
    """Load (or compile) the tile pass and run every step of a tile once on a small range (tiny
    gates: certification candidates, worst pairs): what a command can do while other start-up work
    runs. Returns the seconds it took."""
    t0 = time.perf_counter()
    run_exhaustive(dtype, DEFAULT, device, (0x3f80, 0x3f88), (0x0000, 0x0040), backend=backend)  # ties: certify
    return time.perf_counter() - t0
