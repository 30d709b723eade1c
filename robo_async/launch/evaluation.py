"""A trained policy on the robot it was trained for, through the one control loop, in any
inference mode, scored over deterministic episodes; optionally an MP4 (H.264, plays in browsers)
of the first episode. The body of `robo-async eval` (robo_async/commands/eval.py), and the evaluation
that ends `robo-async train` and `robo-async bc`; for a language-conditioned policy trained on several
tasks, its success per task's instruction (`evaluate_per_instruction`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hal.safety import SafeRobot
from robo_async.actor.inference_modes import InferenceModeError, choose_inference
from robo_async.actor.loop import ControlLoop
from robo_async.actor.loop_config import LoopConfig, TickInfo
from robo_async.launch.policy_args import make_actor_policy
from robo_async.launch.sources import Compose, policy_source
from robo_async.launch.tasks import make_robot, make_safe_robot
from sim import INSTRUCTIONS


class CheckpointMismatch(ValueError):
    """The policy does not fit what it is asked to run on (task, robot, inference mode)."""


@dataclass(frozen=True)
class EvalResult:
    """Scores of an evaluation: success, return and length over its episodes, and its timing."""

    episodes: int
    success_rate: float
    mean_return: float
    mean_length: float
    video: str | None
    mode: str = "inline"
    missed_ticks: int = 0  # ticks started more than half a period late
    lateness_p99_ms: float = 0.0
    held_ticks: int = 0  # ticks with no planned action (async modes): the robot held
    infer_p50_ms: float | None = None
    infer_p95_ms: float | None = None


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
    compose: Compose | None = None,
) -> EvalResult:
    """`episodes` deterministic episodes (seeds from `seed`) of a checkpoint, run directory,
    `robo-async bc` directory or (with `compose`) saved LeRobot policy; `inference_delay_ms`
    injects latency into every inference (sim studies)."""
    src = policy_source(path, task, inference_delay_ms, compose)
    if task is not None and src.what != "lerobot policy" and task != src.task.name:
        raise CheckpointMismatch(
            f"{path} was trained on task '{src.task.name}', not '{task}'; "
            f"evaluate it on its own task or pick one trained for '{task}'"
        )
    robot = make_safe_robot(src.task)
    if src.spec is not None and robot.spec.signature() != src.spec:
        raise CheckpointMismatch(
            f"{path} was trained for robot {src.spec.get('name')} with {src.spec}, "
            f"this task builds {robot.spec.signature()}"
        )
    policy = make_actor_policy(src.policy, robot.spec, deterministic=True)
    if src.weights is not None:
        policy.load_weights(src.version, src.weights)
    try:  # None or auto: inline for a one-step policy on an as-fast sim, else async_forward_rtc
        mode = choose_inference(
            mode or None,
            purpose="evaluate",
            horizon=policy.horizon,
            realtime=src.task.realtime,
            robot=src.task.robot["type"] if src.task.robot is not None else None,
        )
    except InferenceModeError as e:
        raise CheckpointMismatch(str(e)) from None
    frames: list[np.ndarray] = []
    render = getattr(robot.inner, "render", None)
    if video is not None and render is None:
        raise CheckpointMismatch(f"video: {robot.spec.name} has no camera or render to record")

    def on_tick(t: TickInfo) -> None:
        if t.episode == 0 and render is not None:
            frames.append(render(video_size))

    loop = ControlLoop(
        robot,
        policy,
        LoopConfig(
            episode_ticks=src.task.episode_ticks(),
            realtime=mode != "inline" or src.task.realtime,
            seed=seed,
            eval_every=1,
            max_episodes=episodes,
            inference=mode,
            explore_until_weights=False,
        ),
        observer=on_tick if video is not None else None,
    )
    robot.connect()
    try:
        if video is not None:  # the first frame: the start pose
            frames.append(render(video_size))
        res = loop.run()
    finally:
        robot.close()
    eps = res.episodes
    written = write_mp4(video, frames, robot.spec.hz) if video is not None and frames else None
    st = loop.stats()
    return EvalResult(
        len(eps),
        float(np.mean([e.success for e in eps])) if eps else 0.0,
        float(np.mean([e.episode_return for e in eps])) if eps else 0.0,
        float(np.mean([e.length for e in eps])) if eps else 0.0,
        written,
        mode,
        res.missed_ticks,
        res.lateness_p99_ms,
        int(st.get("held_ticks", 0)),
        st.get("infer_p50_ms"),
        st.get("infer_p95_ms"),
    )


def evaluate_per_instruction(policy, targs: dict, episodes: int, mode: str, seed: int = 10_000) -> dict[str, float]:
    """Success rate per task, the policy told that task's instruction (deterministic), through
    the one control loop (real time unless `inline`): `robo-async bc policy=tiny_vla`'s evaluation."""
    out = {}
    for name, t in targs.items():
        policy.instruction = INSTRUCTIONS[name]
        robot = SafeRobot(make_robot(t))
        robot.connect()
        try:
            loop = ControlLoop(
                robot,
                policy,
                LoopConfig(
                    episode_ticks=t.episode_ticks(),
                    realtime=mode != "inline",
                    seed=seed,
                    eval_every=1,
                    max_episodes=episodes,
                    inference=mode,
                    explore_until_weights=False,
                ),
            )
            res = loop.run()
        finally:
            robot.close()
        out[INSTRUCTIONS[name]] = float(np.mean([e.success for e in res.episodes])) if res.episodes else 0.0
    return out


def write_mp4(path: Path, frames: list[np.ndarray], fps: float) -> str:
    """H.264 (yuv420p, faststart): plays in browsers. Frame sides must be even."""
    import imageio_ffmpeg

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    h, w = frames[0].shape[:2]
    writer = imageio_ffmpeg.write_frames(
        str(path),
        (w, h),
        fps=fps,
        codec="libx264",
        pix_fmt_in="rgb24",
        pix_fmt_out="yuv420p",
        macro_block_size=2,
        quality=None,
        output_params=["-crf", "20", "-movflags", "+faststart"],
        ffmpeg_log_level="error",
    )
    writer.send(None)  # start the encoder
    for f in frames:
        writer.send(np.ascontiguousarray(f[:, :, :3], dtype=np.uint8))
    writer.close()
    return str(path)
