"""The run's environment, for reports: versions, device, git commit when known."""
from __future__ import annotations

import datetime
import platform
import subprocess

import torch

import harness


def environment(device: str) -> dict:
    env = {"harness": harness.__version__, "torch": torch.__version__, "python": platform.python_version(),
           "device": device, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if device.startswith("cuda") and torch.cuda.is_available():
        env["cuda"] = torch.version.cuda
        env["device_name"] = torch.cuda.get_device_name()
        from harness.references import fast, triton_reference    # the pass set for the big cases' references
        triton = fast.FUSED_BACKEND == "triton" and triton_reference.available()
        env["reference_pass"] = (f"from {fast.FUSED_MIN_ELEMENTS} elements: Triton for {fast.TRITON_MIN_HIDDEN}-"
                                 f"{fast.TRITON_MAX_HIDDEN} columns and eps >= {fast.TRITON_MIN_EPS:g}, else "
                                 "Inductor (a failed Triton pass falls back with a warning in the log)" if triton
                                 else f"from {fast.FUSED_MIN_ELEMENTS} elements: Inductor")
        try:
            import triton
            env["triton"] = triton.__version__
        except ImportError:
            pass
    else:
        env["device_name"] = platform.processor() or platform.machine()
    try:
        env["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                           timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        env["git_commit"] = "unknown"
    return env
