"""One definition per config key (issue 38): a runtime config (what a component receives) never
states a default of its own for a key an options section (what the user writes) defines. A field
named as a key of a section has that key's default and type, or it is derived from it and listed
in DERIVED with what derives it. (YAML against the sections: test_config_schema.py.)"""

from __future__ import annotations

import typing
from dataclasses import MISSING, Field, fields

import pytest
from omegaconf import OmegaConf

from robo_async.actor.actor import ActorConfig
from robo_async.actor.guide import GuideConfig
from robo_async.actor.loop_config import LoopConfig
from robo_async.actor.options import ActorOptions, InferenceChoice, InferenceMode, Replan, ReplanChoice
from robo_async.actor.uplink_config import UplinkConfig
from robo_async.config import UserError, compose_config, load_config
from robo_async.launch.builders import build_plan
from robo_async.launch.mirrors import ConfigError
from robo_async.launch.schema import BufferConfig, TrainConfig
from robo_async.learner.config import LearnerConfig
from robo_async.learner.options import BudgetOptions, LearnerOptions, Precision, PrecisionChoice
from robo_async.serve.config import ServeConfig
from robo_async.serve.options import ServeOptions
from robo_async.transport.options import TransportOptions

SECTIONS: dict[str, type] = {  # the options sections, as the user writes them
    "actor": ActorOptions,
    "learner": LearnerOptions,
    "budget": BudgetOptions,
    "serve": ServeOptions,
    "transport": TransportOptions,
    "buffer": BufferConfig,
    "(root)": TrainConfig,
}
RUNTIME = (ActorConfig, LoopConfig, UplinkConfig, GuideConfig, LearnerConfig, ServeConfig)  # what components get

# runtime fields that mirror a key under another name: (class, field) -> (section, key)
RENAMED = {
    (GuideConfig, "ticks"): ("actor", "guide_ticks"),
    (GuideConfig, "step"): ("actor", "guide_step"),
    (GuideConfig, "window"): ("actor", "guide_window"),
    (GuideConfig, "threshold"): ("actor", "guide_threshold"),
}

# runtime fields named as a key but derived from it (or a different thing): (class, field) -> what makes it
DERIVED = {
    (LoopConfig, "inference"): "actor.inference resolved (choose_inference): an InferenceMode, never auto",
    (LoopConfig, "replan"): "actor.replan resolved (builders.resolve_replan): a Replan, never auto",
    (LearnerConfig, "device"): "learner.device resolved (learner.config.resolve_device): never auto",
    (LearnerConfig, "precision"): "learner.precision resolved (learner.config.resolve_precision): never auto",
    (LearnerConfig, "run_dir"): "the run's directory as made (runs_root/<date>-<task> where run_dir is null)",
    (LearnerConfig, "algo"): "the algorithm's name (algo.name), not the algo section",
    (LearnerConfig, "task"): "the task's name (task.name), not the task section",
    (LearnerConfig, "policy"): "the PolicySpec built from the policy section and the task (builders.plan_policy)",
    (LearnerConfig, "resume"): "whether the learner restores a checkpoint (resume given, a checkpoint there)",
    (UplinkConfig, "image_codec"): "buffer.image_codec, or None (raw pixels) where a caller sends them raw",
}


def _default(f: Field) -> object:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def _section_fields() -> dict[str, dict[str, tuple[str, Field, object]]]:
    """section -> key -> (section, field, its type)."""
    return {
        name: {f.name: (name, f, typing.get_type_hints(cls)[f.name]) for f in fields(cls)}
        for name, cls in SECTIONS.items()
    }


def disagreements(runtime: tuple[type, ...] = RUNTIME) -> list[str]:
    """Each runtime field whose default or type differs from the key of the same name (or the key
    it mirrors, RENAMED) in a section, unless DERIVED lists it."""
    sections = _section_fields()
    out = []
    for cls in runtime:
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            if (cls, f.name) in DERIVED:
                continue
            if (cls, f.name) in RENAMED:
                section, key = RENAMED[cls, f.name]
                keys = [sections[section][key]]
            else:
                keys = [s[f.name] for s in sections.values() if f.name in s]
            for section, g, g_type in keys:
                where = f"{cls.__name__}.{f.name} vs {section}.{g.name}"
                if _default(f) != _default(g):
                    out.append(f"{where}: default {_default(f)!r} != {_default(g)!r}")
                if hints[f.name] != g_type:
                    out.append(f"{where}: type {hints[f.name]} != {g_type}")
    return out


def test_no_runtime_config_states_a_default_or_type_of_its_own_for_a_key():
    assert disagreements() == []


def test_the_check_names_a_disagreeing_key():
    """A runtime config with a literal default that drifted from its key's is named."""
    from dataclasses import make_dataclass

    drifted = make_dataclass("LoopConfig", [("eval_every", int, 3), ("heartbeat_s", int, 1)])
    assert disagreements((drifted,)) == [
        "LoopConfig.eval_every vs actor.eval_every: default 3 != 2",
        "LoopConfig.heartbeat_s vs actor.heartbeat_s: type <class 'int'> != <class 'float'>",
    ]


