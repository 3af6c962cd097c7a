"""One Triton cache directory for the whole process, whatever compiles first.

Why: Inductor, when it compiles a kernel and TRITON_CACHE_DIR is unset, sets that variable to its
own directory (/tmp/torchinductor_USER/triton/0) for the rest of the process; when it finds its
graph in its cache it compiles nothing and leaves the variable alone. So in a sweep where
torch-compile runs before fla, a cold run stored fla's kernels and autotuning results in
Inductor's directory and the next run looked for them in Triton's own (~/.triton/cache): the
"warm" rerun compiled and autotuned fla all over again (bench/RESULTS.md, runs 9a and 9b). Pinning
the variable to Triton's default before anything compiles keeps every run looking where the last
one stored. A directory the user chose (TRITON_CACHE_DIR already set) is left as it is, and so is
an unset variable where Triton's default cannot be written.

Not pinned: scripts that bypass the command line (bench/*.py, pytest)."""
from __future__ import annotations

import importlib.util
import os


def triton_default_cache_dir() -> str:
    """Triton's own default: $TRITON_HOME/.triton/cache, TRITON_HOME defaulting to the home directory."""
    return os.path.join(os.environ.get("TRITON_HOME") or os.path.expanduser("~"), ".triton", "cache")


def _writable(path: str) -> bool:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK)


def pin_triton_cache_dir(environ: dict | None = None) -> str | None:
    """Set TRITON_CACHE_DIR to Triton's default unless already set, Triton is not installed (nothing
    to pin, no directory created in the home of a CPU-only user), or that directory cannot be
    written (a read-only or missing home: Inductor's own /tmp directory then keeps working, as
    before); returns the directory in force, None if left unset. (--jobs workers and bisect steps
    inherit it.)"""
    env = os.environ if environ is None else environ
    if "TRITON_CACHE_DIR" not in env and importlib.util.find_spec("triton") is not None:
        default = triton_default_cache_dir()
        if _writable(default):
            env["TRITON_CACHE_DIR"] = default
    return env.get("TRITON_CACHE_DIR")
