"""UR5e adapter: unreachable robot, missing package, and the mapping to ur_rtde calls on fake interfaces."""

from __future__ import annotations

import socket
import sys

import numpy as np
import pytest

from simdist.errors import RobotConnectionError
from simdist.hardware import Robot
from simdist.hardware.state import JointCommand
from simdist.robots.ur5e.hardware import UR5eRobot, rotvec_to_quaternion


class FakeReceive:
    def __init__(self) -> None:
        self.time = 10.0
        self.connected = True
        self.disconnected = False

    def isConnected(self) -> bool:  # noqa: N802 - ur_rtde's names
        return self.connected

    def getTimestamp(self) -> float:  # noqa: N802
        return self.time

    def getActualQ(self) -> list[float]:  # noqa: N802
        return [0.0, -1.57, 1.57, -1.57, -1.57, 0.0]

    def getActualQd(self) -> list[float]:  # noqa: N802
        return [0.1] * 6

    def getActualTCPPose(self) -> list[float]:  # noqa: N802
        return [0.4, -0.1, 0.3, 0.0, 0.0, np.pi / 2]

    def getActualTCPSpeed(self) -> list[float]:  # noqa: N802
        return [0.0] * 6

    def getActualTCPForce(self) -> list[float]:  # noqa: N802
        return [1.0, 2.0, 3.0, 0.1, 0.2, 0.3]

    def disconnect(self) -> None:
        self.disconnected = True


class FakeControl:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def servoJ(self, *args: object) -> bool:  # noqa: N802
        self.calls.append(("servoJ", *args))
        return True

    def servoStop(self, a: float) -> bool:  # noqa: N802
        self.calls.append(("servoStop", a))
        return True

    def stopScript(self) -> None:  # noqa: N802
        self.calls.append(("stopScript",))

    def disconnect(self) -> None:
        self.calls.append(("disconnect",))


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_unreachable_robot_is_one_clear_line() -> None:
    pytest.importorskip("rtde_receive", reason="ur-rtde not installed")
    if not _port_free(30004):
        pytest.skip("something listens on 127.0.0.1:30004 here")
    with pytest.raises(RobotConnectionError) as info:
        UR5eRobot.connect("127.0.0.1")
    message = str(info.value)
    assert "\n" not in message and "127.0.0.1" in message and "unreachable" in message and "30004" in message


def test_missing_package_names_the_pip_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rtde_control", None)
    with pytest.raises(RobotConnectionError, match=r"pip install ur-rtde==1\.6\.5"):
        UR5eRobot.connect("192.0.2.1")


def test_rotvec_to_quaternion() -> None:
    q = rotvec_to_quaternion([0.0, 0.0, np.pi / 2])
    assert q == pytest.approx([np.cos(np.pi / 4), 0.0, 0.0, np.sin(np.pi / 4)])
    assert rotvec_to_quaternion([0.0, 0.0, 0.0]).tolist() == [1.0, 0.0, 0.0, 0.0]
    assert np.linalg.norm(rotvec_to_quaternion([0.3, -1.2, 2.0])) == pytest.approx(1.0)


def test_read_maps_rtde_fields_and_detects_a_frozen_stream() -> None:
    receive = FakeReceive()
    robot = UR5eRobot(receive, FakeControl(), control_hz=25.0)
    assert isinstance(robot, Robot)
    state = robot.read()
    assert state.joint_positions.tolist() == [0.0, -1.57, 1.57, -1.57, -1.57, 0.0]
    assert state.tool_pose == pytest.approx([0.4, -0.1, 0.3, np.cos(np.pi / 4), 0.0, 0.0, np.sin(np.pi / 4)])
    # UR's TCP force (base axes, torque about the TCP) as the flange sensor's reading: the tool turned 90 degrees
    # about z, the TCP 8 cm out along the tool's z
    assert state.tool_wrench == pytest.approx([2.0, -1.0, 3.0, 0.28, 0.06, 0.3])
    assert state.robot_time == 10.0 and state.joint_names[0] == "shoulder_pan_joint"
    # The controller clock did not advance: the state keeps its first arrival time, so it can go stale.
    assert robot.read().timestamp == state.timestamp
    receive.time = 10.002
    assert robot.read().timestamp >= state.timestamp
    receive.connected = False  # lost: the last state, with the time it arrived (stale), so the tick is logged
    receive.time = 10.004
    lost = robot.read()
    assert lost.robot_time == 10.002 and lost.timestamp == robot.read().timestamp
    fresh = UR5eRobot(receive, FakeControl(), control_hz=25.0)
    with pytest.raises(RobotConnectionError, match="connection lost"):  # never connected: nothing to report
        fresh.read()