def test_every_derived_field_still_exists_and_shares_a_name_with_a_key():
    """DERIVED lists no field that was renamed or removed (it would hide nothing, silently)."""
    keys = {k for s in _section_fields().values() for k in s}
    for cls, name in DERIVED:
        assert name in {f.name for f in fields(cls)}, (cls.__name__, name)
        assert name in keys, (cls.__name__, name)


def test_a_resolved_choice_is_the_asked_one_without_auto():
    """Each `...Choice` enum is `auto` plus the members of what it resolves to (one list of names)."""
    for asked, resolved in ((InferenceChoice, InferenceMode), (ReplanChoice, Replan), (PrecisionChoice, Precision)):
        assert [m.value for m in asked] == ["auto", *sorted((m.value for m in resolved), key=list(asked).index)]
        assert "auto" not in {m.value for m in resolved}


def test_a_runtime_config_embeds_its_section_and_makes_the_rest(tmp_path):
    plan = build_plan(compose_config(["actor.flush_every=7", "learner.publish_every=3"]), tmp_path / "run")
    assert plan.learner.options == load_config(["learner.publish_every=3"]).learner
    assert plan.actors[0].options.flush_every == 7 and plan.learner.options.publish_every == 3
    assert plan.learner.device == "cpu" and plan.learner.options.device == "auto"  # resolved vs asked
    assert plan.actors[0].loop.inference == InferenceMode.inline and plan.actors[0].options.inference == "auto"


@pytest.mark.parametrize(
    "key, choices",
    [
        ("actor.replan", "auto, due, end or continuous"),
        ("actor.uplink", "thread or process"),
        ("actor.server_image_codec", "jpeg, png, qoi or raw"),
        ("learner.stale_embeddings", "refuse or skip"),
        ("learner.precision", "auto, fp32 or bf16"),
        ("transport.curve", "auto, on or off"),
    ],
)
def test_a_value_not_among_a_keys_choices_is_one_line_naming_the_key_and_the_choices(tmp_path, key, choices):
    with pytest.raises(UserError) as e:  # on the command line: when Hydra composes
        compose_config([f"{key}=bogus"])
    assert f"{key} 'bogus' unknown: {key} must be {choices}" in str(e.value) and "\n" not in str(e.value)
    section, name = key.split(".")
    stored = OmegaConf.to_container(compose_config([]), resolve=True)
    stored[section][name] = "bogus"  # a resumed run's config.yaml, edited by hand
    with pytest.raises(ConfigError) as err:
        build_plan(stored, tmp_path / "run")
    assert str(err.value) == f"{key} 'bogus' unknown: {key} must be {choices}"


def test_a_choice_given_as_its_string_works_and_round_trips_through_a_stored_config(tmp_path):
    plan = build_plan(compose_config(["actor.replan=end", "actor.uplink=process"]), tmp_path / "run")
    assert plan.actors[0].loop.replan == Replan.end and plan.actors[0].options.uplink == "process"
    stored = plan.learner.config_yaml
    assert "replan: end" in stored and "uplink: process" in stored  # the values as written, not enum names
    (tmp_path / "config.yaml").write_text(stored.replace("replan: end", "replan: due"))
    resumed = build_plan(compose_config([f"resume={tmp_path}"], base=tmp_path), tmp_path / "run2")
    assert resumed.actors[0].loop.replan == Replan.due and type(resumed.actors[0].loop.replan) is Replan


def test_options_given_in_code_are_checked_and_typed_too():
    assert ActorOptions(replan="end").replan is ReplanChoice.end
    with pytest.raises(ValueError, match="actor.replan must be auto, due, end or continuous, not 'bogus'"):
        ActorOptions(replan="bogus")
    with pytest.raises(ValueError, match="learner.precision must be auto, fp32 or bf16"):
        LearnerOptions(precision="fp16")
    assert LoopConfig(inference="async_forward").inference is InferenceMode.async_forward


def test_episode_ticks_default_is_the_tasks_own():
    """Where the options leave `episode_ticks` out, every caller (train, eval, bc, teleop) gets the
    task config's default: one definition, no literal beside it."""
    from dataclasses import replace

    from robo_async.launch.tasks import TaskArgs
    from sim import TASKS

    for name, (_, cfg_cls) in TASKS.items():
        assert TaskArgs(name, {}).episode_ticks() == cfg_cls().episode_ticks, name
    assert TaskArgs("push", {"episode_ticks": 7}).episode_ticks() == 7
    robot = replace(TaskArgs("reach", {}), robot={"type": "so101", "hz": 10, "episode": {"seconds": 2.0}})
    assert robot.episode_ticks() == 20  # a robot's episode.seconds at its rate
