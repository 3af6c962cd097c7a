"""One module file of an installed package, loaded without the package: the one home of "load a
kernel's file, not its package's __init__" (mamba_ssm's __init__ imports a compiled extension;
sglang's and vLLM's import their whole serving stacks).

`package_file` finds the file through `importlib.util.find_spec(top)` — which, for a top-level name,
reads the import system's finders and executes nothing — and the package's
`submodule_search_locations`, so it works for an installed wheel and for a bare folder laid out as
the package on PYTHONPATH. `load_file` executes that one file as a module of a private name, with
`stand_ins` — small modules an adapter writes for the helper imports the file makes (each documented
where it is written) — present in `sys.modules` while the file executes and removed afterwards, so
that nothing outside the loaded module ever sees them and a real package imported later is itself."""
from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType

# The prefix of every loaded module's name: never the name of a real module.
PREFIX = "harness_file"
_LOCK = threading.Lock()          # sys.modules is process-global while stand-ins are in it


def package_file(top: str, candidates: tuple[str, ...], needs: tuple[str, ...] = ()) -> tuple[Path | None, str]:
    """(the first of `candidates` — paths relative to the package folder — that exists, "") or
    (None, why not); `needs`: the modules the file imports itself (found, never imported), each
    of which must be installed too."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError) as e:
        return None, f"{top}: {e}"
    if spec is None or not spec.submodule_search_locations:
        return None, f"{top} not installed"
    for folder in spec.submodule_search_locations:
        for rel in candidates:
            path = Path(folder) / rel
            if path.is_file():
                missing = [m for m in needs if importlib.util.find_spec(m) is None]
                if missing:
                    return None, f"{top}'s {rel} needs {' and '.join(missing)}, not installed"
                return path, ""
    return None, f"{top} (at {', '.join(spec.submodule_search_locations)}) has no {' or '.join(candidates)}"


def load_file(path: str | Path, name: str, stand_ins: dict[str, ModuleType] | None = None) -> ModuleType:
    """Execute `path` as module `PREFIX.name` (a dotted `name` gives it a package, so that its
    relative imports resolve to stand-ins named `PREFIX.<package>.<module>`), with `stand_ins`
    (import name -> module) in sys.modules only while it executes. Never registered in sys.modules."""
    full = f"{PREFIX}.{name}"
    spec = importlib.util.spec_from_file_location(full, str(path))
    module = importlib.util.module_from_spec(spec)
    stand_ins = stand_ins or {}
    with _LOCK:
        saved = {k: sys.modules[k] for k in stand_ins if k in sys.modules}
        sys.modules.update(stand_ins)
        try:
            spec.loader.exec_module(module)
        finally:
            for k in stand_ins:
                sys.modules.pop(k, None)
            sys.modules.update(saved)
    return module


def stand_in(name: str, doc: str, **attrs) -> ModuleType:
    """A stand-in module `name` holding `attrs`; `doc` says why it does not change the arithmetic."""
    m = ModuleType(name, doc)
    m.__dict__.update(attrs)
    return m
