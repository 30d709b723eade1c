"""A twin of an SO-101 (follower, and optionally a leader arm) on pseudo-terminals.

`robo-async twin so101 [dir=...] [leader=true]` (or `python -m hardware.twin`) starts one; LeRobot's
own `so101_follower` / `so101_leader` connect to it unchanged with `port=<dir>/follower.tty` and
`calibration_dir=<dir>/calibration/<role>`, where the twin wrote the calibration files
`lerobot-calibrate` would have written for its servos. `<dir>/twin.json` lists the ports and the
control address. The control socket (ZMQ REP on loopback, msgpack maps) takes:

    {"cmd": "state"}                         -> joints (rad, truth), torque, faults, max goal step
    {"cmd": "hand", "role": "leader", "q": [...]}   a hand moves that arm's joints (None lets go)
    {"cmd": "fault", "role": ..., "motor": ..., "kind": "overload|overheat|clear"}
    {"cmd": "unplug", "role": ...} / {"cmd": "replug", "role": ...}   the USB cable
    {"cmd": "set_joints", "role": ..., "q": [...]}   place an arm (a person moving it before a test)
    {"cmd": "reset_stats"}
    {"cmd": "readings", "role": ..., "since": k} -> the whole-arm position readings the bus served
                                             (rad, as the ticks sent stand for them), from the k-th on

A pulled cable closes the pseudo-terminal and removes the port's link (the host's next read or
write fails, as with a real USB adapter); a replug opens a new one behind the same link (port.py). The
camera feed is camera.py, the control socket's client `TwinControl` client.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from pathlib import Path

import msgpack
import numpy as np
import zmq

from hardware.twin.arm import MOTORS, TwinArm
from hardware.twin.camera import CameraFeed
from hardware.twin.port import PtyPort
from hardware.twin.protocol import ServoBus

CALIBRATION_SUBDIR = {"follower": "robots/so_follower", "leader": "teleoperators/so_leader"}


def write_calibration(arm: TwinArm, path: Path) -> None:
    """LeRobot's calibration file (`MotorCalibration` fields per motor) for `arm`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(arm.calibration(), indent=4))


