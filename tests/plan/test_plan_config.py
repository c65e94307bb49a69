"""Planner YAML: the authors' settings, cpu as differences from them, strict keys, per-robot sections."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from simdist.errors import ConfigError
from simdist.plan import (
    ActionLimits,
    PlannerConfig,
    load_planner_config,
    load_planner_configs,
    task_action_limits,
)


def test_gpu_config_is_the_authors_planner() -> None:
    cfg = load_planner_config("gpu", "go2")
    assert (cfg.num_samples, cfg.num_policy_samples, cfg.iterations, cfg.elites) == (450, 22, 8, 64)
    assert (cfg.temperature, cfg.init_std, cfg.min_std, cfg.horizon, cfg.discount) == (
        0.25,
        2.0,
        0.05,
        25,
        0.99,
    )
    assert cfg.policy_std == 0.05 and not cfg.keep_elites and not cfg.compile


def test_cpu_config_inherits_what_it_does_not_change() -> None:
    go2, ur5e = load_planner_config("cpu", "go2"), load_planner_config("cpu", "ur5e")
    assert go2.discount == ur5e.discount == 0.99 and go2.min_std == 0.05  # from gpu.yaml, not repeated
    assert go2.num_samples < 450 and go2 != ur5e  # robot sections differ
    # nothing in cpu.yaml repeats a value of gpu.yaml: a setting lives in one file
    from simdist.paths import config_dir

    parent = yaml.safe_load((config_dir() / "planner" / "gpu.yaml").read_text())
    child = yaml.safe_load((config_dir() / "planner" / "cpu.yaml").read_text())
    repeated = [k for k, v in child.items() if k in parent and parent[k] == v]
    assert repeated == []


def write(folder, name: str, text: str) -> None:
    (folder / "planner").mkdir(exist_ok=True)
    (folder / "planner" / f"{name}.yaml").write_text(text)


def test_merge_order_overrides_and_strict_keys(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SIMDIST_CONFIG_DIR", str(tmp_path))
    base = (
        "num_samples: 10\nnum_policy_samples: 2\npolicy_std: 0.05\niterations: 3\nelites: 4\ntemperature: 0.5\n"
        "init_std: 1.0\nmin_std: 0.1\nhorizon: 5\ndiscount: 0.9\nrobots:\n  arm: {iterations: 4}\n"
    )
    write(tmp_path, "base", base)
    write(tmp_path, "child", "extends: base\nelites: 5\nrobots:\n  arm: {elites: 6}\n")
    assert load_planner_config("child", "legs").elites == 5
    arm = load_planner_config("child", "arm")
    assert (arm.iterations, arm.elites) == (4, 6)
    assert load_planner_config("child", "arm", {"compile": True, "iterations": 7}).iterations == 7
    with pytest.raises(ConfigError, match="unknown key 'bogus'"):
        load_planner_config("child", "arm", {"bogus": 1})
    write(tmp_path, "typo", "extends: base\nrobots:\n  arm: {iteratons: 4}\n")
    with pytest.raises(ConfigError, match="iteratons"):
        load_planner_config("typo", "arm")
    write(tmp_path, "loop", "extends: loop\n")
    with pytest.raises(ConfigError, match="extends itself"):
        load_planner_config("loop", "arm")
    write(tmp_path, "bad", "extends: base\nelites: 11\n")
    with pytest.raises(ConfigError, match="elites"):
        load_planner_config("bad", "arm")
    with pytest.raises(ConfigError, match="unknown planner 'nope'"):
        load_planner_config("nope", "arm")
    with pytest.raises(ConfigError, match="expected integer"):
        load_planner_config("base", "arm", {"iterations": 2.5})


def test_a_task_section_applies_to_its_task_only_after_the_robot_section(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SIMDIST_CONFIG_DIR", str(tmp_path))
    base = (
        "num_samples: 10\nnum_policy_samples: 2\npolicy_std: 0.05\niterations: 3\nelites: 4\ntemperature: 0.5\n"
        "init_std: 1.0\nmin_std: 0.1\nhorizon: 5\ndiscount: 0.9\nrobots:\n  legs: {iterations: 4, elites: 3}\n"
        "tasks:\n  legs_ramp: {iterations: 2}\n"
    )
    write(tmp_path, "base", base)
    write(
        tmp_path,
        "child",
        "extends: base\nrobots:\n  legs: {elites: 2}\ntasks:\n  legs_ramp: {policy_max_lead: 1}\n",
    )
    plain = load_planner_config("child", "legs", task="legs_flat")
    assert (plain.iterations, plain.elites, plain.policy_max_lead) == (4, 2, 0)
    ramp = load_planner_config("child", "legs", task="legs_ramp")
    assert (ramp.iterations, ramp.elites, ramp.policy_max_lead) == (2, 2, 1)  # the parent's task section too
    assert load_planner_config("child", "legs", {"policy_max_lead": 0}, task="legs_ramp").policy_max_lead == 0
    assert load_planner_config("child", "legs").iterations == 4  # no task: robot sections only
    write(tmp_path, "typo", "extends: base\ntasks:\n  legs_ramp: {policy_max_leed: 1}\n")
    with pytest.raises(ConfigError, match="tasks.legs_ramp.policy_max_leed"):
        load_planner_config("typo", "legs", task="legs_ramp")


def test_task_action_limits() -> None:
    from simdist.sim.config import load_task

    slope = (0.0, 0.0, -0.3), (0.8, 0.0, 0.3)  # the pretraining's forward, lateral and yaw-rate ranges
    assert task_action_limits(load_task("go2_slope")) == ActionLimits(-4.0, 4.0, 1.0, *slope)
    assert task_action_limits(load_task("go2_foam")).command_low == (0.0, -0.2, -0.3)
    # a hole-pose estimate is not a setpoint to scale
    assert task_action_limits(load_task("ur5e_peg")).command_high is None
    assert task_action_limits(load_task("ur5e_peg", {"action_max_delta": 0.2})).max_delta == 0.2
    limits = task_action_limits({"robot": "ur5e", "action_clip": 1.0, "action_max_delta": 0.2})
    assert limits == ActionLimits(-1.0, 1.0, 0.2)
    assert task_action_limits({"robot": "other"}) == ActionLimits(None, None, None)


# -- the checks of PlannerConfig, at their boundaries (tests that the mutation check showed were missing) ----------
_EDGE = dict(  # every setting at the edge of what is allowed
    num_samples=1,
    num_policy_samples=0,
    policy_std=0.0,
    iterations=1,
    elites=1,
    temperature=1e-6,
    init_std=0.5,
    min_std=0.5,
    horizon=1,
    discount=1.0,
    num_threads=1,
    disagreement_weight=0.0,
    budget_ms=None,
)


def test_every_setting_at_the_edge_of_its_range_is_accepted() -> None:
    from simdist.plan.config import PlannerConfig

    cfg = PlannerConfig(**_EDGE)
    assert (cfg.num_samples, cfg.elites, cfg.min_std, cfg.init_std, cfg.discount) == (1, 1, 0.5, 0.5, 1.0)
    assert PlannerConfig(**{**_EDGE, "budget_ms": 1e-3}).budget_ms == 1e-3  # any positive deadline
    assert PlannerConfig(**{**_EDGE, "num_samples": 3, "elites": 3}).elites == 3  # elites == num_samples
    assert PlannerConfig(**{**_EDGE, "temperature": 0.5, "discount": 0.5}).temperature == 0.5
    assert PlannerConfig(**{**_EDGE, "min_std": 1e-6, "init_std": 0.5}).min_std == 1e-6


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_samples": 0, "elites": 0}, "num_samples must be >= 1"),
        ({"num_policy_samples": -1}, "num_policy_samples must be >= 0"),
        ({"iterations": 0}, "iterations must be >= 1"),
        ({"elites": 0}, "elites must be in [1, num_samples]"),
        ({"num_samples": 3, "elites": 4}, "elites must be in [1, num_samples]"),
        ({"temperature": 0.0}, "temperature must be > 0"),
        ({"temperature": -1.0}, "temperature must be > 0"),
        ({"min_std": 0.0}, "need 0 < min_std <= init_std"),
        ({"min_std": 0.6, "init_std": 0.5}, "need 0 < min_std <= init_std"),
        ({"policy_std": -0.01}, "policy_std must be >= 0"),
        ({"horizon": 0}, "horizon must be >= 1"),
        ({"discount": 0.0}, "discount must be in (0, 1]"),
        ({"discount": 1.01}, "discount must be in (0, 1]"),
        ({"num_threads": 0}, "num_threads must be >= 1"),
        ({"disagreement_weight": -0.1}, "disagreement_weight must be >= 0"),
        ({"budget_ms": 0.0}, "budget_ms must be > 0 (or null: no deadline)"),
        ({"budget_ms": -5.0}, "budget_ms must be > 0 (or null: no deadline)"),
    ],
)
def test_a_setting_out_of_range_is_refused_naming_it(change: dict, message: str) -> None:
    import re

    from simdist.plan.config import PlannerConfig

    with pytest.raises(ConfigError, match=f"^{re.escape('planner config: ' + message)}$"):
        PlannerConfig(**{**_EDGE, **change})


_BASE = (
    "num_samples: 10\nnum_policy_samples: 2\npolicy_std: 0.05\niterations: 3\nelites: 4\ntemperature: 0.5\n"
    "init_std: 1.0\nmin_std: 0.1\nhorizon: 5\ndiscount: 0.9\n"
)


def test_merge_order_own_top_level_beats_the_parents_robot_section(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SIMDIST_CONFIG_DIR", str(tmp_path))
    write(tmp_path, "base", _BASE + "robots:\n  arm: {iterations: 4, elites: 2}\n")
    write(tmp_path, "child", "extends: base\niterations: 6\nrobots:\n  arm: {elites: 3}\n  legs: {}\n")
    arm = load_planner_config("child", "arm")
    assert (arm.iterations, arm.elites) == (6, 3)  # parent top, parent robot, own top, own robot
    legs = load_planner_config("child", "legs")  # an empty robot section: the shared settings
    assert (legs.iterations, legs.elites) == (6, 4)
    write(tmp_path, "grandchild", "extends: child\n")
    assert load_planner_config("grandchild", "arm") == arm  # two levels
    write(tmp_path, "norobots", _BASE + "robots:\n")  # `robots:` left empty
    assert load_planner_config("norobots", "arm").iterations == 3


def test_defaults_fill_what_the_file_leaves_out_and_overrides_reach_them(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SIMDIST_CONFIG_DIR", str(tmp_path))
    write(tmp_path, "base", _BASE)
    cfg = load_planner_config("base", "arm")
    assert (
        cfg.keep_elites,
        cfg.compile,
        cfg.num_threads,
        cfg.budget_ms,
        cfg.disagreement_weight,
        cfg.plan_ahead,
    ) == (False, False, 1, None, 0.0, False)
    assert load_planner_config("base", "arm", {}) == cfg  # no overrides: the file as written
    cfg = load_planner_config(
        "base", "arm", {"num_threads": 2, "budget_ms": 8.0, "disagreement_weight": 1.5, "plan_ahead": True}
    )
    assert (cfg.num_threads, cfg.budget_ms, cfg.disagreement_weight, cfg.plan_ahead) == (2, 8.0, 1.5, True)
    write(tmp_path, "missing", "num_samples: 10\n")
    with pytest.raises(ConfigError, match="missing key 'planner.num_policy_samples'"):
        load_planner_config("missing", "arm")


def test_a_malformed_planner_file_is_refused_naming_the_problem(tmp_path, monkeypatch) -> None:
    import re

    monkeypatch.setenv("SIMDIST_CONFIG_DIR", str(tmp_path))
    write(tmp_path, "base", _BASE)
    cases = {
        "a": ("extends: b\n", "planner config 'a' extends itself (a -> b -> a)"),
        "b": ("extends: a\n", None),
        "num": ("extends: 3\n", "planner config 'num': 'extends' must be a config name"),
        "list": (
            _BASE + "robots: [arm]\n",
            "planner config 'list': 'robots' must be a mapping of robot -> settings",
        ),
        "flat": (_BASE + "robots:\n  arm: 3\n", "planner config 'flat': robots.arm must be a mapping"),
        "two": (
            "extends: base\nrobots:\n  arm: {zeta: 1, alpha: 2}\n",
            "unknown key 'robots.arm.alpha' in planner config 'two' (valid: "
            + ", ".join(sorted(f.name for f in dataclasses.fields(PlannerConfig)))
            + ")",
        ),
        "other": ("extends: base\nrobots:\n  legs: {bogus: 1}\n", "unknown key 'robots.legs.bogus'"),
    }
    for name, (text, _) in cases.items():
        write(tmp_path, name, text)
    for name, (_, message) in cases.items():
        if message is not None:
            with pytest.raises(ConfigError, match=f"^{re.escape(message)}"):
                load_planner_config(name, "arm")  # a bad section of another robot is refused too
    write(tmp_path, "badparent", "extends: flat\n")
    with pytest.raises(ConfigError, match="planner config 'flat': robots.arm"):  # the parent's problem, named
        load_planner_config("badparent", "legs")


def test_adapted_blocks_merge_after_the_plain_settings_and_before_overrides(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SIMDIST_CONFIG_DIR", str(tmp_path))
    base = (
        "num_samples: 10\nnum_policy_samples: 2\npolicy_std: 0.05\niterations: 1\nelites: 4\ntemperature: 0.5\n"
        "init_std: 1.0\nmin_std: 0.1\nhorizon: 5\ndiscount: 0.9\nadapted: {init_std: 2.0}\n"
        "robots:\n  legs: {elites: 3, adapted: {num_samples: 20}}\n"
    )
    write(tmp_path, "base", base)
    write(tmp_path, "child", "extends: base\ntasks:\n  legs_ramp: {adapted: {iterations: 3}}\n")
    plain = load_planner_config("child", "legs", task="legs_ramp")
    assert (plain.num_samples, plain.iterations, plain.init_std, plain.elites) == (10, 1, 1.0, 3)
    wide = load_planner_config("child", "legs", task="legs_ramp", adapted=True)
    assert (wide.num_samples, wide.iterations, wide.init_std, wide.elites) == (20, 3, 2.0, 3)
    assert (
        load_planner_config("child", "legs", {"iterations": 2}, task="legs_ramp", adapted=True).iterations
        == 2
    )
    assert load_planner_configs("child", "legs", task="legs_ramp") == (plain, wide)
    # nothing granted, or overrides that make both the same: one planner
    write(
        tmp_path,
        "flat",
        base.replace("adapted: {init_std: 2.0}\n", "").replace(", adapted: {num_samples: 20}", ""),
    )
    assert load_planner_configs("flat", "legs")[1] is None
    same = {"num_samples": 10, "init_std": 1.0, "iterations": 1}
    assert load_planner_configs("child", "legs", same, task="legs_ramp")[1] is None
    for text, message in (
        ("extends: base\nadapted: {iteratons: 3}\n", "unknown key 'adapted.iteratons'"),
        (
            "extends: base\nrobots:\n  legs: {adapted: {bogus: 1}}\n",
            "unknown key 'robots.legs.adapted.bogus'",
        ),
        ("extends: base\nadapted: {num_threads: 2}\n", "adapted.num_threads cannot change"),
        ("extends: base\ntasks:\n  legs_ramp: {adapted: {plan_ahead: true}}\n", "plan_ahead cannot change"),
        ("extends: base\nadapted: [1, 2]\n", "adapted must be a mapping"),
        ("extends: base\nadapted: {elites: 30}\n", "elites"),
    ):
        write(tmp_path, "broken", text)
        with pytest.raises(ConfigError, match=message):
            load_planner_config("broken", "legs", task="legs_ramp", adapted=True)
