"""One class out of its module file (harness.impls.modfile.load_class), and the HF adapters' classes
taken that way: the same code objects, bound to the same objects, the same bits as the class the
modeling module's import gives."""
from __future__ import annotations

import importlib
import sys
import types

import pytest
import torch

from harness.impls import hf
from harness.impls.modfile import NotSelfContained, load_class

FILE = '''"""a module file whose other imports must not run"""
from __future__ import annotations

import math
import this_module_does_not_exist  # noqa
from os import path, sep

SCALE = math.sqrt(4.0)


def helper(v):
    return v * SCALE


class Unused:
    raise RuntimeError("never executed")


class Wanted:
    """uses a helper, an imported module and one name of a multi-name import"""
    kind: int = sep

    def __call__(self, v):
        return helper(v) + len(path.join("a", "b"))


if True:
    GUARDED = 1


class Guarded:
    def __call__(self):
        return GUARDED
'''


@pytest.fixture
def module_file(tmp_path):
    p = tmp_path / "pkg" / "mod.py"
    p.parent.mkdir()
    p.write_text(FILE)
    return p


def test_the_class_runs_with_only_the_statements_it_uses(module_file):
    Wanted = load_class(module_file, "pkg", "Wanted")
    assert Wanted()(3.0) == 6.0 + len("a/b")            # helper, SCALE, math, path: all there
    assert Wanted.__call__.__code__.co_filename == str(module_file)
    assert Wanted.__call__.__code__.co_firstlineno == FILE.splitlines().index("    def __call__(self, v):") + 1
    assert Wanted.__annotations__ == {"kind": "int"}     # a string: the file's __future__ import is in force
    g = Wanted.__call__.__globals__
    assert "Unused" not in g and "this_module_does_not_exist" not in g and "Guarded" not in g
    assert g["sep"] is __import__("os").sep and "sys" not in g
    assert Wanted.__module__ == "harness_file.pkg"


def test_a_name_bound_under_a_compound_statement_is_not_self_contained(module_file):
    with pytest.raises(NotSelfContained, match="GUARDED"):
        load_class(module_file, "pkg", "Guarded")
    with pytest.raises(NotSelfContained, match="binds no Missing"):
        load_class(module_file, "pkg", "Missing")


REFUSED = {
    "augmented": "X = 1\nX += 1\n",
    "a call that changes it": "D = {}\nD.update(k=1)\nX = D\n",
    "a function's global": "X = 1\n\ndef init():\n    global X\n    X = 2\n",
    "a star import": "X = 1\nfrom math import *\n",
    "a match capture": "X = 1\nmatch 2:\n    case X:\n        pass\n",
    "try/except*": "try:\n    X = 1\nexcept* ValueError:\n    X = 2\n",
    "a dynamic read": "X = globals().get('Y', 1)\n",
}


@pytest.mark.parametrize("top", REFUSED.values(), ids=REFUSED.keys())
def test_a_name_bound_or_changed_otherwise_than_plainly_is_refused(tmp_path, top):
    p = tmp_path / "m.py"
    p.write_text(top + "\n\nclass K:\n    def get(self):\n        return X\n")
    with pytest.raises(NotSelfContained):
        load_class(p, "mpkg", "K")


def test_a_method_reading_a_global_nothing_binds_is_refused(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("class K:\n    @property\n    def get(self):\n        return NOWHERE\n")
    with pytest.raises(NotSelfContained, match="NOWHERE"):
        load_class(p, "mpkg", "K")


def test_hf_imports_the_module_where_the_class_is_not_self_contained(monkeypatch, tmp_path):
    models = tmp_path / "fakehf" / "models" / "tiny"
    models.mkdir(parents=True)
    (tmp_path / "fakehf" / "__init__.py").write_text("")
    (tmp_path / "fakehf" / "models" / "__init__.py").write_text("")
    (models / "__init__.py").write_text("")
    (models / "modeling_tiny.py").write_text("try:\n    import torch\nexcept ImportError:\n    torch = None\n\n"
                                             "class TinyNorm:\n    lib = torch\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))      # the stand-in package does not outlive the test
    c = hf.HfClass("hf-tiny", "tiny", "TinyNorm", "fused", "norm", "a stand-in")
    monkeypatch.setattr(type(c), "module", property(lambda self: f"fakehf.models.{self.model}.modeling_{self.model}"))
    monkeypatch.setattr(hf, "modeling_file", lambda c: models / "modeling_tiny.py")
    cls = hf.load.__wrapped__(c)
    assert cls.__module__ == "fakehf.models.tiny.modeling_tiny" and cls.lib is torch


def _functions(cls) -> dict:
    return {k: v for k, v in vars(cls).items() if isinstance(v, types.FunctionType)}


def _globals_used(code) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _globals_used(const)
    return names


@pytest.mark.parametrize("c", hf.CLASSES, ids=lambda c: c.name)
def test_every_hf_class_is_the_one_its_module_gives(c):
    if hf.missing(c):
        pytest.skip(hf.missing(c))
    ours = hf.load.__wrapped__(c)
    theirs = getattr(importlib.import_module(c.module), c.cls)
    assert ours is not theirs and ours.__qualname__ == theirs.__qualname__
    assert set(vars(ours)) == set(vars(theirs))
    assert [b.__name__ for b in ours.__mro__[1:]] == [b.__name__ for b in theirs.__mro__[1:]]
    assert ours.__mro__[1:] == theirs.__mro__[1:]
    mine, real = _functions(ours), _functions(theirs)
    assert mine.keys() == real.keys() and mine
    for name, f in mine.items():
        assert f.__code__ == real[name].__code__, name          # bytecode, constants, names, lines
        assert f.__defaults__ == real[name].__defaults__ and f.__kwdefaults__ == real[name].__kwdefaults__
        for g in _globals_used(f.__code__) & set(real[name].__globals__):
            assert f.__globals__.get(g) is real[name].__globals__[g], f"{name} uses {g}"
    for k, v in vars(theirs).items():                           # the hub decorator's marks, say
        if not isinstance(v, types.FunctionType) and k not in ("__module__", "__dict__", "__weakref__", "__doc__"):
            assert vars(ours)[k] == v, k


def test_an_hf_class_so_loaded_computes_the_same_bits():
    c = next(c for c in hf.CLASSES if c.name == "hf-qwen3next")
    if hf.missing(c):
        pytest.skip(hf.missing(c))
    theirs = getattr(importlib.import_module(c.module), c.cls)
    g = torch.Generator().manual_seed(0)
    x, gate, dy = (torch.randn(8, 64, generator=g).to(torch.bfloat16) for _ in range(3))
    outs = []
    for cls in (hf.load.__wrapped__(c), theirs):
        m = cls(64, eps=1e-5).to(torch.bfloat16)
        with torch.no_grad():
            m.weight.copy_(torch.linspace(0.5, 1.5, 64))
        xi, gi = x.clone().requires_grad_(), gate.clone().requires_grad_()
        y = m(xi, gi)
        y.backward(dy)
        outs.append([t.view(torch.int16) for t in (y, xi.grad, gi.grad, m.weight.grad)])
    assert all(torch.equal(a, b) for a, b in zip(*outs))


def test_the_harness_own_future_imports_do_not_reach_the_file(tmp_path):
    p = tmp_path / "plain.py"
    p.write_text("class Plain:\n    kind: int = 1\n")
    assert load_class(p, "plainpkg", "Plain").__annotations__ == {"kind": int}
