"""LeRobot chunk policies (ACT, SmolVLA, the pi0 family, ...) behind our `Policy` interface.

`LeRobotChunkPolicy` wraps a `lerobot.policies.pretrained.PreTrainedPolicy` together with LeRobot's
own pre/post-processor pipelines (normalization, batching, device, tokenization for VLAs):

- our observation -> a LeRobot batch: the joint state (replaced by the forwarded state when the
  actor gives one) -> `observation.state`; task features (e.g. `target`, `ee_to_target`) ->
  `observation.environment_state`; camera frames (uint8 HxWx3) -> `observation.images.<name>`
  (float CxHxW in [0, 1]); the language instruction -> `task`;
- `predict_action_chunk` -> post-processor -> actions [H, A] in robot units, clipped to the joint
  limits, `units: deg` converting from LeRobot's degree convention;
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

from policies.base import ActionChunk, Policy, WeightsMismatch, register


class LeRobotPolicyUnavailable(RuntimeError):
    """The LeRobot policy cannot be built here (missing hub files, unknown type)."""


_NO_HUB = {  # policy types whose construction needs files from the Hugging Face hub
    "smolvla": ("vlm_model_name", "the SmolVLM2 config and processor"),
    "pi0": (None, "the PaliGemma tokenizer (google/paligemma-3b-pt-224) for its processor"),
    "pi05": (None, "the PaliGemma tokenizer (google/paligemma-3b-pt-224) for its processor"),
}


def _features(state_dim: int, env_dim: int, action_dim: int, cameras: Sequence[tuple[str, int, int]]):
    from lerobot.configs.types import FeatureType, PolicyFeature

    inputs = {"observation.state": PolicyFeature(FeatureType.STATE, (state_dim,))}
    if env_dim:
        inputs["observation.environment_state"] = PolicyFeature(FeatureType.ENV, (env_dim,))
    for name, h, w in cameras:
        inputs[f"observation.images.{name}"] = PolicyFeature(FeatureType.VISUAL, (3, h, w))
    return inputs, {"action": PolicyFeature(FeatureType.ACTION, (action_dim,))}


def _stats(state_dim: int, env_dim: int, action_low: np.ndarray, action_high: np.ndarray,
           env_scale: float, cameras: Sequence[tuple[str, int, int]]) -> dict[str, dict[str, torch.Tensor]]:
    """Normalization statistics from the robot's limits (a fresh policy has no dataset yet)."""
    lo, hi = torch.as_tensor(action_low, dtype=torch.float32), torch.as_tensor(action_high, dtype=torch.float32)
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    joint = {"mean": mid[:state_dim] if state_dim <= len(mid) else torch.zeros(state_dim),
             "std": half[:state_dim] if state_dim <= len(half) else torch.ones(state_dim),
             "min": lo[:state_dim] if state_dim <= len(lo) else -torch.ones(state_dim),
             "max": hi[:state_dim] if state_dim <= len(hi) else torch.ones(state_dim)}
    stats = {"observation.state": joint, "action": {"mean": mid, "std": half, "min": lo, "max": hi}}
    if env_dim:
        stats["observation.environment_state"] = {
            "mean": torch.zeros(env_dim), "std": torch.full((env_dim,), 1.0 / env_scale),
            "min": torch.full((env_dim,), -1.0 / env_scale), "max": torch.full((env_dim,), 1.0 / env_scale)}
    for name, _, _ in cameras:
        stats[f"observation.images.{name}"] = {
            "mean": torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1), "std": torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1),
            "min": torch.zeros(3, 1, 1), "max": torch.ones(3, 1, 1)}
    return stats


