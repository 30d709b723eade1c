"""Config of each `policy=` choice (the `policy:` section), one dataclass per choice, one comment per
field. `robo_async.launch.schema` adds `bc` (how `robo-async bc` trains it) to the chunk policies.
Plain dataclasses: no Hydra, no `robo_async` here."""

from __future__ import annotations

from dataclasses import dataclass, field


def _scale(**kv: float) -> dict[str, float]:
    return dict(kv)


@dataclass(frozen=True)
class MLPPolicyConfig:
    """`policy=mlp`: a tanh-Gaussian MLP on state vectors (chunk length 1)."""

    name: str = "mlp"  # the registered policy (policies.make_policy)
    obs_keys: tuple[str, ...] = ("state", "ee_to_target")  # observation keys fed to the network, in order
    hidden: tuple[int, ...] = (256, 256)  # hidden layer widths
    action_mode: str = "delta"  # delta: target = joint state + delta_scale * output; absolute: across joint range
    delta_scale: float = 0.15  # rad per tick
    # input scale per key, so metres and radians have similar size
    obs_scale: dict[str, float] = field(default_factory=lambda: _scale(ee_to_target=10.0))
    # white (SAC's per-tick Gaussian) or gsde (state-dependent, resampled every sde_every ticks: smoother commands)
    exploration: str = "white"
    sde_every: int = 8  # ticks between gSDE noise draws
    cameras: tuple[
        str, ...
    ] = ()  # camera names (task.cameras) the policy sees through a small conv encoder (pixel SAC)
    image_size: int = 64  # frames are resized to this square size for the encoder
    # normalise the vector inputs by running statistics of the replay (HER's normaliser; the fetch task's default)
    obs_norm: bool = False
    # injected inference latency for sim/tests (async actor modes): a number, or [low, high] (uniform)
    inference_delay_ms: float | tuple[float, float] = 0


@dataclass(frozen=True)
class FlowPolicyConfig:
    """`policy=flow`: a flow-matching action-chunk policy (pi0-style, small), trained by behaviour cloning."""

    name: str = "flow"  # the registered policy (policies.make_policy)
    obs_keys: tuple[str, ...] = ("state", "target", "ee_to_target")  # observation keys fed to the network, in order
    # input scale per key, so metres and radians have similar size
    obs_scale: dict[str, float] = field(default_factory=lambda: _scale(ee_to_target=10.0, target=5.0))
    cameras: tuple[
        str, ...
    ] = ()  # camera names fed through a small conv encoder, e.g. [front] (with task.cameras=[front])
    image_size: int = 64  # frames are resized to this square size for the encoder
    hidden: tuple[int, ...] = (512, 512)  # hidden layer widths
    horizon: int = 8  # chunk length H in control ticks
    steps: int = 5  # flow integration (Euler) steps per chunk
    # delta: chunk relative to the (forwarded) joint state, +- delta_range rad; absolute: joint range
    action_mode: str = "delta"
    delta_range: float = 0.6  # rad
    # RTC conditioning on the committed prefix: path (held on its flow path) | clean (training-time RTC)
    prefix_mode: str = "path"
    # binary: the last joint, when it is named gripper, snapped to the two levels the demonstrations use (when they
    # use two) | continuous
    gripper: str = "binary"
    seed: int = 0  # initialisation seed
    path: str | None = None  # start from these weights (a bc run directory or its policy.safetensors)
    # injected inference latency for sim/tests: a number, or [low, high] (uniform)
    inference_delay_ms: float | tuple[float, float] = 0


@dataclass(frozen=True)
class TinyVLAPolicyConfig:
    """`policy=tiny_vla`: our tiny VLA (an instruction encoder, camera frames, proprio state and
    features, the flow action head), behaviour-cloned on several sim tasks at once."""

    name: str = "tiny_vla"  # the registered policy (policies.make_policy)
    tasks: tuple[str, ...] = (
        "reach",
        "push",
        "pick_lift",
    )  # trained together; each task's instruction is sim.INSTRUCTIONS[task]
    instruction: str = "reach the red target"  # what it follows when run (actors, the policy server, eval)
    obs_keys: tuple[str, ...] = (
        "state",
        "ee_to_target",
        "ee_to_cube",
        "cube_to_target",
    )  # zeros where a task lacks one
    # input scale per key
    obs_scale: dict[str, float] = field(
        default_factory=lambda: _scale(ee_to_target=10.0, ee_to_cube=10.0, cube_to_target=10.0)
    )
    cameras: tuple[str, ...] = ("front",)  # frames through the small conv encoder (the task gets task.cameras=[front])
    image_size: int = 48  # frames are resized to this square size for the encoder
    hidden: tuple[int, ...] = (512, 512)  # hidden layer widths
    text_dim: int = 32  # instruction embedding size
    horizon: int = 8  # chunk length H in control ticks
    steps: int = 5  # flow integration (Euler) steps per chunk
    action_mode: str = "delta"  # delta: chunk relative to the (forwarded) joint state; absolute: joint range
    delta_range: float = 0.6  # rad
    prefix_mode: str = "path"  # RTC conditioning on the committed prefix: path | clean
    # binary: the last joint, when it is named gripper, snapped to the two levels the demonstrations use (when they
    # use two) | continuous
    gripper: str = "binary"
    seed: int = 0  # initialisation seed
    path: str | None = None  # a `robo-async bc policy=tiny_vla` run directory (or its policy.safetensors)
    inference_delay_ms: float | tuple[float, float] = 0  # injected inference latency for sim/tests


