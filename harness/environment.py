"""The run's environment, for reports: versions, device, and for each implementation under test the
package it comes from, its version and the git commit of its source (where it is a checkout)."""
from __future__ import annotations

import datetime
import functools
import importlib
import importlib.metadata
import platform
import subprocess
from pathlib import Path

import mpmath
import torch

from harness.references import package_version


def _git(directory: Path) -> str:
    try:
        run = lambda *a: subprocess.run(["git", "-C", str(directory), *a], capture_output=True,  # noqa: E731
                                        text=True, timeout=5)
        sha = run("rev-parse", "HEAD")
        if sha.returncode != 0:
            return ""
        dirty = run("status", "--porcelain", "--untracked-files=no").stdout.strip()
        return sha.stdout.strip() + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return ""


def implementation_source(impl, distributions=importlib.metadata.packages_distributions, git=_git) -> str:
    """'package version, git commit' of the module an implementation's factory comes from.
    `distributions()`: top-level import names to their distributions; `git(folder)`: its commit
    (environment() passes each cached for its call: one scan of every installed distribution's
    metadata and one git per folder, however many implementations share them)."""
    module = getattr(impl.factory, "__module__", None)
    if not module:
        return impl.source
    top = module.split(".")[0]
    dists = distributions().get(top, [])
    version = ""
    for d in dists:
        try:
            version = f"{d} {importlib.metadata.version(d)}"
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    try:
        where = Path(importlib.import_module(module).__file__).parent
    except Exception:
        where = None
    commit = git(where) if where is not None else ""
    parts = [p for p in (version or top, f"git {commit}" if commit else "") if p]
    return ", ".join(parts)


def environment(device: str, impls=(), reference_backend: str = "auto") -> dict:
    env = {"harness": package_version(), "torch": torch.__version__, "python": platform.python_version(),
           "device": device, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "threads": torch.get_num_threads(),
           # mpmath picks its integer backend at import (gmpy2 when installed, unless MPMATH_NOGMPY):
           # the certified values are the same, the time spent certifying is not
           "mpmath": f"{mpmath.__version__} ({mpmath.libmp.BACKEND} backend)"}
    if device.startswith("cuda") and torch.cuda.is_available():
        from harness.references.accel import FUSED_MIN_ELEMENTS, triton_regs
        env["cuda"] = torch.version.cuda
        env["device_name"] = torch.cuda.get_device_name()
        env["reference_pass"] = (f"backend {reference_backend}: from {FUSED_MIN_ELEMENTS} elements "
                                 + ("the Triton kernel where it fits, else Inductor" if triton_regs.available()
                                    and reference_backend == "auto" else "Inductor"))
        try:
            import triton
            env["triton"] = triton.__version__
        except ImportError:
            pass
    else:
        env["device_name"] = platform.processor() or platform.machine()
    git, distributions = functools.cache(_git), functools.cache(importlib.metadata.packages_distributions)
    env["git_commit (cwd)"] = git(Path.cwd()) or "not a git checkout"
    for impl in impls:
        env[f"impl {impl.name}"] = f"{impl.rounding.name}; {implementation_source(impl, distributions, git)}"
    return env