def test_send_hold_stop_call_servoj_and_stop_once() -> None:
    control, receive = FakeControl(), FakeReceive()
    robot = UR5eRobot(receive, control, control_hz=25.0, lookahead_time=0.05, gain=500.0)
    robot.hold()  # nothing to stop before servoing
    robot.send(JointCommand([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], kp=99.0))
    name, q, speed, accel, t, lookahead, gain = control.calls[0]
    assert name == "servoJ" and q == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    assert (t, lookahead, gain) == (pytest.approx(0.04), 0.05, 500.0)
    robot.hold()
    robot.hold()
    assert [c[0] for c in control.calls] == ["servoJ", "servoStop"]
    robot.send(JointCommand(np.zeros(6)))
    robot.stop()
    robot.stop()
    assert [c[0] for c in control.calls] == [
        "servoJ",
        "servoStop",
        "servoJ",
        "servoStop",
        "stopScript",
        "disconnect",
    ]
    assert receive.disconnected
    with pytest.raises(RobotConnectionError, match="stopped"):
        robot.send(JointCommand(np.zeros(6)))
    with pytest.raises(ValueError, match="6 joint targets"):
        UR5eRobot(FakeReceive(), FakeControl()).send(JointCommand(np.zeros(5)))


def test_read_only_connection_cannot_command() -> None:
    robot = UR5eRobot(FakeReceive(), None)
    assert robot.read().joint_torques is None
    with pytest.raises(RobotConnectionError, match="read-only"):
        robot.send(JointCommand(np.zeros(6)))


def test_urs_tcp_force_becomes_the_sensors_own_reading_as_the_simulator_measures_it() -> None:
    """The inverse of what a UR reports: a sensor-frame wrench (force, torque about the flange, flange axes) turned
    into base axes with the torque about the TCP, 8 cm out along the tool's z, comes back unchanged."""
    from simdist.robots.ur5e.hardware import rotvec_to_matrix, tcp_wrench_to_sensor

    rng = np.random.default_rng(0)
    for _ in range(5):
        rotvec, sensor = rng.normal(size=3), rng.normal(size=6) * 10
        rot = rotvec_to_matrix(rotvec)
        np.testing.assert_allclose(rot @ rot.T, np.eye(3), atol=1e-12)
        force = rot @ sensor[:3]
        tip_from_sensor = rot @ np.array([0.0, 0.0, 0.08])
        reported = np.concatenate([force, rot @ sensor[3:] - np.cross(tip_from_sensor, force)])
        np.testing.assert_allclose(tcp_wrench_to_sensor(reported, rotvec, 0.08), sensor, atol=1e-9)
    # tool pointing down (rotation pi about x): a push up on the peg is +z in base axes and -z at the sensor
    down = tcp_wrench_to_sensor(np.array([0.0, 0.0, 5.0, 0.0, 0.0, 0.0]), np.array([np.pi, 0.0, 0.0]), 0.08)
    np.testing.assert_allclose(down, [0.0, 0.0, -5.0, 0.0, 0.0, 0.0], atol=1e-9)


class SilentArmControl(FakeControl):
    """ur_rtde's control interface while the arm's state stream is gone: every call that waits for the script's
    answer (servoStop, stopScript, getJointTorques) or the disconnect blocks until the stream is back."""

    def __init__(self) -> None:
        super().__init__()
        import threading

        self.stream_back = threading.Event()

    def _blocks(self, name: str) -> None:
        self.calls.append((name,))
        self.stream_back.wait()

    def servoStop(self, a: float) -> bool:  # noqa: N802
        self._blocks("servoStop")
        return True

    def stopScript(self) -> None:  # noqa: N802
        self._blocks("stopScript")

    def disconnect(self) -> None:
        self._blocks("disconnect")

    def getJointTorques(self) -> list[float]:  # noqa: N802
        self._blocks("getJointTorques")
        return [0.0] * 6

    def kickWatchdog(self) -> bool:  # noqa: N802
        self.calls.append(("kickWatchdog",))
        return True


def test_an_arm_not_heard_from_never_blocks_the_hold_or_the_stop() -> None:
    """The state stream stopped (found by `simdist bench faults --task ur5e_peg`): the hold's servoStop blocked a
    tick for 2.4 s and stop() never returned (ur_rtde reconnecting inside stopScript and disconnect), so the deploy
    process hung after its safe stop. Now nothing that waits is sent to an arm not heard from (its RTDE watchdog
    stops it), and the disconnect is bounded."""
    import threading
    import time

    from simdist.robots.ur5e import hardware

    control, receive = SilentArmControl(), FakeReceive()
    robot = UR5eRobot(receive, control, control_hz=10.0, watchdog_hz=hardware.WATCHDOG_HZ)
    robot._servoing = True
    # the stream stopped a second ago: the controller clock has not moved since
    robot._robot_time, robot._fresh_at = receive.time, time.monotonic() - 1.0
    robot.read()  # no getJointTorques: it would wait
    done = threading.Thread(target=lambda: (robot.hold(), robot.stop()), daemon=True)
    started = time.monotonic()
    done.start()
    done.join(timeout=hardware.DISCONNECT_WAIT_S + 5.0)
    try:
        assert not done.is_alive(), control.calls
        assert time.monotonic() - started < hardware.DISCONNECT_WAIT_S + 2.0
        assert [c[0] for c in control.calls] == ["disconnect"]  # no servoStop, stopScript or torques
        assert receive.disconnected
    finally:
        control.stream_back.set()


