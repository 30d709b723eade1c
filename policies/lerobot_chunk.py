"""LeRobot chunk policies (ACT, SmolVLA, the pi0 family, ...) behind our `Policy` interface.

`LeRobotChunkPolicy` wraps a `lerobot.policies.pretrained.PreTrainedPolicy` together with LeRobot's
own pre/post-processor pipelines (normalization, batching, device, tokenization for VLAs):

- our observation -> a LeRobot batch: the joint state (replaced by the forwarded state when the
  actor gives one) -> `observation.state`; task features (e.g. `target`, `ee_to_target`) ->
  `observation.environment_state`; camera frames (uint8 HxWx3) -> `observation.images.<name>`
  (float CxHxW in [0, 1]); the language instruction -> `task`;
- `predict_action_chunk` -> post-processor -> actions [H, A] in robot units, clipped to the joint
  limits; `units: deg` is LeRobot's arm convention (arm joints in degrees, the gripper 0..100 onto its
  joint range), converted both ways (state in, actions out) by `hal.units.LeRobotUnits`, the one
  place those conversions live. The gripper is the joint named `gripper...` in `joint_names`, or,
  without names, the last joint (LeRobot's arms list it last);
- a committed prefix (RTC): policies with LeRobot's RTC enabled get `inference_delay` and the
  normalized `prev_chunk_left_over`; in every case the prefix is returned exactly.

Build one with random initialisation or load a saved one (written by `save`) with
`policies.lerobot_build`; DSRL steering a frozen one is `policies.lerobot_dsrl`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from hal.units import LeRobotUnits
from policies.base import ActionChunk, ChunkRequest, Policy, WeightsMismatch, register


def joint_units(
    units: str, joint_names: Sequence[str] | None, low: Sequence[float], high: Sequence[float]
) -> LeRobotUnits | None:
    """`units: deg`: LeRobot's arm convention for the robot's joints (the gripper named `gripper...`, or
    the last joint without names); None for rad."""
    if units == "rad":
        return None
    names = list(joint_names) if joint_names else [f"joint{i}" for i in range(len(low) - 1)] + ["gripper"]
    if len(names) != len(low):
        raise ValueError(f"lerobot policy units=deg: {len(names)} joint names {names} for {len(low)} joint limits")
    return LeRobotUnits([f"{n}.pos" for n in names], tuple(low), tuple(high))


def _check_units(units: LeRobotUnits | None, config) -> None:
    """`units: deg` converts joint positions: refused where the model's state or action is not one
    value per joint (there is nothing to convert the other entries with)."""
    if units is None:
        return
    for feature in ("observation.state", "action"):
        f = (config.input_features or {}).get(feature) or (config.output_features or {}).get(feature)
        if f is not None and tuple(f.shape) != (len(units.keys),):
            raise ValueError(
                f"lerobot policy units=deg converts joint positions (degrees, gripper 0..100): its "
                f"{feature} has shape {tuple(f.shape)}, the robot has {len(units.keys)} joints "
                f"{units.keys}"
            )


@register("lerobot")
class LeRobotChunkPolicy(Policy):
    """The `lerobot` policy: a LeRobot pretrained policy with its pre/post-processors behind `Policy` (see the
    module's docstring). `units` says whether the LeRobot model works in rad (ours) or in LeRobot's arm
    convention `deg` (degrees, gripper 0..100); `joint_names` (the robot's, rad limits `action_low/high`)
    find the gripper for `deg`; `task` is the instruction given to VLAs."""

    def __init__(
        self,
        policy,
        preprocessor,
        postprocessor,
        *,
        state_key: str = "state",
        env_keys: Sequence[str] = (),
        cameras: Sequence[str] = (),
        action_low: Sequence[float],
        action_high: Sequence[float],
        dt: float = 1 / 30,
        units: str = "rad",
        task: str = "",
        joint_names: Sequence[str] | None = None,
    ) -> None:
        if units not in ("rad", "deg"):
            raise ValueError(f"lerobot policy units must be 'rad' or 'deg', not '{units}'")
        self.policy, self.pre, self.post = policy, preprocessor, postprocessor
        self.policy.eval()
        self.state_key, self.env_keys, self.cameras = state_key, tuple(env_keys), tuple(cameras)
        self.low = np.asarray(action_low, np.float32)
        self.high = np.asarray(action_high, np.float32)
        self.dt, self.units, self.task = dt, units, task
        self.horizon = int(getattr(policy.config, "chunk_size", getattr(policy.config, "n_action_steps", 1)))
        self.action_dim = int(policy.config.output_features["action"].shape[0])
        self.type = policy.config.type
        self.lerobot_units = joint_units(units, joint_names, action_low, action_high)
        _check_units(self.lerobot_units, policy.config)

    @property
    def instruction(self) -> str:  # type: ignore[override]
        """The task text given to the LeRobot policy (VLAs read it)."""
        return self.task

    @instruction.setter
    def instruction(self, text: str) -> None:
        self.task = text

    @property
    def architecture(self) -> str:
        shapes = ";".join(f"{k}:{tuple(v.shape)}" for k, v in self.policy.state_dict().items())
        return f"lerobot-{self.type}:H{self.horizon}x{self.action_dim}:{hashlib.sha1(shapes.encode()).hexdigest()[:12]}"

    def module(self) -> torch.nn.Module:
        return self.policy

    def load_weights(self, version: int, arrays: Mapping[str, np.ndarray]) -> None:
        try:
            super().load_weights(version, arrays)
        except RuntimeError as e:  # load_state_dict's own complaints
            raise WeightsMismatch(f"weights v{version} do not fit {self.architecture}: {e}") from e

    def reset(self) -> None:
        """Clear the LeRobot policy's internal queues (at an episode start)."""
        if hasattr(self.policy, "reset"):
            self.policy.reset()

    # --- conversions (hal.units: LeRobot's degrees and gripper 0..100 <-> rad) -------------------
    def _to_robot(self, a: np.ndarray) -> np.ndarray:
        """The model's joint values [..., A] -> the robot's (rad)."""
        return a if self.lerobot_units is None else self.lerobot_units.to_hal_array(a)

    def _from_robot(self, a: np.ndarray) -> np.ndarray:
        """The robot's joint values (rad) [..., A] -> the model's."""
        return a if self.lerobot_units is None else self.lerobot_units.to_lerobot_array(a)

    def batch(self, obs: Mapping[str, np.ndarray], forwarded_state: np.ndarray | None = None) -> dict:
        """One observation as a LeRobot batch: `observation.state` (the forwarded state when given, in the
        model's units), `observation.environment_state`, `observation.images.<camera>` (float C x H x W in
        [0, 1]) and `task`."""
        state = np.asarray(obs[self.state_key] if forwarded_state is None else forwarded_state, np.float32)
        b: dict = {"observation.state": torch.as_tensor(self._from_robot(state), dtype=torch.float32)}
        if self.env_keys:
            env = np.concatenate([np.asarray(obs[k], np.float32).ravel() for k in self.env_keys])
            b["observation.environment_state"] = torch.as_tensor(env)
        for cam in self.cameras:
            frame = obs.get(f"image/{cam}", obs.get(cam))
            if frame is None:
                raise KeyError(f"lerobot policy needs camera '{cam}' but the observation has {sorted(obs)}")
            b[f"observation.images.{cam}"] = torch.as_tensor(np.asarray(frame)).permute(2, 0, 1).float() / 255.0
        b["task"] = self.task
        return b

    def predict_chunk(
        self,
        obs: Mapping[str, np.ndarray],
        *,
        forwarded_state: np.ndarray | None = None,
        prefix: np.ndarray | None = None,
        delay_ticks: int = 0,
    ) -> ActionChunk:
        batch = self.pre(self.batch(obs, forwarded_state))
        kwargs = {}
        rtc = getattr(self.policy.config, "rtc_config", None)
        if prefix is not None and len(prefix) and rtc is not None and getattr(rtc, "enabled", False):
            norm = self.pre({"action": torch.as_tensor(self._from_robot(np.asarray(prefix, np.float32)))})
            kwargs = {"inference_delay": len(prefix), "prev_chunk_left_over": norm["action"]}
        with torch.no_grad():
            chunk = self.predict_normalized(batch, **kwargs)
        actions = self.post(chunk)
        a = np.asarray(actions.detach().cpu().numpy(), np.float32).reshape(-1, self.action_dim)
        a = np.clip(self._to_robot(a), self.low, self.high).astype(np.float32)
        if prefix is not None and len(prefix):
            d = min(len(prefix), len(a))
            a[:d] = np.asarray(prefix, np.float32)[:d]
        return ActionChunk(a, self.dt, self.version)

    def predict_chunks(self, requests: Sequence[ChunkRequest]) -> list[ActionChunk]:
        """One forward pass for the requests without an RTC prefix the policy would use (the
        policy server's batches); the others one by one."""
        rtc = getattr(self.policy.config, "rtc_config", None)
        rtc = rtc is not None and getattr(rtc, "enabled", False)
        rows = [i for i, r in enumerate(requests) if not (rtc and r.prefix is not None and len(r.prefix))]
        out: list[ActionChunk | None] = [None] * len(requests)
        if len(rows) > 1:
            parts = [self.batch(requests[i].obs, requests[i].forwarded_state) for i in rows]
            batch = {k: torch.stack([p[k] for p in parts]) for k in parts[0] if k != "task"}
            batch["task"] = [p["task"] for p in parts]
            with torch.no_grad():
                chunk = self.predict_normalized(self.pre(batch))
            a = np.asarray(self.post(chunk).detach().cpu().numpy(), np.float32).reshape(len(rows), -1, self.action_dim)
            a = np.clip(self._to_robot(a), self.low, self.high).astype(np.float32)
            for j, i in enumerate(rows):
                prefix = requests[i].prefix
                if prefix is not None and len(prefix):
                    d = min(len(prefix), a.shape[1])
                    a[j, :d] = np.asarray(prefix, np.float32)[:d]
                out[i] = ActionChunk(a[j], self.dt, self.version)
        for i, r in enumerate(requests):
            if out[i] is None:
                out[i] = self.predict_chunk(
                    r.obs, forwarded_state=r.forwarded_state, prefix=r.prefix, delay_ticks=r.delay_ticks
                )
        return out  # type: ignore[return-value]

    @property
    def noise_shape(self) -> tuple[int, int] | None:
        """The shape [steps, A] of the starting noise its sampler takes (`predict_action_chunk(noise=)`:
        diffusion plans `horizon` steps, flow-matching VLAs `chunk_size`); None if it takes none."""
        import inspect

        if "noise" not in inspect.signature(self.policy.predict_action_chunk).parameters:
            return None
        c = self.policy.config
        steps = int(getattr(c, "horizon", None) or getattr(c, "chunk_size", self.horizon))
        # VLAs (SmolVLA, pi0) sample in an action space padded to max_action_dim
        return steps, int(getattr(c, "max_action_dim", None) or self.action_dim)

    def predict_normalized(self, batch: dict, noise: torch.Tensor | None = None, **kwargs: object) -> torch.Tensor:
        """`predict_action_chunk` on a preprocessed batch (leading batch dim), in the policy's
        normalized action space, [B, chunk, A]; `noise` [B, *noise_shape] starts its sampler."""
        if self.type == "diffusion":  # it takes observation histories [B, n_obs_steps, ...]
            batch = dict(batch)
            for k in ("observation.state", "observation.environment_state"):
                if k in batch and batch[k].ndim == 2:
                    batch[k] = batch[k].unsqueeze(1)
        if noise is not None:
            kwargs["noise"] = noise
        return self.policy.predict_action_chunk(batch, **kwargs)

    # --- persistence ---------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Policy config + weights + processors, as LeRobot writes them (loadable by LeRobot too).
        A VLA's local backbone directory (config, processor, tokenizer) is copied in as
        `backbone/`, so the directory is complete on any machine."""
        import shutil

        path = Path(path)
        vlm = getattr(self.policy.config, "vlm_model_name", None)
        if vlm and Path(str(vlm)).is_dir() and Path(str(vlm)).resolve() != (path / "backbone").resolve():
            shutil.copytree(str(vlm), path / "backbone", dirs_exist_ok=True)
        self.policy.save_pretrained(path)
        self.pre.save_pretrained(path)
        self.post.save_pretrained(path)
        return path
