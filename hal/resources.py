"""What a machine has: robots, motor buses, cameras, GPUs and simulators, and leasing them to jobs.

    found = discover(inventory="robots.yaml", sims={"reach": 4})
    leases = acquire_needs(found, parse_needs(["sim:reach*2", "gpu*1"]), LeaseManager(), job="exp1")

Resource ids read `<kind>:<type>/<name>`: `robot:so101_follower/left`, `serial:feetech/ttyACM0`,
`camera:opencv/video0`, `gpu:nvidia/0`, `sim:reach/3`. Simulators are always available, as many
as configured. Serial motor buses are the ports pyserial lists whose USB ids are those of the
adapter boards LeRobot arms use; cameras are those LeRobot's camera finder opens; robots
themselves are declared in an inventory file (YAML list).
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from hal.leases import Lease, LeaseError, LeaseHeld, LeaseManager

# USB (vendor, product) of the motor-bus adapters LeRobot arms ship with.
log = logging.getLogger(__name__)
MOTOR_BUS_USB = {
    ("1a86", "7523"): "feetech",  # CH340 (Waveshare bus servo adapter: SO-100/SO-101)
    ("1a86", "55d3"): "feetech",  # CH343 (newer Waveshare boards)
    ("0403", "6014"): "dynamixel",  # FTDI FT232H (Robotis U2D2: Koch, OMX)
    ("0403", "6001"): "dynamixel",  # FTDI FT232R
}
KINDS = ("robot", "serial", "camera", "gpu", "sim", "teleop")


class InventoryError(ValueError):
    """An inventory file that does not parse or has a bad entry (the message names it)."""


@dataclass(frozen=True)
class Resource:
    """A robot, teleop, camera, GPU, motor bus or sim slot found by discovery or declared in an inventory."""

    kind: str  # one of KINDS
    type: str  # robot/teleop type (so101_follower), bus type (feetech), task for sims
    name: str
    where: str  # device path, host, or "local"
    health: str = "ok"  # ok | missing: ... | ...
    options: tuple[tuple[str, object], ...] = ()  # inventory extras (port, id, cameras ...)

    @property
    def id(self) -> str:
        """A stable id: `kind:type/name` (the key leases use)."""
        return f"{self.kind}:{self.type}/{self.name}"

    def option(self, key: str, default: object = None) -> object:
        """An inventory option (port, id, width ...), `default` when absent."""
        return dict(self.options).get(key, default)


def serial_buses(ports: list | None = None) -> list[Resource]:
    """Motor buses among the serial ports pyserial lists (`list_ports.comports()`), by USB ids."""
    if ports is None:
        from serial.tools import list_ports

        ports = list_ports.comports()
    out = []
    for p in sorted(ports, key=lambda p: p.device):
        if p.vid is None or p.pid is None:
            continue
        kind = MOTOR_BUS_USB.get((f"{p.vid:04x}", f"{p.pid:04x}"))
        if kind is not None:
            out.append(Resource("serial", kind, Path(p.device).name, p.device))
    return out


def cameras(found: list[dict] | None = None) -> list[Resource]:
    """Cameras LeRobot finds (`OpenCVCamera.find_cameras`: the ones that open, with their default
    profile), as resources."""
    if found is None:
        try:
            from lerobot.cameras.opencv import OpenCVCamera

            found = OpenCVCamera.find_cameras()
        except Exception as e:  # noqa: BLE001 - no camera stack here is not an error for discovery
            log.debug("camera discovery unavailable: %s", e)
            found = []
    out = []
    for c in found:
        where = str(c.get("id"))
        profile = c.get("default_stream_profile") or {}
        opts = tuple((k, profile[k]) for k in ("width", "height", "fps") if k in profile)
        out.append(Resource("camera", str(c.get("type", "opencv")).lower(), Path(where).name, where, options=opts))
    return out


def gpus() -> list[Resource]:
    """The NVIDIA GPUs `nvidia-smi -L` lists (none without nvidia-smi)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    found = re.findall(r"GPU (\d+): (.+?) \(UUID", out)
    return [Resource("gpu", "nvidia", i, "local", options=(("model", model),)) for i, model in found]


