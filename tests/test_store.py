"""Golden store (references/store.py): round trip, corruption and wrong-input detection, metadata,
no pickle, and the runner's use of it."""
import inspect
import json
import re
import warnings

import numpy as np
import pytest
import torch

from harness.references import store
from harness.references.bundle import build
from harness.references.exact import Inputs
from harness.references.formats import fmt_of
from harness.references.store import cached_build, key_for, load, load_checked, path_for, refs_to, save
from tests.conftest import make_inputs

PARAMS = {"shape": [3, 40], "dtype": "bf16", "seed": 7, "eps": 1e-5}


def _inputs(seed=7, shape=(3, 40)):
    return make_inputs(shape, torch.bfloat16, seed=seed, gate_dtype=torch.float32)


def _midpoint_inputs():
    # n[0] = 0.75*(1 + 2**-7) sits exactly on a bf16 midpoint: the y/dgate goldens need mpmath
    g = 1 + 2 ** -7
    return Inputs(torch.tensor([3.0, 4.0]), torch.tensor([0.0, 1.0]), torch.tensor([g, 1.0]),
                  torch.tensor([1.0, 1.0]), 3.5, False)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float64).view(torch.int64)


def assert_same_refs(a, b):
    assert set(a.values) == set(b.values) and set(a.gauges) == set(b.gauges)
    for k in a.values:
        assert torch.equal(a.values[k], b.values[k]), k
        assert torch.equal(_bits(a.values[k]), _bits(b.values[k])), k     # signed zeros too
        assert torch.equal(a.gauges[k], b.gauges[k]), k
    assert set(a.golden) == set(b.golden)
    for k, c in a.golden.items():
        d = b.golden[k]
        assert torch.equal(_bits(c.golden), _bits(d.golden)), k
        assert torch.equal(_bits(c.value64), _bits(d.value64)), k
        assert (c.flagged, c.certified, c.uncertified) == (d.flagged, d.certified, d.uncertified), k


def _no_store_warnings(record):
    return [w for w in record if "golden store" in str(w.message)] == []


def test_round_trip(tmp_path):
    inp = _inputs()
    refs = build(inp)
    for out, fmt in store.output_formats(inp):
        refs.certified(out, fmt)
    key = key_for(inp, PARAMS)
    path = save(tmp_path, key, refs, PARAMS)
    assert path == tmp_path / f"{key}.npz" and path.exists()
    assert list(tmp_path.iterdir()) == [path]                # no temporary left behind
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        back = load(tmp_path, key, inp)
    assert back is not None and _no_store_warnings(rec)
    assert_same_refs(refs, back)
    assert back.inputs is inp
    # a loaded bundle still certifies further formats and builds model references
    back.certified("y", fmt_of("fp16"))
    back.model("chain", fmt_of("bf16"), "y")


def test_round_trip_keeps_mpmath_decided_goldens(tmp_path):
    inp = _midpoint_inputs()
    refs = cached_build(inp, {"case": "midpoint"}, tmp_path, formats=[("dgate", fmt_of("bf16"))])
    # gate 0: dgate = dy n / 2, so dgate[0] = n[0] / 2 is a bf16 midpoint too
    assert refs.golden["dgate:bf16"].flagged >= 1 and refs.golden["dgate:bf16"].certified >= 1
    back = load(tmp_path, key_for(inp, {"case": "midpoint"}), inp)
    assert back is not None
    assert_same_refs(refs, back)
    assert back.golden["dgate:bf16"].golden[0].item() == (0.75 + 2 * 2 ** -8) / 2   # 193.5 q -> 194 q (even)


def test_metadata_present(tmp_path):
    inp = _inputs()
    cached_build(inp, PARAMS, tmp_path)
    key = key_for(inp, PARAMS)
    with np.load(path_for(tmp_path, key), allow_pickle=False) as z:
        meta = json.loads(str(z["meta"][()]))
        names = set(z.files)
    assert meta["key"] == key and re.fullmatch(r"[0-9a-f]{64}", key)
    assert meta["params"] == PARAMS
    assert set(meta["versions"]) >= {"torch", "mpmath", "harness"}
    assert meta["versions"]["torch"] == torch.__version__
    assert meta["mpmath_dps"] == store.mp.DEFAULT_DPS
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", meta["created"])
    assert re.fullmatch(r"[0-9a-f]{64}", meta["checksum"])
    assert set(meta["golden"]) == {"y:bf16", "dx:bf16", "dgate:fp32", "dweight:bf16"}
    for q in ("y", "dx", "dgate", "dweight"):
        assert f"value.{q}" in names and f"gauge.{q}" in names


