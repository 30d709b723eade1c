"""The live dashboard: a web page served by the run's launcher (aiohttp, server-sent events).

It shows the learner's progress (updates/s, losses, versions and lag, buffer sizes and free disk,
restarts) and one row per actor (its robot or simulator and lease, ticks, tick lateness and
missed ticks, inference latency, who is in control, unacked data, its policy version). An actor's
row is its latest heartbeat (`Learner.actor_rows`): the `transport.stats.ActorStats` figures it
filled, by field name, with `env_steps`, `policy_version`, `episodes`, `heard_s` and the
launcher's `resource`; the page reads those names (tests/dashboard checks it names no other). The
page subscribes to `/events` (one JSON state every `every_s`); `/state` returns the same JSON once.

Curves: every progress report adds a point to `History` (elapsed s, success and return,
updates/s and env steps/s, intervention rate, takeovers and operators' labels so far, each loss),
served at `/history` and drawn by the
page as inline SVG (no network, no library). It keeps at most `max_points`: when full it drops
every other point, so a days-long run keeps its whole span at half the resolution, in bounded
memory.

It binds loopback only: on a remote learner, open it through SSH
(`ssh -L 8765:127.0.0.1:8765 learner-host`, then http://127.0.0.1:8765), so nothing but an
authenticated SSH session reaches it.

    dash = Dashboard(port=8765).start()     # a thread with its own event loop
    dash.update(progress=..., actors=..., run={...})   # from the launcher, as reports arrive
    dash.url; dash.close()
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)
PAGE = Path(__file__).with_name("page.html")


def _clean(x: object) -> object:
    """JSON-safe: NaN/inf become None, numpy scalars plain."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item"):
        x = x.item()  # type: ignore[union-attr]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


CURVES = {
    "success": "charts/success_rate",
    "train_success": "charts/train_success_rate",
    "return": "charts/episodic_return",
    "updates_per_s": "time/updates_per_s_10s",
    "env_steps_per_s": "time/env_steps_per_s_10s",
    "intervention_rate": "hil/intervention_rate",
    "takeovers": "hil/takeovers",
    "label_success": "hil/label_success",
    "label_failure": "hil/label_failure",
    "label_rerecord": "hil/label_rerecord",
}


class History:
    """The curves of a run, bounded (see the module's docstring): `add(progress)`, `points()`."""

    def __init__(self, max_points: int = 600) -> None:
        if max_points < 4:
            raise ValueError(f"max_points must be at least 4, not {max_points}")
        self.max_points = max_points
        self._points: list[dict] = []
        self._last_t: float | None = None

    def add(self, progress: dict) -> None:
        t = progress.get("time/elapsed_s")
        if not isinstance(t, (int, float)) or (self._last_t is not None and t <= self._last_t):
            return  # no clock, or a report already seen
        self._last_t = float(t)
        point = {"t": round(float(t), 2)}
        for name, key in CURVES.items():
            if isinstance(progress.get(key), (int, float)):
                point[name] = progress[key]
        for k, v in progress.items():
            if k.startswith("losses/") and isinstance(v, (int, float)):
                point[k] = v
        self._points.append(_clean(point))
        if len(self._points) > self.max_points:
            kept = self._points[::2]  # half the resolution, the whole span (the newest point kept)
            if kept[-1] is not self._points[-1]:
                kept.append(self._points[-1])
            self._points = kept

    def points(self) -> list[dict]:
        """The points kept, oldest first: `t` (elapsed s) and each curve's value at that report."""
        return list(self._points)


class Dashboard:
    """The live page on loopback: `start()`, `update(**parts)` as reports arrive, `close()`."""

    def __init__(self, port: int = 0, every_s: float = 0.5, max_points: int = 600) -> None:
        self.port = port
        self.every_s = every_s
        self.history = History(max_points)
        from robo_async.transport.stats import HIST_EDGES_MS

        # the actors' histograms' bin edges (ms), for the page's labels
        self._state: dict = {
            "run": {},
            "progress": {},
            "actors": {},
            "t": 0.0,
            "hist_edges": {k: list(v) for k, v in HIST_EDGES_MS.items()},
        }
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.url = ""
        self.error: BaseException | None = None

    def update(self, **parts: object) -> None:
        """Replace parts of the state (`progress`, `actors`, `run`), made JSON-safe."""
        with self._lock:
            for k, v in parts.items():
                self._state[k] = _clean(v)
            if isinstance(parts.get("progress"), dict):
                self.history.add(parts["progress"])  # type: ignore[arg-type]
            self._state["t"] = time.time()

    def state(self) -> dict[str, object]:
        """The state the page shows now (a shallow copy)."""
        with self._lock:
            return dict(self._state)

    def start(self) -> Dashboard:
        """Serve on a thread with its own event loop; returns self once `url` is set (raises if it did not start)."""
        self._thread = threading.Thread(target=self._run, name="dashboard", daemon=True)
        self._thread.start()
        if not self._ready.wait(30) or self.error is not None:
            raise RuntimeError(f"the dashboard did not start: {self.error}")
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as e:  # noqa: BLE001 - reported by start() or logged
            self.error = e
            self._ready.set()
            log.error("dashboard stopped: %s: %s", type(e).__name__, e)

    async def _serve(self) -> None:
        from aiohttp import web

        app = web.Application()
        app.router.add_get("/", self._page)
        app.router.add_get("/state", self._json)
        app.router.add_get("/events", self._events)
        app.router.add_get("/history", self._history)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self.port)  # loopback only: reach it through SSH
        await site.start()
        sock = site._server.sockets[0]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()

    async def _page(self, request):
        from aiohttp import web

        return web.Response(text=PAGE.read_text(), content_type="text/html")

    async def _json(self, request):
        from aiohttp import web

        return web.json_response(self.state())

    async def _history(self, request):
        from aiohttp import web

        with self._lock:
            points = self.history.points()
        return web.json_response({"points": points})

    async def _events(self, request):
        from aiohttp import web

        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        try:
            while not self._stop.is_set():
                await resp.write(f"data: {json.dumps(self.state())}\n\n".encode())
                await asyncio.sleep(self.every_s)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return resp

    def close(self) -> None:
        """Stop serving and join the thread."""
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)
