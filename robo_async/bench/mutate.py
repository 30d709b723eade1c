"""Malformed wire messages, reproducibly: a small valid message of every kind (`valid`, the real
dataclasses through `encode`) given one or two mutations (`Mutants`): header fields near-valid and
hostile, keys, kind, array specs with and without a data frame to fit, arrays added or left out,
frames cut, grown, flipped, dropped or flooded, a header of garbage, deep nesting or past the cap.
`robo-async bench fuzz` sends them to live receivers one by one; `bench chaos`'s hostile peer mixes
them into a running job.

    m = Mutants(seed=0, stream=1)
    frames = m.malformed("transitions")   # this process's decode refuses it
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter

import msgpack
import numpy as np

from robo_async.buffer.codec import encode_image
from robo_async.transport.stats import ActorStats, histogram
from robo_async.transport.weights import PushConfig, encode_push
from robo_async.transport.wire import (
    DTYPES,
    KINDS,
    MAX_FRAMES,
    ChunkReply,
    EpisodeStats,
    Frames,
    Heartbeat,
    InferRequest,
    LearnerStatus,
    Message,
    StreamGap,
    TransitionBatch,
    WeightPart,
    Weights,
    WireError,
    decode,
    encode,
)

EDGE_INTS = [
    -1,
    0,
    1,
    2,
    65,
    4097,
    (1 << 16) + 1,
    1 << 20,
    (1 << 20) + 1,
    1 << 34,
    (1 << 34) + 1,
    1 << 40,
    1 << 62,
    (1 << 62) + 1,
    (1 << 63) - 1,
    1 << 63,
    (1 << 64) - 1,
    -(1 << 63),
]
EDGE_FLOATS = [float("nan"), float("inf"), -float("inf"), 1e31, -1e31, 0.5, -0.0]
EDGE_TEXT = ["", "x" * 65, "x" * 257, "y" * 20_000, "frames", "float32", "obs/", "d:a:0", "success", "fp8"]
ARRAY_NAMES = [
    "obs/x",
    "next_obs/x",
    "final_obs/x",
    "obs/embedding",
    "obs/embedding_version",
    "reward",
    "action",
    "terminated",
    "policy_version",
    "intervention",
    "policy_action",
    "fstate",
    "prefix",
    "actions",
    "d:fc.bias:0",
    "i:fc.bias:0",
    "v:fc.bias:0",
    "d:a:x",
    "evil",
    "",
    "x" * 300,
]
SHAPES = [[0, 1 << 34], [1 << 34, 0], [0, 1 << 20, 1 << 20], [0] * 8, [1] * 9, [], [1], [0], [2, 3], [4]]
PLAIN_DTYPES = sorted(DTYPES)
SPEC_DTYPES = [*PLAIN_DTYPES, "frames", "object", "<f4", "", 3]
# weighted by repetition: the mutations that reach the kinds' own checks come most often
OPS = (
    ["field"] * 4
    + ["reshape"] * 3
    + ["add", "drop_array"] * 2
    + ["drop_field", "kind", "spec", "frames", "frames", "header"]
)
UNNAMED = ("malformed message (", "message refused:")  # decode's last-resort wrapper, not a named check
KEYS = sorted(
    {"schema", "kind", "evil", ""}
    | {
        f
        for c in (
            TransitionBatch,
            EpisodeStats,
            Weights,
            WeightPart,
            LearnerStatus,
            Heartbeat,
            InferRequest,
            ChunkReply,
            StreamGap,
        )
        for f in c.__dataclass_fields__
    }
)


def valid(kind: str, r: np.random.Generator) -> Message:
    """A small valid message of `kind`, its values drawn from `r`."""
    n, d, a = (int(x) for x in r.integers(1, 5, 3))
    i = lambda lo, hi: int(r.integers(lo, hi))

    def f32(*shape: int) -> np.ndarray:
        return r.standard_normal(shape, np.float32)

    images = lambda m: Frames(
        [encode_image(x) for x in r.integers(0, 255, (m, 4, 4, 3), np.uint8)],
        (m, 4, 4, 3),
    )  # a camera column encoded as actors send it
    if kind == "transitions":
        arrays: dict[str, np.ndarray | Frames] = {
            "obs/state": f32(n, d),
            "final_obs/state": f32(1, d),
            "action": f32(n, a),
            "reward": f32(n),
            "terminated": r.random(n) < 0.2,
            "truncated": np.zeros(n, bool),
            "success": np.zeros(n, bool),
            "policy_version": r.integers(-1, 9, n),
            "intervention": r.integers(0, 3, n).astype(np.uint8),
            "policy_action": f32(n, a),
        }
        if r.random() < 0.3:
            arrays |= {"obs/cam": images(n), "final_obs/cam": images(1)}
        return TransitionBatch(i(0, 100), i(0, 1 << 40), arrays)  # type: ignore[arg-type]
    if kind == "episode":
        length = i(0, 500)
        return EpisodeStats(
            i(0, 100),
            i(0, 1000),
            float(r.normal()),
            length,
            r.random() < 0.5,
            i(-1, 100),
            r.random() < 0.5,
            i(0, length + 1),
            ("", "success", "failure")[i(0, 3)],
        )
    if kind in ("weights", "wpart"):
        w = {"fc.weight": f32(4, 3), "fc.bias": f32(4)}
        if kind == "weights":
            return Weights(i(0, 100), w, "mlp:3-4")
        parts, _, _ = encode_push(i(1, 100), w, "mlp:3-4", PushConfig(part_mb=0.00003, whole_mb=0))
        return parts[i(0, len(parts))]
    if kind == "status":
        return LearnerStatus(
            i(0, 1 << 30),
            i(0, 1 << 30),
            i(0, 1 << 30),
            i(0, 1 << 30),
            r.random() < 0.1,
            f"boot-{i(0, 1000)}",
            tuple((k, i(0, 1 << 30)) for k in range(i(0, 4))),
        )
    if kind == "heartbeat":
        return Heartbeat(
            i(0, 100),
            i(0, 1 << 30),
            i(-1, 100),
            ActorStats(
                clipped=i(0, 9),
                late_p99_ms=float(r.random()),
                late_hist=histogram(r.random(20) * 10, "late_hist"),
                unacked=64,
            ),
        )
    if kind == "infer":
        if r.random() < 0.3:
            return InferRequest(i(0, 100), i(0, 1 << 30), hello=True, spec="{}")
        obs: dict[str, np.ndarray | Frames] = {"state": f32(d), **({"cam": images(1)} if r.random() < 0.3 else {})}
        return InferRequest(i(0, 100), i(0, 1 << 30), 5, 2, False, obs, f32(d), f32(2, a), instruction="pick")
    if kind == "gap":
        return StreamGap(i(0, 100), i(0, 1 << 40), i(1, 100), "journal entry damaged")
    assert kind == "chunk", f"no valid {kind} message here: add one"
    how = i(0, 3)  # chunk: actions, an error or a hello's answer
    return ChunkReply(
        i(0, 1 << 30),
        i(-1, 100),
        "mlp:3-4",
        f32(8, a) if how == 0 else None,
        "refused" if how == 1 else "",
        8 if how == 2 else 0,
    )


class Mutants:
    """Malformed messages of each kind, reproducibly from (seed, stream): one of a pool of valid
    messages given one or two mutations, until this process's `decode` refuses it (`counts`: the
    mutants it accepted, refusals only its last-resort wrapper made, other exceptions out of it).
    Python's `random` draws the mutations: a numpy generator's call costs ten times as much."""

    def __init__(self, seed: int, stream: int, pool: int = 32) -> None:
        rng = np.random.default_rng([seed, stream])
        self.pool = {k: [[bytes(f) for f in encode(valid(k, rng))] for _ in range(pool)] for k in KINDS}
        self.rand = random.Random(seed * 1000 + stream)
        self.pick = self.rand.choice
        self.counts = {"valid_mutants": 0, "unnamed": 0, "escapes": 0}
        self.unnamed_reasons: Counter[str] = Counter()

    def malformed(self, kind: str) -> list[bytes]:
        while True:
            frames = list(self.pick(self.pool[kind]))
            for _ in range(1 + (self.rand.random() < 0.3)):
                frames = self._mutate(frames) or [b""]
            try:
                decode(frames)
            except WireError as e:
                if str(e).startswith(UNNAMED):
                    self.counts["unnamed"] += 1
                    self.unnamed_reasons[re.sub(r"\d+", "N", str(e))[:120]] += 1
                return frames
            except Exception:  # noqa: BLE001 - decode broke its contract: still sent, the receivers must cope
                self.counts["escapes"] += 1
                return frames
            self.counts["valid_mutants"] += 1

    def topic_for(self, kind: str, status: bytes, weights: bytes) -> bytes:
        """A `kind` mutant's topic: its kind's (either for other kinds); sometimes one that only starts so."""
        either = self.pick((status, weights))
        if self.rand.random() < 0.02:
            return either + b"X"
        return {"status": status, "weights": weights, "wpart": weights}.get(kind, either)

    def _mutate(self, frames: list[bytes]) -> list[bytes]:
        pick, rand = self.pick, self.rand.random
        try:
            header = msgpack.unpackb(frames[0], raw=False)
        except Exception:  # noqa: BLE001 - garbage from an earlier mutation
            header = None
        if not isinstance(header, dict):
            return self._frames(frames)
        op, raw, data = pick(OPS), header.get("arrays"), frames[1:]
        specs: list = raw if isinstance(raw, list) else []
        fits = isinstance(raw, list) and len(specs) == len(data)
        plain = [i for i, sp in enumerate(specs) if isinstance(sp, list) and len(sp) == 3] if fits else []
        if op in ("reshape", "drop_array", "add", "spec") and not plain and rand() < 0.9:
            op = "field"  # a kind without arrays: its fields are what there is to break
        if op == "frames":
            return self._frames(frames)
        if op == "header":
            return self._header(header, data)
        if op == "field":
            key = pick([k for k in header if type(k) is str and k != "arrays"] * 8 + KEYS)
            header[key] = self._near(header[key]) if key in header and rand() < 0.5 else self._hostile()
        elif op == "drop_field" and header:
            header.pop(pick(list(header)))
        elif op == "kind":
            header["kind"] = pick(KINDS)
        elif op == "reshape" and plain:
            i, dtype, shape = pick(plain), pick(PLAIN_DTYPES), self._shape()
            specs[i], data[i] = [specs[i][0], dtype, shape], self._bytes(dtype, shape)
        elif op == "drop_array" and plain:
            i = pick(plain)
            del specs[i], data[i]
        elif op == "spec" and fits and specs and isinstance(spec := pick(specs), list) and spec:
            at = self.rand.randrange(len(spec) + 1)  # a name, dtype, shape, image lengths or one more entry
            value = (pick(ARRAY_NAMES), pick(SPEC_DTYPES), self._shape(), self._hostile())[min(at, 3)]
            spec[at : at + 1] = [value] if rand() < 0.8 else []
        elif fits:  # one more array, well formed
            dtype, shape = pick(PLAIN_DTYPES), self._shape()
            specs.append([pick(ARRAY_NAMES), dtype, shape])
            data.append(self._bytes(dtype, shape))
        else:
            header["arrays"] = self._hostile()
        return [msgpack.packb(header, use_bin_type=True), *data]

    def _header(self, header: dict, data: list[bytes]) -> list[bytes]:
        """Another msgpack object, garbage, deep nesting, an int map key, none; rarely past the cap."""
        rr = self.rand
        how = rr.randrange(5) if rr.random() > 0.005 else 5
        head = (
            lambda: msgpack.packb(self._hostile()),
            lambda: rr.randbytes(rr.randrange(40)),
            lambda: b"\x81\xa6schema" + b"\x91" * self.pick([100, 1000, 5000, 100_000]) + b"\x01",
            lambda: msgpack.packb({**header, rr.randrange(9): 1}),
            lambda: None,
            lambda: msgpack.packb({**header, "evil": "z" * (1 << 20)}),
        )[how]()
        return (data or [b""]) if head is None else [head, *data]

    def _frames(self, frames: list[bytes]) -> list[bytes]:
        """A frame cut, grown or flipped; data frames dropped, added or reversed; rarely 65,000 more
        (about one message in 8,000: each costs ~0.2 s to send and to read)."""
        rr, i = self.rand, self.rand.randrange(len(frames))
        how = rr.randrange(6) if rr.random() > 0.0005 else 6
        if how >= 3:
            return (
                lambda: frames[:i] + frames[i + 1 :] if i else frames[:1],
                lambda: frames + [rr.randbytes(rr.randrange(16)) for _ in range(rr.randrange(1, 4))],
                lambda: [frames[0], *reversed(frames[1:])],
                lambda: frames + [b""] * (MAX_FRAMES + 5 - len(frames)),
            )[how - 3]()
        f = bytearray(frames[i])
        if how < 2:
            f = f[: rr.randrange(max(len(f), 1))] if how == 0 else f + rr.randbytes(rr.randrange(1, 64))
        for _ in range(rr.randrange(1, 5) if f and how == 2 else 0):
            f[rr.randrange(len(f))] ^= rr.randrange(1, 256)
        return [*frames[:i], bytes(f), *frames[i + 1 :]]

    def _shape(self) -> list[int]:
        return (
            self.pick(SHAPES)
            if self.rand.random() < 0.3
            else [self.rand.randrange(6) for _ in range(self.rand.randrange(4))]
        )

    def _bytes(self, dtype: str, shape: list[int]) -> bytes:
        """Data for a `dtype` `shape` array: random, zeros or all 0xFF (NaNs); none past 64 KiB."""
        size = math.prod(shape) * np.dtype(dtype).itemsize
        return (
            b"" if size > 1 << 16 else (self.rand.randbytes(size), bytes(size), b"\xff" * size)[self.rand.randrange(3)]
        )

    def _near(self, value: object) -> object:
        """A value of `value`'s type that may break its range; in a list, one element so."""
        pick, rand = self.pick, self.rand.random
        if type(value) is bool:
            return pick([not value, 0, 1, None])
        if type(value) is int:
            step = value + self.rand.randrange(-2, 3)  # (msgpack packs [-2^63, 2^64))
            return pick(EDGE_INTS) if rand() < 0.8 or not -(1 << 63) <= step < 1 << 64 else step
        if type(value) in (float, str):
            return pick(EDGE_FLOATS if type(value) is float else EDGE_TEXT)
        if isinstance(value, list) and value:
            i = self.rand.randrange(len(value))
            return value * 2 if rand() < 0.2 else [*value[:i], self._near(value[i]), *value[i + 1 :]]
        return self._hostile()

    def _hostile(self, depth: int = 0) -> object:
        """Any msgpack value: edge numbers, long text, bytes, lists and maps (nested a little)."""
        rr, pick = self.rand, self.pick
        c = rr.randrange(9 if depth < 3 else 7)
        if c < 5:
            return (None, c == 1, pick(EDGE_INTS), pick(EDGE_FLOATS), pick(EDGE_TEXT))[c]
        if c < 7:
            return rr.randbytes(rr.randrange(8)) if c == 5 else rr.randrange(-(1 << 62), 1 << 62)
        if c == 7:
            return [self._hostile(depth + 1) for _ in range(rr.randrange(4))]
        return {pick(EDGE_TEXT)[:6] + str(i): self._hostile(depth + 1) for i in range(rr.randrange(3))}
