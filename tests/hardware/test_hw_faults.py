"""`simdist bench faults`: the emulator's faults parse and happen on schedule, the check at the robot flags what is
unsafe, and a state that stops coming ends, end to end over DDS, in a safe stop the emulated robot receives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simdist.hardware import faults
from simdist.robots.go2 import STAND_POSE
from simdist.robots.go2.emulator import CommandCheck, Fault


def test_a_fault_parses_and_is_active_only_in_its_window() -> None:
    fault = Fault.parse("state_gap:3:0.5")
    assert (fault.kind, fault.start_s, fault.duration_s) == ("state_gap", 3.0, 0.5)
    assert [fault.active(t) for t in (None, 2.9, 3.0, 3.49, 3.5)] == [False, False, True, True, False]
    for bad in ("state_gap:3", "nap:1:1", "vanish:-1:1", "vanish:1:0", "vanish:a:1"):
        with pytest.raises(ValueError, match="fault"):
            Fault.parse(bad)


def test_the_check_at_the_robot_flags_each_unsafe_command() -> None:
    check = CommandCheck(max_step=0.3)
    stand, kp, kd, tau = np.array(STAND_POSE, float), np.full(12, 25.0), np.full(12, 0.5), np.zeros(12)
    assert check(stand, kp, kd, tau)
    assert check(stand + 0.29, kp, kd, tau)
    assert not check(stand + 0.29 + 0.31, kp, kd, tau)  # a 0.31 rad step
    assert check(
        stand, np.zeros(12), np.full(12, 3.0), tau
    )  # damping in between: no step limit applies to it
    assert not check(np.full(12, np.nan), kp, kd, tau)
    assert not check(stand + 10.0, kp, kd, tau)  # outside the joint range
    assert not check(stand, np.full(12, 500.0), kd, tau)
    assert check.unsafe == 4 and len(check.reasons) == 4 and "0.310" in check.reasons[0]


def test_the_judge_needs_a_safe_stop_soon_enough_and_no_unsafe_command() -> None:
    scenario = faults.Scenario("x", expect_stop=True)
    good = faults.Outcome(
        "x", unsafe_commands=0, ticks=300, bag_ticks=300, safe_stop=True, time_to_safe_stop_s=1.1
    )
    assert faults._judge(scenario, good, 8.0)
    assert not faults._judge(scenario, faults.Outcome(**{**good.__dict__, "time_to_safe_stop_s": 1.6}), 8.0)
    assert not faults._judge(scenario, faults.Outcome(**{**good.__dict__, "unsafe_commands": 1}), 8.0)
    assert not faults._judge(scenario, faults.Outcome(**{**good.__dict__, "bag_ticks": 200}), 8.0)  # 2 s lost


def test_the_finetune_scenario_counts_only_if_the_finetune_trained_throughout(tmp_path: Path) -> None:
    scenario = next(s for s in faults.SCENARIOS if s.name == "finetune_beside")
    assert scenario in faults.ROBOTS["ur5e"].scenarios  # robot-independent: every robot's bench runs it
    ran = faults.Outcome("finetune_beside", unsafe_commands=0, ticks=400, bag_ticks=400, safe_stop=False)
    assert faults._judge(scenario, faults.Outcome(**{**ran.__dict__, "finetune_trained": True}), 8.0)
    assert not faults._judge(scenario, faults.Outcome(**{**ran.__dict__, "finetune_trained": False}), 8.0)
    assert not faults._judge(scenario, ran, 8.0)  # it never started (no bag to train on)
    assert faults._finetune_beside("models/go2_slope", tmp_path, 8.0) is None  # no plain run's bag: no load


def test_a_dropped_state_ends_in_a_safe_stop_the_emulated_robot_receives(tmp_path: Path) -> None:
    pytest.importorskip("unitree_sdk2py", reason="unitree-sdk2py-dimos not installed")
    pytest.importorskip("cyclonedds", reason="cyclonedds not installed")
    import os

    from simdist.runtime.deploy import resolve_model

    scenario = next(s for s in faults.SCENARIOS if s.name == "state_dropped")
    outcome = faults.run_scenario(
        scenario,
        task="go2_slope",
        model=str(resolve_model("go2_slope", None)),
        seconds=6.0,
        address=f"lo:{200 + os.getpid() % 30}",
        out_dir=tmp_path,
    )
    assert outcome.unsafe_commands == 0 and outcome.safe_stop and outcome.stale >= 10
    assert outcome.time_to_safe_stop_s is not None  # the damping command reached the robot after the fault
    # stale after 0.1 s, then the hardware watchdog's 1 s: 45-80 held ticks at 50 Hz before the safe stop
    assert 40 <= outcome.held <= 80, outcome
    assert outcome.ticks - outcome.bag_ticks <= 50
