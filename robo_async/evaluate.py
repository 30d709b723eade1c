"""`robo-async eval`: any checkpoint (SAC, BC, ...) or policy directory (`robo-async bc` output,
a saved LeRobot policy) on the robot it was trained for, through the one control loop, in any
inference mode; optionally an MP4 (H.264, plays in browsers) of the first episode. The work is
`launch/evaluation.py`'s; this command adds what only the top floor has: the composed config a
saved LeRobot policy is built from."""

from __future__ import annotations

from pathlib import Path

from robo_async.config import compose_config
from robo_async.launch.evaluation import CheckpointMismatch, EvalResult
from robo_async.launch.evaluation import evaluate as evaluate_policy

__all__ = ["CheckpointMismatch", "EvalResult", "evaluate"]


def evaluate(
    path: Path,
    episodes: int,
    *,
    video: Path | None = None,
    task: str | None = None,
    seed: int = 10_000,
    mode: str | None = None,
    video_size: int = 384,
    inference_delay_ms: float | list | None = None,
) -> EvalResult:
    """`episodes` deterministic episodes (seeds from `seed`) of the policy at `path`;
    `inference_delay_ms` injects latency into every inference (sim studies)."""
    return evaluate_policy(
        path,
        episodes,
        video=video,
        task=task,
        seed=seed,
        mode=mode,
        video_size=video_size,
        inference_delay_ms=inference_delay_ms,
        compose=compose_config,
    )
