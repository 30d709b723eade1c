"""Leases: exclusive use of a resource (a robot, a sim slot, a camera, a GPU) across processes.

A lease is an exclusive `flock` on `<lease dir>/<resource id>.lock`; the kernel drops it the
moment the holding process dies (crash, kill -9), so a dead holder never keeps a robot. Who holds
it is written next to it (`.holder.json`: pid, job, since) for messages and `robo-async resources`.

    leases = LeaseManager()                            # ROBO_ASYNC_LEASE_DIR or ~/.cache/robo_async/leases
    with leases.acquire("robot:so101/ttyACM0", job="fine-tune", wait_s=0) as lease:
        ...                                            # LeaseHeld if another process has it
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path


class LeaseHeld(RuntimeError):
    """The resource is leased by another process (the message names it)."""


class LeaseError(RuntimeError):
    """The resource does not exist or cannot be leased."""


def default_lease_dir() -> Path:
    """Where lease files live: $ROBO_ASYNC_LEASE_DIR, else ~/.cache/robo_async/leases."""
    return Path(os.environ.get("ROBO_ASYNC_LEASE_DIR", Path.home() / ".cache" / "robo_async" / "leases"))


def _fname(resource_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", resource_id)


@dataclass
class Lease:
    """A held lease on one resource (an flock on its lock file): `release()` it, or use it as a context
    manager."""

    resource_id: str
    job: str
    _fd: int
    _holder_path: Path

    def release(self) -> None:
        """Give the resource back (idempotent)."""
        if self._fd >= 0:
            try:
                self._holder_path.unlink(missing_ok=True)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
                self._fd = -1

    @property
    def held(self) -> bool:
        """Whether this lease is still held."""
        return self._fd >= 0

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class LeaseManager:
    """Exclusive leases on robots and other devices across processes, by flock on files in `directory`
    (default: `default_lease_dir()`); a dead holder's lease is free again."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_lease_dir()

    def _paths(self, resource_id: str) -> tuple[Path, Path]:
        base = self.directory / _fname(resource_id)
        return base.with_suffix(".lock"), base.with_suffix(".holder.json")

    def holder(self, resource_id: str) -> dict | None:
        """Who holds the lease (pid, job, since), or None if it is free."""
        lock, info = self._paths(resource_id)
        if not lock.exists():
            return None
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None  # we could take it, so nobody holds it
        except BlockingIOError:
            try:
                return json.loads(info.read_text())
            except (OSError, ValueError):
                return {"pid": None, "job": "?"}
        finally:
            os.close(fd)

    def acquire(self, resource_id: str, job: str = "", wait_s: float = 0.0, poll_s: float = 0.05) -> Lease:
        """Take the lease; wait up to `wait_s` for the holder to release it (0: fail at once)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        lock, info = self._paths(resource_id)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    h = self.holder(resource_id) or {}
                    waited = f" after waiting {wait_s:.0f} s" if wait_s > 0 else ""
                    raise LeaseHeld(
                        f"{resource_id} is held by job '{h.get('job', '?')}' (pid {h.get('pid')}, "
                        f"since {h.get('since', '?')}){waited}"
                    ) from None
                time.sleep(poll_s)
        tmp = info.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": os.getpid(), "job": job, "since": time.strftime("%Y-%m-%d %H:%M:%S")}))
        tmp.replace(info)
        return Lease(resource_id, job, fd, info)
