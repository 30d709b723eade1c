"""Progress display: a live rich table on a terminal, periodic one-line summaries otherwise."""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.live import Live
from rich.table import Table


def _fmt(p: dict[str, float]) -> dict[str, str]:
    sr = p.get("charts/success_rate")
    return {
        "elapsed": f"{p.get('time/elapsed_s', 0):.0f} s",
        "env steps": f"{int(p.get('time/env_steps', 0)):,}",
        # rates over sliding windows (10 s / 60 s), not the last interval's burst or pause
        "steps/s 10s|60s": f"{p.get('time/env_steps_per_s_10s', 0):.0f}|{p.get('time/env_steps_per_s_60s', 0):.0f}",
        "updates": f"{int(p.get('time/updates', 0)):,}",
        "updates/s 10s|60s": f"{p.get('time/updates_per_s_10s', 0):.0f}|{p.get('time/updates_per_s_60s', 0):.0f}",
        "UTD 60s|cap": f"{p.get('time/utd_60s', 0):.2g}|{p.get('time/utd_cap', 0):.3g}",
        "episodes": f"{int(p.get('time/episodes', 0))}",
        "success": "-" if sr is None else f"{sr:.0%}",
        "policy v": f"{int(p.get('charts/policy_version', 0))}",
        "version lag": f"{p.get('charts/version_lag', 0):.1f}",
        # human in the loop: who drives now, share of the last 2,000 ticks an operator drove
        **(
            {
                "control": "operator" if p.get("hil/in_control", 0) else "policy",
                "operator": f"{p.get('hil/intervention_rate', 0):.0%} ({int(p.get('hil/operator_ticks', 0)):,} ticks)",
            }
            if "hil/operator_ticks" in p
            else {}
        ),
        # what was not kept, shown once there is any: a robot's or policy's NaN, malformed messages,
        # rows the learner refused (each named in the learner's log)
        **{label: f"{int(p[key]):,}" for key, label in _TROUBLE if p.get(key)},
    }


_TROUBLE = (
    ("actors/nonfinite", "non-finite rows"),
    ("transport/malformed", "malformed msgs"),
    ("buffer/rows_refused", "rows refused"),
)


class ProgressDisplay:
    """The terminal view of a run: a live table on a TTY, else one summary line every `every_s`
    seconds; `message()` prints events (restarts, failures) above it."""

    def __init__(self, title: str, every_s: float = 5.0, console: Console | None = None) -> None:
        self.console = console or Console(stderr=False)
        self.title = title
        self._live: Live | None = None
        self._every = every_s
        self._next = 0.0
        self._tty = sys.stdout.isatty()
        self._unprinted: dict[str, float] | None = None  # the newest progress not yet printed

    def __enter__(self) -> ProgressDisplay:
        if self._tty:
            self._live = Live(self._table({}), console=self.console, refresh_per_second=4)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
        elif self._unprinted is not None:  # the final state, not the one up to every_s before it
            self._print(self._unprinted)

    def _table(self, p: dict[str, float]) -> Table:
        t = Table(title=self.title)
        cells = _fmt(p)
        for k in cells:
            t.add_column(k, justify="right")
        t.add_row(*cells.values())
        return t

    def update(self, progress: dict[str, float]) -> None:
        if self._live is not None:
            self._live.update(self._table(progress))
        elif time.monotonic() >= self._next:
            self._next = time.monotonic() + self._every
            self._print(progress)
        else:
            self._unprinted = progress

    def _print(self, progress: dict[str, float]) -> None:
        self._unprinted = None
        print("  ".join(f"{k}={v}" for k, v in _fmt(progress).items()), flush=True)

    def message(self, text: str) -> None:
        self.console.print(text)
