"""A learned reward for robots with no reward of their own: a success classifier on camera frames
(a small CNN, `SuccessNet`), its saved form (`reward_classifier.safetensors` + `.json`), and
`ClassifierReward`, the robot wrapper that scores each tick's frames with it on an actor
(`reward_classifier=`). Training is `robo-async reward train` (robo_async/commands/reward.py)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from hal.robot import Robot
from hal.spec import Observation, Outcome, RobotSpec
from policies.networks import ImageEncoder

WEIGHTS, META = "reward_classifier.safetensors", "reward_classifier.json"


class RewardError(ValueError):
    """The data or the classifier does not fit (one line for the user)."""


class SuccessNet(nn.Module):
    """The policies' image encoder over all cameras and a small MLP head: success logits."""

    def __init__(self, cameras: int, image_size: int) -> None:
        super().__init__()
        self.encoder = ImageEncoder(cameras, image_size)
        self.head = nn.Sequential(nn.Linear(self.encoder.out * cameras, 64), nn.SiLU(), nn.Linear(64, 1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images [B, n_cams, H, W, 3] (uint8 values) -> success logits [B]."""
        return self.head(self.encoder(images)).squeeze(-1)


@dataclass(frozen=True)
class ClassifierMeta:
    """What a trained classifier reads, its threshold and how it scored (saved as its .json)."""

    cameras: tuple[str, ...]
    image_size: int
    threshold: float
    precision: float  # on held-out episodes, at the threshold
    recall: float
    brier: float
    heldout_frames: int
    heldout_positives: int
    train_frames: int
    train_positives: int


class SuccessClassifier:
    """A `SuccessNet` with its meta: p(success) of camera frames; `save`/`load` a directory."""

    def __init__(self, net: SuccessNet, meta: ClassifierMeta) -> None:
        self.net, self.meta = net.eval(), meta

    def probability(self, frames: dict[str, np.ndarray]) -> np.ndarray:
        """frames: camera -> [B, H, W, 3] uint8 -> p(success) [B]."""
        missing = [c for c in self.meta.cameras if c not in frames]
        if missing:
            raise RewardError(f"the reward classifier needs cameras {list(self.meta.cameras)}; missing {missing}")
        x = torch.as_tensor(np.stack([frames[c] for c in self.meta.cameras], axis=1))
        with torch.no_grad():
            return torch.sigmoid(self.net(x)).numpy()

    def save(self, out: Path) -> Path:
        """Write the weights (safetensors) and meta (json) into directory `out`; returns it."""
        out.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.net.state_dict().items()}, str(out / WEIGHTS))
        (out / META).write_text(json.dumps(asdict(self.meta), indent=1))
        return out

    @staticmethod
    def load(path: str | Path) -> SuccessClassifier:
        """A classifier saved by `save()`; raises RewardError if `path` holds none or the weights do not fit."""
        path = Path(path)
        if not (path / WEIGHTS).exists() or not (path / META).exists():
            raise RewardError(
                f"{path} holds no reward classifier ({WEIGHTS} and {META}); train one with `robo-async reward train`"
            )
        d = json.loads((path / META).read_text())
        meta = ClassifierMeta(**{**d, "cameras": tuple(d["cameras"])})
        net = SuccessNet(len(meta.cameras), meta.image_size)
        try:
            net.load_state_dict(load_file(str(path / WEIGHTS)))
        except RuntimeError as e:
            raise RewardError(
                f"{path / WEIGHTS} does not fit a classifier for cameras {list(meta.cameras)} at "
                f"{meta.image_size} px: {str(e).splitlines()[-1].strip()}"
            ) from None
        return SuccessClassifier(net, meta)


# --- on the actor ---------------------------------------------------------------------------
class ClassifierReward(Robot):
    """A robot whose outcome is the success classifier's on the frames it just returned: reward
    1.0 and success (ending the episode) when p >= threshold, else 0. Everything else passes through."""

    def __init__(self, robot: Robot, classifier: SuccessClassifier) -> None:
        cams = {c.name for c in robot.spec.cameras}
        missing = [c for c in classifier.meta.cameras if c not in cams]
        if missing:
            raise RewardError(
                f"reward_classifier needs cameras {list(classifier.meta.cameras)}; {robot.spec.name} "
                f"has {sorted(cams)} (add them with task.cameras=[...])"
            )
        self.robot, self.classifier = robot, classifier
        self._last: Observation | None = None
        self.last_p = 0.0

    @property
    def spec(self) -> RobotSpec:
        return self.robot.spec

    @property
    def inner(self) -> Robot:
        """The wrapped robot."""
        return self.robot

    def __getattr__(self, name: str):
        if name.startswith("_") or name in ("robot", "classifier"):
            raise AttributeError(name)
        return getattr(self.robot, name)

    def connect(self) -> None:
        self.robot.connect()

    def close(self) -> None:
        self.robot.close()

    def reset(self, *, seed: int | None = None) -> Observation:
        self._last = None
        return self.robot.reset(seed=seed)

    def send_action(self, action: np.ndarray) -> np.ndarray:
        self._last = None
        return self.robot.send_action(action)

    def send_checked_action(self, action: np.ndarray) -> np.ndarray:
        self._last = None
        return self.robot.send_checked_action(action)

    def get_observation(self) -> Observation:
        """One reading per tick: the one `outcome()` scored, if it came first."""
        if self._last is None:
            self._last = self.robot.get_observation()
        return self._last

    def outcome(self) -> Outcome:
        if self._last is None:  # the loop reads the outcome before the observation: read it now
            self._last = self.robot.get_observation()
        frames = {c: self._last.images[c][None] for c in self.classifier.meta.cameras}
        self.last_p = float(self.classifier.probability(frames)[0])
        success = self.last_p >= self.classifier.meta.threshold
        return Outcome(
            reward=1.0 if success else 0.0,
            terminated=success,
            success=success,
            truncated=self.robot.outcome().truncated and not success,
        )  # the env's own time limit
