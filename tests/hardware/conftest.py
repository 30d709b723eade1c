"""A twin of an SO-101 (follower and leader) for the tests: the same command a user runs
(`python -m hardware.twin so101 ...`, which `robo-async twin so101` is), in its own process."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hardware.twin import TwinControl

ROOT = Path(__file__).resolve().parents[2]
# the twin answers from another process, which a loaded 2-core machine may not run within the 50 ms
# LeRobot's SDK waits: the tests give the bus a floor (robot.bus_timeout_ms)
BUS_TIMEOUT_MS = 2000


def _ping_until_answered(port: str, timeout_s: float = 30.0) -> None:
    import serial

    from hardware.twin.protocol import PING, instruction_packet, status_packet

    want = status_packet(1, 0)
    deadline = time.monotonic() + timeout_s
    with serial.Serial(port, 1_000_000, timeout=1.0) as ser:
        while time.monotonic() < deadline:
            ser.reset_input_buffer()
            ser.write(instruction_packet(1, PING))
            if ser.read(len(want)) == want:
                return
    raise RuntimeError(f"the twin's bus on {port} does not answer a ping")


class RunningTwin:
    """The twin's process, its description (`twin.json`) and a control client."""

    def __init__(self, root: Path, camera: bool = False) -> None:
        self.root = root
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.setdefault("MUJOCO_GL", "egl")
        self.proc = subprocess.Popen([sys.executable, "-m", "hardware.twin", "so101", f"dir={root}", "leader=true",
                                      f"camera={str(camera).lower()}"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        deadline = time.monotonic() + 60
        while not (root / "twin.json").exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                out = self.proc.stdout.read() if self.proc.poll() is not None else "(still running)"
                raise RuntimeError(f"the twin did not start: {out}")
            time.sleep(0.05)
        self.info = json.loads((root / "twin.json").read_text())
        self.control = TwinControl(self.info["control"])
        for arm in self.info["arms"].values():  # each bus answers before a test starts on it
            _ping_until_answered(arm["port"])

    def robot(self, **extra: object) -> dict:
        """`robot.*` for LeRobot's so101_follower on this twin."""
        f = self.info["arms"]["follower"]
        return {"type": "so101_follower", "port": f["port"], "id": f["id"], "calibration_dir": f["calibration_dir"],
                "use_degrees": True, "max_relative_target": 15, "cameras": {}, "bus_timeout_ms": BUS_TIMEOUT_MS, **extra}

    def leader(self, **extra: object) -> dict:
        """`teleop.*` for LeRobot's so101_leader on this twin."""
        a = self.info["arms"]["leader"]
        return {"type": "so101_leader", "port": a["port"], "id": a["id"], "calibration_dir": a["calibration_dir"],
                "bus_timeout_ms": BUS_TIMEOUT_MS, **extra}

    def state(self, role: str = "follower") -> dict:
        return self.control("state")[role]

    def close(self) -> None:
        self.control.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def twin(tmp_path):
    t = RunningTwin(tmp_path / "twin")
    yield t
    t.close()
