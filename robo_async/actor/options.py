"""`actor:` and `safety:` config sections: what every actor process is told. The builders
(`robo_async.launch.builders`) derive `LoopConfig`, `UplinkConfig` and `ActorConfig` from these."""

from __future__ import annotations

from dataclasses import dataclass


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
    uplink: str = "thread"
    journal: bool = True  # keep unacked transitions in <run_dir>/actors/<id>/journal (survives actor restarts)
    max_ram_mb: float = 256.0  # unacked data held in RAM before the oldest is spilled to the journal
    resend_s: float = 5.0  # resend unacked data when the learner's acks stall this long
    # no learner status this long: logged as away (real-time robots keep executing, sims pause)
    learner_silent_s: float = 3.0
    # auto (inline on an as-fast-as-possible sim, else async_forward) | inline (sim only) | sync | async_naive |
    # async_forward | async_forward_blend | async_forward_rtc
    inference: str = "auto"
    # async modes: due (next chunk when committed actions fall to latency + 1) | end (about the tick the current chunk
    # ends: every action runs) | continuous; auto: end for qc/dsrl, else due
    replan: str = "auto"
    # an operator's success label: that tick's reward is at least this (and the episode ends)
    success_reward: float = 1.0
    # inferences in flight at once; 2 = pipelined (reacts sooner, twice the inference compute)
    inference_workers: int = 1
    # tcp://host:5560: the policy runs on a `robo-async serve` server (a GPU machine), not here
    inference_server: str | None = None
    # ... waiting this long for it to answer first (the robot holds; where it tries is logged)
    server_wait_s: float = 600.0
    # camera frames to the server: jpeg (quality 90, ~20x fewer bytes) | png | qoi (lossless) | raw
    server_image_codec: str = "jpeg"
    # a policy with a frozen camera encoder (algo=dsrl on a pixel prior): the uplink thread stores each frame's
    # embedding beside it (else the learner embeds)
    embed: bool = True
    # JSRL: expert (the task's scripted expert) or a `bc` run directory acts first in training episodes (sim, inline)
    guide: str | None = None
    guide_ticks: int = 60  # ... for this many ticks at first,
    guide_step: int = 10  # ... handing over this many ticks earlier
    guide_window: int = 10  # ... each time the last guide_window training episodes
    guide_threshold: float = 0.5  # ... succeed at least this often


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
