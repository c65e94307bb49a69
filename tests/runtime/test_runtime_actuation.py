"""Task actions reach robots in task units: the UR5e Cartesian path (servoL on fake RTDE) mirrors the sim's tool
target, Go2 joint targets go through the safety filter, and camera frames come from OpenCV or the simulator."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
from fast_planner import FAST_PLANNER

from simdist import robots
from simdist.hardware.sim_robot import SimRobot
from simdist.hardware.state import RobotState
from simdist.robots import go2
from simdist.robots.ur5e import workspace
from simdist.robots.ur5e.actuation import CartesianActuator, ToolTarget, pose_rotation
from simdist.robots.ur5e.hardware import UR5eRobot, quaternion_to_rotvec, rotvec_to_quaternion
from simdist.runtime.deploy import run_deploy
from simdist.runtime.ingest import CameraIngest
from simdist.sim.config import load_task

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hardware"))
from test_hw_ur5e import FakeControl, FakeReceive  # noqa: E402


class ToolDownReceive(FakeReceive):
    """The fake arm with its tool pointing down (yaw pi / 2), as the peg task holds it."""

    def getActualTCPPose(self) -> list[float]:  # noqa: N802 - ur_rtde's name
        return [0.4, -0.1, 0.3, np.pi / np.sqrt(2.0), np.pi / np.sqrt(2.0), 0.0]


class ServoLControl(FakeControl):
    def servoL(self, *args: object) -> bool:  # noqa: N802 - ur_rtde's name
        self.calls.append(("servoL", *args))
        return True


def test_rotvec_round_trip() -> None:
    for rotvec in ([0.0, 0.0, 0.0], [0.3, -1.2, 2.0], [np.pi, 0.0, 0.0]):
        np.testing.assert_allclose(quaternion_to_rotvec(rotvec_to_quaternion(rotvec)), rotvec, atol=1e-9)


def test_tool_target_mirrors_the_simulator() -> None:
    robot = SimRobot("ur5e_peg", "sim", seed=2, overrides={"nominal.sensor_noise_scale": 0})
    pc = robot.cfg.peg
    tool = ToolTarget(scale_m=pc.action_scale_m, scale_rad=pc.action_scale_rad, hole_depth=pc.hole_depth)
    tool.position, tool.yaw = robot.env.target_pos[0].copy(), float(robot.env.target_yaw[0])
    rng = np.random.default_rng(0)
    for _ in range(15):
        action = rng.uniform(-1, 1, 4)
        tool.step(action, robot.command())
        robot.send_action(action)
        np.testing.assert_allclose(tool.position, robot.env.target_pos[0], atol=1e-6)
        assert tool.yaw == pytest.approx(robot.env.target_yaw[0], abs=1e-6)
    robot.stop()


def test_cartesian_actuator_sends_servol_and_holds_on_nan() -> None:
    control, receive = ServoLControl(), ToolDownReceive()
    robot = UR5eRobot(receive, control, control_hz=10.0, lookahead_time=0.1, gain=300.0)
    state = robot.read()
    hole = np.array([0.45, -0.05, 0.04, 0.0], dtype=np.float32)
    tool = ToolTarget(scale_m=0.01, scale_rad=0.05, hole_depth=0.04)
    actuator = CartesianActuator(robot, tool, command=lambda: hole)
    actuator.apply(np.array([1.0, 0.0, -1.0, 0.5]), state, now=state.timestamp)
    name, pose, speed, accel, t, lookahead, gain = control.calls[-1]
    assert name == "servoL" and (t, lookahead, gain) == (pytest.approx(0.1), 0.1, 300.0)
    np.testing.assert_allclose(pose[:3], [0.41, -0.1, 0.29], atol=1e-9)  # measured TCP + 1 cm x, -1 cm z
    expected_yaw = np.pi / 2 + 0.025  # the fake tool's yaw, plus 0.5 x 0.05 rad
    rot = np.zeros(9)
    import mujoco

    mujoco.mju_quat2Mat(rot, rotvec_to_quaternion(pose[3:]))
    rot = rot.reshape(3, 3)
    assert np.arctan2(rot[1, 0], rot[0, 0]) == pytest.approx(expected_yaw) and rot[2, 2] == pytest.approx(
        -1.0
    )
    for _ in range(30):  # the workspace box around the hole estimate bounds the target
        actuator.apply(np.array([1.0, 1.0, 1.0, 0.0]), state, now=state.timestamp)
    np.testing.assert_allclose(control.calls[-1][1][:3], hole[:3] + [0.12, 0.12, 0.25], atol=1e-6)
    result = actuator.apply(np.array([np.nan, 0, 0, 0]), state, now=state.timestamp)
    assert result.held and control.calls[-1][0] == "servoStop"


def _tool_state(position: np.ndarray, tilt_rad: float = 0.0) -> RobotState:
    """A UR5e state whose tool points down (yaw 0), tilted about x by `tilt_rad`, at `position`."""
    import mujoco

    c, s = np.cos(tilt_rad), np.sin(tilt_rad)
    rot = np.array([[1, 0, 0], [0, -1, 0], [0, 0, -1.0]]) @ np.array([[1, 0, 0], [0, c, -s], [0, s, c]])
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, rot.reshape(-1))
    zeros = np.zeros(6)
    return RobotState(0.0, zeros, zeros, tool_pose=np.r_[position, quat], tool_twist=zeros, tool_wrench=zeros)


class ToolPoses:
    def __init__(self) -> None:
        self.sent: list[np.ndarray] = []

    def send_tool_pose(self, pose: np.ndarray) -> None:
        self.sent.append(np.asarray(pose, dtype=np.float64).copy())

    def hold(self) -> None:
        pass


def test_cartesian_actuator_moves_an_arm_from_outside_the_workspace_in_small_steps() -> None:
    """An arm that starts 40 cm above the workspace and 20 degrees off "tool down" is brought in by at most two
    actions' steps a tick (2 cm, 0.1 rad), never in one servo period; inside the workspace, tool down, what is sent
    is the simulator's target exactly (the limit does not bind)."""
    from simdist.robots.ur5e.actuation import STEP_LIMITED
    from simdist.robots.ur5e.hardware import rotvec_to_matrix

    hole = np.array([0.45, -0.05, 0.04, 0.0])
    low, high = workspace(hole[:3], 0.04)
    robot = ToolPoses()
    actuator = CartesianActuator(
        robot, ToolTarget(scale_m=0.01, scale_rad=0.05, hole_depth=0.04), command=lambda: hole
    )
    start = np.array([0.45, -0.05, high[2] + 0.40])
    state = _tool_state(start, tilt_rad=np.radians(20.0))
    last_position, last_rotation = start, pose_rotation(state.tool_pose)
    flags = []
    for _ in range(40):
        flags.append(STEP_LIMITED in actuator.apply(np.zeros(4), state, now=0.0).flags)
        position, rotation = robot.sent[-1][:3], rotvec_to_matrix(robot.sent[-1][3:])
        assert np.linalg.norm(position - last_position) <= 0.02 + 1e-9
        turn = np.arccos(np.clip((np.trace(last_rotation.T @ rotation) - 1.0) / 2.0, -1.0, 1.0))
        assert turn <= 0.1 + 1e-6
        last_position, last_rotation = position, rotation
    assert flags[:4] == [True] * 4 and flags[-1] is False  # limited while moving in, then not
    np.testing.assert_allclose(last_position, [0.45, -0.05, high[2]], atol=1e-9)  # at the box's top
    assert last_rotation[2, 2] == pytest.approx(-1.0)  # tool down

    inside = ToolPoses()  # from inside the box, tool down: exactly the simulator's target, never limited
    actuator = CartesianActuator(
        inside, ToolTarget(scale_m=0.01, scale_rad=0.05, hole_depth=0.04), command=lambda: hole
    )
    mirror = ToolTarget(scale_m=0.01, scale_rad=0.05, hole_depth=0.04)
    state = _tool_state(hole[:3] + [0.0, 0.0, 0.05])
    mirror.reset(state.tool_pose)
    rng = np.random.default_rng(0)
    for _ in range(60):
        action = rng.choice([-1.0, 1.0], 4)  # full steps: the largest the limit must let through
        assert STEP_LIMITED not in actuator.apply(action, state, now=0.0).flags
        mirror.step(action, hole)
        np.testing.assert_array_equal(inside.sent[-1][:3], mirror.position)
        yaw = rotvec_to_matrix(inside.sent[-1][3:])
        assert np.arctan2(yaw[1, 0], yaw[0, 0]) == pytest.approx(np.angle(np.exp(1j * mirror.yaw)), abs=1e-9)


