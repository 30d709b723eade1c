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

Build one with random initialisation (`build_lerobot_policy`, no hub needed for ACT) or load a
saved one from a local directory (`load_lerobot_policy`, written by `save`); hub ids are not
reachable from these machines and are refused with a clear message.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from hal.units import LeRobotUnits
from policies.base import ActionChunk, ChunkRequest, Policy, WeightsMismatch, register


class LeRobotPolicyUnavailable(RuntimeError):
    """The LeRobot policy cannot be built here (missing hub files, unknown type)."""


_NO_HUB = {  # policy types whose construction needs files from the Hugging Face hub
    "smolvla": ("vlm_model_name", "the SmolVLM2 config and processor"),
    "pi0": (None, "the PaliGemma tokenizer (google/paligemma-3b-pt-224) for its processor"),
    "pi05": (None, "the PaliGemma tokenizer (google/paligemma-3b-pt-224) for its processor"),
}


def _units(
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


def _features(state_dim: int, env_dim: int, action_dim: int, cameras: Sequence[tuple[str, int, int]]):
    from lerobot.configs.types import FeatureType, PolicyFeature

    inputs = {"observation.state": PolicyFeature(FeatureType.STATE, (state_dim,))}
    if env_dim:
        inputs["observation.environment_state"] = PolicyFeature(FeatureType.ENV, (env_dim,))
    for name, h, w in cameras:
        inputs[f"observation.images.{name}"] = PolicyFeature(FeatureType.VISUAL, (3, h, w))
    return inputs, {"action": PolicyFeature(FeatureType.ACTION, (action_dim,))}


def _stats(
    state_dim: int,
    env_dim: int,
    action_low: np.ndarray,
    action_high: np.ndarray,
    env_scale: float,
    cameras: Sequence[tuple[str, int, int]],
) -> dict[str, dict[str, torch.Tensor]]:
    """Normalization statistics from the robot's limits (a fresh policy has no dataset yet)."""
    lo, hi = torch.as_tensor(action_low, dtype=torch.float32), torch.as_tensor(action_high, dtype=torch.float32)
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    joint = {
        "mean": mid[:state_dim] if state_dim <= len(mid) else torch.zeros(state_dim),
        "std": half[:state_dim] if state_dim <= len(half) else torch.ones(state_dim),
        "min": lo[:state_dim] if state_dim <= len(lo) else -torch.ones(state_dim),
        "max": hi[:state_dim] if state_dim <= len(hi) else torch.ones(state_dim),
    }
    stats = {"observation.state": joint, "action": {"mean": mid, "std": half, "min": lo, "max": hi}}
    if env_dim:
        stats["observation.environment_state"] = {
            "mean": torch.zeros(env_dim),
            "std": torch.full((env_dim,), 1.0 / env_scale),
            "min": torch.full((env_dim,), -1.0 / env_scale),
            "max": torch.full((env_dim,), 1.0 / env_scale),
        }
    for name, _, _ in cameras:
        stats[f"observation.images.{name}"] = {
            "mean": torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1),
            "std": torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1),
            "min": torch.zeros(3, 1, 1),
            "max": torch.ones(3, 1, 1),
        }
    return stats


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
        self.lerobot_units = _units(units, joint_names, action_low, action_high)
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


