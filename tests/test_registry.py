"""The built-ins' registry: resolving one name lists only the module that has it."""
from harness.impls import registry


def test_each_module_names_what_it_lists():
    for m in registry._modules():
        assert hasattr(m, "NAMES"), f"{m.__name__} lists implementations but has no NAMES"
        assert set(m.NAMES) == {i.name for i in m.implementations()}, m.__name__


def test_resolving_a_name_lists_only_its_module():
    registry.forget_builtins()
    try:
        impl = registry.resolve("torch@accurate")
        assert impl.name == "torch" and impl.spec == "torch@accurate"
        assert list(registry._LISTED) == ["harness.impls.torch_ref"]        # not fla's, mamba's, the serving stacks'
        assert registry.builtin("no-such-impl") is None
        assert set(registry.builtins()) >= {"torch", "fla", "mamba", "hf-qwen3next", "torch-fastmath"}
    finally:
        registry.forget_builtins()
