"""Golden store: a case's references on disk, keyed by a content hash of its parameters and inputs.

One `.npz` file per key (`DIR/<key>.npz`), written with numpy and read with
`np.load(..., allow_pickle=False)`: no pickle anywhere. It holds the float64 exact values and
gauges of y, dx, dgate, dweight, n and dn (CaseReferences.values / .gauges), the certified goldens
computed so far (CaseReferences.golden, "output:fmt" -> Certified) and a metadata record
(format version, key, params, versions of torch / mpmath / numpy / harness, mpmath precision,
creation time, counts of each golden, checksum).

The key is sha256 over a canonical JSON of the params, eps, zero_centered_gamma and the dtype and
shape of each input, followed by the raw bytes of x, gate, weight and dy in their own dtypes
(viewed as integers: numpy has no bfloat16). A loaded file is used only when

* the stored key equals the key asked for, and the key recomputed from the inputs at hand and the
  stored params equals it too (a file saved for other inputs is rejected),
* the checksum (sha256 over the metadata without the checksum, then every array's name, dtype,
  shape and bytes in sorted name order) matches,
* every expected array is there with the expected shape and dtype, and the mpmath precision the
  goldens were certified at is not below the current default;

otherwise `load` warns ("golden store: PATH: REASON; regenerating") and returns None, so
`cached_build` recomputes and rewrites the file. Saves are atomic (temporary file + os.replace).
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import warnings
from pathlib import Path
from typing import Sequence

import mpmath
import numpy as np
import torch

from harness.references import mp
from harness.references.atomic import atomic_write
from harness.references.bundle import CaseReferences, build
from harness.references.certify import Certified
from harness.references.exact import OUTPUTS, Inputs
from harness.references.formats import Format, fmt_of

STORE_FORMAT = 3                             # 3: certified by the exact-sum pass too; 2: op variants in the key
QUANTITIES = OUTPUTS                         # what CaseReferences.values / .gauges hold
_INPUT_FIELDS = ("x", "gate", "weight", "dy")
_INT_VIEW = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


# ---------------------------------------------------------------------------------------- keys

def _canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _raw_bytes(t: torch.Tensor) -> bytes:
    """The tensor's bytes in its own dtype (as an integer view; numpy lacks bfloat16)."""
    t = t.detach().to("cpu").contiguous()
    if t.is_floating_point():
        t = t.view(_INT_VIEW[t.element_size()])
    return t.numpy().tobytes()


def key_for(inp: Inputs, params: dict) -> str:
    """sha256 (hex) of the canonical params and the raw bytes of x, gate, weight and dy."""
    header = {
        "store_format": STORE_FORMAT,
        "params": params,
        "eps": float(inp.eps).hex(),
        "zero_centered_gamma": bool(inp.zero_centered_gamma),
        "group_size": inp.group,
        "norm_before_gate": bool(inp.norm_before_gate),
        "inputs": [[name, str(getattr(inp, name).dtype), list(getattr(inp, name).shape)]
                   for name in _INPUT_FIELDS],
    }
    if inp.activation != "silu":        # a later axis: only where it is not the default, so every
        header["activation"] = inp.activation       # key stored before it is unchanged
    h = hashlib.sha256(_canonical(header).encode())
    for name in _INPUT_FIELDS:
        h.update(_raw_bytes(getattr(inp, name)))
    return h.hexdigest()


def path_for(directory: Path | str, key: str) -> Path:
    return Path(directory) / f"{key}.npz"


# ------------------------------------------------------------------------------------ checksum

