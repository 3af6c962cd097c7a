"""The two kinds of failure, at the bottom of the layers so every layer can raise them: the user's
input is wrong (UsageError: exit 2 and one line), or an implementation declines a case
(Unsupported: a `skip` row). Anything else that escapes is a bug in the harness and shows its
traceback, so it gets fixed."""


class UsageError(Exception):
    """Bad input from the user: a flag, a suite, budget or baseline file, a plug-in path."""


class Unsupported(Exception):
    """Raised by an implementation's factory or forward for a case it does not support (SPEC §3):
    the case gives `skip` rows with this reason, neither pass nor fail."""

