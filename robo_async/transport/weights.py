"""Weight pushes for big policies: streamed in parts, optionally half precision and delta, each
array checked (its xxh3-64 digest) before an actor swaps it in.

A push of version v is `parts` messages of kind "wpart" (wire.WeightPart). Part 0 carries the
manifest: every array's name, shape, transmitted dtype and the xxh3-64 digest of its transmitted
bytes (xxh3 hashes at ~9 GB/s on these CPUs, crc32 at ~1.1: at 400 MiB crc32 alone was a full
push's worth of time on each side). A keyframe's digests are computed as it goes (seal()): the
manifest lists 0 and each array's digest travels in the part carrying its last piece, so the
learner digests part k while ZMQ sends the parts before it and the actor checks each array as
soon as it is whole, while the rest arrives.
Each part carries pieces of arrays, named in the wire's array list:

    d:<name>:<offset>   dense values from flat element <offset> on
    i:<name>:<offset>   (delta) flat indices of changed elements (int64) ...
    v:<name>:<offset>   ... and their new values

A keyframe (`base` = -1) holds every element. A delta (`base` = k) holds only elements that
differ from keyframe k as transmitted: an actor that holds keyframe k applies it; one that does
not waits for the keyframe, which the publisher repeats (with the newest delta) when an actor
subscribes and periodically (publisher.py). Arrays named `frozen` (parameters the algorithm never trains: a frozen
backbone)
are neither copied, converted nor compared for a delta: the keyframe's copy stands for them, and
each keyframe takes a fresh copy. With `precision=fp16`, float32 arrays travel as float16 (half the bytes); actors
turn them back into float32. The digest covers exactly what the actor ends up with, so a part lost,
reordered, truncated or corrupted is never swapped in.

    parts, tx, keyframe = encode_push(version, arrays, arch, PushConfig(precision="fp16", delta=True), key)
    asm = Assembler(); weights = asm.feed(part) for each part  # (assembler.py) -> Weights once verified
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

import numpy as np
import xxhash

from robo_async.transport.wire import WeightPart

# cast_into() hands torch received arrays, read-only, that it only reads: its warning about them
# says nothing (set once here: warnings.catch_warnings() per call is not thread-safe)
warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)
PRECISIONS = ("fp32", "fp16")
MIN_PARTS = 8  # a push smaller than MIN_PARTS * part_mb goes in about this many parts (each >= 256 KiB)


@dataclass(frozen=True)
class PushConfig:
    """How the learner streams a weight push: precision, deltas, keyframes, part size."""

    precision: str = "fp32"  # fp32 | fp16: float32 arrays travel as float16 (actors get float32 back)
    delta: bool = False  # send only the elements that changed since the last keyframe
    keyframe_every: int = 20  # versions between keyframes when delta is on
    part_mb: float = 4.0  # a push is streamed in parts of about this size (the learner never stalls on one) ...
    # ... but an array up to this size travels whole, so the actor keeps it as received (no copy)
    whole_mb: float = 256.0
    sparse_below: float = 0.25  # a changed array goes as (indices, values) below this changed fraction

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"weights precision must be one of {PRECISIONS}, not '{self.precision}'")
        if self.keyframe_every < 1 or self.part_mb <= 0 or self.whole_mb < 0:
            raise ValueError("weights keyframe_every must be >= 1, part_mb > 0 and whole_mb >= 0")


def digest(a: np.ndarray) -> int:
    """The xxh3-64 digest of an array's bytes (C order): what part 0's manifest lists per array."""
    return xxhash.xxh3_64_intdigest(memoryview(np.ascontiguousarray(a)).cast("B"))


def _equal(a: np.ndarray, b: np.ndarray, block: int = 1 << 20) -> bool:
    """a == b element for element, in blocks (no array-sized temporary; stops at the first change)."""
    fa, fb = a.reshape(-1), b.reshape(-1)
    return all(np.array_equal(fa[i : i + block], fb[i : i + block]) for i in range(0, fa.size, block))


def cast_into(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src, converting float32 <-> float16 with torch's vectorised kernels (numpy's
    conversion took 0.35 s per 512 MiB here, torch's 0.06); small arrays and anything else with
    numpy (a torch call costs tens of microseconds)."""
    if (
        {dst.dtype, src.dtype} == {np.dtype(np.float16), np.dtype(np.float32)}
        and dst.size >= 1 << 16
        and dst.flags.c_contiguous
        and src.flags.c_contiguous
        and dst.shape == src.shape
    ):
        import torch

        torch.from_numpy(dst).copy_(torch.from_numpy(src))  # (a received src is read-only: torch only reads it)
    else:
        np.copyto(dst, src, casting="same_kind")