class Twin:
    """A follower (and a leader when `leader`) with their ports, calibration files and control
    socket, under `root`; with `camera`, the follower's front camera on a ZMQ feed (LeRobot's
    `zmq` camera type). `start()` runs them; `close()` stops them."""

    def __init__(
        self,
        root: Path,
        *,
        leader: bool = False,
        seed: int = 0,
        camera: bool = False,
        follower_id: str = "twin_follower",
        leader_id: str = "twin_leader",
    ) -> None:
        self.root = root
        self.ids = {"follower": follower_id, "leader": leader_id}
        self.arms = {"follower": TwinArm(seed=seed)}
        if leader:
            self.arms["leader"] = TwinArm(seed=seed + 1)
        self.ports = {
            role: PtyPort(ServoBus(arm.servos), root / f"{role}.tty", arm.lock) for role, arm in self.arms.items()
        }
        for role, arm in self.arms.items():
            self.ports[role].bus.on_sync_read = arm.note_sync_read
        self._ctx: zmq.Context | None = None
        self._sock: zmq.Socket | None = None
        self.camera_wanted = camera
        self.camera: CameraFeed | None = None
        self.control = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def calibration_dir(self, role: str) -> Path:
        """The `calibration_dir` LeRobot's device config takes for `role`."""
        return self.root / "calibration" / role

    def start(self) -> dict:
        """Open the ports, write the calibration files, serve the control socket; the twin's
        description (also in `<root>/twin.json`)."""
        self.root.mkdir(parents=True, exist_ok=True)
        for role, arm in self.arms.items():
            write_calibration(arm, self.calibration_dir(role) / f"{self.ids[role]}.json")
            arm.start()
            self.ports[role].open()
        self._ctx = zmq.Context()
        if self.camera_wanted:
            self.camera = CameraFeed(self.arms["follower"], self._ctx)
            self.camera.start()
        self._sock = self._ctx.socket(zmq.REP)
        self._sock.setsockopt(zmq.LINGER, 0)
        port = self._sock.bind_to_random_port("tcp://127.0.0.1")
        self.control = f"tcp://127.0.0.1:{port}"
        self._thread = threading.Thread(target=self._serve, name="twin-control", daemon=True)
        self._thread.start()
        info = self.describe()
        tmp = self.root / "twin.json.tmp"  # whole or not at all: a reader polls for it
        tmp.write_text(json.dumps(info, indent=2))
        os.replace(tmp, self.root / "twin.json")
        return info

    def describe(self) -> dict:
        """Ports, ids, calibration dirs, control address and pid."""
        cam = (
            {
                "camera": {
                    "type": "zmq",
                    "server_address": "127.0.0.1",
                    "port": self.camera.port,
                    "camera_name": self.camera.name,
                    "width": self.camera.size,
                    "height": self.camera.size,
                    "fps": int(self.camera.fps),
                }
            }
            if self.camera is not None
            else {}
        )
        return {
            "pid": os.getpid(),
            "control": self.control,
            **cam,
            "arms": {
                role: {
                    "port": str(self.ports[role].link),
                    "id": self.ids[role],
                    "calibration_dir": str(self.calibration_dir(role)),
                    "motors": list(MOTORS),
                }
                for role in self.arms
            },
        }

    def _serve(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            if not self._sock.poll(100):
                continue
            try:
                req = msgpack.unpackb(self._sock.recv(), raw=False)
                reply = self.handle(req if isinstance(req, dict) else {})
            except Exception as e:  # noqa: BLE001 - any bad request gets its error back, the twin goes on
                reply = {"error": f"{type(e).__name__}: {e}"}
            self._sock.send(msgpack.packb(reply))

    def handle(self, req: dict) -> dict:
        """One control request (see the module's docstring)."""
        cmd = req.get("cmd")
        role = str(req.get("role", "follower"))
        if cmd == "state":
            return {r: self._state(r) for r in self.arms}
        if cmd == "camera":  # {"on": false}: the camera stops delivering; true: it comes back
            if self.camera is None:
                raise ValueError("this twin has no camera (start it with camera=true)")
            self.camera.delivering = bool(req.get("on", True))
            return {"ok": True, "frames": self.camera.frames}
        if role not in self.arms:
            raise ValueError(f"no {role} arm in this twin; it has {sorted(self.arms)}")
        arm = self.arms[role]
        if cmd == "hand":
            arm.hand(None if req.get("q") is None else np.asarray(req["q"], float))
        elif cmd == "set_joints":
            arm.set_joints(np.asarray(req["q"], float))
        elif cmd == "fault":
            arm.fault(str(req["motor"]), str(req["kind"]))
        elif cmd == "unplug":
            self.ports[role].close()
        elif cmd == "replug":
            if not self.ports[role].plugged:
                self.ports[role].open()
        elif cmd == "readings":
            with arm.lock:
                total, kept = arm.readings_total, list(arm.readings)
            since = max(int(req.get("since", 0)), total - len(kept))
            return {"total": total, "first": since, "q": [list(v) for v in kept[len(kept) - (total - since) :]]}
        elif cmd == "reset_stats":
            with arm.lock:
                arm.max_goal_step[:] = 0
                arm.goal_writes = 0
                arm.torque_off_events = 0
        else:
            raise ValueError(f"unknown command {cmd!r}")
        return {"ok": True}

    def _state(self, role: str) -> dict:
        arm = self.arms[role]
        with arm.lock:
            return {
                "q": arm.joints().tolist(),
                "torque": arm.torque.tolist(),
                "errors": [s.error for s in arm.servos],
                "max_goal_step": arm.max_goal_step.tolist(),
                "goal_writes": arm.goal_writes,
                "torque_off_events": arm.torque_off_events,
                "plugged": self.ports[role].plugged,
                "malformed": self.ports[role].bus.malformed,
            }

    def close(self) -> None:
        """Stop everything; the ports disappear."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        for port in self.ports.values():
            port.close()
        with contextlib.suppress(FileNotFoundError):  # its ports are gone: so is the description
            (self.root / "twin.json").unlink()
        if self.camera is not None:
            self.camera.close()
        for arm in self.arms.values():
            arm.stop()
        if self._sock is not None:
            self._sock.close()
        if self._ctx is not None:
            self._ctx.term()


def camera_override(info: dict) -> str:
    """The value of `robot.cameras=` that gives LeRobot's arm the twin's front camera (Hydra syntax)."""
    c = info["camera"]
    fields = ", ".join(
        f"{k}: {c[k]}" for k in ("type", "server_address", "port", "camera_name", "width", "height", "fps")
    )
    return f"{{front: {{{fields}}}}}"


def main(argv: list[str] | None = None) -> int:
    """`python -m hardware.twin so101 [dir=<dir>] [leader=true] [camera=true] [seed=0]` (the twin's
    own process, `process.py`): run a twin until Ctrl-C. `robo-async twin` is `run_twin` too."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "so101":
        print(
            "usage: python -m hardware.twin so101 [dir=<dir>] [leader=true|false] [camera=true|false] [seed=0]",
            file=sys.stderr,
        )
        return 2
    opts = dict(a.split("=", 1) for a in args[1:] if "=" in a)
    unknown = set(opts) - {"dir", "leader", "seed", "camera"}
    if unknown or any("=" not in a for a in args[1:]):
        print(
            f"twin: unknown arguments {sorted(unknown) or args[1:]}; known: dir, leader, seed, camera", file=sys.stderr
        )
        return 2
    yes = ("1", "true", "yes")
    return run_twin(
        Path(opts["dir"]) if "dir" in opts else None,
        leader=opts.get("leader", "false").lower() in yes,
        seed=int(opts.get("seed", 0)),
        camera=opts.get("camera", "false").lower() in yes,
    )


def run_twin(root: Path | None, *, leader: bool = False, seed: int = 0, camera: bool = False) -> int:
    """A twin of an SO-101 under `root` (a new temporary directory if None) until Ctrl-C or
    SIGTERM; prints its ports and the robot.* / teleop.* overrides that drive it."""
    import signal
    import sys

    root = root if root is not None else Path(tempfile.mkdtemp(prefix="robo-twin-"))
    twin = Twin(root, leader=leader, seed=seed, camera=camera)
    info = twin.start()
    f = info["arms"]["follower"]
    print(f"twin so101 follower on {f['port']} (servo ids 1-6, calibrated as id {f['id']})")
    if "leader" in info["arms"]:
        print(f"twin so101 leader   on {info['arms']['leader']['port']}")
    print(f"control: {info['control']}   description: {root / 'twin.json'}")
    if "camera" in info:
        print(f"camera front (LeRobot zmq camera): robot.cameras='{camera_override(info)}'")
    extra = (
        (
            f" teleop=so101_leader teleop.port={info['arms']['leader']['port']} teleop.id=twin_leader "
            f"teleop.calibration_dir={info['arms']['leader']['calibration_dir']}"
        )
        if "leader" in info["arms"]
        else ""
    )
    print(
        f"use:  robot=so101 robot.port={f['port']} robot.id={f['id']} "
        f"robot.calibration_dir={f['calibration_dir']}{extra}"
    )
    sys.stdout.flush()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    twin.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
