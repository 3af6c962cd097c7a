"""One module file of an installed package, loaded without the package: the one home of "load a
kernel's file, not its package's __init__" (mamba_ssm's __init__ imports a compiled extension;
sglang's and vLLM's import their whole serving stacks), and of "one class of a file, not the rest of
the file" (`load_class`: a transformers modeling file imports the whole model stack for a norm
layer that needs torch alone).

`package_file` finds the file through `importlib.util.find_spec(top)` — which, for a top-level name,
reads the import system's finders and executes nothing — and the package's
`submodule_search_locations`, so it works for an installed wheel and for a bare folder laid out as
the package on PYTHONPATH. `load_file` executes that one file as a module of a private name, with
`stand_ins` — small modules an adapter writes for the helper imports the file makes (each documented
where it is written) — present in `sys.modules` while the file executes and removed afterwards, so
that nothing outside the loaded module ever sees them and a real package imported later is itself."""
from __future__ import annotations

import ast
import builtins
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


class NotSelfContained(Exception):
    """A class `load_class` cannot take out of its file alone (a name it uses is bound by a compound
    statement: an `if`, a `try`); the caller imports the file's module instead."""


def _binds(stmt: ast.stmt) -> list[str]:
    """The names a simple top-level statement binds (an import, a def, a class, an assignment)."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in stmt.names]
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    return []


def load_class(path: str | Path, package: str, cls: str) -> type:
    """Class `cls` of the module file `path` (of package `package`), executed with only the
    top-level statements it needs: the file's own source, compiled under its own file name and line
    numbers, in source order — the __future__ imports, the imports of the names it uses (each
    import statement cut to those names), and the defs and assignments it uses, transitively. Its
    methods are the file's code objects, bound to the same imported objects; what the file imports
    besides (a modeling file: the whole model stack, seconds) is never run. NotSelfContained where a
    name it uses is bound by anything else (an `if`, a `try`) at the file's top level."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), str(path))
    simple: dict[str, list] = {}
    compound: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            compound.update(n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
            compound.update(b for s in ast.walk(stmt) if isinstance(s, ast.stmt) for b in _binds(s))
        for name in _binds(stmt):
            simple.setdefault(name, []).append(stmt)
    if cls not in simple:
        raise NotSelfContained(f"{path} binds no {cls} at its top level")
    chosen: dict[int, set[str]] = {}               # id(statement) -> the names it is kept for
    todo, seen = [cls], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in compound:
            raise NotSelfContained(f"{cls} uses {name}, bound under a compound statement of {path}")
        for stmt in simple.get(name, ()):    # not bound at the top level: a local, an argument, a builtin
            if id(stmt) not in chosen and not isinstance(stmt, (ast.Import, ast.ImportFrom)):
                todo.extend(n.id for n in ast.walk(stmt) if isinstance(n, ast.Name))
            chosen.setdefault(id(stmt), set()).add(name)
    body = []
    for stmt in tree.body:
        future = isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"
        if future or id(stmt) in chosen:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)) and not future:
                keep = [a for a in stmt.names if (a.asname or a.name).split(".")[0] in chosen[id(stmt)]]
                stmt = ast.copy_location(type(stmt)(**{**{f: getattr(stmt, f) for f in stmt._fields}, "names": keep}),
                                         stmt)
            body.append(stmt)
    # dont_inherit: this module's own `from __future__ import annotations` must not reach the file's code
    code = compile(ast.fix_missing_locations(ast.Module(body=body, type_ignores=[])), str(path), "exec",
                   dont_inherit=True)
    namespace = {"__name__": f"{PREFIX}.{package}", "__package__": package, "__file__": str(path),
                 "__builtins__": builtins}
    exec(code, namespace)
    return namespace[cls]
