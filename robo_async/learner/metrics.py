"""Metrics: one logger writing `metrics.jsonl` and TensorBoard, plus the learning-curve plot."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

LEARNING_CURVE = "learning_curve.png"


class RateWindows:
    """Rates of growing counters over sliding windows (Sample Factory style: 10 s and 60 s), so
    a progress line shows a steady figure, not the last second's burst or pause. Bounded: one
    sample per `resolution_s`, kept for the longest window."""

    def __init__(self, windows_s: tuple[float, ...] = (10.0, 60.0), resolution_s: float = 0.5) -> None:
        from collections import deque

        self.windows = windows_s
        self.resolution = resolution_s
        self._samples: deque[tuple[float, dict[str, float]]] = deque(maxlen=int(max(windows_s) / resolution_s) + 2)

    def rates(self, now: float, counters: dict[str, float]) -> dict[str, float]:
        """Record `counters` at `now`; `time/<name>_per_s` (shortest window) and
        `time/<name>_per_s_<w>s` for each window. A window not yet filled uses what there is."""
        if not self._samples or now - self._samples[-1][0] >= self.resolution:
            self._samples.append((now, dict(counters)))
        out: dict[str, float] = {}
        for w in self.windows:
            old = next(((t, c) for t, c in self._samples if now - t <= w), self._samples[0])
            dt = now - old[0]
            for k, v in counters.items():
                rate = (v - old[1].get(k, 0.0)) / dt if dt > 0 else 0.0
                out[f"time/{k}_per_s_{int(w)}s"] = rate
                if w == self.windows[0]:
                    out[f"time/{k}_per_s"] = rate
        return out


class MetricsLogger:
    """Namespaced keys (`losses/...`, `charts/...`, `time/...`), one JSON line per record.

    Bounded for days-long runs: past `max_mb`, `metrics.jsonl` becomes `metrics.1.jsonl` (the
    one before is dropped) and TensorBoard's `tb/` becomes `tb.1/`, so both take at most twice
    `max_mb` (read_metrics reads the two in order)."""

    def __init__(self, run_dir: Path, tensorboard: bool = True, max_mb: float = 64.0) -> None:
        self._dir = run_dir
        self._path = run_dir / "metrics.jsonl"
        self._max = int(max_mb * 2**20)
        self._file = open(self._path, "a", buffering=1)  # line-buffered: a crash loses <= 1 line
        self._tensorboard = tensorboard
        self._tb = self._writer() if tensorboard else None

    def _writer(self):
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(str(self._dir / "tb"))

    def write(self, step: int, values: dict[str, float]) -> None:
        clean = {k: float(v) for k, v in values.items() if v is not None and math.isfinite(float(v))}
        self._file.write(json.dumps({"step": step, **clean}) + "\n")
        if self._tb is not None:
            for k, v in clean.items():
                self._tb.add_scalar(k, v, step)
        if self._file.tell() > self._max:
            self._rotate()

    def _rotate(self) -> None:
        import shutil

        self._file.close()
        os.replace(self._path, self._dir / "metrics.1.jsonl")
        self._file = open(self._path, "a", buffering=1)
        if self._tb is not None:
            self._tb.close()
            shutil.rmtree(self._dir / "tb.1", ignore_errors=True)
            os.replace(self._dir / "tb", self._dir / "tb.1")
            self._tb = self._writer()

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    rows = []
    for path in (run_dir / "metrics.1.jsonl", run_dir / "metrics.jsonl"):  # the rotated part first
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a torn last line after a crash
    return rows


def plot_learning_curve(run_dir: Path) -> Path | None:
    """Success rate, episodic return and (with an operator) the intervention rate against env
    steps, saved as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in read_metrics(run_dir) if "charts/success_rate" in r]
    if not rows:
        return None
    steps = [r["step"] for r in rows]
    hil = [(r["step"], r["hil/intervention_rate"]) for r in read_metrics(run_dir) if "hil/intervention_rate" in r]
    fig, axes = plt.subplots(1, 3 if hil else 2, figsize=(15 if hil else 10, 3.6))
    ax1, ax2 = axes[0], axes[1]
    if hil:  # human in the loop: the share of recent ticks an operator drove
        axes[2].plot(*zip(*hil, strict=False), color="tab:red")
        axes[2].set(xlabel="env steps", ylabel="intervention rate (last 2,000 ticks)", ylim=(-0.02, 1.02))
        axes[2].grid(alpha=0.3)
    ax1.plot(steps, [r["charts/success_rate"] for r in rows])
    ax1.set(xlabel="env steps", ylabel="success rate (last episodes)", ylim=(-0.02, 1.02))
    ax1.grid(alpha=0.3)
    ret = [(r["step"], r["charts/episodic_return"]) for r in rows if "charts/episodic_return" in r]
    if ret:
        ax2.plot(*zip(*ret, strict=False))
    ax2.set(xlabel="env steps", ylabel="episodic return")
    ax2.grid(alpha=0.3)
    fig.suptitle(run_dir.name)
    fig.tight_layout()
    out = run_dir / LEARNING_CURVE
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