def test_go2_hardware_path_runs_through_the_safety_filter(go2_model: Path) -> None:
    robot = SimRobot("go2_slope", "sim", seed=0)
    sent: list[np.ndarray] = []
    original = robot.send
    robot.send = lambda command: (sent.append(command.joint_targets.copy()), original(command))[1]  # type: ignore[method-assign]
    result = run_deploy(
        "go2_slope", "sim:sim", go2_model, ticks=15, safety=True, robot=robot, planner_overrides=FAST_PLANNER
    )
    assert result.stats.ticks == 15 and result.stats.errors == 0 and len(sent) >= 15
    steps = np.abs(np.diff(np.stack(sent), axis=0)).max()
    assert steps <= 0.3 + 1e-9  # the filter's per-tick limit
    actuator = robots.get("go2").actuator(robot, load_task("go2_slope"), lambda: np.zeros(3))
    np.testing.assert_allclose(actuator.targets(np.zeros(12)), [0.0, 0.9, -1.8] * 4)  # the stand pose
    lower, _, _ = go2.joint_limits()
    assert np.all(actuator.targets(np.full(12, -100.0)) == lower)  # clipped to the joint range


def test_go2_hardware_gains_bound_the_pd_torque_of_a_caught_leg() -> None:
    """A Go2 leg held in place (caught) while the plan keeps asking it the other way: with the hardware adapter's
    gains in every command, the filter keeps the torque they imply within the motor's limit."""
    from simdist.hardware.safety import TORQUE_LIMITED
    from simdist.robots.go2.hardware import DEFAULT_KD, DEFAULT_KP

    class CaughtGo2:
        kp, kd = DEFAULT_KP, DEFAULT_KD  # Go2Robot's gains, as its adapter holds them
        last_target = None

        def send(self, command: object) -> None:
            self.sent = command

        def hold(self) -> None:
            pass

    robot = CaughtGo2()
    actuator = robots.get("go2").actuator(robot, load_task("go2_slope"), lambda: np.zeros(3))
    _, _, torque = go2.joint_limits()
    q = go2.STAND_POSE.copy()
    q[0] = -0.9  # the front right hip pushed out and held there
    action = np.zeros(12)
    action[0] = 4.0  # the plan asks it back the other way
    flags: set[str] = set()
    for k in range(15):
        state = RobotState(k * 0.02, q, np.zeros(12), joint_torques=np.zeros(12))
        flags |= actuator.apply(action, state, now=k * 0.02).flags
    sent = robot.sent
    implied = sent.kp * (sent.joint_targets - q) - sent.kd * 0.0
    assert np.all(np.abs(implied) <= torque + 1e-6) and TORQUE_LIMITED in flags
    assert sent.joint_targets[0] - q[0] == pytest.approx(
        torque[0] / DEFAULT_KP
    )  # held at the limit, not beyond


