"""Two kinds of failure, never confused: the user's input is wrong (exit 2, one line), or the
harness itself is broken (a traceback, so it gets fixed)."""


class UsageError(Exception):
    """Bad input from the user: a flag, a suite file, a plug-in path, a budget file."""
