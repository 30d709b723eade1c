"""How transitions are laid out on disk: a column schema, one checksummed record per
transition, and camera images stored once each, encoded (QOI by default: lossless, ~10x faster
to encode than PNG at a similar size; see docs/reference/store-format.md) and keyed by content.

A record is `crc32(payload) || payload` with payload = msgpack
`{"a": actor_id, "s": seq, "c": [raw bytes per array column], "i": [image key per image column]}`.
An image key names the frame that was stored: `(actor_id, seq, column)`. A `next_obs` frame equal
to the next transition's `obs` frame (the usual case inside an episode) is not stored again: its
key points at that `obs` frame. Nothing here is pickled.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import cv2
import msgpack
import numpy as np

if TYPE_CHECKING:
    from robo_async.transport.wire import Frames

STORE_SCHEMA = 2  # bump when the on-disk layout changes; older stores are refused with a message
CODECS = ("qoi", "png", "jpeg")
_CODEC_TAG = {"png": b"P", "jpeg": b"J", "qoi": b"Q"}


class CorruptRecord(ValueError):
    """A stored record or image that fails its checksum or does not decode."""


@dataclass(frozen=True)
class Column:
    """One column of a table: its name, numpy dtype name and per-transition shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]  # per transition (no leading batch dim)

    @property
    def is_image(self) -> bool:
        """uint8 H x W x C arrays are camera images: stored encoded, not raw."""
        return self.dtype == "uint8" and len(self.shape) == 3 and self.shape[2] in (1, 3, 4)

    @property
    def nbytes(self) -> int:
        """Bytes of one transition's value, raw."""
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def describe(self) -> str:
        """dtype and shape as one string, for messages (`float32(6,)`)."""
        return f"{self.dtype}{self.shape}"


@dataclass(frozen=True)
class Schema:
    """The columns of a store's tables, sorted by name; fixed by the first batch stored and written to the
    store's meta."""

    columns: tuple[Column, ...]

    @staticmethod
    def of(arrays: Mapping[str, np.ndarray]) -> Schema:
        """The schema of a batch (`arrays`: columns with a leading batch dim)."""
        return Schema(tuple(Column(k, a.dtype.name, tuple(a.shape[1:])) for k, a in sorted(arrays.items())))

    @property
    def names(self) -> tuple[str, ...]:
        """Column names, in order."""
        return tuple(c.name for c in self.columns)

    @property
    def arrays(self) -> tuple[Column, ...]:
        """The columns stored raw in each record (all but camera images)."""
        return tuple(c for c in self.columns if not c.is_image)

    @property
    def images(self) -> tuple[Column, ...]:
        """The camera-image columns (stored encoded, by key)."""
        return tuple(c for c in self.columns if c.is_image)

    @property
    def transition_bytes(self) -> int:
        """Bytes of one decoded transition (sizes the RAM caches)."""
        return sum(c.nbytes for c in self.columns)

    def check(self, arrays: Mapping[str, np.ndarray]) -> str | None:
        """None if `arrays` (batched) fit this schema, else what is wrong."""
        if set(arrays) != set(self.names):
            missing, extra = set(self.names) - set(arrays), set(arrays) - set(self.names)
            return f"batch columns differ from the store's: missing {sorted(missing)}, unexpected {sorted(extra)}"
        for c in self.columns:
            a = arrays[c.name]
            if a.dtype.name != c.dtype or tuple(a.shape[1:]) != c.shape:
                return f"'{c.name}' is {a.dtype.name}{tuple(a.shape[1:])}, the store holds {c.describe()}"
        return None

    def to_msgpack(self) -> dict:
        """The schema as the store writes it to its meta (with STORE_SCHEMA)."""
        return {"store_schema": STORE_SCHEMA, "columns": [[c.name, c.dtype, list(c.shape)] for c in self.columns]}

    @staticmethod
    def from_msgpack(d: dict) -> Schema:
        """The schema back from `to_msgpack`'s form."""
        return Schema(tuple(Column(n, t, tuple(s)) for n, t, s in d["columns"]))


def image_key(actor_id: int, seq: int, column: int) -> bytes:
    """The 18-byte key of one stored image: actor id, seq and column index (big-endian), so a row's frames
    sort together and a next_obs frame can share the next row's obs key."""
    return struct.pack(">QQH", actor_id, seq, column)


def encode_image(img: np.ndarray, codec: str = "qoi", jpeg_quality: int = 95) -> bytes:
    """Lossless QOI by default (single-channel frames, which QOI cannot hold, go as PNG); PNG
    (fast setting) is lossless too; JPEG trades exactness for smaller files. Channels are stored
    in the order given (no RGB/BGR swap: decode returns them as they came). The first byte names
    the codec, so a store may mix them (e.g. PNG frames written by an older version)."""
    if codec == "qoi" and img.ndim == 3 and img.shape[2] in (3, 4):
        import qoi

        payload = qoi.encode(np.ascontiguousarray(img, np.uint8))
        return b"Q" + zlib.crc32(payload).to_bytes(4, "little") + payload
    if codec in ("png", "qoi"):
        codec = "png"
        ok, buf = cv2.imencode(".png", img, [cv2.IMWRITE_PNG_COMPRESSION, 1])
    elif codec == "jpeg":
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, jpeg_quality])
    else:
        raise ValueError(f"unknown image codec '{codec}'; use one of {CODECS}")
    if not ok:
        raise ValueError(f"OpenCV could not encode a {img.shape} image as {codec}")
    payload = buf.tobytes()
    return _CODEC_TAG[codec] + zlib.crc32(payload).to_bytes(4, "little") + payload


