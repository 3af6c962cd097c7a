"""One class out of its module file (harness.impls.modfile.load_class), and the HF adapters' classes
taken that way: the same code objects, bound to the same objects, the same bits as the class the
modeling module's import gives."""
from __future__ import annotations

import subprocess
import sys

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
    "a star import under a try": "X = 1\ntry:\n    from math import *\nexcept ImportError:\n    pass\n",
    "a dynamic write": "X = 1\n\ndef f():\n    globals()['X'] = 2\n",
    "sys.modules": "import sys\nX = 1\nsetattr(sys.modules[__name__], 'X', 6)\n",
    "an alias": "CFG = {'eps': 1}\nALIAS = CFG\nALIAS['eps'] = 2\nX = CFG\n",
    "a registry": "REG = []\n_ = REG.append(1)\nX = REG\n",
    "a registering decorator": "REG = []\n\ndef register(f):\n    REG.append(f)\n    return f\n\n\n"
                               "@register\ndef g():\n    pass\n\n\nX = REG\n",
    "a walrus": "Z = (X := 5)\n",
    "except ... as": "X = 1\ntry:\n    pass\nexcept Exception as X:\n    pass\n",
}


def class_k(tmp_path, source: str) -> type:
    """Class K taken out of a module file holding `source`."""
    p = tmp_path / "m.py"
    p.write_text(source)
    return load_class(p, "mpkg", "K")


@pytest.mark.parametrize("top", REFUSED.values(), ids=REFUSED.keys())
def test_a_name_bound_or_changed_otherwise_than_plainly_is_refused(tmp_path, top):
    with pytest.raises(NotSelfContained):
        class_k(tmp_path, top + "\n\nclass K:\n    def get(self):\n        return X\n")


def test_the_class_changed_at_import_by_another_statement_is_refused(tmp_path):
    with pytest.raises(NotSelfContained, match="K"):
        class_k(tmp_path, "class K:\n    pass\n\n\nsetattr(K, 'extra', 1)\n")
    # only used, later: taken
    assert class_k(tmp_path, "class K:\n    pass\n\n\ndef make():\n    return K()\n").__name__ == "K"


def test_a_method_reading_its_module_docstring_is_refused(tmp_path):
    with pytest.raises(NotSelfContained, match="__doc__"):
        class_k(tmp_path, '"""the module"""\n\n\nclass K:\n    def doc(self):\n        return __doc__\n')


def test_a_method_reading_a_global_nothing_binds_is_refused(tmp_path):
    with pytest.raises(NotSelfContained, match="NOWHERE"):
        class_k(tmp_path, "class K:\n    @property\n    def get(self):\n        return NOWHERE\n")


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


# Run in a fresh interpreter, so that no modeling module is imported before the classes are taken
# out of their files (an import's side effect on a shared object would hide a difference) — then
# the modules imported, and every class compared with the import's.
FIDELITY = r"""
import importlib, sys, types
import torch
from harness.impls import hf

def functions(cls):
    return {k: v for k, v in vars(cls).items() if isinstance(v, types.FunctionType)}

def used(code):
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= used(c)
    return names

def kwargs(c):
    kw = dict(eps=1e-5, zero_centered_gamma=False, dtype=torch.bfloat16, device="cpu")
    if c.order == "norm":
        return {**kw, "activation": c.activations[0]}
    return {**kw, "group_size": 16, "norm_before_gate": c.order != "gate"}

def bits(c):
    torch.manual_seed(0)
    m = hf.factory_for(c)(64, **kwargs(c))
    with torch.no_grad():
        m.weight.copy_(torch.linspace(0.5, 1.5, 64))
    x, gate, dy = (torch.randn(8, 64).to(torch.bfloat16) for _ in range(3))
    x.requires_grad_(), gate.requires_grad_()
    y = m(x, gate)
    y.backward(dy.to(y.dtype))
    return [t.detach().view(torch.int16 if t.element_size() == 2 else torch.int32) for t in (y, x.grad, gate.grad, m.weight.grad)]

classes = [c for c in hf.CLASSES if not hf.missing(c)]
ours = {c.name: hf.load(c) for c in classes}
ours_bits = {c.name: bits(c) for c in classes}
assert not [m for m in sys.modules if ".modeling_" in m and m.startswith("transformers.models.")], "imported too soon"
theirs = {c.name: getattr(importlib.import_module(c.module), c.cls) for c in classes}
hf.load = lambda c: theirs[c.name]
for c in classes:
    a, b = ours[c.name], theirs[c.name]
    assert a is not b and a.__qualname__ == b.__qualname__ and a.__mro__[1:] == b.__mro__[1:], c.name
    assert set(vars(a)) == set(vars(b)), c.name
    fa, fb = functions(a), functions(b)
    assert fa and fa.keys() == fb.keys(), c.name
    for k, f in fa.items():
        g = fb[k]
        assert f.__code__ == g.__code__, (c.name, k)            # bytecode, constants, names, lines
        assert f.__defaults__ == g.__defaults__ and f.__kwdefaults__ == g.__kwdefaults__, (c.name, k)
        for name in used(f.__code__) & set(g.__globals__):
            assert f.__globals__.get(name) is g.__globals__[name], (c.name, k, name)
    assert all(torch.equal(u, v) for u, v in zip(ours_bits[c.name], bits(c))), c.name
print("same", len(classes))
"""


def test_every_hf_class_is_the_one_its_module_gives():
    """Code objects (bytecode, constants, names, lines), the object behind every global they use,
    and a bf16 forward and backward bit for bit, for every HF class transformers has here."""
    if not [c for c in hf.CLASSES if not hf.missing(c)]:
        pytest.skip("transformers not installed")
    done = subprocess.run([sys.executable, "-c", FIDELITY], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["same", str(sum(1 for c in hf.CLASSES if not hf.missing(c)))]


def test_the_harness_own_future_imports_do_not_reach_the_file(tmp_path):
    assert class_k(tmp_path, "class K:\n    kind: int = 1\n").__annotations__ == {"kind": int}
