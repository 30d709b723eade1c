"""A twin in its own process, as a user starts one (`robo-async twin so101 ...`): for tests and
benchmarks, which drive it through LeRobot's own classes from another process (the twin's physics
does not share their GIL, as a real arm's firmware does not).

    twin = TwinProcess(Path("/tmp/twin"), camera=True).start()
    robot = make_safe_robot(task_args({"name": "reach"}, twin.robot()))   # robot.* for so101_follower
    twin.control("unplug"); twin.state()["q"]; twin.close()
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from hardware.twin.client import TwinControl
from hardware.twin.protocol import PING, instruction_packet, status_packet

# The twin answers from another process, which a loaded 2-core machine may not run within the
# ~50 ms LeRobot's SDK waits (a late answer is then taken as the next request's): the robot and
# leader configs made here give the bus this floor (`robot.bus_timeout_ms`).
BUS_TIMEOUT_MS = 2000


class TwinProcess:
    """`python -m hardware.twin so101 dir=<root> leader=true [camera=true]` in a child process."""

    def __init__(self, root: Path, *, camera: bool = False, bus_timeout_ms: int = BUS_TIMEOUT_MS) -> None:
        self.root, self.camera, self.bus_timeout_ms = root, camera, bus_timeout_ms
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}
        self._control: TwinControl | None = None

    @property
    def control(self) -> TwinControl:
        """The twin's control socket (`state`, `hand`, `fault`, `unplug`, `camera`, ...)."""
        if self._control is None:
            raise RuntimeError("the twin is not started: call start() first")
        return self._control

    def start(self, timeout_s: float = 60.0) -> TwinProcess:
        """Start the process, wait for its description and until each bus answers a ping."""
        import hardware

        self.root.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(Path(hardware.__file__).resolve().parents[1])}
        env.setdefault("MUJOCO_GL", "egl")
        with open(self.root / "twin.log", "w") as log_file:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "hardware.twin",
                    "so101",
                    f"dir={self.root}",
                    "leader=true",
                    f"camera={str(self.camera).lower()}",
                ],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
            )
        try:
            deadline = time.monotonic() + timeout_s
            while (info := self._description()) is None:  # this child's (a twin.json left in `root` is not)
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the twin did not start: {(self.root / 'twin.log').read_text()}")
                time.sleep(0.05)
            self.info = info
            self._control = TwinControl(self.info["control"])
            for arm in self.info["arms"].values():
                ping_until_answered(arm["port"], max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.close()  # no twin left running behind a failed start
            raise
        return self

    def _description(self) -> dict | None:
        """The child's `twin.json`, once it has written it (None before)."""
        try:
            info = json.loads((self.root / "twin.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return info if self.proc is not None and info.get("pid") == self.proc.pid else None

    def robot(self, **extra: object) -> dict:
        """`robot.*` for LeRobot's so101_follower on this twin (LeRobot's own 15 degree cap kept)."""
        f = self.info["arms"]["follower"]
        return {
            "type": "so101_follower",
            "port": f["port"],
            "id": f["id"],
            "calibration_dir": f["calibration_dir"],
            "use_degrees": True,
            "max_relative_target": 15,
            "cameras": {},
            "bus_timeout_ms": self.bus_timeout_ms,
            **extra,
        }

    def leader(self, **extra: object) -> dict:
        """`teleop.*` for LeRobot's so101_leader on this twin."""
        a = self.info["arms"]["leader"]
        return {
            "type": "so101_leader",
            "port": a["port"],
            "id": a["id"],
            "calibration_dir": a["calibration_dir"],
            "bus_timeout_ms": self.bus_timeout_ms,
            **extra,
        }

    def state(self, role: str = "follower") -> dict:
        """One arm's truth: q (rad), torque flags, max_goal_step (rad), goal_writes, ..."""
        return self.control("state")[role]

    def close(self) -> None:
        """Stop the process (its ports disappear)."""
        if self._control is not None:
            self._control.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def ping_until_answered(port: str, timeout_s: float = 30.0) -> None:
    """Ping servo 1 on `port` until it answers (the twin's bus is serving), else RuntimeError."""
    import serial

    want = status_packet(1, 0)
    deadline = time.monotonic() + timeout_s
    with serial.Serial(port, 1_000_000, timeout=1.0) as ser:
        while time.monotonic() < deadline:
            ser.reset_input_buffer()
            ser.write(instruction_packet(1, PING))
            if ser.read(len(want)) == want:
                return
    raise RuntimeError(f"the twin's bus on {port} does not answer a ping")
