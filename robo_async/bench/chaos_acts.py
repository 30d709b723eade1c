"""What `robo-async bench chaos` and `bench soak` do to the processes of a run and read from them,
by hand of the operating system: a signal to a process (`send_signal`: kill -9, SIGSTOP, SIGCONT),
a process with its descendants (`family`), their anonymous resident memory (`rss_mb`,
`family_rss`), a learner port's TCP connections cut (`cut_connections`, `ss -K`), a disk filled to
a threshold (`fill_disk`, fallocate), and a free loopback port (`free_port`)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path


def rss_mb(pid: int) -> float | None:
    """Anonymous resident memory (RssAnon): what a leak grows. File-backed pages (the LMDB map,
    shared libraries) come and go with the page cache and are not counted."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def family(pid: int) -> list[int]:
    """A process and its descendants (an actor's uplink child, inference helpers)."""
    from robo_async.bench.netem import with_descendants

    return sorted(with_descendants([pid]))


def family_rss(pid: int) -> float:
    """The anonymous resident memory of a process and its descendants, MB."""
    return sum(rss_mb(p) or 0.0 for p in family(pid))


def cut_connections(port: int) -> bool:
    """Kill the TCP sockets on a learner port (actors see a dropped link and reconnect)."""
    res = subprocess.run(["ss", "-K", f"( sport = :{port} or dport = :{port} )"], capture_output=True, text=True)
    return res.returncode == 0 and "Invalid argument" not in res.stderr


def fill_disk(path: Path, root: Path, leave_gb: float) -> bool:
    """Allocate a file so that only `leave_gb` stays free on root's disk (fallocate: instant)."""
    need = shutil.disk_usage(root).free - leave_gb * 2**30
    if need <= 0:
        return False
    res = subprocess.run(["fallocate", "-l", str(int(need)), str(path)], capture_output=True)
    return res.returncode == 0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def send_signal(pid: int, sig: int) -> bool:
    """`sig` to `pid`; False if the process is gone."""
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False