@dataclass(frozen=True)
class LeRobotPolicyConfig:
    """`policy=act`: a LeRobot chunk policy behind our Policy interface (any LeRobot type with
    predict_action_chunk). Random initialisation unless `path` names a saved LeRobot policy directory."""

    name: str = "lerobot"  # the registered policy (policies.make_policy)
    type: str = "act"  # the LeRobot policy type
    obs_keys: tuple[str, ...] = (
        "state",
        "target",
        "ee_to_target",
    )  # state -> observation.state, the rest -> observation.environment_state
    cameras: tuple[str, ...] = ()  # -> observation.images.<name>
    chunk_size: int = 8  # actions per chunk
    units: str = "rad"  # deg for policies trained on LeRobot datasets of SO-10x arms
    env_scale: float = 10.0  # scale of observation.environment_state
    instruction: str = ""  # the language task for VLAs
    path: str | None = None  # a local directory written by LeRobot's save_pretrained (hub ids are unreachable here)
    inference_delay_ms: float | tuple[float, float] = 0  # injected inference latency for sim/tests
    overrides: dict[str, object] = field(
        default_factory=lambda: {  # LeRobot config fields (a small ACT for CPUs)
            "dim_model": 256,
            "n_heads": 4,
            "dim_feedforward": 1024,
            "n_encoder_layers": 2,
            "use_vae": False,
        }
    )


@dataclass(frozen=True)
class DiffusionPolicyConfig(LeRobotPolicyConfig):
    """`policy=diffusion`: LeRobot's diffusion policy (a 1-D conv U-Net denoising a plan of `horizon`
    steps, executing chunk_size of them); `algo=dsrl` can steer a trained one through its noise."""

    type: str = "diffusion"  # the LeRobot policy type
    overrides: dict[str, object] = field(
        default_factory=lambda: {  # LeRobot DiffusionConfig fields (a small U-Net for CPUs)
            "down_dims": [64, 128],
            "num_inference_steps": 10,
            "noise_scheduler_type": "DDIM",
        }
    )


@dataclass(frozen=True)
class SmolVLAPolicyConfig(LeRobotPolicyConfig):
    """`policy=smolvla`: LeRobot's SmolVLA. `backbone: tiny` generates a small random SmolVLM here (the
    hub is unreachable); give a local SmolVLM directory for the real one, or `path:` a saved SmolVLA."""

    type: str = "smolvla"  # the LeRobot policy type
    obs_keys: tuple[str, ...] = ("state",)  # the joint state; the scene comes through the camera and the instruction
    cameras: tuple[str, ...] = ("front",)  # -> observation.images.<name> (add it to the task: task.cameras=[front])
    instruction: str = "reach the red target"  # the language task
    backbone: str = "tiny"  # tiny | a local SmolVLM directory
    path: str | None = None  # a saved SmolVLA directory (LeRobotChunkPolicy.save / LeRobot's save_pretrained)
    overrides: dict[str, object] = field(
        default_factory=lambda: {  # LeRobot SmolVLAConfig fields, sized for CPUs
            "resize_imgs_with_padding": [64, 64],
            "num_steps": 5,
            "max_state_dim": 8,
            "max_action_dim": 8,
        }
    )


POLICY_CONFIGS: dict[str, type] = {
    "mlp": MLPPolicyConfig,
    "flow": FlowPolicyConfig,
    "tiny_vla": TinyVLAPolicyConfig,
    "act": LeRobotPolicyConfig,
    "diffusion": DiffusionPolicyConfig,
    "smolvla": SmolVLAPolicyConfig,
}
