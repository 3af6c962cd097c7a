"""Whether a process forked from this one now can use CUDA: the one check before the harness forks
a process that may (a worker template's workers, a worker's implementation process).

A child forked after its parent started CUDA's driver cannot use CUDA. torch refuses at the child's
first CUDA call once its own lazy init ran in the parent (`torch.cuda.is_initialized()`); but the
driver can also be started without torch knowing — by an import (Dynamo's and Inductor's entry
modules, transformers' Qwen3-Next modeling module: docs/performance.md §13) or by a start-up hook
of the interpreter (a sitecustomize or a .pth file calling cuInit) — and then the child fails at its
first CUDA call with an initialisation error that names no cause. The driver's own threads show
both: on Linux it names them `cuda…` (`cuda00001400006` once cuInit has run, `cuda-EvtHandlr`
with a context; H200, driver 580). Any thread so named counts: from Python 3.14 a Python thread's
name is its OS name too, and one named `cuda…` started before the fork would read as the driver."""
from __future__ import annotations

import os
import sys

TASKS = "/proc/self/task"


def driver_threads(tasks: str = TASKS) -> list[str]:
    """The names of this process's threads that CUDA's driver started (empty where /proc is not
    readable: nothing is claimed then)."""
    try:
        ids = os.listdir(tasks)
    except OSError:
        return []
    names = []
    for tid in ids:
        try:
            with open(os.path.join(tasks, tid, "comm")) as f:
                name = f.read().strip()
        except OSError:                       # the thread ended meanwhile
            continue
        if name.startswith("cuda"):
            names.append(name)
    return sorted(names)


def cuda_started() -> str:
    """Why a child forked now could not use CUDA, or "" where it could."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "torch had initialised CUDA"
    threads = driver_threads()
    if threads:
        return (f"CUDA's driver was running (its thread {threads[0]!r}), started by an import or by a "
                f"start-up hook of the interpreter (a sitecustomize or .pth file)")
    return ""


def unusable(started_before_fork: str, device: str) -> str:
    """What every pair of a forked implementation's process says where its worker had started CUDA
    before the fork (`started_before_fork`, cuda_started's reason) and the sweep is on a CUDA device;
    "" where the process can run its pairs."""
    if not started_before_fork or not device.startswith("cuda"):
        return ""
    return (f"this implementation's process cannot use CUDA: its worker forked it after CUDA had started "
            f"there ({started_before_fork}); run with --isolate inline, or remove what starts CUDA")
