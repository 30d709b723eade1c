"""How a chaos run (`bench chaos`, `bench soak`) is judged: the hits dealt (`Hit`), when the
learner's acks of each actor moved (`_observe`, a subscriber of our own to its statuses), a
healthy actor's longest wait no chaos explains (`ack_stalls`), a victim's wait during its hit
(`victim_wait`), the processes that died by anything but our chaos (`crashes`), counters summed
over learner lives (`total`), and the plot of acks against the chaos."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HOSTILE_ID, OBSERVER_ID = 900, 901  # keys issued beside the actors': the hostile peer's and our observer's


@dataclass
class Hit:
    """One chaos action: when, what, at whom (an actor id, or None for the learner), its pids, and
    when its effect ends (a restart's `ready`, a SIGCONT, the link back)."""

    t: float
    action: str
    actor: int | None
    pids: tuple[int, ...] = ()
    end: float | None = None
    done: bool = False


def ack_stalls(acks: dict[int, list[float]], hits: list[Hit], end: float) -> dict[int, float]:
    """Per actor, the longest time between two moves of its ack that no chaos explains: a gap is
    left out when it overlaps a hit on that actor or on the learner (from the hit to its `end`)."""
    out = {}
    for actor, times in acks.items():
        worst = 0.0
        for a, b in zip(times, times[1:], strict=False):
            excused = any(
                (h.actor is None or h.actor == actor) and h.done and a <= (h.end or end) and h.t <= b for h in hits
            )
            if not excused:
                worst = max(worst, b - a)
        out[actor] = worst
    return out


def victim_wait(acks: dict[int, list[float]], hit: Hit) -> float | None:
    """How long the actor a hit was aimed at waited for its acks: the longest gap between two of its
    acks among those that overlap the hit (from the hit to its end). A stop or a dropped link shows
    its length here (the chaos was real); the gap holding the hit alone may end early, with an ack
    of rows sent just before it."""
    times = acks.get(hit.actor, []) if hit.actor is not None else []
    end = hit.end if hit.end is not None else hit.t
    gaps = [b - a for a, b in zip(times, times[1:], strict=False) if a <= end and b > hit.t]
    return max(gaps) if gaps else None


def plot(path: Path, acks: dict[int, list[float]], hits: list[Hit], t0: float) -> None:
    """Each actor's wait between acks over the run, the chaos shaded (learner hits across all)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4))
    for actor, times in sorted(acks.items()):
        t = np.asarray(times) - t0
        ax.plot(t[1:] / 60, np.diff(t), ".", ms=3, label=f"actor {actor}")
    colours = {"kill learner": "red", "kill actor": "orange", "stop actor": "purple", "drop link": "blue"}
    for h in hits:
        if h.done:
            ax.axvspan(
                (h.t - t0) / 60, ((h.end or h.t) - t0) / 60 + 0.05, color=colours.get(h.action, "grey"), alpha=0.2, lw=0
            )
    ax.set(
        xlabel="minutes",
        ylabel="seconds since the previous ack",
        yscale="log",
        title="acks per actor; shaded: kill learner (red), kill actor (orange), SIGSTOP (purple), link down (blue)",
    )
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def crashes(events: list[dict], hits: list[Hit]) -> list[dict]:
    """The supervisor's `failed` events that our chaos does not explain: a process we killed, or a
    stopped (or cut-off) actor the supervisor killed as hung, is explained; anything else is a crash."""
    killed = {p for h in hits if h.action.startswith("kill") for p in h.pids}
    frozen = {p for h in hits if h.action in ("stop actor", "drop link") for p in h.pids}
    out = []
    for e in events:
        if e.get("event") != "failed":
            continue
        pid, why = e.get("pid"), str(e.get("why", ""))
        if pid in killed and "SIGKILL" in why or pid in frozen and why.startswith("hung"):
            continue
        out.append({"who": e.get("who"), "pid": pid, "why": why[:300]})
    return out


def total(rows: list[dict], key: str) -> float:
    """A counter summed over learner lives: each restart starts it at 0 again."""
    out, last = 0.0, 0.0
    for r in rows:
        v = r.get(key)
        if v is None:
            continue
        out += v - last if v >= last else v
        last = v
    return out


def _observe(address: str, keys_dir: str | None, stop: threading.Event, acks: dict[int, list[float]]) -> None:
    """A subscriber of our own to the learner's statuses: when each actor's ack moved."""
    import zmq

    from robo_async.transport.channels import STATUS_TOPIC
    from robo_async.transport.curve import secure_client
    from robo_async.transport.wire import LearnerStatus, WireError, decode

    sock = zmq.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    if keys_dir:
        secure_client(sock, keys_dir, OBSERVER_ID)
    sock.subscribe(STATUS_TOPIC)
    sock.connect(address)
    last: dict[int, int] = {}
    while not stop.is_set():
        if not sock.poll(200):
            continue
        frames = sock.recv_multipart()
        try:
            msg = decode(frames[1:])
        except WireError:
            continue
        if isinstance(msg, LearnerStatus):
            now = time.monotonic()
            for actor, nxt in msg.acked:
                if actor < HOSTILE_ID and last.get(actor) != nxt:
                    last[actor] = nxt
                    acks.setdefault(actor, []).append(now)
    sock.close(0)
