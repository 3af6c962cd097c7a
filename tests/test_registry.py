"""The built-ins' registry: resolving one name lists only the module that has it."""
from harness.impls import registry


def test_each_module_names_what_it_lists_and_no_name_twice():
    seen: set = set()
    for m in registry._modules():
        assert hasattr(m, "NAMES"), f"{m.__name__} lists implementations but has no NAMES"
        assert set(m.NAMES) == {i.name for i in m.implementations()}, m.__name__
        assert not seen & set(m.NAMES), f"{m.__name__} names what another module names"
        seen |= set(m.NAMES)


def test_resolving_a_name_lists_only_its_module():
    registry._LISTED.clear()
    try:
        impl = registry.resolve("torch@accurate")
        assert impl.name == "torch" and impl.spec == "torch@accurate"
        assert list(registry._LISTED) == ["harness.impls.torch_ref"]        # not fla's, mamba's, the serving stacks'
        assert registry.builtin("no-such-impl") is None
        assert set(registry.builtins()) >= {"torch", "fla", "mamba", "hf-qwen3next", "torch-fastmath"}
    finally:
        registry._LISTED.clear()


def test_a_spare_lists_the_command_lines_builtins():
    from harness.commands import builtin_names
    from harness.pipeline.serve import preload
    assert builtin_names(["torch", "torch@fast", "mine=pkg.mod:make@fast", "fla@accurate", "ep@fast", "a,b"]) \
        == ("torch", "fla", "ep")
    registry._LISTED.clear()
    try:
        preload(["torch", "no-such-impl"])          # an unknown name is the pair's to report, not the spare's
        assert "harness.impls.torch_ref" in registry._LISTED and "harness.impls.fla_adapter" not in registry._LISTED
    finally:
        registry._LISTED.clear()


def test_a_spare_imports_what_an_available_adapter_wraps(monkeypatch):
    """preload calls the module's prepare(name) for an available entry only, and a prepare that
    raises is the first pair's to report."""
    import types
    from harness.impls.base import Implementation
    from harness.pipeline.serve import preload
    prepared: list = []

    def prepare(name):
        prepared.append(name)
        if name == "raises":
            raise ImportError("broken")
    listed = [Implementation("ok", lambda *a, **k: None), Implementation("raises", lambda *a, **k: None),
              Implementation("absent", None, unavailable="not installed")]
    fake = types.SimpleNamespace(__name__="fake_adapter", NAMES=("ok", "raises", "absent"),
                                 implementations=lambda: listed, prepare=prepare)
    monkeypatch.setattr(registry, "_modules", lambda: [fake])
    registry._LISTED.clear()
    try:
        preload(["ok", "raises", "absent", "no-such-impl"])
        assert prepared == ["ok", "raises"]
    finally:
        registry._LISTED.clear()
