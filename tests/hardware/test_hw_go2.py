"""Go2 adapter: LowCmd_ building (order, gains, stop motors, CRC) and a loopback run against an emulator over DDS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simdist.errors import RobotConnectionError
from simdist.hardware.state import JointCommand
from simdist.robots.go2 import hardware as go2

HERE = Path(__file__).resolve().parent


def test_joint_names_are_unitree_motor_order() -> None:
    assert go2.JOINT_NAMES[:3] == ("FR_hip_joint", "FR_thigh_joint", "FR_calf_joint")
    assert go2.JOINT_NAMES[9:] == ("RL_hip_joint", "RL_thigh_joint", "RL_calf_joint")
    assert [n.split("_")[0] for n in go2.JOINT_NAMES[::3]] == ["FR", "FL", "RR", "RL"]


def test_missing_sdk_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "unitree_sdk2py.core.channel", None)
    with pytest.raises(RobotConnectionError, match="pip install unitree-sdk2py-dimos"):
        go2.build_lowcmd(JointCommand(np.zeros(12)))


def test_lowcmd_carries_targets_gains_and_crc() -> None:
    pytest.importorskip("unitree_sdk2py", reason="unitree-sdk2py-dimos not installed")
    from unitree_sdk2py.utils.crc import CRC

    targets = np.arange(12) * 0.1 - 0.5
    kp = np.arange(12) + 20.0
    msg = go2.build_lowcmd(JointCommand(targets, kp=kp, kd=0.7, torque_ff=np.full(12, 0.25)))
    assert list(msg.head) == [0xFE, 0xEF] and msg.level_flag == 0xFF
    for i in range(12):
        motor = msg.motor_cmd[i]
        assert motor.mode == 0x01
        assert motor.q == pytest.approx(targets[i]) and motor.kp == kp[i]
        assert motor.kd == pytest.approx(0.7) and motor.tau == 0.25 and motor.dq == 0.0
    for motor in msg.motor_cmd[12:]:
        assert motor.mode == 0 and motor.q == go2.POS_STOP_F and motor.kp == 0.0 and motor.kd == 0.0
    assert msg.crc != 0 and msg.crc == CRC().Crc(msg)
    before = msg.crc
    msg.motor_cmd[4].q += 0.01
    assert CRC().Crc(msg) != before, "the CRC must cover the targets"


def test_lowcmd_default_gains_and_reuse() -> None:
    pytest.importorskip("unitree_sdk2py", reason="unitree-sdk2py-dimos not installed")
    msg = go2.build_lowcmd(JointCommand(np.zeros(12)))
    assert [m.kp for m in msg.motor_cmd[:12]] == [go2.DEFAULT_KP] * 12
    assert [m.kd for m in msg.motor_cmd[:12]] == pytest.approx([go2.DEFAULT_KD] * 12)
    again = go2.build_lowcmd(JointCommand(np.ones(12)), default_kp=50.0, msg=msg)
    assert again is msg and msg.motor_cmd[0].q == 1.0 and msg.motor_cmd[0].kp == 50.0
    with pytest.raises(ValueError, match="12 joint targets"):
        go2.build_lowcmd(JointCommand(np.zeros(6)))


def test_no_nan_reaches_the_motors_and_an_unknown_joint_is_damped_not_held() -> None:
    """A first lowstate with a NaN joint position: the hold damps that joint (kp 0 at the stop position) and holds
    the others; nothing held is remembered as a target; a command with a NaN is refused before it is built."""
    pytest.importorskip("unitree_sdk2py", reason="unitree-sdk2py-dimos not installed")
    from simdist.hardware.safety import SafetyFilter
    from simdist.hardware.state import RobotState
    from simdist.robots.go2 import STAND_POSE, safety_limits

    q = STAND_POSE.copy()
    q[4] = np.nan
    state = RobotState(timestamp=0.0, joint_positions=q, joint_velocities=np.zeros(12))
    written: list[tuple[float, float, float]] = []

    class Publisher:
        def Write(self, msg: object) -> bool:  # noqa: N802 - the SDK's name
            written.append([(m.q, m.kp, m.kd) for m in msg.motor_cmd[:12]])  # type: ignore[attr-defined]
            return True

    robot = go2.Go2Robot()
    robot._publisher = Publisher()
    robot._latest = (object(), 0.0)
    robot.read = lambda: state  # type: ignore[method-assign]
    robot.hold()
    (sent,) = written
    assert all(np.isfinite(value) for motor in sent for value in motor)
    assert sent[4] == (go2.POS_STOP_F, 0.0, pytest.approx(robot.damping_kd))
    assert sent[3] == (pytest.approx(q[3]), robot.kp, pytest.approx(robot.kd))
    assert robot.last_target is None  # a later hold does not hold the stop position at kp 25
    robot.damp()
    assert all(np.isfinite(value) for motor in written[-1] for value in motor) and written[-1][4][1] == 0.0
    with pytest.raises(ValueError, match="non-finite targets"):
        go2.build_lowcmd(JointCommand(q))
    with pytest.raises(ValueError, match="non-finite"):
        SafetyFilter(safety_limits(), 50.0).reset(state)


@pytest.mark.slow
def test_loopback_against_emulator_over_cyclonedds() -> None:
    pytest.importorskip("unitree_sdk2py", reason="unitree-sdk2py-dimos not installed")
    pytest.importorskip("cyclonedds", reason="cyclonedds not installed")
    domain = 100 + os.getpid() % 100  # away from the real robot's 0 and unitree_mujoco's 1
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    emulator = subprocess.Popen(
        [sys.executable, str(HERE / "go2_echo_emulator.py"), str(domain)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert emulator.stdout is not None
        ready = emulator.stdout.readline().strip()
        if ready != "ready":
            pytest.fail(
                f"emulator did not start: {ready!r} {emulator.stderr.read() if emulator.stderr else ''}"
            )
        client = subprocess.run(
            [sys.executable, str(HERE / "go2_loopback_client.py"), str(domain)],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        summary_text, emulator_err = emulator.communicate(input="", timeout=20)
    finally:
        if emulator.poll() is None:
            emulator.kill()
    assert client.returncode == 0, client.stderr[-2000:]
    result = json.loads(client.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(f"DDS discovery between two processes on lo failed here: {result['skip']}")
    summary = json.loads(summary_text.strip().splitlines()[-1])

    assert result["names"] == list(go2.JOINT_NAMES)
    assert result["first_q"] == pytest.approx([0.0, 0.9, -1.8] * 4, abs=1e-6)
    assert result["last_q"] == pytest.approx(result["target"], abs=1e-3), "the emulator followed our targets"
    assert result["quaternion"] == [1.0, 0.0, 0.0, 0.0] and result["accel"][2] == pytest.approx(
        9.81, abs=1e-5
    )
    assert result["foot_forces"] == [10, 20, 30, 40]
    assert result["age_s"] < 0.5
    assert summary["received"] >= 30 and summary["crc_ok"] == summary["received"]
    last = summary["last"]  # stop() sends damping: no stiffness, kd on every leg motor
    assert last["head"] == [0xFE, 0xEF] and last["level_flag"] == 0xFF
    assert last["mode"] == [1] * 12 + [0] * 8
    assert last["kp"][:12] == [0.0] * 12 and last["kd"][:12] == pytest.approx([3.0] * 12)


def test_no_lowstate_is_a_clear_connection_error() -> None:
    pytest.importorskip("unitree_sdk2py", reason="unitree-sdk2py-dimos not installed")
    domain = 200 + os.getpid() % 30  # a domain nobody publishes on
    code = (
        "from simdist.robots.go2.hardware import Go2Robot\n"
        "from simdist.errors import RobotConnectionError\n"
        "try:\n"
        f"    Go2Robot.connect('lo', {domain}, timeout_s=0.3)\n"
        "except RobotConnectionError as exc:\n"
        "    print('ERROR', exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    line = out.stdout.strip().splitlines()[-1]
    assert line.startswith("ERROR Go2: no rt/lowstate on interface 'lo'") and f"domain {domain}" in line