def test_camera_from_a_video_file_and_from_the_simulator(tmp_path: Path) -> None:
    cv2 = pytest.importorskip("cv2")
    path = tmp_path / "clip.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10, (48, 32))
    for _ in range(5):
        frame = np.zeros((32, 48, 3), np.uint8)
        frame[..., 2] = 200  # BGR: red
        writer.write(frame)
    writer.release()
    camera = CameraIngest(str(path), width=64, height=64)
    try:
        for _ in range(500):
            frame = camera.read()
            if frame is not None:
                break
            __import__("time").sleep(0.01)
        assert frame is not None and frame.image.shape == (64, 64, 3)
        assert frame.image[..., 0].mean() > 150 and frame.image[..., 2].mean() < 50  # RGB now
    finally:
        camera.close()
    sim = CameraIngest(lambda: np.full((16, 16, 3), 7, np.uint8), width=64, height=64, clock=lambda: 3.0)
    got = sim.read()
    assert got is not None and got.image.shape == (64, 64, 3) and got.timestamp == 3.0 and not got.stale
    with pytest.raises(Exception, match="cannot open"):
        CameraIngest(str(tmp_path / "missing.avi"))


def test_the_first_filtered_target_steps_from_what_the_robot_holds_not_from_where_it_sagged() -> None:
    """A robot holding targets 0.2 rad above its measured posture (it sagged under load): the first command of a run
    moves at most max_step from the held targets, as the robot sees it, not from the measured posture."""
    from simdist.hardware.state import RobotState

    class Holding:
        def __init__(self) -> None:
            self.last_target = np.array(go2.STAND_POSE, dtype=np.float64) + 0.2
            self.sent: list[np.ndarray] = []

        def send(self, command) -> None:  # type: ignore[no-untyped-def]
            self.sent.append(command.joint_targets.copy())

    robot = Holding()
    actuator = robots.get("go2").actuator(robot, load_task("go2_slope"), lambda: np.zeros(3))
    state = RobotState(timestamp=1.0, joint_positions=np.array(go2.STAND_POSE), joint_velocities=np.zeros(12))
    actuator.apply(np.full(12, -1.2), state, 1.0)  # wants stand - 0.3 rad: 0.5 rad below the held targets
    step = np.abs(robot.sent[0] - robot.last_target).max()
    assert step == pytest.approx(0.3, abs=1e-9)  # the filter's per-tick limit, from the held targets


