"""The dashboard's camera frames: the last row of each actor's latest batch, raw or as the actor
encoded it, as a JPEG the browser shows; one per camera per actor."""

import base64

import cv2
import numpy as np

from robo_async.buffer.codec import Column, Schema, encode_image
from robo_async.learner.frames import LatestFrames
from robo_async.transport.messages import Frames, TransitionBatch

SCHEMA = Schema((Column("obs/front", "uint8", (8, 8, 3)), Column("reward", "float32", ())))


def batch(actor, images):
    return TransitionBatch(actor, 0, {"obs/front": images, "reward": np.zeros(len(images), np.float32)})


def decoded(url):
    assert url.startswith("data:image/jpeg;base64,")
    return cv2.imdecode(np.frombuffer(base64.b64decode(url.split(",", 1)[1]), np.uint8), cv2.IMREAD_COLOR)[..., ::-1]


def test_the_latest_frame_of_each_actor_raw_or_encoded():
    f = LatestFrames()
    red = np.zeros((2, 8, 8, 3), np.uint8)
    red[1, ..., 0] = 250  # the batch's last row is red
    f.note(batch(0, red), SCHEMA)
    blue = np.zeros((8, 8, 3), np.uint8)
    blue[..., 2] = 250
    f.note(batch(1, Frames([encode_image(np.zeros_like(blue)), encode_image(blue)], (2, 8, 8, 3))), SCHEMA)
    a, b = decoded(f.urls(0)["front"]), decoded(f.urls(1)["front"])
    assert a.shape == (8, 8, 3) and a[..., 0].mean() > 200 and a[..., 2].mean() < 40
    assert b[..., 2].mean() > 200 and b[..., 0].mean() < 40
    assert f.urls(7) == {}  # an actor without frames
    f.note(batch(1, Frames([b"Qbad!" + b"x" * 8, b"Qbad!" + b"x" * 8], (2, 8, 8, 3))), SCHEMA)
    assert f.urls(1) == {}  # a corrupt blob shows nothing (and raises nothing)
