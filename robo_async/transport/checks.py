"""What a received message must satisfy: `decode` parses a multipart message and refuses
(`WireError`, naming what was wrong) anything malformed. This module reads the envelope: the header
(msgpack, at most MAX_HEADER_BYTES, a known schema and kind, only the kind's known keys) and the array
specs over the data frames (names, dtypes, shapes, byte sizes, counts; encoded camera frames); each
kind's own fields and contents are checked by `kind_checks`, the limits live in `limits`.
"""

import math
from collections.abc import Sequence

import msgpack
import numpy as np

from robo_async.transport.kind_checks import KIND_FIELDS, PLAIN, infer_request, transitions
from robo_async.transport.limits import (
    MAX_ARRAYS,
    MAX_ELEMENTS,
    MAX_FRAMES,
    MAX_HEADER_BYTES,
    MAX_NAME,
    MAX_NDIM,
    OBS_PREFIXES,
    show,
)
from robo_async.transport.messages import DTYPES, FRAME_TAGS, KINDS, MAX_SIDE, SCHEMA, Frames, Message, WireError

_ITEMSIZE = {d: np.dtype(d).itemsize for d in DTYPES}
_HEADER = {"schema", "kind", "arrays"}


def decode(frames: Sequence[bytes | memoryview]) -> Message:
    """Parse and validate a multipart message; raises WireError on anything malformed (and only
    WireError: any other exception a hostile message provokes in the checks is one too, named): the
    header (msgpack, at most MAX_HEADER_BYTES, only the kind's known keys, every field's type and
    range), the array specs (names, dtypes, shapes, byte sizes, counts) and, for transitions, the
    columns (known names, dtypes, finite floats)."""
    try:
        return _decode(frames)
    except WireError:
        raise
    except (RecursionError, MemoryError) as e:
        raise WireError(f"message refused: {type(e).__name__}") from None
    except Exception as e:  # noqa: BLE001 - a case the checks above missed: still only a refusal
        raise WireError(f"malformed message ({type(e).__name__}: {show(str(e))})") from None


def _decode(frames: Sequence[bytes | memoryview]) -> Message:
    if len(frames) > MAX_FRAMES:
        raise WireError(f"message of {len(frames)} frames; at most {MAX_FRAMES}")
    if not frames:
        raise WireError("empty message")
    head = memoryview(frames[0])
    if head.nbytes > MAX_HEADER_BYTES:
        raise WireError(f"header of {head.nbytes} bytes exceeds {MAX_HEADER_BYTES}")
    try:
        header = msgpack.unpackb(head, raw=False, strict_map_key=True, max_bin_len=0, max_ext_len=0)
    except Exception as e:  # noqa: BLE001 - msgpack raises several types for garbage
        raise WireError(f"header is not valid msgpack: {e}") from None
    if not isinstance(header, dict):
        raise WireError(f"header must be a map, got {type(header).__name__}")
    if header.get("schema") != SCHEMA or type(header.get("schema")) is not int:
        raise WireError(f"schema {show(header.get('schema'))} not supported (this side speaks {SCHEMA})")
    kind = header.get("kind")
    if type(kind) is not str or kind not in KINDS:
        raise WireError(f"unknown message kind {show(kind)}; known: {sorted(KINDS)}")
    unknown = set(header) - _HEADER - KIND_FIELDS[kind]
    if unknown:
        raise WireError(f"{kind} header has unknown keys {sorted(map(str, unknown))[:8]}")
    specs = header.get("arrays")
    if not isinstance(specs, list) or len(specs) > MAX_ARRAYS.get(kind, 0):
        raise WireError(f"{kind} header 'arrays' must be a list of at most {MAX_ARRAYS.get(kind, 0)} specs")
    arrays = _arrays(specs, frames[1:])
    encoded = [k for k, a in arrays.items() if isinstance(a, Frames)]
    if encoded and (kind not in ("transitions", "infer") or any(not k.startswith(OBS_PREFIXES) for k in encoded)):
        raise WireError(f"encoded frames are for observations in transitions and infer requests, not {kind} {encoded}")
    if kind == "transitions":
        return transitions(header, arrays)
    if kind == "infer":
        return infer_request(header, arrays)
    return PLAIN[kind](header, {k: a for k, a in arrays.items() if isinstance(a, np.ndarray)})


