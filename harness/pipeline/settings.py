"""What every pair of a run shares besides its case and implementation (Settings, sent to each
process of the pipeline), where a case's references and analysis run, and the command that
replays a pair."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from harness.cases.case import Case

# Where a case's float64 references and analysis run. On a GPU, every small kernel and host sync of
# the analysis waits its turn behind the other workers' contexts (docs/performance.md: a 32x127
# case's analysis took 1.3 s there and 0.02 s on one CPU core): below this many elements they run
# on the CPU; bigger cases, whose float64 work the GPU does far faster, stay on the device.
ANALYSIS_ON_CPU_BELOW = 1 << 18


@dataclass(frozen=True)
class Settings:
    device: str = "cpu"
    overrides: tuple = ()
    override_path: str = ""
    golden_dir: Path | None = None
    reference_backend: str = "auto"
    suite_ref: str = "quick"                 # what `--cases` replay commands name
    impl_specs: dict = field(default_factory=dict)     # name -> --impl text, for replay commands
    impl_hashes: dict = field(default_factory=dict)    # name -> hash of its source (harness.impls.source)
    repeats: int | None = None               # warm timed calls per pair (None: 5 on CUDA, 3 on the CPU; 0: none)
    allow_nondeterministic: bool = False     # a later call on the same inputs may give other bits
    models: tuple = ()                       # more (model name, MathClass) references to check (harness identify)
    top: int = 1                             # elements explained per measured check (harness replay: more)
    timeout: float | None = None             # the sweep's --timeout where not the default: its replay commands say it

    @property
    def timed_calls(self) -> int:
        if self.repeats is not None:
            return self.repeats
        return 5 if self.device.startswith("cuda") else 3


def analysis_device(case: Case, device: str) -> str:
    if device.startswith("cuda") and math.prod(case.shape) < ANALYSIS_ON_CPU_BELOW:
        return "cpu"
    return device


def spec_of(impl, s: Settings) -> str:
    """What recreates the implementation: its --impl text, else (an API factory) MODULE:QUALNAME."""
    return s.impl_specs.get(impl.name) or impl.spec or impl.source


def replay_command(case: Case, spec: str, suite_ref: str, device: str = "", budgets: str = "",
                   timeout: float | None = None) -> str:
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
    if timeout is not None:
        cmd += f" --timeout {timeout:g}"
    return cmd


def replay_of(case: Case, impl, s: Settings) -> str:
    spec = s.impl_specs.get(impl.name, impl.spec or impl.name)
    return replay_command(case, spec, s.suite_ref, s.device, s.override_path, s.timeout) if spec else ""