def test_the_press_guard_scales_the_push_along_the_force_to_the_limit_it_aims_at() -> None:
    """Under a tenth of the press limit the target moves as the action says; above it the target's push beyond the
    measured tool along the force's axis is capped at the last push x aimed / measured force (aimed: halfway up to
    the limit, or the limit once over it), whatever the sensor's sign, on any axis; it backs off by one step a tick
    at most; moves across the force and away from it pass; a tick the guard moved is flagged."""
    control, receive = ServoLControl(), ToolDownReceive()
    robot = UR5eRobot(receive, control, control_hz=10.0, lookahead_time=0.1, gain=300.0)
    state = robot.read()
    hole = np.array([0.45, -0.05, 0.20, 0.0], dtype=np.float32)  # the tool well inside the box
    limited = frozenset({"press_limited"})
    rot = pose_rotation(np.asarray(state.tool_pose, dtype=np.float64))
    tool = np.asarray(state.tool_pose[:3], dtype=np.float64)

    def guard() -> CartesianActuator:
        return CartesianActuator(
            robot,
            ToolTarget(scale_m=0.01, scale_rad=0.05, hole_depth=0.04),
            command=lambda: hole,
            press_limit_n=150.0,
        )

    def press(
        actuator: CartesianActuator, base_force: list[float], move: list[float]
    ) -> tuple[np.ndarray, object]:
        flange = rot.T @ np.array(base_force)  # the sensor reads in the flange's axes
        wrench = np.concatenate([flange, np.zeros(3)])
        result = actuator.apply(
            np.array([*move, 0.0]), dataclasses.replace(state, tool_wrench=wrench), state.timestamp
        )
        assert not result.held
        return np.asarray(control.calls[-1][1][:3]) - tool, result.flags

    down = guard()
    offset, flags = press(down, [0.0, 0.0, 14.0], [0.0, 0.0, -0.5])  # under a tenth: free
    assert offset == pytest.approx([0.0, 0.0, -0.005]) and flags == frozenset()
    for sign in (1.0, -1.0):  # 100 N: aims at 125 N, a push of 5 mm x 1.25
        down = guard()
        press(down, [0.0, 0.0, 0.0], [0.0, 0.0, -0.5])
        offset, flags = press(down, [0.0, 0.0, sign * 100.0], [0.3, 0.0, -1.0])
        assert (
            offset == pytest.approx([0.003, 0.0, -0.00625]) and flags == limited
        )  # across the force it moves
    offset, flags = press(down, [0.0, 0.0, 200.0], [0.0, 0.0, 0.0])  # over the limit: back to 150 N's push
    assert offset == pytest.approx([0.003, 0.0, -0.00625 * 150.0 / 200.0]) and flags == limited
    offset, flags = press(
        down, [0.0, 0.0, 200.0], [0.0, 0.0, 0.2]
    )  # lifting away from the force always passes
    assert offset[2] == pytest.approx(-0.00625 * 0.75 + 0.002) and flags == frozenset()

    deep = guard()
    for _ in range(4):  # a target far under the tool (a servo lagging while it presses)...
        press(deep, [0.0, 0.0, 0.0], [0.0, 0.0, -1.0])
    offset, flags = press(deep, [0.0, 0.0, 600.0], [0.0, 0.0, -1.0])
    assert offset[2] == pytest.approx(-0.03) and flags == limited  # ...backs off one step a tick, not at once

    wall = guard()  # the peg pressed sideways against the hole's wall
    press(wall, [0.0, 0.0, 0.0], [0.4, 0.0, 0.0])
    offset, flags = press(wall, [-75.0, 0.0, 0.0], [1.0, 0.0, -1.0])  # aims at 112.5 N: 4 mm x 1.5
    assert offset == pytest.approx([0.006, 0.0, -0.01]) and flags == limited