def test_key_depends_on_params_and_every_input_bit():
    inp = _inputs()
    k = key_for(inp, PARAMS)
    assert k == key_for(_inputs(), dict(reversed(list(PARAMS.items()))))   # canonical JSON
    assert k != key_for(inp, {**PARAMS, "seed": 8})
    for name in ("x", "gate", "weight", "dy"):
        t = getattr(inp, name).clone()
        bits = t.view(torch.int16 if t.element_size() == 2 else torch.int32)
        bits.reshape(-1)[5] ^= 1                                          # one ulp on one element
        other = Inputs(**{**inp.__dict__, name: t})
        assert key_for(other, PARAMS) != k, name
    # same values in another dtype is another case
    assert key_for(Inputs(inp.x.float(), inp.gate, inp.weight, inp.dy, inp.eps, False), PARAMS) != k
    assert key_for(Inputs(inp.x, inp.gate, inp.weight, inp.dy, inp.eps * (1 + 2 ** -52), False), PARAMS) != k
    assert key_for(Inputs(inp.x, inp.gate, inp.weight, inp.dy, inp.eps, True), PARAMS) != k


def test_flipped_byte_detected_and_regenerated(tmp_path):
    inp = _inputs()
    refs = cached_build(inp, PARAMS, tmp_path)
    key = key_for(inp, PARAMS)
    path = path_for(tmp_path, key)
    good = path.read_bytes()
    # a byte inside the float64 data of value.y
    with np.load(path, allow_pickle=False) as z:
        target = np.ascontiguousarray(z["value.y"]).tobytes()
    pos = good.find(target[:64]) + 37
    assert pos > 37
    bad = bytearray(good)
    bad[pos] ^= 0x10
    path.write_bytes(bytes(bad))
    with pytest.warns(UserWarning, match=r"golden store: .*" + key + r"\.npz: .*; regenerating"):
        assert load(tmp_path, key, inp) is None
    with pytest.warns(UserWarning, match="regenerating"):
        again = cached_build(inp, PARAMS, tmp_path)
    assert_same_refs(refs, again)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                   # the rewritten file is valid: no warning
        assert load(tmp_path, key, inp) is not None
    assert path.read_bytes() != bytes(bad)


