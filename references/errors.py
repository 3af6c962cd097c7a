"""The two kinds of failure, at the bottom of the layers so every layer can raise them: the user's
input is wrong (UsageError: exit 2 and one line), or an implementation declines a case
(Unsupported: a `skip` row). Anything else that escapes is a bug in the harness and shows its
traceback, so it gets fixed."""


class UsageError(Exception):
    """Bad input from the user: a flag, a suite, budget or baseline file, a plug-in path."""


class Unsupported(Exception):
    """Raised by an implementation's factory or forward for a case it does not support (SPEC §3):
    the case gives `skip` rows with this reason, neither pass nor fail."""



def said(e: BaseException) -> str:
    """str(e), stripped; an exception whose own __str__ raises (an implementation's) still says what
    it is, and whoever reads it is not the one who fails."""
    try:
        return str(e).strip()
    except Exception:                   # noqa: BLE001 — the implementation's exception class, not ours
        return "(its message could not be read: its __str__ raised)"


def naming(e: BaseException, name: str) -> OSError | None:
    """`e` again, naming `name`, where it is an OSError that names no file but carries an errno (a
    write to a full disk: ENOSPC names neither the file nor the stream), its subclass kept (OSError
    picks it by the errno); None otherwise, for the caller to raise `e` itself."""
    if isinstance(e, OSError) and e.filename is None and e.errno is not None:
        return OSError(e.errno, e.strerror, name)
    return None


def out_of_memory(e: BaseException) -> bool:
    """The machine had no memory for the work (a case too big for it): MemoryError, torch's
    OutOfMemoryError (CUDA's included), or the CPU allocator's RuntimeError, which names no type
    of its own ("DefaultCPUAllocator: can't allocate memory")."""
    if isinstance(e, MemoryError) or any(c.__name__ == "OutOfMemoryError" for c in type(e).__mro__):
        return True
    return isinstance(e, RuntimeError) and "can't allocate memory" in said(e)
