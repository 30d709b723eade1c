"""`robo-async eval`: any checkpoint (SAC, BC, ...) or policy directory (`robo-async bc` output,
a saved LeRobot policy) on the robot it was trained for, through the one control loop, in any
inference mode; optionally an MP4 (H.264, plays in browsers) of the first episode. Prints the
success rate, mean return and length (and missed ticks and lateness p99 outside `inline`). The
work is `launch/evaluation.py`'s; this command adds what only the top floor has: the composed
config a saved LeRobot policy is built from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from robo_async.commands.args import arg, help_text, parse, usage, wants_help
from robo_async.config import UserError, compose_config
from robo_async.launch.evaluation import EvalResult
from robo_async.launch.evaluation import evaluate as evaluate_policy


@dataclass(frozen=True, kw_only=True)
class EvalArgs:
    """The keys of `robo-async eval`."""

    checkpoint: Path = arg(
        metavar="ckpt|run dir|policy dir",
        help="a checkpoint file, a run directory (its last checkpoint) or a policy directory",
    )
    episodes: int = arg(20, help="evaluation episodes")
    inference: str | None = arg(None, metavar="mode", help="an actor.inference mode (default: the run's)")
    video: Path | None = arg(None, metavar="out.mp4", help="write the first episode as an H.264 MP4 here")
    video_size: int = arg(384, help="video frame size in pixels")
    delay_ms: float | None = arg(None, help="injected inference latency in ms (sim studies)")
    task: str | None = arg(None, metavar="task", help="another task (default: the run's)")
    seed: int = arg(10_000, help="the first episode's seed")


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


def main(argv: list[str]) -> int:
    """Evaluate and print one line of results (and where the video is)."""
    from robo_async.launch.builders import ConfigError
    from robo_async.launch.evaluation import CheckpointMismatch
    from robo_async.learner.checkpoint import CheckpointError

    if wants_help(argv):
        print(help_text(EvalArgs, "eval", __doc__))
        return 0
    opts = parse(EvalArgs, argv, "eval")
    if not opts.checkpoint.exists():
        raise UserError(f"checkpoint {opts.checkpoint} does not exist")
    try:
        res = evaluate(
            opts.checkpoint,
            opts.episodes,
            video=opts.video,
            task=opts.task,
            seed=opts.seed,
            mode=opts.inference,
            video_size=opts.video_size,
            inference_delay_ms=opts.delay_ms,
        )
    except (CheckpointError, CheckpointMismatch, ConfigError) as e:
        raise UserError(str(e)) from None
    except ValueError as e:
        raise UserError(f"eval: {e}") from None
    print(
        f"success rate {res.success_rate:.0%} over {res.episodes} episodes "
        f"(mean return {res.mean_return:.1f}, mean length {res.mean_length:.1f} ticks; inference {res.mode}"
        + (
            f", {res.missed_ticks} missed ticks, lateness p99 {res.lateness_p99_ms:.2f} ms"
            if res.mode != "inline"
            else ""
        )
        + ")"
    )
    if res.video:
        print(f"video: {res.video}")
    return 0


def usage_lines() -> str:
    """This command's usage, for `robo-async --help`."""
    return usage(EvalArgs, "eval")