def as_dtype(a: np.ndarray, dtype: type) -> np.ndarray:
    """`a` converted to `dtype` (cast_into a new array)."""
    out = np.empty(a.shape, dtype)
    cast_into(out, np.ascontiguousarray(a))
    return out


FP16_MAX = float(np.finfo(np.float16).max)  # 65,504: a larger float32 would become inf in half precision


def too_wide_for_fp16(arrays: Mapping[str, np.ndarray], precision: str) -> frozenset[str]:
    """The float32 arrays an fp16 push sends in float32 instead: a value beyond +-65,504 would
    become inf (and the actor would refuse the whole push as malformed)."""
    if precision != "fp16":
        return frozenset()
    return frozenset(
        k
        for k, a in arrays.items()
        if a.dtype == np.float32 and a.size and (float(a.max()) > FP16_MAX or float(a.min()) < -FP16_MAX)
    )


def transmitted(
    arrays: Mapping[str, np.ndarray], precision: str, wide: frozenset[str] = frozenset()
) -> dict[str, np.ndarray]:
    """The arrays as they travel: float32 -> float16 for fp16 (but the `wide` ones), else as they
    are (contiguous)."""
    out = {}
    for k, a in arrays.items():
        a = np.ascontiguousarray(a)
        out[k] = as_dtype(a, np.float16) if precision == "fp16" and a.dtype == np.float32 and k not in wide else a
    return out


def encode_push(
    version: int,
    arrays: Mapping[str, np.ndarray],
    architecture: str,
    cfg: PushConfig,
    key: tuple | None = None,
    frozen: frozenset[str] = frozenset(),
) -> tuple[list[WeightPart], dict[str, np.ndarray], bool]:
    """(parts, transmitted arrays, is_keyframe): plan_push() with every part sealed now."""
    parts, tx, keyframe = plan_push(version, arrays, architecture, cfg, key, frozen)
    return list(seal(parts, tx)), tx, keyframe


def _array_of(piece: str) -> str:
    return piece.partition(":")[2].rpartition(":")[0]


def seal(
    parts: list[WeightPart], tx: Mapping[str, np.ndarray], ready: Callable[[Iterable[str]], object] = lambda names: None
) -> Iterator[WeightPart]:
    """A keyframe's parts as they go, each with the digests (`sums`) of the arrays whose last piece
    it carries, computed when the part is taken: the publisher digests part k while ZMQ sends the
    parts before it, and the actor checks each array the moment its last piece is in. A delta's
    parts (digests in their manifest) come as they are. `ready(names)` is called before a part is
    taken with the names of the arrays it holds pieces of (the publisher waits there until
    publish() has copied them)."""
    if not parts or parts[0].base >= 0:
        for p in parts:
            ready(map(_array_of, p.arrays))
            yield p
        return
    last = {_array_of(name): i for i, p in enumerate(parts) for name in p.arrays}
    for i, p in enumerate(parts):
        ready(map(_array_of, p.arrays))
        done = dict.fromkeys(k for k in map(_array_of, p.arrays) if last[k] == i)
        yield replace(p, sums=tuple((k, digest(tx[k])) for k in done))


