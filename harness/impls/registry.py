"""Where implementations come from: the built-ins (every module of this folder with an
`implementations()` function and the tuple `NAMES` of the names it lists — a new built-in or
adapter is one new file; resolving a name lists only the module that names it, so what the other
adapters wrap is not imported; an adapter imports its library at its first factory call, and a
module may say how to do that earlier with `prepare(name)`), `NAME=MODULE:ATTR`
plug-ins, and installed packages' entry points in the group `harness.impls`. Any of them may end in
`@CLASS` (accurate, fast, accurate+ftz, fast+ftz): the implementation judged at that math class
instead of its declared one."""
from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import re
import sys
from dataclasses import replace
from pathlib import Path

from harness import impls as _package
from harness.impls.base import Implementation, from_factory
from harness.references.errors import UsageError
from harness.references.mathclass import parse_math

ENTRY_POINT_GROUP = "harness.impls"
# An --impl NAME=MODULE:ATTR (harness.bisect and its judge read the module from it too).
PLUGIN_SPEC = re.compile(r"^(?P<name>[A-Za-z0-9_.\-]+)=(?P<module>[A-Za-z_][\w.]*):(?P<attr>[A-Za-z_][\w.]*)$")
# Names pandas would read back as missing values: never an implementation's name (results.csv).
RESERVED = {"", "na", "nan", "n/a", "null", "none", "<na>", "-nan", "#n/a", "nat"}
# Each module's listed implementations, by module name, once listed.
_LISTED: dict[str, dict[str, Implementation]] = {}


def _modules() -> list:
    """The modules of harness.impls that list implementations. Importing one is cheap: what an
    adapter wraps (fla, Triton, mamba_ssm, a serving stack) is imported when it is listed."""
    mods = [importlib.import_module(f"{_package.__name__}.{m.name}")
            for m in sorted(pkgutil.iter_modules(_package.__path__), key=lambda m: m.name)]
    return [m for m in mods if hasattr(m, "implementations")]


def _listed(module) -> dict[str, Implementation]:
    if module.__name__ not in _LISTED:
        _LISTED[module.__name__] = {i.name: replace(i, spec=i.name)       # a worker resolves it by name
                                    for i in module.implementations()}
    return _LISTED[module.__name__]


def builtins() -> dict[str, Implementation]:
    """Every built-in implementation, by name (optional ones say why they are unavailable)."""
    return {k: v for m in _modules() for k, v in _listed(m).items()}


def _module_of(name: str):
    """The module of harness.impls whose NAMES has `name`, or None."""
    return next((m for m in _modules() if name in m.NAMES), None)


def builtin(name: str) -> Implementation | None:
    """The built-in implementation `name`, listing only the module whose NAMES has it (resolving
    `torch` does not import fla); None where no built-in has that name."""
    m = _module_of(name)
    return None if m is None else _listed(m).get(name)


def prepare(name: str) -> None:
    """List the built-in `name` and import what it wraps, where its module says how (`prepare(name)`:
    an adapter imports its library at the first factory call, not when listed)."""
    impl = builtin(name)
    if impl is not None and impl.unavailable is None and hasattr(m := _module_of(name), "prepare"):
        m.prepare(name)


def check_name(name: str) -> str:
    if name.strip().lower() in RESERVED:
        raise UsageError(f"--impl {name!r}: a name that reads as a missing value in CSV files; choose another")
    return name


def load_plugin(spec: str) -> Implementation:
    """`NAME=MODULE:ATTR`, MODULE importable from the current directory or PYTHONPATH."""
    m = PLUGIN_SPEC.match(spec)
    if not m:
        raise UsageError(f"--impl {spec!r}: expected a built-in name ({', '.join(builtins())}), an "
                         f"installed entry point's name, or NAME=MODULE:ATTR")
    name, module, attr = check_name(m["name"]), m["module"], m["attr"]
    if str(Path.cwd()) not in sys.path and "" not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise UsageError(f"--impl {name}: cannot import module {module!r}: {e}") from None
    except BaseException as e:          # its own import-time failure (even sys.exit) is the user's to fix
        if isinstance(e, KeyboardInterrupt):
            raise
        raise UsageError(f"--impl {name}: importing {module!r} raised {type(e).__name__}: {e}") from None
    obj = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"--impl {name}: module {module!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return from_factory(name, obj, f"{module}:{attr}", spec=spec)


def _from_entry_point(ep) -> Implementation:
    """An installed entry point's implementation, its module imported (one that fails to load is
    an Implementation saying so)."""
    source = f"entry point {ep.value}"
    try:
        factory = ep.load()
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        return Implementation(ep.name, None, unavailable=f"{source} failed to load: {e}", source=source, spec=ep.name)
    return from_factory(check_name(ep.name), factory, source, spec=ep.name)


def resolve(spec: str) -> Implementation:
    """A built-in name, an entry point's name, or NAME=MODULE:ATTR; each optionally `@CLASS`."""
    if "@" in spec:
        base, _, label = spec.rpartition("@")
        try:
            mc = parse_math(label)
        except UsageError as e:
            raise UsageError(f"--impl {spec!r}: {e}") from None
        return resolve(base).with_math(mc)
    found = builtin(spec)
    if found is not None:
        return found
    if "=" in spec:
        return load_plugin(spec)
    # only the entry point named is loaded: another's import (slow, hanging, failing) is not this one's
    eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    named = [ep for ep in eps if ep.name == spec]
    if named:
        return _from_entry_point(named[-1])
    installed = list(dict.fromkeys(ep.name for ep in eps))
    raise UsageError(f"--impl {spec!r}: unknown implementation; built-ins: {', '.join(builtins())}"
                     + (f"; installed: {', '.join(installed)}" if installed else "") + "; or NAME=MODULE:ATTR")


def resolve_all(specs: list[str]) -> list[Implementation]:
    impls = [resolve(s) for s in specs]
    names = [i.name for i in impls]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise UsageError(f"--impl: name {sorted(dup)[0]!r} given twice")
    return impls
