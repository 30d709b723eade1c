"""The wire format of a learner replica's shard (`learner.replicas=N`, `replicas.py`): a msgpack
header (keys, dtypes, shapes) and one raw byte payload per rank, 8-byte aligned; nothing is
pickled. Rows are dealt round-robin (row i to rank i mod N), so every rank sees each table's share.
A header or payload that does not decode raises ShardError naming what was wrong.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgpack
import numpy as np

DTYPES = frozenset(
    {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64"}
)
HEADER_MAX = 1 << 20  # bytes of one shard header


class ShardError(ValueError):
    """A replica shard (or control message) that does not decode: names what was wrong."""


Layout = list[tuple[str, str, tuple[int, ...]]]  # (key, dtype name, shape after the row axis)


def layout_of(batch: Mapping[str, np.ndarray]) -> tuple[int, Layout]:
    """Rows and (key, dtype, trailing shape) of a batch; every array must have the same rows."""
    rows = {len(a) for a in batch.values()}
    if len(rows) != 1:
        raise ValueError(f"a batch's arrays have different row counts: {sorted(rows)}")
    return rows.pop(), [(k, a.dtype.name, tuple(a.shape[1:])) for k, a in sorted(batch.items())]


def offsets(layout: Layout, rows: int) -> tuple[list[int], int]:
    """Byte offset of each array in a shard of `rows` rows (8-byte aligned), and the total."""
    out, at = [], 0
    for _, dtype, shape in layout:
        out.append(at)
        at += -(-rows * int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize // 8) * 8
    return out, at


def encode_header(layout: Layout) -> bytes:
    return msgpack.packb({"v": 1, "arrays": [[k, d, list(s)] for k, d, s in layout]})


def decode_header(data: bytes) -> Layout:
    """The layout in a shard header; ShardError naming what is wrong with a malformed one."""
    try:
        head = msgpack.unpackb(data, raw=False, strict_map_key=True, max_bin_len=0, max_ext_len=0)
    except Exception as e:  # noqa: BLE001 - msgpack raises several types for bad bytes
        raise ShardError(f"replica shard header is not msgpack ({type(e).__name__}: {e})") from None
    if not isinstance(head, dict) or head.get("v") != 1 or not isinstance(head.get("arrays"), list):
        raise ShardError("replica shard header must be a map with v=1 and a list 'arrays'")
    layout: Layout = []
    for i, entry in enumerate(head["arrays"]):
        if not (
            isinstance(entry, list)
            and len(entry) == 3
            and isinstance(entry[0], str)
            and isinstance(entry[1], str)
            and isinstance(entry[2], list)
        ):
            raise ShardError(f"replica shard header: array {i} is not [key, dtype, shape]")
        key, dtype, shape = entry
        if dtype not in DTYPES:
            raise ShardError(f"replica shard header: '{key}' has dtype {dtype!r}, not one of {sorted(DTYPES)}")
        if (
            not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 31 for n in shape)
            or len(shape) > 8
        ):
            raise ShardError(f"replica shard header: '{key}' has shape {shape!r}, not up to 8 sizes >= 0")
        layout.append((key, dtype, tuple(shape)))
    if len({k for k, _, _ in layout}) != len(layout):
        raise ShardError("replica shard header names an array twice")
    return layout


def pack(batch: Mapping[str, np.ndarray], layout: Layout, rank: int, world: int, rows: int) -> np.ndarray:
    """Rank `rank`'s shard of a combined batch (rows rank, rank + world, ...; `rows` of them) as bytes."""
    at, total = offsets(layout, rows)
    out = np.empty(total, np.uint8)
    for (key, dtype, shape), o in zip(layout, at, strict=False):
        n = rows * int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        out[o : o + n].view(dtype).reshape((rows, *shape))[...] = batch[key][rank : rows * world : world]
    return out


def unpack(payload: np.ndarray, layout: Layout, rows: int) -> dict[str, np.ndarray]:
    """The arrays of a shard (views into `payload`); ShardError if its size does not match the layout."""
    at, total = offsets(layout, rows)
    if payload.dtype != np.uint8 or payload.ndim != 1 or len(payload) != total:
        raise ShardError(f"replica shard payload is {payload.nbytes} bytes, its header says {total}")
    return {
        key: payload[o : o + rows * int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize]
        .view(dtype)
        .reshape((rows, *shape))
        for (key, dtype, shape), o in zip(layout, at, strict=False)
    }
