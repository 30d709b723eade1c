"""The twin's USB cable: a servo bus (protocol.py) served on a pseudo-terminal behind a symlink,
as LeRobot opens a real adapter's port. Unplugging closes the terminal and removes the link (the
host's next read or write fails); plugging opens a new terminal behind the same link.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import tty
from pathlib import Path

from hardware.twin.protocol import ServoBus

log = logging.getLogger(__name__)


class PtyPort:
    """A servo bus on a pseudo-terminal, reachable at `link` (a symlink to the terminal)."""

    def __init__(self, bus: ServoBus, link: Path, lock: threading.RLock) -> None:
        self.bus, self.link, self.lock = bus, link, lock
        self._fds: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.plugged = False

    def open(self) -> None:
        """Plug the cable: a new terminal behind `link`, answered by a thread."""
        master, slave = os.openpty()
        tty.setraw(slave)
        self._fds = (master, slave)  # the slave stays open here: reads on the master never see EOF
        tmp = self.link.with_suffix(".tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        os.symlink(os.ttyname(slave), tmp)
        os.replace(tmp, self.link)
        self._stop.clear()
        self._thread = threading.Thread(target=self._serve, args=(master,), name=f"twin-{self.link.stem}", daemon=True)
        self._thread.start()
        self.plugged = True

    def _serve(self, master: int) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([master], [], [], 0.1)
                if not ready:
                    continue
                data = os.read(master, 4096)
                with self.lock:
                    out = self.bus.feed(data)
                while out:
                    out = out[os.write(master, out) :]
            except InterruptedError:
                continue
            except OSError as e:
                if not self._stop.is_set():  # not unplugged by us: say so (the host sees a dead bus)
                    log.error("twin port %s stopped answering: %s", self.link, e)
                return
            except Exception:  # a bug in the twin: said, and the port stops as a dead bus would
                log.exception("twin port %s failed", self.link)
                return

    def close(self) -> None:
        """Pull the cable: the terminal goes away and so does the link."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
        if self._fds is not None:
            for fd in self._fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._fds = None
        with contextlib.suppress(FileNotFoundError):
            self.link.unlink()
        self.plugged = False
