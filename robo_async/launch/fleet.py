"""Leases across machines: one lease authority per Ray cluster, with a first-come-first-served
queue of jobs waiting for a robot.

The authority is a named, detached Ray actor (`robo_async_leases` in namespace `robo_async`),
created by the first job that needs it. A job (the `train` driver with `launcher=ray`) leases
every robot it needs before it starts any actor, all or nothing, in arrival order: a robot held
by another job puts this job in that robot's queue, and it gets the robot when the holder
releases it and everyone queued before it has been served. Holders renew their leases every few
seconds; a lease not renewed for `ttl_s` (its job died with its machine) is freed, and a waiter
that stops asking leaves the queue. On each node the per-machine flock (hal/leases.py) is still
taken by the actor that drives the robot, as in local runs.

    with FleetLeases(["robot:so101_follower/left"], job="run-17", wait_s=600, say=print):
        ...                                          # the job runs; leases renewed in the background
    fleet_table() -> {resource: {"holder", "since", "waiting": [jobs]}}   # `robo-async resources fleet=true`
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from hal.leases import LeaseHeld

NAME, NAMESPACE = "robo_async_leases", "robo_async"


class LeaseAuthority:
    """The Ray actor's state: holders and a FIFO queue per resource (all calls are serialised by Ray)."""

    def __init__(self) -> None:
        self.holders: dict[str, dict] = {}  # resource -> {job, since, seen}
        self.queues: dict[str, list[dict]] = {}  # resource -> [{job, since, seen}] in arrival order

    def _expire(self, ttl_s: float) -> None:
        now = time.time()
        for rid, h in list(self.holders.items()):
            if now - h["seen"] > ttl_s:
                del self.holders[rid]
        for q in self.queues.values():
            q[:] = [w for w in q if now - w["seen"] <= ttl_s]

    def acquire(self, resources: list[str], job: str, ttl_s: float = 30.0) -> dict:
        """All of `resources` for `job`, or none: {"granted": bool, "blocked": {rid: (holder, position)}}.
        A job not granted keeps its place in each queue as long as it keeps asking."""
        self._expire(ttl_s)
        now = time.time()
        blocked = {}
        for rid in resources:
            q = self.queues.setdefault(rid, [])
            mine = next((w for w in q if w["job"] == job), None)
            if mine is None:
                mine = {"job": job, "since": now, "seen": now}
                q.append(mine)
            mine["seen"] = now
            h = self.holders.get(rid)
            if (h is not None and h["job"] != job) or q[0]["job"] != job:
                pos = [w["job"] for w in q].index(job) + (1 if h is not None and h["job"] != job else 0)
                blocked[rid] = (h["job"] if h else q[0]["job"], pos)
        if blocked:
            return {"granted": False, "blocked": blocked}
        for rid in resources:
            self.queues[rid] = [w for w in self.queues[rid] if w["job"] != job]
            self.holders[rid] = {"job": job, "since": now, "seen": now}
        return {"granted": True, "blocked": {}}

    def renew(self, resources: list[str], job: str) -> list[str]:
        """Refresh `job`'s leases; returns those it no longer holds (expired and taken)."""
        lost = []
        for rid in resources:
            h = self.holders.get(rid)
            if h is not None and h["job"] == job:
                h["seen"] = time.time()
            else:
                lost.append(rid)
        return lost

    def release(self, resources: list[str], job: str) -> None:
        for rid in resources:
            if self.holders.get(rid, {}).get("job") == job:
                del self.holders[rid]
            if rid in self.queues:
                self.queues[rid] = [w for w in self.queues[rid] if w["job"] != job]

    def table(self) -> dict:
        out = {}
        for rid in sorted(set(self.holders) | {r for r, q in self.queues.items() if q}):
            h = self.holders.get(rid)
            out[rid] = {
                "holder": h["job"] if h else None,
                "since": h["since"] if h else None,
                "waiting": [w["job"] for w in self.queues.get(rid, [])],
            }
        return out


def authority():
    import ray

    return (
        ray.remote(LeaseAuthority)
        .options(name=NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True, num_cpus=0)
        .remote()
    )


