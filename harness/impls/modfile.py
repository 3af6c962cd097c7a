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
import dis
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
    """A class `load_class` cannot take out of its file alone (a name it uses is bound or changed by
    anything but a plain import, def, class or assignment at the file's top level, or read
    dynamically); the caller imports the file's module instead."""


_SIMPLE = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign,
           ast.Pass)
# What in a file, anywhere, could reach or change a module's globals unseen (names, attributes): the
# file is never taken apart (_refuse_file).
_WRITES_GLOBALS = ({"globals", "vars", "locals", "eval", "exec"}, {"_getframe", "f_globals", "modules"})
# Names a kept statement may not use: the module's own name differs here, and an import by name.
_DYNAMIC = {"__name__", "__import__"}
# Builtins a method may read: not the dunders, which a module has of its own (__doc__, __spec__...).
_BUILTINS = {k for k in vars(builtins) if not (k.startswith("__") and k.endswith("__"))}


def _bound(alias: ast.alias) -> str:
    """The name an import's alias binds (`import a.b` binds a)."""
    return (alias.asname or alias.name).split(".")[0]


def _binds(stmt: ast.stmt) -> list[str]:
    """The names a simple top-level statement binds (an import, a def, a class, an assignment)."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return [_bound(a) for a in stmt.names]
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    return []


def _executed(node: ast.AST):
    """The nodes of `node` that run when it runs (a def's decorators and defaults, not its body)."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo.extend([*getattr(n, "decorator_list", []), *n.args.defaults, *[d for d in n.args.kw_defaults if d]])
        else:
            todo.extend(ast.iter_child_nodes(n))


def _touched(stmt: ast.stmt) -> set[str]:
    """Every name a statement mentions or binds (nested defs, imports, handlers, match captures too)."""
    names = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
    names |= {b for s in ast.walk(stmt) if isinstance(s, ast.stmt) for b in _binds(s)}
    names |= {getattr(n, a) for n in ast.walk(stmt) for a in ("name", "rest")
              if isinstance(n, (ast.MatchAs, ast.MatchStar, ast.MatchMapping, ast.ExceptHandler))
              and isinstance(getattr(n, a, None), str)}
    return names


def _unbound(code, namespace: dict) -> set[str]:
    """The names the module code `code` (class bodies and functions nested in it included) reads as
    globals — a class body's own names apart — that neither `namespace` nor _BUILTINS holds."""
    ins = list(dis.get_instructions(code))
    stored = {i.argval for i in ins if i.opname in ("STORE_NAME", "DELETE_NAME")}
    if any(i.opname == "SETUP_ANNOTATIONS" for i in ins):      # a body's own __annotations__
        stored.add("__annotations__")
    out = {i.argval for i in ins if i.opname == "LOAD_GLOBAL" or (i.opname == "LOAD_NAME" and i.argval not in stored)}
    for const in code.co_consts:
        if isinstance(const, type(code)):
            out |= _unbound(const, namespace)
    return out - namespace.keys() - _BUILTINS


def _refuse_file(tree: ast.Module, path) -> None:
    """NotSelfContained for a file that could change its globals unseen (a star import; globals(),
    exec, a frame's globals, sys.modules), anywhere in it."""
    names, attrs = _WRITES_GLOBALS
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names):
            raise NotSelfContained(f"{path} has a star import (from {n.module} import *)")
        if (isinstance(n, ast.Name) and n.id in names) or (isinstance(n, ast.Attribute) and n.attr in attrs):
            raise NotSelfContained(f"{path} may change its globals through {getattr(n, 'id', None) or n.attr}")


def load_class(path: str | Path, package: str, cls: str) -> type:
    """Class `cls` of the module file `path` (of package `package`), executed with only the
    top-level statements it needs: the file's own source, compiled under its own file name and line
    numbers, in source order — the __future__ imports, the imports of the names it uses (each
    import statement cut to those names), and the defs and assignments it uses, transitively. Its
    methods are the file's code objects, bound to the same imported objects; what the file imports
    besides (a modeling file: the whole model stack, seconds) is never run, nor any side effect of
    it on other modules. NotSelfContained where the file could change its globals unseen (a star
    import, globals(), exec, sys.modules), where a name it uses is also bound or changed by any other
    top-level statement (an `if`, a `try`, an augmented assignment, a call, a walrus, a `global` in a
    function), where anything else in the file mentions what it keeps of the file's own (an alias, a
    registry) or, at import, the class itself, where it reads its module's name, and where the kept
    code reads a global they do not bind."""
    tree = ast.parse(importlib.util.decode_source(Path(path).read_bytes()), str(path))
    _refuse_file(tree, path)
    simple: dict[str, list] = {}
    tainted = {n for node in ast.walk(tree) if isinstance(node, ast.Global) for n in node.names}
    for i, stmt in enumerate(tree.body):
        docstring = i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
        walrus = any(isinstance(n, ast.NamedExpr) for n in _executed(stmt))
        if (not isinstance(stmt, _SIMPLE) and not docstring) or walrus:
            tainted |= _touched(stmt)
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
        if name in _DYNAMIC:
            raise NotSelfContained(f"{cls} reaches its module's globals through {name}")
        if name in tainted:
            raise NotSelfContained(f"{cls} uses {name}, which {path} binds or changes otherwise than plainly")
        for stmt in simple.get(name, ()):    # not bound at the top level: a local, an argument, a builtin
            if id(stmt) not in chosen and not isinstance(stmt, (ast.Import, ast.ImportFrom)):
                todo.extend(n.id for n in ast.walk(stmt) if isinstance(n, ast.Name))
            chosen.setdefault(id(stmt), set()).add(name)
    own = {n for st in tree.body if id(st) in chosen and not isinstance(st, (ast.Import, ast.ImportFrom))
           for n in chosen[id(st)]}
    for stmt in tree.body:                         # what is kept, changed by what is not
        if id(stmt) in chosen:
            continue
        mentioned = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)} & (own - {cls})
        mentioned |= {n.id for n in _executed(stmt) if isinstance(n, ast.Name)} & {cls}
        if mentioned:
            raise NotSelfContained(f"{cls}: {', '.join(sorted(mentioned))} also appears in {path}:{stmt.lineno}")
    body = []
    for stmt in tree.body:
        future = isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"
        if future or id(stmt) in chosen:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)) and not future:
                keep = [a for a in stmt.names if _bound(a) in chosen[id(stmt)]]
                stmt = ast.copy_location(type(stmt)(**{**{f: getattr(stmt, f) for f in stmt._fields}, "names": keep}),
                                         stmt)
            body.append(stmt)
    # dont_inherit: this module's own `from __future__ import annotations` must not reach the file's code
    code = compile(ast.fix_missing_locations(ast.Module(body=body, type_ignores=[])), str(path), "exec",
                   dont_inherit=True)
    namespace = {"__name__": f"{PREFIX}.{package}", "__package__": package, "__file__": str(path),
                 "__builtins__": builtins}
    exec(code, namespace)
    unbound = _unbound(code, namespace)
    if unbound:                                    # what the walk above missed, the bytecode says
        raise NotSelfContained(f"{cls} reads {', '.join(sorted(unbound))}, not bound by the statements it was taken with")
    return namespace[cls]