def load_inventory(path: str | Path) -> list[Resource]:
    """Robots and teleop devices declared by hand. Each entry: kind (robot|teleop|camera), type,
    name, and device options (port, id, host, ...)."""
    path = Path(path)
    try:
        entries = yaml.safe_load(path.read_text()) or []
    except (OSError, yaml.YAMLError) as err:
        raise InventoryError(f"inventory {path} cannot be read: {str(err).splitlines()[0]}") from None
    if not isinstance(entries, list):
        raise InventoryError(f"inventory {path} must be a list of entries, got {type(entries).__name__}")
    out = []
    for i, e in enumerate(entries):
        where = f"inventory {path} entry {i + 1}"
        if not isinstance(e, dict):
            raise InventoryError(
                f"{where}: expected a mapping like {{kind: robot, type: so101_follower, "
                f"name: left, port: /dev/ttyACM0}}, got {e!r}"
            )
        missing = [k for k in ("kind", "type", "name") if k not in e]
        if missing:
            raise InventoryError(f"{where}: missing {missing}")
        if e["kind"] not in ("robot", "teleop", "camera"):
            raise InventoryError(f"{where}: kind '{e['kind']}' unknown; use robot, teleop or camera")
        port = e.get("port")
        health = "ok" if port is None or Path(str(port)).exists() else f"missing: {port} not found"
        opts = tuple(sorted((k, v) for k, v in e.items() if k not in ("kind", "type", "name")))
        out.append(
            Resource(e["kind"], str(e["type"]), str(e["name"]), str(port or e.get("host", "local")), health, opts)
        )
    return out


def discover(inventory: str | Path | None = None, sims: dict[str, int] | None = None) -> list[Resource]:
    """Everything attached to this machine plus declared robots and configured simulators."""
    found = [*serial_buses(), *cameras(), *gpus()]
    if inventory is not None:
        found += load_inventory(inventory)
    for task, count in (sims or {}).items():
        found += [Resource("sim", task, str(i), "local") for i in range(count)]
    return found


@dataclass(frozen=True)
class Need:
    """What a job needs: `count` resources of `kind` (and of `type`, when given), as parsed from
    `kind[:type][*count]`."""

    kind: str
    type: str | None  # None: any type of that kind
    count: int = 1

    def matches(self, r: Resource) -> bool:
        """Whether resource `r` can serve this need."""
        return r.kind == self.kind and (self.type is None or r.type == self.type)

    def __str__(self) -> str:
        return f"{self.count} x {self.kind}" + (f":{self.type}" if self.type else "")


def parse_needs(specs: list[str]) -> list[Need]:
    """`["robot:so101_follower*2", "gpu", "sim:reach*4"]` -> needs."""
    out = []
    for s in specs:
        m = re.fullmatch(r"(\w+)(?::([\w.-]+))?(?:\*(\d+))?", s.strip())
        if not m or m.group(1) not in KINDS:
            raise ValueError(f"resource need '{s}' should look like kind[:type][*count], kind one of {KINDS}")
        out.append(Need(m.group(1), m.group(2), int(m.group(3) or 1)))
    return out


def _some(ids: list[str], show: int = 3) -> str:
    """Resource ids for a message: all of a few, the first and last of many (a 64-simulator job)."""
    if len(ids) <= show + 1:
        return ", ".join(ids)
    return f"{', '.join(ids[:show])}, ... {ids[-1]} ({len(ids)} in all)"


def acquire_needs(
    found: list[Resource], needs: list[Need], leases: LeaseManager, job: str, wait_s: float = 0.0
) -> list[tuple[Resource, Lease]]:
    """Lease everything a job needs, all or nothing. Waits up to `wait_s` for held resources,
    then raises LeaseHeld naming the holders; raises LeaseError when too few exist at all."""
    for need in needs:
        usable = [r for r in found if need.matches(r) and r.health == "ok"]
        if len(usable) < need.count:
            have = ", ".join(f"{r.id} ({r.health})" for r in found if need.matches(r)) or "none"
            raise LeaseError(f"job '{job}' needs {need}; this machine has {have}")
    deadline = time.monotonic() + wait_s
    while True:
        taken: list[tuple[Resource, Lease]] = []
        blocked: dict[str, list[str]] = {}  # holder -> the resources it holds that we need
        for need in needs:
            got = 0
            for r in (r for r in found if need.matches(r) and r.health == "ok"):
                if got == need.count:
                    break
                if any(r is t[0] for t in taken):
                    continue
                try:
                    taken.append((r, leases.acquire(r.id, job)))
                    got += 1
                except LeaseHeld:
                    h = leases.holder(r.id) or {}
                    who = f"job '{h.get('job', '?')}' (pid {h.get('pid')}, since {h.get('since', '?')})"
                    blocked.setdefault(who, []).append(r.id)
            if got < need.count:
                for _, lease in taken:
                    lease.release()
                if time.monotonic() >= deadline:
                    raise LeaseHeld(
                        f"job '{job}' needs {need} but: "
                        + "; ".join(
                            f"{_some(ids)} {'is' if len(ids) == 1 else 'are'} held by {who}"
                            for who, ids in blocked.items()
                        )
                    )
                time.sleep(0.1)
                break
        else:
            return taken
