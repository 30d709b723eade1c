"""Making a `LeRobotChunkPolicy`: a fresh one with random initialisation (`build_lerobot_policy`, no hub
needed for ACT; its input/output features and normalization statistics come from the robot's shapes and
joint limits) or a saved one from a local directory (`load_lerobot_policy`, written by
`LeRobotChunkPolicy.save`, its features checked against the robot's by `check_features` first). Hub ids
are not reachable from these machines and are refused with a clear message (`LeRobotPolicyUnavailable`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from policies.lerobot_chunk import LeRobotChunkPolicy, joint_units


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
    conv = joint_units(units, joint_names, action_low, action_high)
    if conv is not None:  # the model normalizes in its own units (degrees, gripper 0..100)
        lo, hi = conv.to_lerobot_array(lo), conv.to_lerobot_array(hi)
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
