"""Evaluate a checkpoint: success rate over N episodes, optionally an MP4 of the first one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from robo_async.learner import checkpoint
from robo_async.launch.builders import PolicyArgs, make_actor_policy, make_robot, task_args


class CheckpointMismatch(ValueError):
    pass


@dataclass(frozen=True)
class EvalResult:
    episodes: int
    success_rate: float
    mean_return: float
    mean_length: float
    video: str | None


def evaluate(ckpt: Path, episodes: int, *, video: Path | None = None, task: str | None = None,
             seed: int = 10_000) -> EvalResult:
    path = checkpoint.resolve(ckpt)
    tensors, metadata = checkpoint.read(path)
    meta = checkpoint.meta_of(metadata)
    cfg = yaml.safe_load(str(meta["config"]))
    if task is not None and task != meta["task"]:
        raise CheckpointMismatch(f"{path} was trained on task '{meta['task']}', not '{task}'; "
                                 f"evaluate it on its own task or pick a checkpoint for '{task}'")
    targs = task_args(cfg["task"])
    robot = make_robot(targs)
    if robot.spec.signature() != meta["spec"]:
        raise CheckpointMismatch(f"{path} was trained for robot {meta['spec'].get('name')} with "
                                 f"{meta['spec']}, this task builds {robot.spec.signature()}")
    pargs = PolicyArgs.from_config(cfg["policy"])
    policy = make_actor_policy(pargs, robot.spec, deterministic=True)
    policy.load_weights(int(meta["version"]), {k: v.numpy() for k, v in checkpoint.module_state(tensors, "actor").items()})
    ticks = int(targs.options.get("episode_ticks", 50))
    successes, returns, lengths, frames = [], [], [], []
    robot.connect()
    try:
        for ep in range(episodes):
            obs = robot.reset(seed=seed + ep)
            ret, success, n = 0.0, False, 0
            for n in range(1, ticks + 1):
                robot.send_action(policy.predict_chunk(obs.as_dict()).actions[0])
                out = robot.outcome()
                ret += out.reward
                success = success or out.success
                if video is not None and ep == 0:
                    frames.append(robot.task.render("front"))
                obs = robot.get_observation()
                if out.terminated:
                    break
            successes.append(success)
            returns.append(ret)
            lengths.append(n)
    finally:
        robot.close()
    written = write_mp4(video, frames, robot.spec.hz) if video is not None and frames else None
    return EvalResult(episodes, float(np.mean(successes)) if successes else 0.0,
                      float(np.mean(returns)) if returns else 0.0,
                      float(np.mean(lengths)) if lengths else 0.0, written)


def write_mp4(path: Path, frames: list[np.ndarray], fps: float) -> str:
    import cv2

    path.parent.mkdir(parents=True, exist_ok=True)
    h, w = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
    if not writer.isOpened():
        raise RuntimeError(f"cannot open a video writer for {path}")
    for f in frames:
        writer.write(np.ascontiguousarray(f[:, :, ::-1]))
    writer.release()
    return str(path)