def test_the_end_of_a_run_stops_the_script_of_an_arm_still_streaming() -> None:
    """The run's end comes a while after its last read (the bag closes first): an arm whose stream still advances
    gets servoStop and stopScript, not only its watchdog (seen under load: the script ended by the watchdog)."""
    import time

    control, receive = FakeControl(), FakeReceive()
    robot = UR5eRobot(receive, control, control_hz=10.0)
    robot.read()
    robot._servoing = True
    robot._fresh_at = time.monotonic() - 1.0  # the last read a second ago
    receive.time += 1.0  # and the stream has moved on since
    robot.stop()
    assert [c[0] for c in control.calls if c[0] != "disconnect"][-2:] == ["servoStop", "stopScript"]


def test_a_live_arms_hold_stops_the_servo_then_kicks_its_watchdog() -> None:
    from simdist.robots.ur5e import hardware

    control = SilentArmControl()
    control.stream_back.set()  # answers come
    robot = UR5eRobot(FakeReceive(), control, control_hz=10.0, watchdog_hz=hardware.WATCHDOG_HZ)
    robot.read()
    robot._servoing = robot._watchdog_set = True
    robot.hold()
    robot.hold()
    assert [c[0] for c in control.calls] == ["getJointTorques", "servoStop", "kickWatchdog"]


def test_the_first_servo_command_sets_the_arms_rtde_watchdog(monkeypatch: pytest.MonkeyPatch) -> None:
    from simdist.robots.ur5e import hardware

    calls: list[float] = []

    class Control(FakeControl):
        def __init__(self, host: str, hz: float) -> None:
            super().__init__()

        def setWatchdog(self, hz: float) -> bool:  # noqa: N802
            calls.append(hz)
            return True

        def servoL(self, *args: object) -> bool:  # noqa: N802
            return True

    receive_module = type("M", (), {"RTDEReceiveInterface": lambda host, hz: FakeReceive()})
    control_module = type("M", (), {"RTDEControlInterface": Control})
    monkeypatch.setattr(hardware, "_import_rtde", lambda: (receive_module, control_module))
    robot = UR5eRobot.connect("192.0.2.1")
    assert calls == []  # not at connect: the loop may start seconds later
    robot.send_tool_pose(np.array([0.4, 0.1, 0.1, np.pi, 0.0, 0.0]))
    robot.send_tool_pose(np.array([0.4, 0.1, 0.1, np.pi, 0.0, 0.0]))
    assert calls == [hardware.WATCHDOG_HZ]


def test_a_process_whose_driver_thread_is_stuck_leaves_with_its_own_exit_code() -> None:
    """A ur_rtde disconnect blocked on a vanished arm must not turn a clean end of run into an abort at teardown:
    with such a thread alive the process leaves at once with the code it meant; without one the code is returned."""
    import subprocess
    import sys

    from simdist.hardware.robot import leave_past_stuck_drivers

    assert leave_past_stuck_drivers(0) == 0 and leave_past_stuck_drivers(3) == 3
    code = (
        "import threading, time\n"
        "from simdist.hardware.robot import DISCONNECT_THREAD, leave_past_stuck_drivers\n"
        "threading.Thread(target=time.sleep, args=(60,), name=DISCONNECT_THREAD, daemon=True).start()\n"
        "print('report', flush=True)\n"
        "leave_past_stuck_drivers(3)\n"
        "raise SystemExit('not reached')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.returncode == 3 and done.stdout == "report\n" and "not reached" not in done.stderr


def test_simdist_main_returns_its_status_past_a_stuck_driver_thread() -> None:
    """`simdist.cli.main` is called by tests and programs: only the executable (`run`) may end the process at once
    past a stuck driver thread; `main` returns the status (tests/conftest.py fails any `os._exit` in this process)."""
    import threading

    from simdist.cli import main
    from simdist.hardware.robot import DISCONNECT_THREAD

    release = threading.Event()
    stuck = threading.Thread(target=release.wait, name=DISCONNECT_THREAD, daemon=True)
    stuck.start()
    try:
        assert main(["emulate", "--task", "ur5e_peg", "--address", "127.0.0.1:30004"]) == 2
    finally:
        release.set()
        stuck.join(timeout=5.0)
