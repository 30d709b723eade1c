"""Metrics: one logger writing `metrics.jsonl` and TensorBoard, plus the learning-curve plot."""

from __future__ import annotations

import json
import math
import os
import threading
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from robo_async.transport.options import as_choices

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

    Bounded for days-long runs, the beginning kept: past `max_mb`, `metrics.jsonl`'s rows join the
    history in `metrics.1.jsonl`, which holds the run from its first record, thinned (every k-th
    row, the first and the newest always kept) to at most half of `max_mb`: each rotation halves
    the resolution of what is older, never drops it. `read_metrics` reads the history, then the
    recent rows at full resolution. TensorBoard's `tb/` goes the same way: at a rotation, `tb.1/`
    is written anew from the thinned history (on a thread of its own, off the learner's path) and
    the full-resolution `tb/` starts again, so both take at most about twice `max_mb`."""

    def __init__(
        self, run_dir: Path, tensorboard: bool = True, max_mb: float = 64.0, wandb: WandbOptions | None = None
    ) -> None:
        self._dir = run_dir
        self._wandb = WandbSink(run_dir, wandb) if wandb is not None and wandb.project else None
        self._path = run_dir / "metrics.jsonl"
        self._max = int(max_mb * 2**20)
        self._file = open(self._path, "a", buffering=1)  # line-buffered: a crash loses <= 1 line
        self._tensorboard = tensorboard
        self._tb = self._writer("tb") if tensorboard else None
        self._history_thread: threading.Thread | None = None
        self.rotations = 0

    def _writer(self, name: str):
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(str(self._dir / name))

    def write(self, step: int, values: dict[str, float]) -> None:
        clean = {k: float(v) for k, v in values.items() if v is not None and math.isfinite(float(v))}
        self._file.write(json.dumps({"step": step, **clean}) + "\n")
        if self._tb is not None:
            for k, v in clean.items():
                self._tb.add_scalar(k, v, step)
        if self._wandb is not None:
            self._wandb.log(step, clean)
        if self._file.tell() > self._max:
            self._rotate()

    def _rotate(self) -> None:
        """The recent rows join the thinned history; the recent file (and TensorBoard's) start again."""
        import shutil

        self._file.close()
        history = self._dir / "metrics.1.jsonl"
        lines = [ln for p in (history, self._path) if p.exists() for ln in p.read_text().splitlines() if ln]
        kept = thin(lines, self._max // 2)
        tmp = self._dir / ".metrics.1.jsonl.tmp"
        tmp.write_text("".join(ln + "\n" for ln in kept))
        os.replace(tmp, history)  # whole or not at all: a crash here keeps the last history
        self._path.unlink()
        self._file = open(self._path, "a", buffering=1)
        self.rotations += 1
        if self._tb is not None:
            self._tb.close()
            if self._history_thread is not None:
                self._history_thread.join()
            shutil.rmtree(self._dir / "tb.old", ignore_errors=True)
            os.replace(self._dir / "tb", self._dir / "tb.old")  # shown until tb.1 is written anew
            self._tb = self._writer("tb")
            self._history_thread = threading.Thread(
                target=self._write_history_tb, args=(kept,), name="metrics-history", daemon=True
            )
            self._history_thread.start()

    def _write_history_tb(self, lines: list[str]) -> None:
        """`tb.1/` from the thinned history (written beside, then put in place)."""
        import shutil

        shutil.rmtree(self._dir / "tb.1.tmp", ignore_errors=True)
        w = self._writer("tb.1.tmp")
        for ln in lines:
            try:
                row = json.loads(ln)
            except json.JSONDecodeError:
                continue
            step = int(row.pop("step", 0))
            for k, v in row.items():
                w.add_scalar(k, v, step)
        w.close()
        shutil.rmtree(self._dir / "tb.1", ignore_errors=True)
        os.replace(self._dir / "tb.1.tmp", self._dir / "tb.1")
        shutil.rmtree(self._dir / "tb.old", ignore_errors=True)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._history_thread is not None:
            self._history_thread.join()
        if self._wandb is not None:
            self._wandb.close()


class WandbMode(StrEnum):
    """`learner.wandb.mode`: where W&B writes."""

    online = "online"
    offline = "offline"  # no network needed: `wandb sync <run dir>/wandb/offline-run-*` uploads later
    disabled = "disabled"


@dataclass(frozen=True)
class WandbOptions:
    """Weights & Biases beside TensorBoard (`learner.wandb.*`): the same namespaced keys, stepped by
    env steps. `project` null: off. `mode`: online, or offline (no network: `wandb sync <dir>`
    uploads later), or disabled."""

    project: str | None = None  # the W&B project; null: no W&B
    entity: str | None = None  # the team or user (null: your default)
    mode: WandbMode = WandbMode.online  # online | offline (no network needed) | disabled

    def __post_init__(self) -> None:
        as_choices(self, "learner.wandb")


class WandbSink:
    """One W&B run per training run, its id derived from the run directory, so a resumed run (and
    a restarted learner) goes on logging into the same W&B run. Its files go under
    `<run_dir>/wandb/`."""

    def __init__(self, run_dir: Path, options: WandbOptions) -> None:
        import hashlib

        try:
            import wandb
        except ImportError:
            raise RuntimeError(
                "learner.wandb.project is set but wandb is not installed: pip install 'robo_async[wandb]' "
                "(or pip install wandb)"
            ) from None
        config = {}
        if (run_dir / "config.yaml").exists():
            import yaml

            config = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
        run_id = hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:16]
        self.run = wandb.init(
            project=options.project,
            entity=options.entity,
            mode=str(options.mode),
            dir=str(run_dir),
            name=run_dir.name,
            id=run_id,
            resume="allow",
            config=config,
            settings=wandb.Settings(silent=True, console="off"),
        )

    def log(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def close(self) -> None:
        self.run.finish()


def thin(lines: list[str], max_bytes: int) -> list[str]:
    """Every k-th line, the smallest k that fits `max_bytes` (the first and the last always kept)."""
    size = sum(len(ln) + 1 for ln in lines)
    if size <= max_bytes or len(lines) <= 2:
        return lines
    k = 2
    while True:
        kept = lines[:-1:k] + [lines[-1]]
        if sum(len(ln) + 1 for ln in kept) <= max_bytes or len(kept) <= 2:
            return kept
        k *= 2


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
