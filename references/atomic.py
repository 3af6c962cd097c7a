"""Atomic file writes (golden store, reports, budget files): write beside the target, fsync, rename
over it, so a reader never sees half a file and a crash leaves the old one. The file gets the
permissions a plain open() would give it (0666 less the umask), not mkstemp's 0600."""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

from harness.references.errors import naming


@contextmanager
def atomic_write(path: Path | str, mode: str = "wb"):
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        named = naming(e, str(path))          # a full disk: say which file was being written
        if named is not None:
            raise named from e
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
