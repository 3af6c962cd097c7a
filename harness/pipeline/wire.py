"""A CallRecord as bytes, from the implementation's process to the judging one: a JSON header and
the outputs' raw bytes. Never pickle: unpickling runs code the sender chose, and the sender is the
process the implementation runs in. Decoding checks every field's type, every dtype against a list,
every shape and extent against the payload; anything else is a WireError (an `error` pair naming
it), never a verdict."""
from __future__ import annotations

import json
import math
import struct

import torch

from harness.analysis.result import Finding, Repeat, Speed
from harness.pipeline.call import CallRecord
from harness.reports.schema import CHECKED_OUTPUTS as OUTPUTS

MAGIC = b"HRC1"
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}
_NAMES = {v: k for k, v in DTYPES.items()}
STATUSES = ("ran", "skip", "error")
INPUTS = ("x", "gate", "weight", "dy")
GPU_METHODS = ("graph", "profiler", "")
PROBLEM_KINDS = ("contract", "error")     # what the implementation's side can find: a broken contract, a raise


class WireError(ValueError):
    """A record that is not one this harness writes."""


def encode(rec: CallRecord) -> bytes:
    meta, chunks, offset = {}, [], 0
    for k, t in rec.outputs.items():
        t = t.detach().to("cpu").contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy() if t.numel() else b""       # a view: one copy, in join
        meta[k] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "offset": offset, "nbytes": len(raw)}
        chunks.append(raw)
        offset += len(raw)
    head = {
        "status": rec.status, "text": rec.text, "outputs": meta,
        "problems": {k: [f.kind, f.text] for k, f in rec.problems.items()},
        "repeats": {k: [r.count, list(r.index), r.first, r.later, r.error] for k, r in rec.repeats.items()},
        "inputs_modified": list(rec.inputs_modified), "notes": list(rec.notes),
        "seconds": rec.seconds, "timing_seconds": rec.timing_seconds,
        "speed": None if rec.speed is None else [rec.speed.impl_seconds, rec.speed.gpu_seconds, rec.speed.gpu_method,
                                                 rec.speed.bytes_moved, rec.speed.floor_fraction],
    }
    h = json.dumps(head).encode()
    return MAGIC + struct.pack(">Q", len(h)) + h + b"".join(chunks)


def _want(cond: bool, what: str) -> None:
    if not cond:
        raise WireError(what)


def _num(v, what: str) -> float:
    _want(isinstance(v, (int, float)) and not isinstance(v, bool), f"{what}: not a number")
    return float(v)


def _int(v, what: str, lo: int = 0) -> int:
    _want(isinstance(v, int) and not isinstance(v, bool) and v >= lo, f"{what}: not an integer >= {lo}")
    return v


def _text(v, what: str) -> str:
    _want(isinstance(v, str) and len(v) <= 4000, f"{what}: not a short text")
    return v


def _names(v, allowed, what: str) -> dict:
    _want(isinstance(v, dict) and all(k in allowed for k in v), f"{what}: unknown keys")
    return v


def status_of(data: bytes) -> str:
    """A record's status ("" where it is not a record): what the command reads of one, as JSON."""
    try:
        (n,) = struct.unpack(">Q", data[4:12])
        status = json.loads(data[12:12 + n]).get("status", "") if data[:4] == MAGIC else ""
    except (ValueError, struct.error, AttributeError, UnicodeDecodeError):
        return ""
    return status if isinstance(status, str) else ""


def decode(data: bytes | bytearray) -> CallRecord:
    _want(len(data) >= 12 and bytes(data[:4]) == MAGIC, "not a call record")
    (n,) = struct.unpack(">Q", bytes(data[4:12]))
    _want(12 + n <= len(data), "header past the end")
    try:
        head = json.loads(bytes(data[12:12 + n]))
    except (ValueError, UnicodeDecodeError) as e:
        raise WireError(f"header: {e}") from None
    _want(isinstance(head, dict) and set(head) == {"status", "text", "outputs", "problems", "repeats",
                                                    "inputs_modified", "notes", "seconds", "timing_seconds",
                                                    "speed"}, "header: wrong fields")
    payload = memoryview(data)[12 + n:]
    _want(head["status"] in STATUSES, "status")
    outputs = {}
    for k, m in _names(head["outputs"], OUTPUTS, "outputs").items():
        _want(isinstance(m, dict) and set(m) == {"dtype", "shape", "offset", "nbytes"}, f"outputs.{k}")
        _want(m["dtype"] in DTYPES, f"outputs.{k}.dtype")
        dtype = DTYPES[m["dtype"]]
        _want(isinstance(m["shape"], list) and len(m["shape"]) <= 8, f"outputs.{k}.shape")
        shape = [_int(d, f"outputs.{k}.shape") for d in m["shape"]]
        off, nbytes = _int(m["offset"], f"outputs.{k}.offset"), _int(m["nbytes"], f"outputs.{k}.nbytes")
        _want(nbytes == math.prod(shape) * dtype.itemsize and off + nbytes <= len(payload), f"outputs.{k}: extent")
        raw = torch.frombuffer(bytearray(payload[off:off + nbytes]), dtype=torch.uint8) if nbytes else \
            torch.empty(0, dtype=torch.uint8)
        outputs[k] = raw.view(dtype).reshape(shape)
    problems = {}
    for k, v in _names(head["problems"], OUTPUTS, "problems").items():
        _want(isinstance(v, list) and len(v) == 2 and v[0] in PROBLEM_KINDS, f"problems.{k}")
        problems[k] = Finding(v[0], text=_text(v[1], f"problems.{k}"))
    repeats = {}
    for k, v in _names(head["repeats"], OUTPUTS, "repeats").items():
        _want(isinstance(v, list) and len(v) == 5 and isinstance(v[1], list), f"repeats.{k}")
        repeats[k] = Repeat(_int(v[0], f"repeats.{k}"), tuple(_int(i, f"repeats.{k}") for i in v[1]),
                            _num(v[2], f"repeats.{k}"), _num(v[3], f"repeats.{k}"), _text(v[4], f"repeats.{k}"))
    _want(isinstance(head["inputs_modified"], list) and all(i in INPUTS for i in head["inputs_modified"]),
          "inputs_modified")
    _want(isinstance(head["notes"], list), "notes")
    speed = head["speed"]
    if speed is not None:
        _want(isinstance(speed, list) and len(speed) == 5 and speed[2] in GPU_METHODS, "speed")
        speed = Speed(_num(speed[0], "speed"), _num(speed[1], "speed"), speed[2],
                      None if speed[3] is None else _int(speed[3], "speed"), _num(speed[4], "speed"))
    return CallRecord(head["status"], _text(head["text"], "text"), outputs, problems, repeats,
                      tuple(head["inputs_modified"]), tuple(_text(t, "notes") for t in head["notes"]),
                      _num(head["seconds"], "seconds"), _num(head["timing_seconds"], "timing_seconds"), speed)
