"""UR5e over RTDE (ur_rtde): joint states, TCP pose and wrench in; servoJ joint targets or servoL tool poses out.

servoL is the Cartesian path the peg task uses: the task's tool deltas become a TCP pose target and the UR
controller's own IK tracks it at its servo rate, as the simulator's IK does at the physics rate. The TCP must be
the peg tip (set it on the teach pendant or with RTDEControlInterface.setTcp) for poses to match the task's.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

import numpy as np

from simdist.errors import RobotConnectionError
from simdist.hardware.robot import DISCONNECT_THREAD
from simdist.hardware.state import JointCommand, RobotState
from simdist.robots.ur5e import JOINT_NAMES

log = logging.getLogger(__name__)
PIP_PACKAGE = "ur-rtde==1.6.5"
# The arm's own RTDE watchdog (ur_rtde's setWatchdog: the control script stops when nothing was written for 1 s, the
# deploy's own safe-stop time), set with the first servo command: a PC that crashed, hangs or lost the network
# stops the arm from the controller, with no link needed.
WATCHDOG_HZ = 1.0
# The arm was heard from this recently (the deploy loop's stale-state limit): a command that waits for the script's
# answer (servoStop, stopScript, getJointTorques) gets one; without the state stream ur_rtde waits seconds, then
# reconnects for as long as the stream stays away, and its disconnect waits for that too.
LINK_STALE_S = 0.1
DISCONNECT_WAIT_S = 2.0


def rotvec_to_quaternion(rotvec: np.ndarray) -> np.ndarray:
    """UR's axis-angle rotation vector (rx, ry, rz) as a unit quaternion (w, x, y, z)."""
    r = np.asarray(rotvec, dtype=np.float64)
    angle = float(np.linalg.norm(r))
    if angle < 1e-12:
        return np.array([1.0, 0.0, 0.0, 0.0])
    axis = r / angle
    return np.concatenate([[np.cos(angle / 2.0)], np.sin(angle / 2.0) * axis])


def quaternion_to_rotvec(quaternion: np.ndarray) -> np.ndarray:
    """A unit quaternion (w, x, y, z) as UR's axis-angle rotation vector (angle in [0, pi])."""
    q = np.asarray(quaternion, dtype=np.float64)
    q = q / np.linalg.norm(q)
    if q[0] < 0:
        q = -q
    sin_half = float(np.linalg.norm(q[1:]))
    if sin_half < 1e-12:
        return np.zeros(3)
    angle = 2.0 * np.arctan2(sin_half, q[0])
    return q[1:] / sin_half * angle


def rotvec_to_matrix(rotvec: np.ndarray) -> np.ndarray:
    """UR's rotation vector as a 3 x 3 rotation matrix (Rodrigues)."""
    r = np.asarray(rotvec, dtype=np.float64)
    angle = float(np.linalg.norm(r))
    if angle < 1e-12:
        return np.eye(3)
    k = r / angle
    skew = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    return np.eye(3) + np.sin(angle) * skew + (1.0 - np.cos(angle)) * skew @ skew


def tcp_wrench_to_sensor(wrench: np.ndarray, rotvec: np.ndarray, tcp_offset_m: float) -> np.ndarray:
    """UR's actual_TCP_force (force in base axes, torque about the TCP in base axes) as the F/T sensor's own
    reading, which is what the simulator measures and the model was trained on: both in the flange's axes, the
    torque about the sensor (the flange), `tcp_offset_m` behind the TCP along the tool's z axis."""
    w = np.asarray(wrench, dtype=np.float64).reshape(6)
    rot = rotvec_to_matrix(rotvec)
    force, torque_tcp = w[:3], w[3:]
    lever = rot @ np.array([0.0, 0.0, tcp_offset_m])  # from the sensor to the TCP, base axes
    torque_sensor = torque_tcp + np.cross(lever, force)
    return np.concatenate([rot.T @ force, rot.T @ torque_sensor])


def _import_rtde() -> tuple[Any, Any]:
    try:
        import rtde_control
        import rtde_receive
    except ImportError:
        raise RobotConnectionError(
            f"the UR5e adapter needs ur_rtde: pip install {PIP_PACKAGE} (or pip install 'simdist[hardware]')"
        ) from None
    return rtde_receive, rtde_control


