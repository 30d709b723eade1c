"""The latest camera frame of each actor, for the dashboard: the learner notes the last `obs/<camera>`
row of every batch it stores (raw, or the blob as the actor encoded it: no work per batch) and
turns it into a small JPEG data URL only when the dashboard asks (`Learner.actor_rows`). Bounded:
one frame per camera per actor (the learner's actors are capped by `learner.max_actors`)."""

from __future__ import annotations

import base64
import logging

import cv2
import numpy as np

from robo_async.buffer.codec import Column, CorruptRecord, Schema, decode_image
from robo_async.transport.messages import Frames, TransitionBatch

log = logging.getLogger(__name__)


class LatestFrames:
    """`note(batch, schema)` per stored batch; `urls(actor)` -> {camera: data URL}."""

    def __init__(self, width: int = 160) -> None:
        self.width = width
        self._last: dict[int, dict[str, tuple[object, Column]]] = {}

    def note(self, batch: TransitionBatch, schema: Schema | None) -> None:
        if schema is None:
            return
        for c in schema.images:
            if c.name.startswith("obs/") and c.name in batch.arrays and batch.count:
                col = batch.arrays[c.name]
                self._last.setdefault(batch.actor_id, {})[c.name.removeprefix("obs/")] = (col[len(col) - 1], c)

    def urls(self, actor: int) -> dict[str, str]:
        out = {}
        for cam, (frame, column) in self._last.get(actor, {}).items():
            try:
                img = decode_image(frame, column) if isinstance(frame, (bytes, bytearray)) else np.asarray(frame)
            except CorruptRecord as e:  # the store refused such a batch too; nothing to show
                log.debug("no frame for actor %d %s: %s", actor, cam, e)
                continue
            if img.shape[1] > self.width:
                img = cv2.resize(
                    img, (self.width, int(img.shape[0] * self.width / img.shape[1])), interpolation=cv2.INTER_AREA
                )
            ok, jpg = cv2.imencode(
                ".jpg",
                np.ascontiguousarray(img[..., ::-1]) if img.shape[-1] == 3 else img,
                [cv2.IMWRITE_JPEG_QUALITY, 80],
            )
            if ok:
                out[cam] = "data:image/jpeg;base64," + base64.b64encode(jpg.tobytes()).decode()
        return out


__all__ = ["Frames", "LatestFrames"]
