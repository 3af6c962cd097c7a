"""Where implementations come from: built-ins by short name, `NAME=MODULE:ATTR` plug-ins, and
installed packages' entry points in the group `harness.impls`.

A new built-in goes into BUILTINS below (one line and a factory); a plug-in needs no change here."""
from __future__ import annotations

import importlib
import importlib.metadata
import re
import sys
from pathlib import Path

from harness.errors import UsageError
from harness.impls import fla_adapter, te_adapter, torch_ref
from harness.impls.base import ROUNDINGS, Implementation

ENTRY_POINT_GROUP = "harness.impls"


def _builtins() -> dict[str, Implementation]:
    return {
        "torch": Implementation("torch", torch_ref.chain, "chain",
                                notes="eager PyTorch op chain; n rounded to x's dtype"),
        "torch-fused": Implementation("torch-fused", torch_ref.fused, "fused",
                                      notes="eager PyTorch, no intermediate rounding"),
        # Inductor elides the n -> x.dtype -> float32 round trip unless emulate_precision_casts
        # is set (measured: bench/RESULTS.md), so the default compile realises the fused model.
        "torch-compile": Implementation("torch-compile", torch_ref.compiled, "fused",
                                        notes="torch.compile of the chain, Inductor defaults"),
        "torch-compile-emulate": Implementation(
            "torch-compile-emulate", torch_ref.compiled_emulate, "chain",
            notes="torch.compile of the chain with emulate_precision_casts=True"),
        "fla": fla_adapter.implementation(),
        "te": te_adapter.implementation(),
    }


BUILTIN_NAMES = ("torch", "torch-fused", "torch-compile", "torch-compile-emulate", "fla", "te")
CPU_BUILTINS = ("torch", "torch-fused", "torch-compile", "torch-compile-emulate")
_SPEC = re.compile(r"^(?P<name>[A-Za-z0-9_.\-]+)=(?P<module>[A-Za-z_][\w.]*):(?P<attr>[A-Za-z_][\w.]*)$")


def _with_factory(name: str, factory, source: str) -> Implementation:
    if not callable(factory):
        raise UsageError(f"--impl {name}: {source} is not callable")
    rounding = getattr(factory, "rounding", "chain")
    if rounding not in ROUNDINGS:
        raise UsageError(f"--impl {name}: {source}.rounding is {rounding!r}; expected one of {', '.join(ROUNDINGS)}")
    act = getattr(factory, "act_follows", "x")
    if act not in ("x", "weight"):
        raise UsageError(f"--impl {name}: {source}.act_follows is {act!r}; expected 'x' or 'weight'")
    devices = getattr(factory, "devices", ("cpu", "cuda"))
    devices = (devices,) if isinstance(devices, str) else tuple(devices)
    if not devices or any(d not in ("cpu", "cuda") for d in devices):
        raise UsageError(f"--impl {name}: {source}.devices is {devices!r}; expected 'cpu' and/or 'cuda'")
    return Implementation(name, factory, rounding, act, devices, source=source)


def load_plugin(spec: str) -> Implementation:
    """`NAME=MODULE:ATTR`, MODULE importable from the current directory or PYTHONPATH."""
    m = _SPEC.match(spec)
    if not m:
        raise UsageError(f"--impl {spec!r}: expected a built-in name ({', '.join(BUILTIN_NAMES)}) "
                         f"or NAME=MODULE:ATTR")
    name, module, attr = m["name"], m["module"], m["attr"]
    if str(Path.cwd()) not in sys.path and "" not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise UsageError(f"--impl {name}: cannot import module {module!r}: {e}") from None
    except Exception as e:  # the plug-in's own import-time failure is the user's to fix
        raise UsageError(f"--impl {name}: importing {module!r} raised {type(e).__name__}: {e}") from None
    obj = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"--impl {name}: module {module!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return _with_factory(name, obj, f"{module}:{attr}")


def entry_point_impls() -> dict[str, Implementation]:
    out = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            factory = ep.load()
        except Exception as e:
            out[ep.name] = Implementation(ep.name, None, unavailable=f"entry point {ep.value} failed to load: {e}",
                                          source=f"entry point {ep.value}")
            continue
        out[ep.name] = _with_factory(ep.name, factory, f"entry point {ep.value}")
    return out


def resolve(spec: str) -> Implementation:
    builtins = _builtins()
    if spec in builtins:
        return builtins[spec]
    if "=" in spec:
        return load_plugin(spec)
    eps = entry_point_impls()
    if spec in eps:
        return eps[spec]
    raise UsageError(f"--impl {spec!r}: unknown implementation; built-ins: {', '.join(BUILTIN_NAMES)}"
                     + (f"; installed: {', '.join(eps)}" if eps else "") + "; or NAME=MODULE:ATTR")


def resolve_all(specs: list[str]) -> list[Implementation]:
    impls = [resolve(s) for s in specs]
    names = [i.name for i in impls]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise UsageError(f"--impl: name {sorted(dup)[0]!r} given twice")
    return impls


def available_impls() -> dict[str, Implementation]:
    return {**_builtins(), **entry_point_impls()}