class FleetLeases:
    """A job's leases on the cluster's authority, held (and renewed) inside the `with` block."""

    def __init__(
        self,
        resources: list[str],
        job: str,
        wait_s: float = 0.0,
        ttl_s: float = 30.0,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.resources, self.job, self.wait_s, self.ttl_s = sorted(set(resources)), job, wait_s, ttl_s
        self.say = say or (lambda _: None)
        self.waited_s = 0.0
        self.granted = self.released = 0.0  # wall-clock times (written to <run dir>/fleet.json)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> FleetLeases:
        import ray

        if not self.resources:
            return self
        self._auth = authority()
        t0, last_said = time.monotonic(), ""
        while True:
            got = ray.get(self._auth.acquire.remote(self.resources, self.job, self.ttl_s))
            if got["granted"]:
                break
            what = "; ".join(
                f"{rid} held by job '{h}' (this job is number {p} in line)"
                for rid, (h, p) in sorted(got["blocked"].items())
            )
            if time.monotonic() - t0 >= self.wait_s:
                ray.get(self._auth.release.remote(self.resources, self.job))
                raise LeaseHeld(f"job '{self.job}' cannot have {what}; waited {self.wait_s:.0f} s (resources.wait_s)")
            if what != last_said:
                self.say(f"waiting in line: {what}")
                last_said = what
            time.sleep(0.5)
        self.waited_s = time.monotonic() - t0
        self.granted = time.time()
        self._thread = threading.Thread(target=self._renew, name="fleet-leases", daemon=True)
        self._thread.start()
        return self

    def _renew(self) -> None:
        import ray

        while not self._stop.wait(self.ttl_s / 4):
            try:
                lost = ray.get(self._auth.renew.remote(self.resources, self.job), timeout=self.ttl_s / 2)
            except Exception:  # noqa: BLE001 - the authority is unreachable for a moment: retry
                continue
            if lost:
                self.say(f"[red]leases lost (not renewed within {self.ttl_s:.0f} s): {lost}[/]")

    def __exit__(self, *exc: object) -> None:
        import ray

        self._stop.set()
        if self.resources and hasattr(self, "_auth"):
            try:
                ray.get(self._auth.release.remote(self.resources, self.job), timeout=30)
            except Exception:  # noqa: BLE001 - expires after ttl_s anyway
                pass
        self.released = time.time()


def join_cluster(address: str, **kw: object) -> None:
    """ray.init to a running cluster. Clusters started with `ray start` use token authentication
    (Ray 2.5x) and Ray sends its token (~/.ray/auth_token, RAY_AUTH_TOKEN) to an explicit address
    only with RAY_AUTH_MODE=token, so a token never goes to a stranger by accident. A head on this
    machine (a loopback address) is joined with the local token like `address=auto` is; anything
    else needs RAY_AUTH_MODE=token set by the user. A refusal is one line naming what to set.
    Raises ConnectionError."""
    import os

    import ray

    host = address.removeprefix("ray://").rsplit(":", 1)[0]
    if host in ("127.0.0.1", "localhost", "::1", "[::1]") and "RAY_AUTH_MODE" not in os.environ:
        try:  # Ray's own switch (the environment variable plus its cached config)
            from ray._private.authentication.authentication_token_setup import (
                maybe_enable_token_auth_if_token_available,
            )

            maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
        except ImportError:  # another Ray: its environment variable alone
            if (Path.home() / ".ray" / "auth_token").exists():
                os.environ["RAY_AUTH_MODE"] = "token"
    try:
        ray.init(address=address, log_to_driver=False, **kw)
    except Exception as e:  # noqa: BLE001 - ConnectionError, RuntimeError or Ray's AuthenticationError
        why = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        hint = (
            ""
            if os.environ.get("RAY_AUTH_MODE") == "token"
            else "; if the cluster uses token authentication (the default of `ray start`), set RAY_AUTH_MODE=token "
            "and give this machine its token (~/.ray/auth_token or RAY_AUTH_TOKEN)"
        )
        raise ConnectionError(f"cannot join the Ray cluster at {address}: {why[:300]}{hint}") from None


def fleet_table() -> dict:
    import ray

    return ray.get(authority().table.remote())