def build_lerobot_policy(
    kind: str,
    *,
    state_dim: int,
    action_low: Sequence[float],
    action_high: Sequence[float],
    env_keys: Sequence[str] = (),
    env_dim: int = 0,
    env_scale: float = 1.0,
    cameras: Sequence[tuple[str, int, int]] = (),
    chunk_size: int = 10,
    dt: float = 1 / 30,
    units: str = "rad",
    task: str = "",
    device: str = "cpu",
    joint_names: Sequence[str] | None = None,
    **overrides: object,
) -> LeRobotChunkPolicy:
    """A LeRobot policy of type `kind` with random initialisation, for our robot's shapes (`joint_names`
    find the gripper for `units="deg"`, see `LeRobotChunkPolicy`)."""
    from lerobot.policies.factory import get_policy_class, make_policy_config, make_pre_post_processors

    if kind in _NO_HUB:
        key, what = _NO_HUB[kind]
        local = overrides.get(key) if key else None
        if not (local and Path(str(local)).is_dir()):
            hint = f"; pass {key}=<a local directory with it>" if key else ""
            raise LeRobotPolicyUnavailable(
                f"LeRobot '{kind}' needs {what} from the Hugging Face hub, which is not reachable here{hint}. "
                f"Load a saved policy from a local directory with `policy.path=` instead."
            )
    action_dim = len(action_low)
    inputs, outputs = _features(state_dim, env_dim, action_dim, cameras)
    kw: dict = {"input_features": inputs, "output_features": outputs, "device": device}
    if kind == "act":
        kw.update(chunk_size=chunk_size, n_action_steps=chunk_size, pretrained_backbone_weights=None)
    elif kind == "diffusion":  # plans `horizon` steps (a multiple of its U-Net's downsampling), executes chunk_size
        levels = 2 ** len(tuple(overrides.get("down_dims", (512, 1024, 2048))))  # type: ignore[arg-type]
        kw.update(
            n_action_steps=chunk_size,
            n_obs_steps=1,
            horizon=-(-max(chunk_size, 2) // levels) * levels,
            pretrained_backbone_weights=None,
        )
    else:
        kw.update(chunk_size=chunk_size, n_action_steps=chunk_size)
    kw.update(overrides)
    try:
        cfg = make_policy_config(kind, **kw)
    except (ValueError, KeyError, TypeError) as e:
        raise LeRobotPolicyUnavailable(f"cannot configure LeRobot policy '{kind}': {e}") from e
    policy = get_policy_class(kind)(cfg)
    lo, hi = np.asarray(action_low), np.asarray(action_high)
    lerobot_units = _units(units, joint_names, action_low, action_high)
    if lerobot_units is not None:  # the model normalizes in its own units (degrees, gripper 0..100)
        lo, hi = lerobot_units.to_lerobot_array(lo), lerobot_units.to_lerobot_array(hi)
    pre, post = make_pre_post_processors(cfg, dataset_stats=_stats(state_dim, env_dim, lo, hi, env_scale, cameras))
    return LeRobotChunkPolicy(
        policy,
        pre,
        post,
        env_keys=env_keys,
        cameras=[c[0] for c in cameras],
        action_low=action_low,
        action_high=action_high,
        dt=dt,
        units=units,
        task=task,
        joint_names=joint_names,
    )


def check_features(
    cfg,
    path: Path,
    *,
    state_dim: int | None,
    env_dim: int | None,
    action_dim: int,
    cameras: Sequence[str],
) -> None:
    """A saved policy's input and output features against what the robot gives and takes:
    `LeRobotPolicyUnavailable` naming the first feature that differs and both shapes."""
    ins = {k: tuple(v.shape) for k, v in (cfg.input_features or {}).items()}
    outs = {k: tuple(v.shape) for k, v in (cfg.output_features or {}).items()}

    def refuse(feature: str, theirs: object, ours: object) -> None:
        raise LeRobotPolicyUnavailable(
            f"policy.path={path}: its {feature} is {theirs}, the robot "
            f"{'takes' if feature == 'action' else 'gives'} {ours}"
        )

    if "action" in outs and outs["action"] != (action_dim,):
        refuse("action", outs["action"], (action_dim,))
    if state_dim is not None and "observation.state" in ins and ins["observation.state"] != (state_dim,):
        refuse("observation.state", ins["observation.state"], (state_dim,))
    if env_dim is not None:
        theirs = ins.get("observation.environment_state")
        if (theirs or (0,)) != ((env_dim,) if env_dim else (0,)):
            refuse(
                "observation.environment_state",
                theirs or "absent",
                f"({env_dim},) from policy.obs_keys" if env_dim else "none (policy.obs_keys has only state)",
            )
    wanted = sorted(k.removeprefix("observation.images.") for k in ins if k.startswith("observation.images."))
    missing = [c for c in wanted if c not in cameras]
    if missing:
        refuse(
            f"camera observation.images.{missing[0]}",
            ins[f"observation.images.{missing[0]}"],
            f"cameras {sorted(cameras)} (policy.cameras)",
        )


def load_lerobot_policy(
    path: str | Path,
    *,
    action_low: Sequence[float],
    action_high: Sequence[float],
    env_keys: Sequence[str] = (),
    cameras: Sequence[str] = (),
    dt: float = 1 / 30,
    units: str = "rad",
    task: str = "",
    device: str = "cpu",
    state_dim: int | None = None,
    env_dim: int | None = None,
    joint_names: Sequence[str] | None = None,
) -> LeRobotChunkPolicy:
    """A LeRobot policy saved in a local directory (`save`, or LeRobot's own `save_pretrained`).
    With `state_dim`/`env_dim` (the robot's), a checkpoint whose features do not fit is refused
    (`check_features`) before any weight is loaded. `joint_names` find the gripper for `units="deg"`."""
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    path = Path(path)
    if not (path / "config.json").is_file():
        raise LeRobotPolicyUnavailable(
            f"no LeRobot policy in {path}: config.json missing (hub ids are not "
            "reachable here; download on a connected machine and copy the directory)"
        )
    cfg = PreTrainedConfig.from_pretrained(str(path))
    cfg.device = device
    check_features(cfg, path, state_dim=state_dim, env_dim=env_dim, action_dim=len(action_low), cameras=cameras)
    overrides = {}
    if (path / "backbone").is_dir():  # a VLA saved with its backbone (LeRobotChunkPolicy.save)
        from policies.tiny_backbone import check_backbone_dir

        check_backbone_dir(path / "backbone")
        cfg.vlm_model_name = str(path / "backbone")
        overrides = {"tokenizer_processor": {"tokenizer_name": str(path / "backbone")}}
    elif cfg.type in _NO_HUB and _NO_HUB[cfg.type][0]:
        vlm = getattr(cfg, _NO_HUB[cfg.type][0], "")
        if not Path(str(vlm)).is_dir():
            raise LeRobotPolicyUnavailable(
                f"{path}: the {cfg.type} policy's backbone {vlm} is not a local directory "
                f"and the hub is not reachable here; save it with its backbone/"
            )
    missing = [
        f
        for f in ("model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json")
        if not (path / f).is_file()
    ]
    if missing:
        raise LeRobotPolicyUnavailable(f"LeRobot policy directory {path} is missing {', '.join(missing)}")
    policy = get_policy_class(cfg.type).from_pretrained(str(path), config=cfg)
    pre, post = make_pre_post_processors(cfg, pretrained_path=str(path), preprocessor_overrides=overrides)
    return LeRobotChunkPolicy(
        policy,
        pre,
        post,
        env_keys=env_keys,
        cameras=cameras,
        action_low=action_low,
        action_high=action_high,
        dt=dt,
        units=units,
        task=task,
        joint_names=joint_names,
    )


def _deterministic_sampler(policy: LeRobotChunkPolicy) -> None:
    """DSRL needs noise -> chunk to be a function: a diffusion policy sampling with DDPM (which
    adds fresh noise every step) samples with DDIM instead (eta 0, the same trained betas)."""
    diffusion = getattr(policy.policy, "diffusion", None)
    sched = getattr(diffusion, "noise_scheduler", None)
    if sched is None or type(sched).__name__ == "DDIMScheduler":
        return
    from diffusers.schedulers.scheduling_ddim import DDIMScheduler

    diffusion.noise_scheduler = DDIMScheduler.from_config(sched.config)


@register("lerobot_dsrl")
class SteeredLeRobotPolicy(Policy):
    """DSRL (Wagenmaker et al. 2025) on a frozen LeRobot policy whose sampler takes its starting
    noise (`predict_action_chunk(noise=)`: diffusion, and the flow-matching VLAs): a small
    tanh-Gaussian actor over the policy's own observation features picks the noise in
    [-b, b]^noise_shape; the chunk is the frozen policy's chunk for that noise (so always one it
    can make, inside the joint limits). Only the noise actor's weights travel; every machine
    loads the prior from `policy.path=`. A committed prefix (RTC) is kept exactly.

    A deterministic policy that takes no noise (ACT) gets a residual head instead (residual RL,
    as Policy Decorator / ResiP): the same actor picks z in [-b, b]^(chunk x A) and the chunk is the
    frozen policy's own plus `residual_scale * z` in its normalized action space (at most
    `residual_scale * b` of each action's spread), so the critics, the learner and the wire are DSRL's."""

    def __init__(
        self,
        prior: LeRobotChunkPolicy,
        noise_bound: float = 1.5,
        noise_hidden: tuple[int, ...] = (128, 128),
        seed: int = 0,
        residual_scale: float = 0.1,
    ) -> None:
        from policies.mlp import GaussianActor

        shape = prior.noise_shape
        self.residual = shape is None  # ACT: a residual head on its chunk
        if self.residual:
            if not residual_scale > 0:
                raise ValueError(
                    f"LeRobot '{prior.type}' takes no starting noise; its residual head needs "
                    f"residual_scale > 0 (got {residual_scale})"
                )
            shape = (prior.horizon, prior.action_dim)
        self.prior, self.noise_shape = prior, shape
        self.noise_bound, self.residual_scale = float(noise_bound), float(residual_scale)
        prior.policy.requires_grad_(False)
        _deterministic_sampler(prior)
        self.horizon, self.dt = prior.horizon, prior.dt
        self.low, self.high = prior.low, prior.high
        self.deterministic = False
        self._gen = torch.Generator().manual_seed(seed)
        self.feature_dim = int(self.features(self._zeros()).shape[-1])
        self.noise_actor = GaussianActor(self.feature_dim, shape[0] * shape[1], tuple(noise_hidden))
        self.prior_loaded = True

    @property
    def architecture(self) -> str:
        sizes = "-".join(str(m.out_features) for m in self.noise_actor.trunk if isinstance(m, torch.nn.Linear))
        head = f"residual{self.residual_scale:g}" if self.residual else "dsrl"
        return (
            f"{head}-{sizes}-z{self.noise_shape[0]}x{self.noise_shape[1]}-b{self.noise_bound:g}:"
            f"{self.prior.architecture}"
        )

    @property
    def instruction(self) -> str:  # type: ignore[override]
        """The task text given to the prior LeRobot policy."""
        return self.prior.task

    @instruction.setter
    def instruction(self, text: str) -> None:
        self.prior.task = text

    def module(self) -> torch.nn.Module:
        return self.noise_actor

    def reset(self) -> None:
        """Reset the prior LeRobot policy (at an episode start)."""
        self.prior.reset()

    # --- batched observation -> the prior's inputs and features --------------------------------
    def _zeros(self) -> dict[str, np.ndarray]:
        c = self.prior.policy.config
        obs: dict[str, np.ndarray] = {self.prior.state_key: np.zeros((1, c.robot_state_feature.shape[0]), np.float32)}
        if self.prior.env_keys:
            env = c.env_state_feature.shape[0] if c.env_state_feature else 0
            obs["__env"] = np.zeros((1, env), np.float32)
        for cam in self.prior.cameras:
            _, h, w = c.input_features[f"observation.images.{cam}"].shape
            obs[cam] = np.zeros((1, h, w, 3), np.uint8)
        return obs

    def prior_batch(self, obs: Mapping[str, np.ndarray], forwarded_state: np.ndarray | None = None) -> dict:
        """Batched observations ([B, ...] arrays, as sampled from the store) -> the prior's
        preprocessed batch."""
        p = self.prior
        state = np.asarray(obs[p.state_key] if forwarded_state is None else forwarded_state, np.float32)
        b: dict = {"observation.state": torch.as_tensor(p._from_robot(state), dtype=torch.float32)}
        n = len(state)
        if p.env_keys:
            env = (
                obs["__env"]
                if "__env" in obs
                else np.concatenate([np.asarray(obs[k], np.float32).reshape(n, -1) for k in p.env_keys], axis=1)
            )
            b["observation.environment_state"] = torch.as_tensor(np.asarray(env, np.float32))
        for cam in p.cameras:
            frames = obs.get(f"image/{cam}", obs.get(cam))
            if frames is None:
                raise KeyError(f"lerobot policy needs camera '{cam}' but the observation has {sorted(obs)}")
            b[f"observation.images.{cam}"] = torch.as_tensor(np.asarray(frames)).permute(0, 3, 1, 2).float() / 255.0
        b["task"] = [p.task] * n
        return p.pre(b)

    def _history(self, batch: dict) -> dict:
        if self.prior.type != "diffusion":
            return batch
        out = dict(batch)
        for k, v in batch.items():
            if k.startswith("observation.") and torch.is_tensor(v):
                out[k] = v.unsqueeze(1)  # n_obs_steps = 1
        if self.prior.policy.config.image_features:
            out["observation.images"] = torch.stack([out[k] for k in self.prior.policy.config.image_features], dim=-4)
        return out

    @torch.no_grad()
    def features(self, obs: Mapping[str, np.ndarray], forwarded_state: np.ndarray | None = None) -> torch.Tensor:
        """[B, F]: the observation as the prior conditions on it (diffusion: its global
        conditioning, image features included); other types: the normalized state and
        environment vectors."""
        batch = self.prior_batch(obs, forwarded_state)
        if self.prior.type == "diffusion":
            return self.prior.policy.diffusion._prepare_global_conditioning(self._history(batch))
        parts = [batch["observation.state"]]
        if "observation.environment_state" in batch:
            parts.append(batch["observation.environment_state"])
        return torch.cat([x.reshape(len(x), -1).float() for x in parts], dim=-1)

    @torch.no_grad()
    def steered(
        self, obs: Mapping[str, np.ndarray], noise: torch.Tensor, forwarded_state: np.ndarray | None = None
    ) -> np.ndarray:
        """Joint targets [B, H, A] (robot units, inside the limits) the prior makes from `noise`
        (a residual prior: its own chunk plus `residual_scale * noise`, normalized)."""
        batch = self.prior_batch(obs, forwarded_state)
        z = noise.reshape(len(noise), *self.noise_shape)
        if self.residual:
            chunk = self.prior.predict_normalized(batch) + self.residual_scale * z.to(torch.float32)
        else:
            chunk = self.prior.predict_normalized(batch, noise=z)
        a = self.prior.post(chunk)
        a = np.asarray(a.detach().cpu().numpy(), np.float32).reshape(len(noise), -1, self.prior.action_dim)
        return np.clip(self.prior._to_robot(a), self.low, self.high).astype(np.float32)

    def normalize(self, actions: np.ndarray) -> np.ndarray:
        """Joint targets -> [-1, 1] across the joint range (what the critics see)."""
        return (2 * (np.asarray(actions, np.float32) - self.low) / (self.high - self.low) - 1).astype(np.float32)

    def noise(self, features: torch.Tensor) -> torch.Tensor:
        """Starting noise [B, *noise_shape] (the actor's mode when deterministic)."""
        with torch.no_grad():
            z = self.noise_actor.act(features, self.deterministic)
        return (z * self.noise_bound).reshape(len(z), *self.noise_shape)

    def predict_chunk(
        self,
        obs: Mapping[str, np.ndarray],
        *,
        forwarded_state: np.ndarray | None = None,
        prefix: np.ndarray | None = None,
        delay_ticks: int = 0,
    ) -> ActionChunk:
        one = {k: np.asarray(v)[None] for k, v in obs.items()}
        fs = None if forwarded_state is None else np.asarray(forwarded_state, np.float32)[None]
        z = self.noise(self.features(one, fs))
        a = self.steered(one, z, fs)[0]
        if prefix is not None and len(prefix):
            d = min(len(prefix), len(a))
            a[:d] = np.asarray(prefix, np.float32)[:d]
        return ActionChunk(a, self.dt, self.version)
