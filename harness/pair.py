"""One (case, implementation) pair, start to finish: the case's inputs and references (kept for the
next implementation of the same case), the implementation's forward and backward, the checks.
This is what a worker process runs (harness.worker), and what runs in-process where a factory
cannot be sent to one."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis.check import check, status_rows
from harness.cases.case import Case
from harness.cases.generate import act_format, generate
from harness.execute import differing, forward_backward, run_impl, time_calls
from harness.impls.base import Implementation
from harness.references import package_version
from harness.references.bundle import CaseReferences, build

# Where a case's float64 references and analysis run. On a GPU, every small kernel and host sync of
# the analysis waits its turn behind the other workers' contexts (docs/performance.md: a 32x127
# case's analysis took 1.3 s there and 0.02 s on one CPU core): below this many elements they run
# on the CPU; bigger cases, whose float64 work the GPU does far faster, stay on the device.
ANALYSIS_ON_CPU_BELOW = 1 << 18
VERSION = package_version()


@dataclass(frozen=True)
class Settings:
    """Everything a pair needs besides the case and the implementation (sent to each worker)."""
    device: str = "cpu"
    overrides: tuple = ()
    override_path: str = ""
    golden_dir: Path | None = None
    reference_backend: str = "auto"
    suite_ref: str = "quick"                 # what `--cases` replay commands name
    impl_specs: dict = field(default_factory=dict)     # name -> --impl text, for replay commands
    repeats: int | None = None               # warm timed calls per pair (None: 5 on CUDA, 3 on the CPU; 0: none)
    require_repeatable: bool = False         # a second call on the same inputs must give the same bits
    models: tuple = ()                       # more model references to check (harness identify)


def analysis_device(case: Case, device: str) -> str:
    if device.startswith("cuda") and math.prod(case.shape) < ANALYSIS_ON_CPU_BELOW:
        return "cpu"
    return device


def case_inputs(case: Case, act_follows: str, s: Settings):
    """(the inputs on the implementation's device, their references on analysis_device)."""
    inp = generate(case, act_follows)                       # on the CPU
    where = analysis_device(case, s.device)
    if s.golden_dir is None:
        refs = build(inp.to(where), s.reference_backend)
    else:
        from harness.references.store import cached_build, refs_to
        refs = refs_to(cached_build(inp, case.params(), s.golden_dir, backend=s.reference_backend), where)
    return inp.to(s.device), refs


def replay_command(case: Case, spec: str, suite_ref: str, device: str = "", budgets: str = "") -> str:
    """The command that reruns one pair: by case id in a suite, or — for a case from no suite
    (hypothesis, a list given to harness.verify) — with the case itself as JSON."""
    import json
    import shlex
    where = f"--cases {shlex.quote(suite_ref)}" if suite_ref else \
        f"--case {shlex.quote(json.dumps(case.params(), separators=(',', ':')))}"
    cmd = f"harness replay {case.case_id} --impl {shlex.quote(spec)} {where}"
    if device:
        cmd += f" --device {device}"
    if budgets:
        cmd += f" --budgets {shlex.quote(budgets)}"
    return cmd


class PairRunner:
    """Runs pairs with one Settings; keeps the last case's inputs and references per activation dtype."""

    def __init__(self, settings: Settings):
        self.s = settings
        self._case_id: str | None = None
        self._refs: dict[str, tuple] = {}

    def references(self, case: Case, impl: Implementation) -> tuple:
        if case.case_id != self._case_id:
            self._case_id, self._refs = case.case_id, {}
        act = act_format(case, impl.act_follows).name
        if act not in self._refs:
            self._refs[act] = case_inputs(case, impl.act_follows, self.s)
        return self._refs[act]

    def run(self, case: Case, impl: Implementation) -> tuple[list[dict], dict[str, float]]:
        """The pair's rows (each with its replay command) and its stage times."""
        t0 = time.perf_counter()
        times: dict[str, float] = {}
        act = act_format(case, impl.act_follows)
        why = impl.unsupported(case)
        if why is not None:
            rows = status_rows(case, impl, self.s.device, act.name, "skip", why, self.s.models)
        else:
            inp, refs = self.references(case, impl)
            times["references"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            outcome = run_impl(impl, inp, act.dtype, self.s.device, impl.case_kwargs(case))
            times["impl"] = time.perf_counter() - t1
            speed = self.speed(outcome, inp)
            times["timing"] = time.perf_counter() - t1 - times["impl"]
            t2 = time.perf_counter()
            mp0 = _mp_seconds(refs)
            rows = check(case, impl, self.s.device, refs, outcome, self.s.overrides, self.s.override_path,
                         self.s.models)
            times["analysis"] = time.perf_counter() - t2
            times["mpmath"] = _mp_seconds(refs) - mp0
            self.annotate(rows, speed)
        spec = self.s.impl_specs.get(impl.name, impl.spec or impl.name)
        replay = replay_command(case, spec, self.s.suite_ref, self.s.device, self.s.override_path)
        seconds = time.perf_counter() - t0
        for r in rows:
            r.update(replay=replay, pair_seconds=seconds, suite=self.s.suite_ref, harness_version=VERSION)
        return rows, times


    def speed(self, outcome, inp) -> dict:
        """Separate warm calls after the accuracy run: a second call on the same inputs (is every
        output bit for bit the same?) and `repeats` timed ones (median); on CUDA the bytes a fused
        forward + backward must move and the share of the copy-bandwidth floor that time reaches."""
        if outcome.module is None or outcome.error or outcome.skip is not None:
            return {}
        repeats = self.s.repeats if self.s.repeats is not None else (5 if self.s.device.startswith("cuda") else 3)
        try:
            _, again = forward_backward(*outcome.module, inp, self.s.device)
            diff = differing(outcome.outputs, {k: v.detach() for k, v in (again or {}).items() if v is not None})
            seconds = time_calls(outcome.module, inp, self.s.device, repeats) if repeats else math.nan
        except Exception as e:                    # a second call that fails: not repeatable
            return {"differing": {k: -1 for k in outcome.outputs}, "why": f"second call raised {type(e).__name__}: {e}"}
        out = {"differing": diff, "impl_seconds": seconds}
        if self.s.device.startswith("cuda") and repeats:
            moved = bytes_moved(inp)
            out["bytes_moved"] = moved
            out["floor_fraction"] = moved / copy_bandwidth(self.s.device) / seconds
        return out

    def annotate(self, rows: list[dict], speed: dict) -> None:
        for r in rows:
            if r["status"] in ("error", "skip") or not speed:
                continue
            n = speed["differing"].get(r["output"], 0)
            r["repeatable"] = n == 0
            r["differing_elements"] = max(n, 0)
            for k in ("impl_seconds", "bytes_moved", "floor_fraction"):
                if k in speed:
                    r[k] = speed[k]
            if n and self.s.require_repeatable and r["status"] == "pass":
                r["status"] = "fail"
                r["reason"] = speed.get("why") or (f"{r['output']} not repeatable: {n} elements differ between two "
                                                   f"calls on the same inputs (--require-repeatable)")


def bytes_moved(inp) -> int:
    """What a fused forward + backward must read and write at least: x, gate, dy in, y, dx, dgate out
    (each in its dtype; y and dx as x), and the weight in and dweight out."""
    n = inp.x.numel()
    row = 3 * inp.x.element_size() + 2 * inp.gate.element_size() + inp.dy.element_size()
    return n * row + 2 * inp.hidden * inp.weight.element_size()


_BANDWIDTH: dict = {}


def copy_bandwidth(device: str) -> float:
    """Bytes per second a device-to-device copy of 1 GiB moves (read + write), measured once."""
    if device not in _BANDWIDTH:
        import torch
        a = torch.empty(1 << 30, dtype=torch.uint8, device=device)
        b = torch.empty_like(a)
        b.copy_(a)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            b.copy_(a)
        end.record()
        end.synchronize()
        _BANDWIDTH[device] = 10 * 2 * a.numel() / (start.elapsed_time(end) / 1e3)
        del a, b
    return _BANDWIDTH[device]


def _mp_seconds(refs: CaseReferences) -> float:
    return sum(c.mp_seconds for c in refs.golden.values())