class UR5eRobot:
    """A UR5e (e-Series) driven by servoJ; build it with `UR5eRobot.connect(host)`.

    servoJ is given `1 / control_hz` as its time so that the controller interpolates between our targets;
    `lookahead_time` (0.03-0.2 s) and `gain` (100-2000) are ur_rtde's smoothing and stiffness of the servo.
    """

    joint_names = JOINT_NAMES

    def __init__(
        self,
        receive: Any,
        control: Any | None,
        *,
        control_hz: float = 10.0,
        lookahead_time: float = 0.1,
        gain: float = 300.0,
        stop_deceleration: float = 2.0,
        tcp_offset_m: float = 0.08,
        watchdog_hz: float = 0.0,
    ) -> None:
        self._receive = receive
        self.tcp_offset_m = float(tcp_offset_m)  # flange (F/T sensor) to TCP (the peg tip) along the tool z
        self._control = control
        self.control_hz = float(control_hz)
        self.lookahead_time = float(lookahead_time)
        self.gain = float(gain)
        self.stop_deceleration = float(stop_deceleration)
        # the arm's RTDE watchdog (0: none), set with the first servo command (not before: the loop may start late);
        # holds keep it kicked
        self.watchdog_hz = float(watchdog_hz)
        self._watchdog_set = False
        self._servoing = False
        self._stopped = False
        self._robot_time: float | None = None
        self._fresh_at = time.monotonic()
        self._last_state: RobotState | None = None

    @classmethod
    def connect(
        cls,
        host: str,
        *,
        control_hz: float = 10.0,
        rtde_hz: float = 500.0,
        read_only: bool = False,
        **kwargs: Any,
    ) -> UR5eRobot:
        """Open RTDE to the robot at `host` (TCP 30004); `read_only` skips the control script (logging only). The
        control script's RTDE watchdog (`WATCHDOG_HZ`) is set with the first servo command.

        Raises:
            RobotConnectionError: ur_rtde is missing, or the robot is unreachable or refuses the control script.
        """
        rtde_receive, rtde_control = _import_rtde()
        try:
            receive = rtde_receive.RTDEReceiveInterface(host, rtde_hz)
        except RuntimeError as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RobotConnectionError(
                f"UR5e at {host} is unreachable over RTDE (port 30004): {reason}"
            ) from None
        control = None
        if not read_only:
            try:
                control = rtde_control.RTDEControlInterface(host, rtde_hz)
            except RuntimeError as exc:
                receive.disconnect()
                reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise RobotConnectionError(
                    f"UR5e at {host} refused the RTDE control script (remote control enabled?): {reason}"
                ) from None
            kwargs["watchdog_hz"] = WATCHDOG_HZ
        return cls(receive, control, control_hz=control_hz, **kwargs)

    def read(self) -> RobotState:
        if not self._receive.isConnected():
            if self._last_state is None:
                raise RobotConnectionError("UR5e RTDE connection lost")
            # The last state, stamped when it arrived: it goes stale, so the loop holds and still logs the tick, and
            # its watchdog stops the arm safely (as the Go2's adapter keeps its last lowstate); a tick that raised
            # here left the outage out of the bag.
            return self._last_state
        robot_time = self._note_sample()
        pose = np.asarray(self._receive.getActualTCPPose(), dtype=np.float64)
        torques = None
        if self._control is not None and hasattr(self._control, "getJointTorques") and self._link_alive():
            try:
                torques = np.asarray(self._control.getJointTorques(), dtype=np.float64)
            except RuntimeError:  # needs a recent PolyScope; the state is complete without it
                torques = None
        self._last_state = RobotState(
            timestamp=self._fresh_at,
            joint_positions=self._receive.getActualQ(),
            joint_velocities=self._receive.getActualQd(),
            joint_torques=torques if torques is not None and torques.size == 6 else None,
            tool_pose=np.concatenate([pose[:3], rotvec_to_quaternion(pose[3:6])]),
            tool_twist=self._receive.getActualTCPSpeed(),
            tool_wrench=tcp_wrench_to_sensor(self._receive.getActualTCPForce(), pose[3:6], self.tcp_offset_m),
            joint_names=self.joint_names,
            robot_time=robot_time,
        )
        return self._last_state

    def _require_control(self) -> Any:
        if self._control is None:
            raise RobotConnectionError("UR5e was connected read-only; it cannot be commanded")
        if self._stopped:
            raise RobotConnectionError("UR5e was stopped; connect again to command it")
        return self._control

    def _servo_control(self) -> Any:
        """The control interface for a servo command; the first one sets the arm's RTDE watchdog."""
        control = self._require_control()
        if self.watchdog_hz > 0 and not self._watchdog_set:
            control.setWatchdog(self.watchdog_hz)
            self._watchdog_set = True
        return control

    def send(self, command: JointCommand) -> None:
        """servoJ to the joint targets (gains are the controller's own; kp/kd are ignored)."""
        control = self._servo_control()
        q = [float(v) for v in command.joint_targets]
        if len(q) != 6:
            raise ValueError(f"UR5e takes 6 joint targets, got {len(q)}")
        ok = control.servoJ(q, 0.0, 0.0, 1.0 / self.control_hz, self.lookahead_time, self.gain)
        if ok is False:
            raise RobotConnectionError(
                "UR5e rejected servoJ (protective stop, or the control script stopped)"
            )
        self._servoing = True

    def send_tool_pose(self, pose: np.ndarray) -> None:
        """servoL to a TCP pose (x, y, z, rx, ry, rz) in the base frame (m, axis-angle rad).

        The controller interpolates towards it over one control period and solves the IK itself at its servo rate.
        """
        control = self._servo_control()
        p = [float(v) for v in np.asarray(pose, dtype=np.float64).reshape(-1)]
        if len(p) != 6 or not np.all(np.isfinite(p)):
            raise ValueError(f"UR5e servoL takes 6 finite values (x, y, z, rx, ry, rz), got {p}")
        ok = control.servoL(p, 0.0, 0.0, 1.0 / self.control_hz, self.lookahead_time, self.gain)
        if ok is False:
            raise RobotConnectionError(
                "UR5e rejected servoL (protective stop, or the control script stopped)"
            )
        self._servoing = True

    def _link_alive(self) -> bool:
        """The arm was heard from within `LINK_STALE_S` (as of the last `read`), so it can answer a command."""
        return time.monotonic() - self._fresh_at <= LINK_STALE_S and bool(self._receive.isConnected())

    def _note_sample(self) -> float:
        """The controller time of the latest sample; a sample seen for the first time is stamped now. The receive
        thread keeps returning the last sample when data stops, so the stamp is what shows staleness."""
        robot_time = float(self._receive.getTimestamp())
        if robot_time != self._robot_time:
            self._robot_time, self._fresh_at = robot_time, time.monotonic()
        return robot_time

    def hold(self) -> None:
        """Leave servo mode decelerating; the controller then holds the arm where it stopped. Holding again keeps
        the RTDE watchdog kicked. With the arm not heard from, nothing is sent: servoStop would block the loop
        waiting for an answer that cannot come (ur_rtde waits seconds, then reconnects), and an unobserved arm is
        left to its watchdog, which stops the script `1 / watchdog_hz` after the last write."""
        control = self._require_control()
        if not self._link_alive():
            return
        if self._servoing:
            control.servoStop(self.stop_deceleration)
            self._servoing = False
        elif self._watchdog_set:
            control.kickWatchdog()

    def stop(self) -> None:
        """Stop servoing, end the control script and disconnect; safe to call twice. With the arm not heard from
        the script is left to its watchdog (stopScript would wait for it forever, reconnecting)."""
        if self._stopped:
            return
        self._stopped = True
        try:
            if self._control is not None:
                # a sample that arrived since the last read (the end of a run comes a while after its last tick)
                with contextlib.suppress(RuntimeError):
                    if self._receive.isConnected():
                        self._note_sample()
                if self._link_alive():
                    if self._servoing:
                        self._control.servoStop(self.stop_deceleration)
                        self._servoing = False
                    self._control.stopScript()
                # in a thread of its own (ur_rtde releases the GIL): without the stream it never returns
                closing = threading.Thread(
                    target=self._control.disconnect, daemon=True, name=DISCONNECT_THREAD
                )
                closing.start()
                closing.join(DISCONNECT_WAIT_S)
                if closing.is_alive():
                    log.error(
                        "UR5e: the RTDE control interface did not disconnect (the arm is not heard from)"
                    )
        finally:
            self._receive.disconnect()
