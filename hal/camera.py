"""`Camera`: a frame source (OpenCV device, a robot's built-in camera, a simulator's render).

cam.connect()
frame = cam.read()          # Frame(timestamp, image H x W x 3 uint8)
cam.close()
"""

from __future__ import annotations

import abc
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from hal.spec import CameraSpec

if TYPE_CHECKING:
    import cv2


class CameraError(RuntimeError):
    """A camera that is missing, unplugged or returns no frame."""


@dataclass(frozen=True)
class Frame:
    """One camera image and when it was read."""

    timestamp: float  # time.monotonic() when the frame was read
    image: np.ndarray  # H x W x 3 uint8, RGB


class Camera(abc.ABC):
    """A camera read by the control loop: `connect()`, then `read()` each tick, `close()`. `spec` (name, size)
    is readable before connecting."""

    @property
    @abc.abstractmethod
    def spec(self) -> CameraSpec:
        """Name and frame size (readable before connect)."""

    @abc.abstractmethod
    def connect(self) -> None:
        """Open the device; raises CameraError if it cannot be opened."""

    @abc.abstractmethod
    def read(self) -> Frame:
        """The newest frame (RGB uint8, the spec's size); raises CameraError if none comes."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the device (idempotent)."""


class OpenCVCamera(Camera):
    """A V4L2/USB camera through OpenCV, resized to the spec's size."""

    def __init__(self, index_or_path: int | str, spec: CameraSpec) -> None:
        self._source = index_or_path
        self._spec = spec
        self._cap: cv2.VideoCapture | None = None

    @property
    def spec(self) -> CameraSpec:
        """Name and frame size frames are resized to."""
        return self._spec

    def connect(self) -> None:
        """Open the OpenCV capture; raises CameraError if the device is missing or unplugged."""
        import cv2

        cap = cv2.VideoCapture(self._source)
        if not cap.isOpened():
            raise CameraError(f"camera {self._spec.name} at {self._source!r} cannot be opened (unplugged?)")
        self._cap = cap

    def read(self) -> Frame:
        """Grab a frame, convert BGR to RGB and resize it to the spec's size; raises CameraError if not
        connected or no frame came."""
        import cv2

        if self._cap is None:
            raise CameraError(f"camera {self._spec.name} is not connected")
        ok, bgr = self._cap.read()
        if not ok:
            raise CameraError(f"camera {self._spec.name} at {self._source!r} returned no frame")
        img = cv2.resize(bgr[..., ::-1], (self._spec.width, self._spec.height))
        return Frame(time.monotonic(), np.ascontiguousarray(img))

    def close(self) -> None:
        """Release the capture (idempotent)."""
        if self._cap is not None:
            self._cap.release()
            self._cap = None