def test_every_flipped_byte_is_rejected_or_harmless(tmp_path):
    """Flip bytes all over the file: load either rejects it (None + warning) or, where the byte is
    one zip does not use (e.g. a timestamp), returns exactly the saved references."""
    inp = _inputs(shape=(2, 16))
    refs = cached_build(inp, PARAMS, tmp_path)
    key = key_for(inp, PARAMS)
    path = path_for(tmp_path, key)
    good = path.read_bytes()
    rejected = tried = 0
    for pos in range(0, len(good), max(1, len(good) // 400)):
        tried += 1
        bad = bytearray(good)
        bad[pos] ^= 0xFF
        path.write_bytes(bytes(bad))
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            back = load(tmp_path, key, inp)
        if back is None:
            rejected += 1
            assert any("golden store" in str(w.message) for w in rec), pos
        else:
            assert_same_refs(refs, back)
    assert rejected > 0.75 * tried          # the rest are zip bytes that do not reach any data


def _load_after_edit(tmp_path, edit):
    """Store one case, rewrite its .npz (a valid zip) with `edit` applied to its arrays, load it back."""
    inp = _inputs()
    cached_build(inp, PARAMS, tmp_path)
    key = key_for(inp, PARAMS)
    path = path_for(tmp_path, key)
    with np.load(path, allow_pickle=False) as z:
        files = {k: z[k] for k in z.files}
    edit(files)
    with open(path, "wb") as f:
        np.savez(f, **files)
    return load_checked(tmp_path, key, inp)


def test_tampered_array_with_valid_zip_fails_checksum(tmp_path):
    def nudge_golden(files):
        files["golden.y.bf16"] = files["golden.y.bf16"].copy()
        files["golden.y.bf16"][0, 0] = np.nextafter(files["golden.y.bf16"][0, 0], np.inf)
    refs, reason = _load_after_edit(tmp_path, nudge_golden)
    assert refs is None and "checksum" in reason


def test_tampered_metadata_counts_fail_checksum(tmp_path):
    def bump_flagged(files):
        meta = json.loads(str(files["meta"][()]))
        meta["golden"]["y:bf16"]["flagged"] += 1
        files["meta"] = np.array(json.dumps(meta))
    refs, reason = _load_after_edit(tmp_path, bump_flagged)
    assert refs is None and "checksum" in reason


@pytest.mark.parametrize("what", ["missing array", "wrong shape", "truncated", "empty", "not a zip"])
def test_damaged_files_rejected(tmp_path, what):
    inp = _inputs()
    cached_build(inp, PARAMS, tmp_path)
    key = key_for(inp, PARAMS)
    path = path_for(tmp_path, key)
    good = path.read_bytes()
    if what in ("missing array", "wrong shape"):
        with np.load(path, allow_pickle=False) as z:
            files = {k: z[k] for k in z.files}
        if what == "missing array":
            del files["gauge.dx"]
        else:
            files["value.dweight"] = files["value.dweight"][:-1]
        # re-sign the checksum so only the structural check can catch it
        meta = json.loads(str(files.pop("meta")[()]))
        meta["checksum"] = store._checksum(meta, files)
        with open(path, "wb") as f:
            np.savez(f, meta=np.array(store._canonical(meta)), **files)
    elif what == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif what == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(b"\x80\x04garbage that looks like a pickle" * 10)
    with pytest.warns(UserWarning, match="regenerating"):
        assert load(tmp_path, key, inp) is None


def test_file_for_other_inputs_rejected(tmp_path):
    a, b = _inputs(seed=1), _inputs(seed=2)
    ka, kb = key_for(a, PARAMS), key_for(b, PARAMS)
    assert ka != kb
    save(tmp_path, ka, build(a), PARAMS)
    # asked for b's key: nothing there, a plain miss (no warning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load(tmp_path, kb, b) is None
    # a's file copied under b's key: the stored key differs
    path_for(tmp_path, kb).write_bytes(path_for(tmp_path, ka).read_bytes())
    refs, reason = load_checked(tmp_path, kb, b)
    assert refs is None and "key" in reason
    with pytest.warns(UserWarning, match="regenerating"):
        assert load(tmp_path, kb, b) is None
    # a's file under a's key, but loaded with b's inputs: the content hash differs
    refs, reason = load_checked(tmp_path, ka, b)
    assert refs is None and "other inputs" in reason
    # a file saved under a key that is not its content's (params differ) is rejected too
    save(tmp_path, ka, build(a), {**PARAMS, "seed": 99})
    refs, reason = load_checked(tmp_path, ka, a)
    assert refs is None and "other inputs" in reason
    # cached_build then rebuilds a's references and the file is valid again
    with pytest.warns(UserWarning, match="regenerating"):
        cached_build(a, PARAMS, tmp_path)
    assert load_checked(tmp_path, ka, a)[1] is None


def test_cached_build_uses_the_store(tmp_path, monkeypatch):
    inp = _inputs()
    first = cached_build(inp, PARAMS, tmp_path)
    calls = []
    monkeypatch.setattr(store, "build", lambda i: calls.append(i) or build(i))
    second = cached_build(inp, PARAMS, tmp_path)
    assert calls == []                                    # loaded, not rebuilt
    assert_same_refs(first, second)
    # asking for a format not stored yet certifies it and rewrites the file
    third = cached_build(inp, PARAMS, tmp_path, formats=[("y", fmt_of("fp16"))])
    assert calls == [] and "y:fp16" in third.golden
    assert "y:fp16" in load(tmp_path, key_for(inp, PARAMS), inp).golden


def test_golden_equal_to_fresh_certification(tmp_path):
    inp = _inputs()
    cached_build(inp, PARAMS, tmp_path)
    back = load(tmp_path, key_for(inp, PARAMS), inp)
    fresh = build(inp)
    for out, fmt in store.output_formats(inp):
        c = fresh.certified(out, fmt)
        assert torch.equal(_bits(c.golden), _bits(back.golden[f"{out}:{fmt.name}"].golden))


def test_refs_to_moves_everything():
    inp = _inputs()
    refs = build(inp)
    refs.certified("y", fmt_of("bf16"))
    refs.model("chain", fmt_of("bf16"), "y")
    moved = refs_to(refs, "cpu")
    assert_same_refs(refs, moved)
    assert moved.models.keys() == refs.models.keys()
    if torch.cuda.is_available():
        on = refs_to(refs, "cuda")
        assert on.values["y"].is_cuda and on.golden["y:bf16"].golden.is_cuda and on.inputs.x.is_cuda
        assert on.models[("chain", "bf16")]["y"][0].is_cuda


def test_never_unpickles():
    src = inspect.getsource(store)
    assert "pickle" not in src.replace("allow_pickle=False", "").replace("no pickle", "") \
        .replace("pickle-refused", "")
    loads = re.findall(r"np\.load\(([^)]*)\)", src)
    assert loads and all("allow_pickle=False" in call for call in loads)
    assert "allow_pickle=True" not in src
    assert "torch.load" not in src and "np.save(" not in src


def test_runner_uses_store(tmp_path):
    from harness.cases.suite import load_suite
    from harness.impls.registry import resolve
    from harness.pipeline.settings import Settings
    from tests.conftest import pair_rows

    cases = sorted(load_suite("quick").cases, key=lambda c: (c.gate_dtype == c.dtype, c.tokens * c.hidden))[:1]
    impl = resolve("torch")
    strip = lambda rs: [sorted((k, repr(v)) for k, v in r.items() if k not in ("pair_seconds", "impl_seconds"))
                        for r in rs]   # NaN-safe; times differ
    rows = pair_rows(cases[0], impl, Settings("cpu", golden_dir=tmp_path / "golden", repeats=0))
    files = list((tmp_path / "golden").glob("*.npz"))
    assert len(files) == 1
    rows2 = pair_rows(cases[0], impl, Settings("cpu", golden_dir=tmp_path / "golden", repeats=0))
    rows3 = pair_rows(cases[0], impl)
    assert all(r["status"] == "pass" for r in rows), [r.get("reason") for r in rows]
    assert strip(rows) == strip(rows2) == strip(rows3)
