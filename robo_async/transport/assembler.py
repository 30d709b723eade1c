"""The actor's side of a weight push (the learner's is weights.py and publisher.py): `Assembler`
takes the parts of a push as they come, checks each array against its digest as soon as it is whole,
applies a delta to the keyframe it holds, and hands back `Weights` (float32 again from fp16) once
the push is complete and verified; a part lost, reordered, truncated or corrupted is never swapped in.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from robo_async.transport.weights import as_dtype, digest
from robo_async.transport.wire import WeightPart, Weights, WireError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Pending:
    """A keyframe array not yet written: its shape and dtype from the manifest."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


class Assembler:
    """Actor side: parts -> verified Weights (float32 back from fp16). Keeps the newest keyframe
    (as transmitted) so deltas against it can be applied; bounded: one push in progress."""

    def __init__(self) -> None:
        self._key: tuple[int, dict[str, np.ndarray], dict[str, int]] | None = None  # version, arrays, digests
        self._cur: dict | None = None  # the push being assembled
        self.bad = 0  # pushes refused (digest, manifest, pieces that do not fit)
        self.missing_base = 0  # deltas against a keyframe this actor does not hold
        self.completed = 0

    @property
    def busy(self) -> bool:
        """A push is being assembled (its part 0 came, not all of the rest yet)."""
        return self._cur is not None

    def feed(self, p: WeightPart) -> Weights | None:
        """Take one part; the whole push as `Weights` once every part came and every digest
        matched, else None (more to come, a repeat, or a push refused: counted in `bad` or
        `missing_base`; a piece that does not fit is refused the same way). Raises WireError for a
        part 0 without a manifest."""
        cur = self._cur
        if p.part == 0:
            if cur is not None and cur["version"] == p.version and cur["base"] == p.base:
                return None  # a repeat of the push under way
            if p.base >= 0 and (self._key is None or self._key[0] != p.base):
                self.missing_base += 1
                self._cur = None
                return None
            if not p.manifest:
                raise WireError("weights part 0 carries no manifest")
            bufs: dict[str, np.ndarray | _Pending] = {}
            for name, shape, dtype, _ in p.manifest:
                if p.base >= 0:  # a delta: untouched arrays are the (verified) keyframe's, shared
                    src = self._key[1].get(name) if self._key is not None else None
                    if src is None or src.shape != shape or src.dtype.name != dtype:
                        self.missing_base += 1
                        self._cur = None
                        return None
                    bufs[name] = src
                else:  # allocated at its first piece (an array that comes whole is the piece itself)
                    bufs[name] = _Pending(tuple(shape), np.dtype(dtype))
            self._cur = cur = {
                "version": p.version,
                "base": p.base,
                "parts": p.parts,
                "got": set(),
                "touched": set(),
                "manifest": p.manifest,
                "bufs": bufs,
                "precision": p.precision,
                "architecture": p.architecture,
                "sums": {},
                "verified": set(),
                "in_order": True,
                "fp32": {},
            }
        elif cur is None or cur["version"] != p.version or cur["base"] != p.base:
            return None  # its part 0 was not seen: wait for the repeat
        if p.parts != cur["parts"] or p.part in cur["got"]:
            return None
        try:
            if cur["base"] >= 0:  # copy a keyframe array before its first change (the keyframe stays intact)
                for name in p.arrays:
                    k = name.partition(":")[2].rpartition(":")[0]
                    if k not in cur["touched"] and k in cur["bufs"]:
                        cur["bufs"][k] = cur["bufs"][k].copy()
                        cur["touched"].add(k)
            self._apply(cur["bufs"], p.arrays)
            self._check_as_it_goes(cur, p)
        except (ValueError, KeyError, IndexError) as e:
            self.bad += 1
            self._cur = None
            log.warning("weights v%d part %d refused: %s", p.version, p.part, e)
            return None
        cur["got"].add(p.part)
        if len(cur["got"]) < cur["parts"]:
            return None
        self._cur = None
        if any(isinstance(v, _Pending) for v in cur["bufs"].values()):  # an array no piece wrote
            self.bad += 1
            log.warning("weights v%d refused: arrays without pieces", p.version)
            return None
        # a keyframe: every array not checked as it came; a delta: what changed
        check = (cur["touched"] if cur["base"] >= 0 else set(cur["bufs"])) - cur["verified"]
        expected = {n: cur["sums"].get(n, c) for n, _, _, c in cur["manifest"]}
        bad = [n for n in expected if n in check and digest(cur["bufs"][n]) != expected[n]]
        if cur["base"] >= 0 and self._key is not None:  # an untouched array must be the keyframe's as sent now
            key_sums = self._key[2]
            bad += [n for n, _, _, c in cur["manifest"] if n not in check and key_sums.get(n) != c]
        if bad:
            self.bad += 1
            log.warning("weights v%d refused: digest mismatch in %s", p.version, bad[:5])
            return None
        for v in cur["bufs"].values():  # shared with the keyframe and the policy's loader: read-only
            v.flags.writeable = False
        if cur["base"] < 0:
            self._key = (cur["version"], cur["bufs"], expected)
        self.completed += 1
        back = cur["fp32"]  # (float16 arrays turned back into float32 as they were checked)
        arrays = {
            k: back[k] if k in back else (as_dtype(v, np.float32) if v.dtype == np.float16 else v)
            for k, v in cur["bufs"].items()
        }
        return Weights(cur["version"], arrays, cur["architecture"])

    @staticmethod
    def _check_as_it_goes(cur: dict, p: WeightPart) -> None:
        """A keyframe's arrays whose digest this part brings: checked now when every part before
        it came first (so the array is whole), else at the end. Raises ValueError on a mismatch."""
        cur["in_order"] = cur["in_order"] and p.part == len(cur["got"])
        for name, c in p.sums:
            if name not in cur["bufs"]:
                raise ValueError(f"a digest for '{name}', which the manifest does not list")
            cur["sums"][name] = c
            buf = cur["bufs"][name]
            if cur["base"] < 0 and cur["in_order"] and not isinstance(buf, _Pending):
                if digest(buf) != c:
                    raise ValueError(f"digest mismatch in '{name}'")
                cur["verified"].add(name)
                if buf.dtype == np.float16:  # back to float32 now, while the rest arrives
                    cur["fp32"][name] = as_dtype(buf, np.float32)

    @staticmethod
    def _apply(bufs: dict[str, np.ndarray], pieces: Mapping[str, np.ndarray]) -> None:
        for name, a in pieces.items():
            kind, _, rest = name.partition(":")
            key, _, off = rest.rpartition(":")
            if kind == "i":
                continue  # applied with its values
            buf = bufs[key]
            if isinstance(buf, _Pending):
                if a.dtype != buf.dtype:
                    raise ValueError(f"piece {name} is {a.dtype}, the manifest says {buf.dtype}")
                if kind == "d" and int(off) == 0 and a.size == buf.size:  # the whole array: kept as received
                    bufs[key] = a.reshape(buf.shape)
                    continue
                bufs[key] = buf = np.empty(buf.shape, buf.dtype)
            flat = buf.reshape(-1)
            if a.dtype != flat.dtype:
                raise ValueError(f"piece {name} is {a.dtype}, the manifest says {flat.dtype}")
            if kind == "d":
                lo = int(off)
                if lo < 0 or lo + a.size > flat.size:
                    raise ValueError(f"piece {name} runs past '{key}' ({flat.size} elements)")
                flat[lo : lo + a.size] = a
            elif kind == "v":
                idx = pieces[f"i:{key}:{off}"]
                if idx.shape != a.shape or (idx.size and (idx.min() < 0 or idx.max() >= flat.size)):
                    raise ValueError(f"delta piece {name} does not fit '{key}'")
                flat[idx] = a
            else:
                raise ValueError(f"unknown piece {name}")