def plan_push(
    version: int,
    arrays: Mapping[str, np.ndarray],
    architecture: str,
    cfg: PushConfig,
    key: tuple | None = None,
    frozen: frozenset[str] = frozenset(),
) -> tuple[list[WeightPart], dict[str, np.ndarray], bool]:
    """(parts, transmitted arrays, is_keyframe). `key` is (version, transmitted arrays[, digests]) of
    the last keyframe; a delta is made against it when cfg.delta and it is recent and has the same
    arrays. `frozen` names arrays that are unchanged since that keyframe by declaration (they may be
    live views of the learner's tensors: a keyframe copies them). A keyframe's parts go through
    seal() (its digests are computed as it goes: the manifest lists 0); a delta's digests are in its
    manifest. Use `keyframe_of(sealed parts, tx)` for the next call's `key` after a keyframe."""
    wide = too_wide_for_fp16({k: a for k, a in arrays.items() if k not in frozen}, cfg.precision)
    if key is not None:  # a frozen array keeps how its keyframe sent it
        wide |= frozenset(
            k
            for k in frozen
            if k in key[1]
            and key[1][k].dtype == np.float32
            and arrays[k].dtype == np.float32
            and cfg.precision == "fp16"
        )

    def spec(k: str, a: np.ndarray) -> tuple:
        return a.shape, (
            np.dtype(np.float16) if cfg.precision == "fp16" and a.dtype == np.float32 and k not in wide else a.dtype
        )

    delta = (
        cfg.delta
        and key is not None
        and version - key[0] < cfg.keyframe_every
        and {k: (a.shape, a.dtype) for k, a in key[1].items()} == {k: spec(k, a) for k, a in arrays.items()}
    )
    if delta:
        assert key is not None
        # frozen now and already when the keyframe was copied (a parameter frozen later is compared)
        held = frozenset(frozen) & (key[3] if len(key) > 3 else frozenset())
        tx = {k: key[1][k] for k in held} | transmitted(
            {k: a for k, a in arrays.items() if k not in held}, cfg.precision, wide
        )
        tx = {k: tx[k] for k in arrays}  # the arrays' own order
        same = set(held) | {k for k, a in tx.items() if k not in held and _equal(a, key[1][k])}
    else:  # a keyframe: every array, frozen ones copied now (live views must not stand in for it)
        tx = transmitted(arrays, cfg.precision, wide)
        tx = {k: (np.array(a, copy=True) if k in frozen and a is arrays[k] else a) for k, a in tx.items()}
        same = set()
    sums = key[2] if delta and key is not None and len(key) > 2 else {}  # type: ignore[misc]
    # a delta: the digest of every array as transmitted; an unchanged array keeps its keyframe's
    # (not recomputed). A keyframe: 0, its digests come with its parts (seal())
    manifest = tuple(
        (k, tuple(a.shape), a.dtype.name, (sums[k] if k in same and k in sums else digest(a)) if delta else 0)
        for k, a in tx.items()
    )
    pieces: list[tuple[str, np.ndarray]] = []
    # parts of part_mb, but a small push in about MIN_PARTS parts (of at least 256 KiB): digesting,
    # sending, receiving and checking then overlap rather than run one after the other
    total = sum(a.nbytes for a in tx.values())
    step = max(1, min(int(cfg.part_mb * 2**20), max(1 << 18, total // MIN_PARTS)))
    for k, a in tx.items():
        flat = a.reshape(-1)
        if delta:
            assert key is not None
            if k in same:
                continue
            changed = np.flatnonzero(flat != key[1][k].reshape(-1))
            if len(changed) < cfg.sparse_below * flat.size:
                per = max(1, step // (8 + a.itemsize))
                for lo in range(0, len(changed), per):
                    idx = changed[lo : lo + per]
                    pieces += [(f"i:{k}:{lo}", idx.astype(np.int64)), (f"v:{k}:{lo}", flat[idx])]
                continue
        per = max(1, step // max(a.itemsize, 1))
        if a.nbytes <= cfg.whole_mb * 2**20:
            per = max(per, flat.size)  # whole: one piece (a part of its own when bigger than part_mb)
        for lo in range(0, max(flat.size, 1), per):
            pieces.append((f"d:{k}:{lo}", flat[lo : lo + per]))
    groups: list[list[tuple[str, np.ndarray]]] = [[]]
    size = 0
    for name, p in pieces:  # consecutive pieces into parts of about part_mb ((i, v) pairs stay together)
        if groups[-1] and size + p.nbytes > step and not name.startswith("v:"):
            groups.append([])
            size = 0
        groups[-1].append((name, p))
        size += p.nbytes
    base = key[0] if delta and key is not None else -1
    parts = [
        WeightPart(version, i, len(groups), base, cfg.precision, architecture, manifest if i == 0 else (), dict(g))
        for i, g in enumerate(groups)
    ]
    return parts, tx, not delta


def keyframe_of(
    version: int, parts: list[WeightPart], tx: dict[str, np.ndarray], frozen: frozenset[str] = frozenset()
) -> tuple:
    """(version, transmitted arrays, digest per array, names frozen when it was taken): what deltas
    are made against. `parts`: the keyframe's parts as sealed (their sums)."""
    sums = {n: c for n, _, _, c in parts[0].manifest} | {n: c for p in parts for n, c in p.sums}
    return version, tx, sums, frozenset(frozen)
