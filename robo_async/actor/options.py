"""`actor:` and `safety:` config sections: what every actor process is told, and the choices their
keys take (`StrEnum`s whose member names are the values, so Hydra checks a YAML string against
them by name). The runtime configs are made from `ActorOptions` beside their components:
`ActorConfig.from_options` (actor.py) embeds it, `LoopConfig.from_options` (loop.py) and
`UplinkConfig.from_options` (uplink.py) take their mirrored fields' defaults from it.

A `...Choice` is what a user may ask for, `auto` included; the enum of the same name without
`Choice` is what `auto` resolves to (what a component runs): `InferenceChoice` -> `InferenceMode`,
`ReplanChoice` -> `Replan`."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from robo_async.transport.options import as_choices

MAX_ENVS = 64  # robots per vectorized actor (robot j streams as actor id a + j * LANE_STRIDE, under MAX_ACTOR_ID)


class InferenceMode(StrEnum):
    """A resolved inference mode: what a `ControlLoop` runs (`inference_modes.INFERENCE_MODES`)."""

    inline = "inline"  # the policy on the control thread, each chunk whole (as-fast-as-possible sims only)
    sync = "sync"
    sync_bounded = "sync_bounded"
    async_naive = "async_naive"
    async_forward = "async_forward"
    async_forward_blend = "async_forward_blend"
    async_forward_rtc = "async_forward_rtc"


class InferenceChoice(StrEnum):
    """`actor.inference` as asked: `auto` (`inference_modes.choose_inference` decides) or a mode."""

    auto = "auto"
    inline = "inline"
    sync = "sync"
    sync_bounded = "sync_bounded"
    async_naive = "async_naive"
    async_forward = "async_forward"
    async_forward_blend = "async_forward_blend"
    async_forward_rtc = "async_forward_rtc"


class Replan(StrEnum):
    """A resolved replanning rule: when (and about which tick) the next chunk is asked for."""

    due = "due"  # when the committed actions fall to latency + 1
    end = "end"  # the same moment, about the tick the current chunk ends (every action runs)
    continuous = "continuous"  # whenever the engine is idle


class ReplanChoice(StrEnum):
    """`actor.replan` as asked: `auto` (end for chunked critics, else due) or a rule."""

    auto = "auto"
    due = "due"
    end = "end"
    continuous = "continuous"


class UplinkIn(StrEnum):
    """`actor.uplink`: where delivery runs."""

    thread = "thread"
    process = "process"


class ServerImageCodec(StrEnum):
    """`actor.server_image_codec`: how camera frames travel to a policy server."""

    jpeg = "jpeg"
    png = "png"
    qoi = "qoi"
    raw = "raw"


@dataclass(frozen=True)
class ActorOptions:
    """`actor`: batching, journal, inference mode and JSRL guide of the training actors."""

    # simulators one actor process steps, with one batched policy call per tick (sim, as fast as possible, inline)
    envs: int = 1
    flush_every: int = 32  # transitions per message
    heartbeat_s: float = 1.0  # seconds between heartbeats to the learner
    eval_every: int = 2  # every n-th episode is deterministic; success is judged on those
    # where delivery runs: thread (a thread of the actor process) | process (a child process fed through shared
    # memory: encoding, journal, sends and acks off the control process)
    uplink: UplinkIn = UplinkIn.thread
    journal: bool = True  # keep unacked transitions in <run_dir>/actors/<id>/journal (survives actor restarts)
    max_ram_mb: float = 256.0  # unacked data held in RAM before the oldest is spilled to the journal
    resend_s: float = 5.0  # resend unacked data when the learner's acks stall this long
    # no learner status this long: logged as away (real-time robots keep executing, sims pause)
    learner_silent_s: float = 3.0
    # auto (inline on an as-fast-as-possible sim; else sync_bounded for one-step policies, async_forward for chunks) |
    # inline (sim only) | sync | sync_bounded | async_naive | async_forward | async_forward_blend | async_forward_rtc
    inference: InferenceChoice = InferenceChoice.auto
    # async modes: due (next chunk when committed actions fall to latency + 1) | end (about the tick the current chunk
    # ends: every action runs) | continuous; auto: end for qc/dsrl, else due
    replan: ReplanChoice = ReplanChoice.auto
    # an operator's success label: that tick's reward is at least this (and the episode ends)
    success_reward: float = 1.0
    # inferences in flight at once; 2 = pipelined (reacts sooner, twice the inference compute)
    inference_workers: int = 1
    # tcp://host:5560: the policy runs on a `robo-async serve` server (a GPU machine), not here
    inference_server: str | None = None
    # ... waiting this long for it to answer first (the robot holds; where it tries is logged)
    server_wait_s: float = 600.0
    # camera frames to the server: jpeg (quality 90, ~20x fewer bytes) | png | qoi (lossless) | raw
    server_image_codec: ServerImageCodec = ServerImageCodec.jpeg
    # a policy with a frozen camera encoder (algo=dsrl on a pixel prior): the uplink thread stores each frame's
    # embedding beside it (else the learner embeds)
    embed: bool = True
    # JSRL: expert (the task's scripted expert) or a `bc` run directory acts first in training episodes (sim, inline)
    guide: str | None = None
    guide_ticks: int = 60  # ... for this many ticks at first,
    guide_step: int = 10  # ... handing over this many ticks earlier
    guide_window: int = 10  # ... each time the last guide_window training episodes
    guide_threshold: float = 0.5  # ... succeed at least this often
    # a task whose scene starts at random (gym_hil's cube): training episodes start from this fraction of its
    # range around the nominal start at first (null: the whole range; evaluation episodes always: actor/curriculum.py)
    start_range: float | None = None
    start_range_step: float = 0.1  # ... widening by this fraction
    start_range_window: int = 10  # ... each time the last start_range_window training episodes
    start_range_threshold: float = 0.6  # ... succeed at least this often

    def __post_init__(self) -> None:
        as_choices(self, "actor")
        if not 1 <= self.envs <= MAX_ENVS:
            raise ValueError(f"actor.envs must be 1 to {MAX_ENVS}, not {self.envs}")
        if self.inference_workers < 1:
            raise ValueError(f"actor.inference_workers must be at least 1, not {self.inference_workers}")
        # the start-range curriculum (actor/curriculum.py); comparisons written so that NaN fails them
        for key, ok, want in (
            ("start_range", self.start_range is None or 0.0 < self.start_range <= 1.0, "in (0, 1] or null"),
            ("start_range_step", 0.0 < self.start_range_step <= 1.0, "in (0, 1]"),
            ("start_range_window", self.start_range_window >= 1, "at least 1"),
            ("start_range_threshold", 0.0 <= self.start_range_threshold <= 1.0, "in [0, 1]"),
        ):
            if not ok:
                raise ValueError(f"actor.{key} must be {want}, not {getattr(self, key)}")


@dataclass(frozen=True)
class SafetyOptions:
    """`safety`: the `SafeRobot` layer every actor drives through. null keys take the robot's own
    (`robot.safety` in `configs/robot/<name>.yaml`: on a real arm every guard is on by default);
    a value here overrides the robot's."""

    # hold position when the control loop sends nothing for this long (s; null: the robot's; sims: off)
    watchdog_s: float | None = None
    # ... and turn the torque off (latching the e-stop) after this long (s; null: the robot's)
    torque_off_s: float | None = None
    # end-effector box (m), e.g. [-0.4, -0.4, 0.0]; needs forward kinematics
    workspace_low: tuple[float, ...] | None = None
    workspace_high: tuple[float, ...] | None = None  # ... its upper corner (m)