def decode_image(blob: bytes, column: Column) -> np.ndarray:
    """A stored image blob (tagged, crc-checked; QOI, PNG or JPEG) as uint8 H x W x C; raises CorruptRecord if
    it fails its checksum or does not decode."""
    if len(blob) < 5 or zlib.crc32(blob[5:]) != int.from_bytes(blob[1:5], "little"):
        raise CorruptRecord(f"image for '{column.name}' fails its checksum")
    if blob[:1] == b"Q":
        import qoi

        img: np.ndarray | None
        try:
            img = qoi.decode(blob[5:])
        except Exception:  # noqa: BLE001 - the qoi binding raises plain errors
            img = None
    else:
        img = cv2.imdecode(np.frombuffer(blob, np.uint8, offset=5), cv2.IMREAD_UNCHANGED)
    if img is None:
        raise CorruptRecord(f"image for '{column.name}' does not decode")
    if img.ndim == 2:
        img = img[..., None]
    if img.shape != column.shape:
        raise CorruptRecord(f"image for '{column.name}' is {img.shape}, schema says {column.shape}")
    return np.ascontiguousarray(img)


def encode_frames(arrays: Mapping[str, np.ndarray], codec: str = "qoi", jpeg_quality: int = 95) -> dict:
    """Camera columns (uint8 [n, H, W, C]) encoded image by image as `Frames` (what actors
    send, so learners only store bytes); other arrays, and columns already encoded, as they are."""
    from robo_async.transport.wire import Frames, is_image_column

    return {
        k: Frames([encode_image(img, codec, jpeg_quality) for img in a], a.shape)
        if is_image_column(a) and not isinstance(a, Frames)
        else a
        for k, a in arrays.items()
    }


def decode_frames(frames, column: Column) -> np.ndarray:
    """uint8 [n, H, W, C] from `Frames`; raises CorruptRecord naming the column and image."""
    out = np.empty((len(frames), *column.shape), np.uint8)
    for i, blob in enumerate(frames.blobs):
        try:
            out[i] = decode_image(blob, column)
        except CorruptRecord as e:
            raise CorruptRecord(f"image {i}: {e}") from None
    return out


def decode_batch_frames(arrays: Mapping[str, np.ndarray | Frames], names: list[str]) -> dict[str, np.ndarray]:
    """The `Frames` columns `names` of one batch decoded, uint8 [n, H, W, C] each (a next_obs
    column equal to its obs column shifted by one decodes only its last image); raises
    CorruptRecord naming the column and image."""
    out: dict[str, np.ndarray] = {}
    for name in sorted(names, key=lambda k: not k.startswith("obs/")):  # obs first
        f = cast("Frames", arrays[name])
        column = Column(name, "uint8", tuple(f.shape[1:]))
        twin = out.get("obs/" + name.removeprefix("next_obs/")) if name.startswith("next_obs/") else None
        tf = cast("Frames | None", arrays.get("obs/" + name.removeprefix("next_obs/")) if twin is not None else None)
        try:
            if twin is not None and tf is not None and f.blobs[:-1] == tf.blobs[1:]:
                out[name] = np.concatenate([twin[1:], decode_frames(f[-1:], column)])
            else:
                out[name] = decode_frames(f, column)
        except CorruptRecord as e:
            raise CorruptRecord(f"'{name}' {e}") from None
    return out


def encode_record(
    schema: Schema, actor_id: int, seq: int, arrays: Mapping[str, np.ndarray], i: int, image_keys: Mapping[str, bytes]
) -> bytes:
    """Row `i` of a batch as one record; `image_keys[name]` is that row's image key per image column."""
    payload = msgpack.packb(
        {
            "a": actor_id,
            "s": seq,
            "c": [np.ascontiguousarray(arrays[c.name][i]).tobytes() for c in schema.arrays],
            "i": [image_keys[c.name] for c in schema.images],
        },
        use_bin_type=True,
    )
    return zlib.crc32(payload).to_bytes(4, "little") + payload


def decode_record(schema: Schema, value: bytes) -> tuple[int, int, dict[str, np.ndarray], list[bytes]]:
    """-> (actor_id, seq, array columns, image keys); raises CorruptRecord."""
    if len(value) < 4 or zlib.crc32(value[4:]) != int.from_bytes(value[:4], "little"):
        raise CorruptRecord("record fails its checksum")
    try:
        d = msgpack.unpackb(value[4:], raw=False)
        cols = {c.name: np.frombuffer(b, c.dtype).reshape(c.shape) for c, b in zip(schema.arrays, d["c"], strict=True)}
        keys = list(d["i"])
        if len(keys) != len(schema.images):
            raise ValueError("image count")
        return int(d["a"]), int(d["s"]), cols, keys
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptRecord(f"record does not match the store schema: {e}") from None


def peek_record(value: bytes) -> tuple[int, int]:
    """(actor_id, seq) of a record without checking it (for index rebuilds)."""
    d = msgpack.unpackb(value[4:], raw=False)
    return int(d["a"]), int(d["s"])
