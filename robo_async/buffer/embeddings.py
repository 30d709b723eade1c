"""Stored embeddings: the `embedding` and `embedding_version` observation columns of a run whose
policy has a frozen camera encoder (policies/embedding.py; DSRL on a pixel BC prior).

Each transition batch is embedded once, where its frames are produced: the actor's uplink thread
(off the control loop) runs `embed_batch` before it encodes the frames. The learner runs it again
on what it ingests and imports, where it is a check that costs nothing for rows the current
encoder embedded, and the repair for the others: rows from an actor that did not embed (remote
inference, `actor.embed=false`) or embedded with another encoder are (re-)encoded from their
frames, so the store never mixes versions silently. Frames are always stored too, for later
re-encoding. The store counts rows per version in its meta (`PersistentReplayStore.embedding_versions`);
a learner whose encoder does not match them is refused at start (`check_store_versions`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from policies.embedding import EMBEDDING, EMBEDDING_VERSION, FrozenEncoder, show_version
from robo_async.buffer.codec import decode_batch_frames
from robo_async.transport.wire import FINAL_OBS, Frames, TransitionBatch

PREFIXES = ("obs/", "next_obs/", FINAL_OBS)


class EmbeddingMismatch(ValueError):
    """A store holds rows embedded by another frozen encoder than the run's (`check_store_versions`)."""


def is_embedding_column(name: str) -> bool:
    """`obs/embedding`, `next_obs/embedding_version`, ...: the columns `embed_batch` writes."""
    return name.startswith(PREFIXES) and name.split("/", 1)[1] in (EMBEDDING, EMBEDDING_VERSION)


def _frames(arrays: Mapping[str, np.ndarray | Frames], names: list[str]) -> list[np.ndarray]:
    encoded = [k for k in names if isinstance(arrays[k], Frames)]
    decoded = decode_batch_frames(arrays, encoded) if encoded else {}
    return [decoded[k] if k in decoded else np.asarray(arrays[k]) for k in names]


def _current(arrays: Mapping[str, np.ndarray | Frames], prefix: str, encoder: FrozenEncoder) -> bool:
    v, e = arrays.get(prefix + EMBEDDING_VERSION), arrays.get(prefix + EMBEDDING)
    return (
        isinstance(v, np.ndarray)
        and isinstance(e, np.ndarray)
        and v.dtype == np.int64
        and e.dtype == np.float16
        and e.shape[1:] == (encoder.dim,)
        and bool((v == encoder.version).all())
    )


def embed_batch(batch: TransitionBatch, encoder: FrozenEncoder | None) -> tuple[TransitionBatch, int]:
    """`batch` with `<prefix>embedding` (float16 [n, dim]) and `<prefix>embedding_version` (int64 [n])
    made by `encoder` for each observation prefix (obs/, next_obs/, final_obs/) that has its
    cameras; columns another version made are replaced. With `encoder` None, embedding columns are
    removed (a run without a frozen encoder stores none). Returns (batch, rows encoded here).
    Raises ValueError naming a camera the encoder needs and the batch lacks."""
    arrays = dict(batch.arrays)
    if encoder is None:
        strip = [k for k in arrays if is_embedding_column(k)]
        for k in strip:
            del arrays[k]
        return (TransitionBatch(batch.actor_id, batch.seq, arrays) if strip else batch), 0
    made = 0
    done: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # prefix -> (frames, embeddings)
    for prefix in PREFIXES:
        names = [prefix + c for c in encoder.cameras]
        if not any(k in arrays for k in names) or _current(arrays, prefix, encoder):
            continue
        lacking = [k for k in names if k not in arrays]
        if lacking:
            raise ValueError(f"the frozen encoder embeds cameras {list(encoder.cameras)}; the batch lacks {lacking}")
        frames = np.stack(_frames(arrays, names), axis=1)
        before = done.get("obs/")
        if (
            prefix == "next_obs/"
            and before is not None
            and len(frames) > 1
            and np.array_equal(frames[:-1], before[0][1:])
        ):
            emb = np.concatenate([before[1][1:], encoder(frames[-1:])])  # next_obs = obs shifted by one tick
            made += 1
        else:
            emb = encoder(frames)
            made += len(emb)
        done[prefix] = (frames, emb)
        arrays[prefix + EMBEDDING] = emb
        arrays[prefix + EMBEDDING_VERSION] = np.full(len(emb), encoder.version, np.int64)
    return (TransitionBatch(batch.actor_id, batch.seq, arrays) if done else batch), made


def check_store_versions(
    versions: Mapping[int, int], encoder: FrozenEncoder | None, where: str, skip: bool = False
) -> str | None:
    """A one-line refusal when a store holds rows embedded by another encoder than the run's
    (None: they agree, or `skip`: rows of other versions are left out of training)."""
    if encoder is None or skip:
        return None
    other = {v: n for v, n in versions.items() if v != encoder.version}
    if not other:
        return None
    old = ", ".join(f"{show_version(v)} ({n:,} rows)" for v, n in sorted(other.items()))
    return (
        f"{where} holds rows embedded by encoder {old}; this run's policy has encoder "
        f"{show_version(encoder.version)}: use the policy.path that made them, a new run_dir, or "
        f"learner.stale_embeddings=skip to leave those rows out of training"
    )
