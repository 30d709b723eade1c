"""The twin's camera: the simulated follower's `front` view rendered and published as LeRobot's
`ZMQCamera` receives frames (JPEG, base64 in JSON, on a ZMQ PUB socket).
"""

from __future__ import annotations

import json
import logging
import threading
import time

import zmq

from hardware.twin.arm import TwinArm

log = logging.getLogger(__name__)


class CameraFeed:
    """The follower's `front` camera as LeRobot's `ZMQCamera` receives one: JPEG frames of the
    simulated arm, base64 in a JSON message (`{"timestamps": {name: t}, "images": {name: b64}}`),
    published on a ZMQ PUB socket at `fps`. `delivering = False` stops the frames (a camera that
    hangs: LeRobot's reader then finds its latest frame too old)."""

    def __init__(
        self, arm: TwinArm, ctx: zmq.Context, *, fps: float = 10.0, size: int = 96, name: str = "front"
    ) -> None:
        self.arm, self.fps, self.size, self.name = arm, fps, size, name
        self.sock = ctx.socket(zmq.PUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.delivering = True
        self.frames = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="twin-camera", daemon=True)

    def start(self) -> None:
        """Publish until `close()`."""
        self._thread.start()

    def _run(self) -> None:
        import base64

        import cv2
        import mujoco

        try:
            renderer = mujoco.Renderer(self.arm.model, self.size, self.size)
        except Exception:  # no GL here: the camera is absent, said once
            log.exception("twin camera: cannot render (set MUJOCO_GL=egl or osmesa)")
            return
        while not self._stop.wait(1.0 / self.fps):
            if not self.delivering:
                continue
            with self.arm.lock:
                renderer.update_scene(self.arm.data, camera=self.name)
            rgb = renderer.render()
            ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
            if ok:
                msg = {
                    "timestamps": {self.name: time.time()},
                    "images": {self.name: base64.b64encode(jpeg.tobytes()).decode()},
                }
                self.sock.send_string(json.dumps(msg))
                self.frames += 1
        renderer.close()

    def close(self) -> None:
        """Stop publishing and close the socket."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        self.sock.close()