def _arrays(specs: list[object], frames: Sequence[bytes | memoryview]) -> dict[str, np.ndarray | Frames]:
    """The arrays the header's specs name, over the data frames (zero-copy), every spec checked."""
    if len(specs) != len(frames):
        raise WireError(f"header lists {len(specs)} arrays but {len(frames)} data frames arrived")
    out: dict[str, np.ndarray | Frames] = {}
    for spec, frame in zip(specs, frames, strict=False):
        name = spec[0] if isinstance(spec, list) and spec else None
        if type(name) is not str or not 0 < len(name) <= MAX_NAME or name in out:
            raise WireError(f"bad or repeated array name {show(name)} (1-{MAX_NAME} chars, unique)")
        if isinstance(spec, list) and len(spec) == 4 and spec[1] == "frames":
            out[name] = _frames(spec, memoryview(frame))
            continue
        if not (isinstance(spec, list) and len(spec) == 3):
            raise WireError(f"bad array spec {show(spec)}: expected [name, dtype, shape]")
        _, dtype, shape = spec
        if type(dtype) is not str or dtype not in DTYPES:
            raise WireError(f"array '{name}' has dtype {show(dtype)}; allowed: {sorted(DTYPES)}")
        if not (
            isinstance(shape, list)
            and len(shape) <= MAX_NDIM
            and all(type(d) is int and 0 <= d <= MAX_ELEMENTS for d in shape)
            and math.prod(max(d, 1) for d in shape) <= MAX_ELEMENTS
        ):
            raise WireError(
                f"array '{name}' has bad shape {show(shape)} (at most {MAX_NDIM} dimensions, "
                f"{MAX_ELEMENTS} elements counting each dimension)"
            )
        buf = memoryview(frame)
        expected = math.prod(shape) * _ITEMSIZE[dtype]  # exact (Python ints), no numpy call per array
        if buf.nbytes != expected:
            raise WireError(f"array '{name}' {dtype}{tuple(shape)} needs {expected} bytes, frame has {buf.nbytes}")
        out[name] = np.frombuffer(buf, dtype=dtype).reshape(shape)
    return out


def _frames(spec: list[object], buf: memoryview) -> Frames:
    name, _, shape, lengths = spec
    if not isinstance(name, str):
        raise WireError(f"bad frames spec name {name!r}")
    if not (
        isinstance(shape, list)
        and len(shape) == 4
        and all(type(d) is int for d in shape)
        and 0 <= shape[0] <= 1 << 20
        and all(1 <= d <= MAX_SIDE for d in shape[1:3])
        and shape[3] in (1, 3, 4)
    ):
        raise WireError(f"frames '{name}' have bad shape {shape!r}: expected [n, H, W, C], C in 1, 3, 4")
    cap = Frames.max_blob(shape[1:])
    if not (
        isinstance(lengths, list)
        and len(lengths) == shape[0]
        and all(type(n) is int and 6 <= n <= cap for n in lengths)
    ):
        raise WireError(f"frames '{name}' need {shape[0]} image lengths in [6, {cap}] bytes")
    if sum(lengths) != buf.nbytes:
        raise WireError(f"frames '{name}' list {sum(lengths)} bytes, frame has {buf.nbytes}")
    blobs: list[bytes] = []
    at = 0
    for n in lengths:
        blob = bytes(buf[at : at + n])
        if blob[0] not in FRAME_TAGS:
            raise WireError(f"frames '{name}': image {len(blobs)} has unknown codec tag {blob[:1]!r}")
        blobs.append(blob)
        at += n
    return Frames(blobs, shape)