@register("lerobot")
class LeRobotChunkPolicy(Policy):
    def __init__(self, policy, preprocessor, postprocessor, *, state_key: str = "state",
                 env_keys: Sequence[str] = (), cameras: Sequence[str] = (), action_low: Sequence[float],
                 action_high: Sequence[float], dt: float = 1 / 30, units: str = "rad", task: str = "") -> None:
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
        if hasattr(self.policy, "reset"):
            self.policy.reset()

    # --- conversions ---------------------------------------------------------------------------
    def _to_robot(self, a: np.ndarray) -> np.ndarray:
        return np.deg2rad(a) if self.units == "deg" else a

    def _from_robot(self, a: np.ndarray) -> np.ndarray:
        return np.rad2deg(a) if self.units == "deg" else a

    def batch(self, obs: Mapping[str, np.ndarray], forwarded_state: np.ndarray | None = None) -> dict:
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

    def predict_chunk(self, obs: Mapping[str, np.ndarray], *, forwarded_state: np.ndarray | None = None,
                      prefix: np.ndarray | None = None, delay_ticks: int = 0) -> ActionChunk:
        batch = self.pre(self.batch(obs, forwarded_state))
        kwargs = {}
        rtc = getattr(self.policy.config, "rtc_config", None)
        if prefix is not None and len(prefix) and rtc is not None and getattr(rtc, "enabled", False):
            norm = self.pre({"action": torch.as_tensor(self._from_robot(np.asarray(prefix, np.float32)))})
            kwargs = {"inference_delay": len(prefix), "prev_chunk_left_over": norm["action"]}
        with torch.no_grad():
            chunk = self.policy.predict_action_chunk(batch, **kwargs)
        actions = self.post(chunk)
        a = np.asarray(actions.detach().cpu().numpy(), np.float32).reshape(-1, self.action_dim)
        a = np.clip(self._to_robot(a), self.low, self.high).astype(np.float32)
        if prefix is not None and len(prefix):
            d = min(len(prefix), len(a))
            a[:d] = np.asarray(prefix, np.float32)[:d]
        return ActionChunk(a, self.dt, self.version)

    # --- persistence ---------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Policy config + weights + processors, as LeRobot writes them (loadable by LeRobot too)."""
        path = Path(path)
        self.policy.save_pretrained(path)
        self.pre.save_pretrained(path)
        self.post.save_pretrained(path)
        return path


def build_lerobot_policy(kind: str, *, state_dim: int, action_low: Sequence[float], action_high: Sequence[float],
                         env_keys: Sequence[str] = (), env_dim: int = 0, env_scale: float = 1.0,
                         cameras: Sequence[tuple[str, int, int]] = (), chunk_size: int = 10, dt: float = 1 / 30,
                         units: str = "rad", task: str = "", device: str = "cpu",
                         **overrides: object) -> LeRobotChunkPolicy:
    """A LeRobot policy of type `kind` with random initialisation, for our robot's shapes."""
    from lerobot.policies.factory import get_policy_class, make_policy_config, make_pre_post_processors

    if kind in _NO_HUB:
        key, what = _NO_HUB[kind]
        local = overrides.get(key) if key else None
        if not (local and Path(str(local)).is_dir()):
            hint = f"; pass {key}=<a local directory with it>" if key else ""
            raise LeRobotPolicyUnavailable(
                f"LeRobot '{kind}' needs {what} from the Hugging Face hub, which is not reachable here{hint}. "
                f"Load a saved policy from a local directory with `policy.path=` instead.")
    action_dim = len(action_low)
    inputs, outputs = _features(state_dim, env_dim, action_dim, cameras)
    kw: dict = {"input_features": inputs, "output_features": outputs, "device": device}
    if kind == "act":
        kw.update(chunk_size=chunk_size, n_action_steps=chunk_size, pretrained_backbone_weights=None)
    else:
        kw.update(chunk_size=chunk_size, n_action_steps=chunk_size)
    kw.update(overrides)
    try:
        cfg = make_policy_config(kind, **kw)
    except (ValueError, KeyError) as e:
        raise LeRobotPolicyUnavailable(f"cannot configure LeRobot policy '{kind}': {e}") from e
    policy = get_policy_class(kind)(cfg)
    pre, post = make_pre_post_processors(cfg, dataset_stats=_stats(state_dim, env_dim, np.asarray(action_low),
                                                                   np.asarray(action_high), env_scale, cameras))
    return LeRobotChunkPolicy(policy, pre, post, env_keys=env_keys, cameras=[c[0] for c in cameras],
                              action_low=action_low, action_high=action_high, dt=dt, units=units, task=task)


def load_lerobot_policy(path: str | Path, *, action_low: Sequence[float], action_high: Sequence[float],
                        env_keys: Sequence[str] = (), cameras: Sequence[str] = (), dt: float = 1 / 30,
                        units: str = "rad", task: str = "", device: str = "cpu") -> LeRobotChunkPolicy:
    """A LeRobot policy saved in a local directory (`save`, or LeRobot's own `save_pretrained`)."""
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    path = Path(path)
    if not (path / "config.json").is_file():
        raise LeRobotPolicyUnavailable(f"no LeRobot policy in {path}: config.json missing (hub ids are not "
                                       "reachable here; download on a connected machine and copy the directory)")
    cfg = PreTrainedConfig.from_pretrained(str(path))
    cfg.device = device
    policy = get_policy_class(cfg.type).from_pretrained(str(path), config=cfg)
    pre, post = make_pre_post_processors(cfg, pretrained_path=str(path))
    return LeRobotChunkPolicy(policy, pre, post, env_keys=env_keys, cameras=cameras, action_low=action_low,
                              action_high=action_high, dt=dt, units=units, task=task)