def test_the_loop_counts_each_intervention_and_deploy_reports_them() -> None:
    from simdist.runtime.loop_stats import LoopStats

    stats = LoopStats()
    stats.intervened(frozenset({"rate_limited", "press_limited"}))
    stats.intervened(frozenset({"rate_limited"}))
    stats.intervened(frozenset())
    assert stats.summary()["interventions"] == {"press_limited": 1, "rate_limited": 2}


def test_the_ur5e_hardware_path_drives_the_simulator_through_its_tool_target() -> None:
    """`--safety` on a simulated UR5e: the Cartesian actuator (with its press guard) sends servoL poses, which the
    simulator applies as its tool target, inside the workspace, as the emulated arm does."""
    robot = SimRobot("ur5e_peg", "sim", seed=1, overrides={"nominal.sensor_noise_scale": 0})
    try:
        actuator = robots.get("ur5e").actuator(robot, robot.cfg, robot.command)
        assert (
            isinstance(actuator, CartesianActuator) and actuator.press_limit_n == robot.cfg.peg.press_limit_n
        )
        state = robot.read()
        actuator.apply(np.array([0.5, -0.5, -1.0, 0.4]), state, now=state.timestamp)
        tool = np.asarray(state.tool_pose[:3], dtype=np.float64)
        np.testing.assert_allclose(robot.env.target_pos[0], tool + [0.005, -0.005, -0.01], atol=1e-9)
        far = np.array([5.0, 5.0, 5.0, 0.0, 0.0, 0.0])
        robot.send_tool_pose(
            far
        )  # clipped into the box around the hole estimate, as the arm's emulator clips
        low, high = workspace(robot.command()[:3].astype(np.float64), robot.cfg.peg.hole_depth)
        np.testing.assert_allclose(robot.env.target_pos[0], high)
    finally:
        robot.stop()
    go2 = SimRobot("go2_slope", "sim", seed=0)
    with pytest.raises(ValueError, match="takes no tool pose"):
        go2.send_tool_pose(np.zeros(6))
    go2.stop()


def test_an_episode_the_loop_ends_on_an_arm_keeps_its_target_where_the_arm_holds_it(
    ur5e_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On hardware the loop cuts episodes by time; the arm was not moved, so the tool target carries on from what the
    arm holds. Here the arm is blocked (its measured pose never moves) while the planner drives the target away:
    restarting from the measured pose at each new episode would step the target back by the whole tracking error."""
    from simdist.plan.config import load_planner_config, task_action_limits
    from simdist.runtime.deploy import make_actuator
    from simdist.runtime.loop import DeployLoop
    from simdist.runtime.store import ModelStore

    cfg = load_task("ur5e_peg")
    sim = SimRobot("ur5e_peg", "sim", seed=0)
    template, hole = sim.read(), sim.command()
    sim.stop()
    # the plan: 0.8 of a full step along +x every tick (8 mm), for 12 ticks (inside the workspace box)
    monkeypatch.setattr(DeployLoop, "_action", lambda self, k: (np.array([0.8, 0.0, 0.0, 0.0]), "fresh"))

    class BlockedArm:
        control_hz, joint_names = cfg.control_hz, template.joint_names

        def __init__(self) -> None:
            self.sim_time, self.sent = 0.0, []

        def read(self) -> RobotState:
            return dataclasses.replace(template, timestamp=self.sim_time)

        def send_tool_pose(self, pose: np.ndarray) -> None:
            self.sent.append(np.asarray(pose, dtype=np.float64)[:3].copy())
            self.sim_time += 1.0 / self.control_hz

        def hold(self) -> None:
            self.sim_time += 1.0 / self.control_hz

        def stop(self) -> None:
            pass

    arm = BlockedArm()
    store = ModelStore(ur5e_model)
    loop = DeployLoop(
        robot=arm,
        robot_kind="ur5e",
        actuator=make_actuator(arm, cfg, lambda: hole, safety=True),
        store=store,
        planner_config=load_planner_config("cpu", "ur5e", {**FAST_PLANNER, "horizon": store.model.horizon}),
        limits=task_action_limits(cfg),
        command=lambda: hole,
        control_hz=cfg.control_hz,
        episode_steps=3,
    )
    loop.open()
    for k in range(12):
        loop.tick(k)
    assert loop._episode >= 3 and len(arm.sent) == 12
    x = np.stack(arm.sent)[:, 0] - template.tool_pose[0]
    np.testing.assert_allclose(
        x, 0.008 * np.arange(1, 13), atol=1e-9
    )  # 8 mm a tick, across every episode start
