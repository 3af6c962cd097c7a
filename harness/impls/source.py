"""What an implementation's results were produced by, for `--resume` to key on: a hash of its
source. For a factory defined in a file, the file and every .py file beside it (a kernel's own
package usually keeps its kernels in sibling modules); for one without a file (defined at a prompt),
its source text; "" where neither can be read, which nothing matches, so its pairs always rerun."""
from __future__ import annotations

import hashlib
import inspect
from pathlib import Path


def _defining_file(factory) -> Path | None:
    target = inspect.unwrap(factory) if callable(factory) else factory
    for obj in (target, type(target)):
        try:
            f = inspect.getsourcefile(obj) or inspect.getfile(obj)
        except (TypeError, OSError):
            continue
        if f and Path(f).is_file():
            return Path(f).resolve()
    return None


def source_hash(impl) -> str:
    """SHA-256 (hex, first 16 digits) of the implementation's source, or ""."""
    if impl.factory is None:
        return ""
    h = hashlib.sha256()
    f = _defining_file(impl.factory)
    if f is not None:
        for p in sorted({f, *f.parent.glob("*.py")}):
            try:
                data = p.read_bytes()
            except OSError:
                continue
            h.update(p.name.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
        return h.hexdigest()[:16]
    try:
        h.update(inspect.getsource(impl.factory).encode())
    except (TypeError, OSError):
        return ""
    return h.hexdigest()[:16]
