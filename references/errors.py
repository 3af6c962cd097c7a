"""The two kinds of failure, at the bottom of the layers so every layer can raise them: the user's
input is wrong (UsageError: exit 2 and one line), or an implementation declines a case
(Unsupported: a `skip` row). Anything else that escapes is a bug in the harness and shows its
traceback, so it gets fixed."""


class UsageError(Exception):
    """Bad input from the user: a flag, a suite, budget or baseline file, a plug-in path."""


class Unsupported(Exception):
    """Raised by an implementation's factory or forward for a case it does not support (SPEC §3):
    the case gives `skip` rows with this reason, neither pass nor fail."""



def out_of_memory(e: BaseException) -> bool:
    """The machine had no memory for the work (a case too big for it): MemoryError, torch's
    OutOfMemoryError (CUDA's included), or the CPU allocator's RuntimeError, which names no type
    of its own ("DefaultCPUAllocator: can't allocate memory")."""
    if isinstance(e, MemoryError) or any(c.__name__ == "OutOfMemoryError" for c in type(e).__mro__):
        return True
    if not isinstance(e, RuntimeError):
        return False
    try:
        return "can't allocate memory" in str(e)
    except Exception:                   # noqa: BLE001 — a plug-in's exception whose __str__ raises: not the allocator's
        return False