def _checksum(meta: dict, arrays: dict[str, np.ndarray]) -> str:
    body = {k: v for k, v in meta.items() if k != "checksum"}
    h = hashlib.sha256(_canonical(body).encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(_canonical([name, a.dtype.str, list(a.shape)]).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _versions() -> dict:
    from harness.references import package_version
    return {"torch": torch.__version__, "mpmath": mpmath.__version__, "numpy": np.__version__,
            "harness": package_version()}


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float64).contiguous().numpy()


# ---------------------------------------------------------------------------------------- save

def save(directory: Path | str, key: str, refs: CaseReferences, params: dict) -> Path:
    """Write refs' values, gauges and goldens under `key`; atomic (temporary file, os.replace)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    for q in QUANTITIES:
        arrays[f"value.{q}"] = _np(refs.values[q])
        arrays[f"gauge.{q}"] = _np(refs.gauges[q])
    golden_meta = {}
    for gkey, c in sorted(refs.golden.items()):
        output, fmt_name = gkey.split(":")
        arrays[f"golden.{output}.{fmt_name}"] = _np(c.golden)
        arrays[f"value64.{output}.{fmt_name}"] = _np(c.value64)
        golden_meta[gkey] = {"flagged": int(c.flagged), "certified": int(c.certified),
                             "uncertified": int(c.uncertified)}
    meta = {
        "store_format": STORE_FORMAT,
        "key": key,
        "params": params,
        "versions": _versions(),
        "mpmath_dps": mp.DEFAULT_DPS,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "shape": list(refs.inputs.x.shape),
        "golden": golden_meta,
    }
    meta["checksum"] = _checksum(meta, arrays)
    path = path_for(directory, key)
    with atomic_write(path) as f:
        np.savez(f, meta=np.array(_canonical(meta)), **arrays)
    return path


# ---------------------------------------------------------------------------------------- load

def load_checked(directory: Path | str, key: str, inp: Inputs) -> tuple[CaseReferences | None, str | None]:
    """(refs, None) for a valid file; (None, reason) otherwise ("missing" when there is none)."""
    path = path_for(directory, key)
    if not path.exists():
        return None, "missing"
    try:
        with np.load(path, allow_pickle=False) as z:
            files = {name: z[name] for name in z.files}
    except Exception as e:                     # zip / CRC / header / pickle-refused errors
        return None, f"unreadable ({type(e).__name__}: {e})"
    try:
        raw = files.pop("meta")
    except KeyError:
        return None, "no metadata"
    try:
        meta = json.loads(str(raw[()]))
    except Exception as e:
        return None, f"bad metadata ({type(e).__name__}: {e})"
    if not isinstance(meta, dict):
        return None, "bad metadata (not a record)"
    if meta.get("store_format") != STORE_FORMAT:
        return None, f"store format {meta.get('store_format')!r}, expected {STORE_FORMAT}"
    if meta.get("key") != key:
        return None, f"stored key {str(meta.get('key'))[:16]}... does not match {key[:16]}..."
    if "checksum" not in meta or _checksum(meta, files) != meta["checksum"]:
        return None, "checksum mismatch (content changed or corrupted)"
    try:
        if key_for(inp, meta["params"]) != key:
            return None, "saved for other inputs (content hash of params and inputs differs)"
    except Exception as e:
        return None, f"bad params ({type(e).__name__}: {e})"
    if int(meta.get("mpmath_dps", 0)) < mp.DEFAULT_DPS:
        return None, f"certified at {meta.get('mpmath_dps')} digits < {mp.DEFAULT_DPS}"

    shape = tuple(inp.x.shape)
    expected = {q: (inp.hidden,) if q == "dweight" else shape for q in QUANTITIES}

    def arr(name: str, want: tuple) -> torch.Tensor:
        if name not in files:
            raise LookupError(f"missing array {name}")
        a = files[name]
        if a.dtype != np.float64 or tuple(a.shape) != want:
            raise LookupError(f"array {name} is {a.dtype}{list(a.shape)}, expected float64{list(want)}")
        return torch.from_numpy(np.array(a, copy=True))

    try:
        values = {q: arr(f"value.{q}", expected[q]) for q in QUANTITIES}
        gauges = {q: arr(f"gauge.{q}", expected[q]) for q in QUANTITIES}
        golden = {}
        for gkey, counts in meta.get("golden", {}).items():
            output, fmt_name = gkey.split(":")
            fmt_of(fmt_name)                                     # a known format
            if output not in expected:
                raise LookupError(f"golden for unknown output {output!r}")
            golden[gkey] = Certified(arr(f"golden.{output}.{fmt_name}", expected[output]),
                                     arr(f"value64.{output}.{fmt_name}", expected[output]),
                                     int(counts["flagged"]), int(counts["certified"]),
                                     int(counts["uncertified"]))
    except Exception as e:
        return None, f"bad contents ({type(e).__name__}: {e})"
    return CaseReferences(inp, values, gauges, golden), None


def load(directory: Path | str, key: str, inp: Inputs) -> CaseReferences | None:
    """The stored references for `key`, verified; None (with a warning unless the file is simply
    absent) when missing, corrupted or saved for other inputs."""
    refs, reason = load_checked(directory, key, inp)
    if refs is None and reason != "missing":
        warnings.warn(f"golden store: {path_for(directory, key)}: {reason}; regenerating", stacklevel=2)
    return refs


# ------------------------------------------------------------------------------------- helpers

def output_formats(inp: Inputs) -> list[tuple[str, Format]]:
    """Each output's format (SPEC §1): y in dy's (the activation) dtype, dx in x's, dgate in the
    gate's, dweight in the weight's."""
    return [("y", fmt_of(inp.dy.dtype)), ("dx", fmt_of(inp.x.dtype)),
            ("dgate", fmt_of(inp.gate.dtype)), ("dweight", fmt_of(inp.weight.dtype))]


def cached_build(inp: Inputs, params: dict, golden_dir: Path | str,
                 formats: Sequence[tuple[str, Format]] | None = None, backend: str = "auto") -> CaseReferences:
    """Stored references when valid, else build them; goldens of `formats` (default: the four
    outputs in their own formats, see `output_formats`) are certified before saving. A loaded
    file missing some of them is completed and rewritten."""
    formats = output_formats(inp) if formats is None else list(formats)
    key = key_for(inp, params)
    refs = load(golden_dir, key, inp)
    dirty = refs is None
    if refs is None:
        refs = build(inp, backend)
    for output, fmt in formats:
        if f"{output}:{fmt.name}" not in refs.golden:
            refs.certified(output, fmt)
            dirty = True
    if dirty:
        save(golden_dir, key, refs, params)
    return refs


def refs_to(refs: CaseReferences, device) -> CaseReferences:
    """A copy of `refs` with every tensor (inputs, values, gauges, goldens, models) on `device`."""
    def mv(obj):
        if isinstance(obj, torch.Tensor):
            return obj.to(device)
        if isinstance(obj, tuple):
            return tuple(mv(o) for o in obj)
        if isinstance(obj, dict):
            return {k: mv(v) for k, v in obj.items()}
        return obj

    golden = {k: Certified(c.golden.to(device), c.value64.to(device), c.flagged, c.certified,
                           c.uncertified) for k, c in refs.golden.items()}
    return CaseReferences(refs.inputs.to(device), mv(refs.values), mv(refs.gauges), golden,
                          mv(refs.models))
