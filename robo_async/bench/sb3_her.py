"""The baseline of `bench envs`' goal-conditioned rows: Stable-Baselines3's SAC with its
`HerReplayBuffer` (`future`, 4 sampled goals per transition, as SB3's and the HER paper's
defaults), on the same Gymnasium-Robotics env, the same robot-time budget and the same 20
demonstrations of our scripted expert (put in its replay before learning, as ours are imported).

Measured as `robo-async train` measures ours, so the figures compare: every second episode is a
deterministic evaluation episode on the env (robot time, counted), success is any tick of an
episode succeeding, and the curve is the rolling success of the last 20 evaluation episodes
against env steps (training and evaluation) and wall-clock; it stops at 90% (`stop_at_success`)
or at the budget. Hyperparameters: RL Zoo's for Fetch with HER where the CPU allows (gamma 0.95,
learning rate 1e-3, tau 0.05), batch 256 and 256x256 networks (ours), UTD 1 (SB3's default).
"""

from __future__ import annotations

import contextlib
import io
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

WINDOW = 20  # evaluation episodes in the rolling success (as charts/success_rate)


@dataclass(frozen=True)
class SB3Her:
    """One SB3 SAC+HER run's settings."""

    env_id: str = "FetchPush-v4"
    env_steps: int = 45_000  # the robot-time budget, training and evaluation episodes together
    budget_s: float = 1800.0
    seed: int = 0
    demos: int = 20
    stop_at: float = 0.9
    learning_starts: int = 1000
    gamma: float = 0.95
    learning_rate: float = 1e-3
    tau: float = 0.05
    batch_size: int = 256
    threads: int = 1  # torch threads, as our learner's default (learner.threads): two fight over a busy 2-core CPU


def _env(env_id: str):
    import gymnasium as gym

    with contextlib.redirect_stderr(io.StringIO()):  # its import prints a notice about other envs
        import gymnasium_robotics
    gym.register_envs(gymnasium_robotics)
    return gym.make(env_id)


def _episode(env, act, seed: int, add=None) -> tuple[bool, int]:
    """One episode of `act(obs)`; every transition to `add` if given. (any tick succeeded, ticks)."""
    obs, _ = env.reset(seed=seed)
    won, ticks, done = False, 0, False
    while not done:
        a = np.asarray(act(obs), np.float32)
        nxt, r, term, trunc, info = env.step(a)
        won |= bool(info.get("is_success", False))
        ticks += 1
        done = term or trunc
        if add is not None:
            add(obs, nxt, a, r, done, {"TimeLimit.truncated": bool(trunc and not term)})
        obs = nxt
    return won, ticks


def run(s: SB3Her, expert=None) -> dict[str, object]:
    """Train SB3's SAC+HER under `s`; returns {curve: [(elapsed s, env steps, rolling success,
    episodes)], env_steps, wall_s, utd_reached, final_success, replayed}. `expert(obs)`: the demonstrations' policy."""
    import torch
    from stable_baselines3 import SAC, HerReplayBuffer
    from stable_baselines3.common.callbacks import BaseCallback

    torch.manual_seed(s.seed)
    torch.set_num_threads(s.threads)
    env, eval_env = _env(s.env_id), _env(s.env_id)
    model = SAC(
        "MultiInputPolicy",
        env,
        replay_buffer_class=HerReplayBuffer,
        replay_buffer_kwargs={"n_sampled_goal": 4, "goal_selection_strategy": "future"},
        learning_starts=s.learning_starts,
        gamma=s.gamma,
        learning_rate=s.learning_rate,
        tau=s.tau,
        batch_size=s.batch_size,
        policy_kwargs={"net_arch": [256, 256]},
        seed=s.seed,
        verbose=0,
    )
    if expert is not None and s.demos:
        demo_env = _env(s.env_id)
        rb = model.replay_buffer

        def add(o, n, a, r, done, info):
            rb.add(
                {k: v[None] for k, v in o.items()},
                {k: v[None] for k, v in n.items()},
                a[None],
                np.array([r], np.float32),
                np.array([done]),
                [info],
            )

        for i in range(s.demos):
            _episode(demo_env, expert, 10_000 + s.seed * 1000 + i, add)
        demo_env.close()
    t0 = time.monotonic()
    state = {"robot_steps": 0, "episodes": 0, "evals": 0}
    recent: deque[bool] = deque(maxlen=WINDOW)
    curve: list[tuple[float, int, float, int]] = []

    class Interleaved(BaseCallback):
        """After each training episode one deterministic evaluation episode (robot time too)."""

        def _on_step(self) -> bool:
            state["robot_steps"] += 1
            if not self.locals["dones"][0]:
                return state["robot_steps"] < s.env_steps and time.monotonic() - t0 < s.budget_s
            state["episodes"] += 1
            won, ticks = _episode(eval_env, lambda o: model.predict(o, deterministic=True)[0], 20_000 + state["evals"])
            state["evals"] += 1
            state["robot_steps"] += ticks
            state["episodes"] += 1
            recent.append(won)
            rate = sum(recent) / len(recent)
            curve.append((round(time.monotonic() - t0, 2), state["robot_steps"], rate, state["episodes"]))
            if len(recent) == WINDOW and rate >= s.stop_at:
                return False
            return state["robot_steps"] < s.env_steps and time.monotonic() - t0 < s.budget_s

    model.learn(total_timesteps=s.env_steps, callback=Interleaved())
    final = [_episode(eval_env, lambda o: model.predict(o, deterministic=True)[0], 30_000 + i)[0] for i in range(20)]
    env.close()
    eval_env.close()
    updates = max(model.num_timesteps - s.learning_starts, 0)  # train_freq 1, gradient_steps 1
    return {
        "replayed": int(model.replay_buffer.size()),  # demonstrations and training transitions
        "curve": curve,
        "env_steps": state["robot_steps"],
        "wall_s": round(time.monotonic() - t0, 1),
        "utd_reached": round(updates / max(state["robot_steps"], 1), 2),
        "final_success": sum(final) / len(final),
    }
