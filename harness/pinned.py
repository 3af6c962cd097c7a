"""One top-level package imported from given roots only (harness bisect: each step judges its own
commit's code, in its judge and in the worker's implementation process alike)."""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys


class RootsFirst(importlib.abc.MetaPathFinder):
    """Finds one top-level package in the import roots only, ahead of every finder of sys.meta_path
    (editable installs put theirs in front of it too); not there is ModuleNotFoundError, never the
    installed copy. Its submodules follow its __path__, inside the roots."""

    def __init__(self, name: str, roots: list[str]):
        self.name, self.roots = name, list(roots)

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, self.roots)
        if spec is None:
            raise ModuleNotFoundError(f"no module named {fullname!r} under {', '.join(self.roots)}", name=fullname)
        return spec


def pin_imports(top: str, roots: list[str]) -> None:
    """From now on, `top` and its submodules come from `roots` only (any already imported — by a
    .pth at start-up, say — are forgotten: they are not this commit's)."""
    for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
        del sys.modules[name]
    sys.meta_path.insert(0, RootsFirst(top, list(roots)))
