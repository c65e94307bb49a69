"""The project's MuJoCo UR5e peg arm behind a UR e-Series controller's own interfaces, for ur_rtde 1.6.5:
`simdist emulate --task ur5e_peg --address 127.0.0.1`, then `simdist deploy --task ur5e_peg --robot ur5e:127.0.0.1`.

What is emulated, on HOST (given explicitly; ur_rtde's ports are fixed, so one emulator per address; any
127.x.y.z works on Linux):
- RTDE, TCP 30004 (protocol v2, `rtde_protocol`): any number of clients (ur_rtde's receive and control interfaces
  each open one). Each client's output recipe streams at its frequency, capped at the emulator's servo rate
  (125 Hz by default: every data package is one servo cycle, so a client that asks 500 Hz gets 125); its input
  recipes write the controller's registers, shared by all clients (a field another client writes is IN_USE).
- The dashboard server, TCP 29999: the queries ur_rtde sends (PolyscopeVersion, get serial number, is in remote
  control) and the usual state queries (robotmode, safetystatus, safetymode, programState, running, get robot
  model), `stop`, `unlock protective stop`, popups; power, brake, load/play/pause answer "Failed to execute".
- The script ports, TCP 30001-30003: a program is read up to its closing `end`. No URScript is interpreted: ur_rtde's
  own rtde_control.script is recognised and its register protocol runs here, one main-loop pass per servo cycle
  as the script's `sync()` paces it: the command in input_int_register_0 (plus the script's register offset), its
  arguments in input_double_register_0.., the script's state in output_int_register_0 (1 ready, 2 done); the
  script's realtime commands are processed every cycle and answered ready, the others once, answered done, until
  the client clears the register (0); 255 ends the script. Emulated commands: servoJ (11), servoL (24), servoStop
  (16), getJointTorques (38), zeroFtSensor (8), setWatchdog (35, enforced: the script stops when
  input_int_register_0 is not written at the set rate), plus the clear and stopScript ur_rtde sends itself. Any
  other command stops the script (as a URScript runtime error would) with one line on stderr, and is counted; a
  program that is not the control script is counted and stops the running one (a new program replaces it).

State: robot_mode 7 (RUNNING), safety_mode 1 (NORMAL), robot_status_bits power-on plus program-running and
runtime_state 2 (PLAYING) while the script runs (1, STOPPED, otherwise); `timestamp` is the controller clock, one
servo period per cycle, paced in real time; actual_q/qd from the simulator (with the task's sensor noise, as
`sim:PROFILE` measures); actual_TCP_pose the peg tip with the flange's orientation as UR's rotation vector;
actual_TCP_speed the tip's twist in base axes; actual_TCP_force what UR's get_tcp_force reports: the F/T sensor's
wrench in base axes, torque about the tip (ft_raw_wrench carries the sensor-frame reading, which is what the
simulator's own proprio holds: `tcp_force="sensor"` serves that as actual_TCP_force instead); target_q the servo's
joint target. Unlisted outputs are plausible constants or zero.

Motion: servoL's pose becomes the simulator's tool target, the position and the yaw about the vertical (the only
orientation PegEnv's servo tracks: a tilted pose's tilt is ignored and counted); servoJ's joints become a tool
target by forward kinematics (`PegEnv.joint_targets_action`); servoStop and an ended script hold the tool where it
is. servoJ/servoL's time, lookahead and gain are accepted and unused: the profile's servo (gains, servo lag) stands
for the UR's, and its latency_steps (task control periods) delay every command. The simulator clips targets to the
task's workspace, as it clips its own (counted). The bench puts the hole at the task's nominal pose (no
per-episode offset), where a hardware run without --command expects it. A contact force above the task's
termination force is a protective stop: the arm holds, the script stops, safety mode 3 until the dashboard's
`unlock protective stop`.

Faults (`--fault KIND:START_S:DURATION_S`, seconds after the first servo target; `simdist bench faults`):
`state_gap` sends no RTDE data package to any client for the duration (the controller runs on; the timestamps jump
when the packages resume); `vanish` closes every listener and connection (RTDE, dashboard, script ports) for the
duration, then listens again; clients must reconnect. What a real controller does when its RTDE client goes away, and
so what this one does: the program keeps running; the input registers keep their last values (a disconnected
client's registers are only freed for another writer), so rtde_control.script's servo thread keeps servoing the
last target: the arm holds it. Only the RTDE watchdog the client set (ur_rtde's setWatchdog, `rtde_set_watchdog` on
input_int_register_0 with the stop action) stops the script when nothing was written for 1 / frequency s.
Every servo target the script applies is checked at the arm (`servo_check.ServoCheck`: unsafe counts and reasons)
and the time of every stop (servoStop, the script stopped for any reason, a protective stop) is kept.

What differs from a real UR5e, stated: the state changes once per servo cycle (125 Hz, not 500); no primary,
secondary or realtime state streams on 30001-30003 (ur_rtde reads none); servoStop holds at once instead of
decelerating; only RTDE protocol version 2 is accepted; episodes of the task do not end (a diverged simulation is
reset to the start pose, reported in the summary's episodes).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import os
import re
import socket
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import mujoco
import numpy as np

from simdist.errors import ConfigError, RobotConnectionError
from simdist.hardware.emulated_faults import Fault, FaultSchedule
from simdist.hardware.sim_robot import SimRobot
from simdist.robots.ur5e import rtde_protocol as rtde
from simdist.robots.ur5e import workspace
from simdist.robots.ur5e.hardware import quaternion_to_rotvec, rotvec_to_matrix
from simdist.robots.ur5e.servo_check import ServoCheck
from simdist.runtime.realtime import run_paced
from simdist.sim.config import TaskConfig

RTDE_PORT, DASHBOARD_PORT, SCRIPT_PORTS = 30004, 29999, (30001, 30002, 30003)
CONTROLLER_VERSION = (5, 15, 0, 0)
POLYSCOPE_VERSION = "URSoftware 5.15.0.0 (simdist emulator)"
SERIAL_NUMBER = "20235500001"
SERVO_HZ = 125.0
MAX_RTDE_HZ = 500.0
RUN_FOREVER_S = 1e7
TILT_TOLERANCE_RAD = 0.05
ROBOT_MODE_RUNNING, SAFETY_NORMAL, SAFETY_PROTECTIVE_STOP = 7, 1, 3
RUNTIME_STOPPED, RUNTIME_PLAYING = 1, 2
STATUS_POWER_ON, STATUS_PROGRAM_RUNNING = 1, 2
SAFETY_BIT_NORMAL, SAFETY_BIT_PROTECTIVE_STOP = 1, 4
SCRIPT_READY, SCRIPT_DONE = 1, 2
STOP_SCRIPT = 255
COMMAND_NAMES = {
    0: "clear",
    8: "zeroFtSensor",
    11: "servoJ",
    16: "servoStop",
    24: "servoL",
    35: "setWatchdog",
    38: "getJointTorques",
    STOP_SCRIPT: "stopScript",
}
# rtde_control.script's main loop: these are processed every cycle and answered ready, without the done/clear step
REALTIME_COMMANDS = frozenset({24, 11, 9, 10, 6, 25, 26, 27, 38, 58, 66, 67, 68, 69, 70, 71})
CONTROL_SCRIPT = re.compile(r"^def rtde_control\(\):", re.M)
PROGRAM_START = re.compile(r"^(def|sec)\s+(\w+)\s*\(\s*\)\s*:", re.M)
ZERO_OUTPUTS: dict[str, Any] = {
    name: (0.0,) * int(rtde.TYPE_FORMATS[kind][:-1])
    if kind.startswith("VECTOR")
    else (False if kind == "BOOL" else 0)
    for name, kind in rtde.OUTPUT_TYPES.items()
}
CONSTANT_OUTPUTS: dict[str, Any] = {
    "joint_mode": (253,) * 6,  # JOINT_RUNNING
    "joint_temperatures": (32.0,) * 6,
    "speed_scaling": 1.0,
    "target_speed_fraction": 1.0,
    "actual_main_voltage": 48.0,
    "actual_robot_voltage": 48.0,
    "actual_joint_voltage": (48.0,) * 6,
    "tool_temperature": 32.0,
    "time_scale_source": 0,
}


def parse_host(address: str) -> str:
    """`HOST`: an IP address or localhost, given explicitly (it takes the robot's ports there); no port (ur_rtde's
    are fixed)."""
    host = address.strip()
    if not host:
        raise ConfigError(
            "the UR5e emulator takes the robot's ports on a host: give it, e.g. --address 127.0.0.1"
        )
    if ":" in host:
        raise ConfigError(
            f"UR5e emulator address '{address}': give a host only; ur_rtde connects to the fixed ports "
            f"{RTDE_PORT} (RTDE), {DASHBOARD_PORT} (dashboard) and {SCRIPT_PORTS[-1]} (script)"
        )
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ConfigError(
                f"UR5e emulator address '{address}' is not an IP address (e.g. 127.0.0.1)"
            ) from None
    return host


def _warn(message: str) -> None:
    print(f"ur5e emulator: {message}", file=sys.stderr, flush=True)


# -- the arm: the simulator behind the servo ------------------------------------------------------------------------
class EmulatedArm:
    """The peg env (one member) stepped one servo period at a time; tool targets in, RTDE output values out."""

    def __init__(self, cfg: TaskConfig, profile: str, *, seed: int, servo_hz: float, tcp_force: str) -> None:
        substeps = 1.0 / (servo_hz * cfg.physics_dt)
        if servo_hz <= 0 or abs(substeps - round(substeps)) > 1e-6:
            raise ConfigError(
                f"UR5e emulator servo rate {servo_hz} Hz is not a whole number of {cfg.physics_dt} s physics steps"
            )
        if tcp_force not in ("base", "sensor"):
            raise ConfigError(f"tcp_force must be 'base' or 'sensor', got '{tcp_force}'")
        self.protective_stop_n = float(cfg.termination.get("max_force_n", 200.0))
        termination = {**cfg.termination, "max_force_n": math.inf}  # a protective stop here, not a reset
        # the bench: the hole stands at the nominal pose, where a hardware run without --command expects it
        peg = dataclasses.replace(
            cfg.peg, ranges={**cfg.peg.ranges, cfg.peg.range_name: 0.0}, hole_yaw_range=0.0
        )
        run = dataclasses.replace(
            cfg, control_hz=servo_hz, episode_seconds=RUN_FOREVER_S, termination=termination, peg=peg
        )
        self.robot = SimRobot(run, profile, seed=seed)
        self.env: Any = self.robot.env
        self.tcp_force = tcp_force
        self.latency_s = float(self.env.params["latency_steps"][0]) / float(cfg.control_hz)
        self.hole_depth = cfg.peg.hole_depth
        self._ft_site = self.env.models[0].site("ft").id
        self._queue: deque[tuple[float, Callable[[], None]]] = deque()
        self._ft_offset = np.zeros(6)
        self.protective_stop = False
        self.servoing = False
        self.counts = {"clipped_targets": 0, "tilt_ignored": 0, "protective_stops": 0}
        # controller time the peg first reached the task's success depth, and of the first servo target applied
        self.inserted_at: float | None = None
        self.peak_force_n = 0.0
        self.first_servo_at: float | None = None
        self._tracking = [0.0, 0]  # sum of |target - tip| over servo cycles, and their count
        self.history: deque[tuple[float, tuple[float, ...], tuple[float, ...]]] = deque(maxlen=4096)

    @property
    def time(self) -> float:
        return self.robot.sim_time

    # commands (delayed by the profile's latency) ---------------------------------------------------------------
    def _later(self, action: Callable[[], None]) -> None:
        if not self.protective_stop:
            self._queue.append((self.time + self.latency_s, action))

    def servo_pose(self, pose: np.ndarray) -> None:
        """servoL: (x, y, z, rx, ry, rz) of the TCP (peg tip), base frame."""
        pose = np.asarray(pose, dtype=np.float64)
        if pose.shape != (6,) or not np.isfinite(pose).all():
            raise ValueError(f"servoL pose is not 6 finite values: {pose.tolist()}")
        rot = rotvec_to_matrix(pose[3:])
        if math.acos(float(np.clip(-rot[2, 2], -1.0, 1.0))) > TILT_TOLERANCE_RAD:
            self.counts["tilt_ignored"] += 1
        yaw = math.atan2(rot[1, 0], rot[0, 0])
        self._later(lambda: self._target(pose[:3], yaw))

    def servo_joints(self, q: np.ndarray) -> None:
        """servoJ: joint targets, tracked as the tool target they put the tool at."""
        q = np.asarray(q, dtype=np.float64)
        if q.shape != (6,) or not np.isfinite(q).all():
            raise ValueError(f"servoJ targets are not 6 finite values: {q.tolist()}")
        self._later(lambda: self._joints(q))

    def hold(self) -> None:
        self._later(self._hold_now)

    def _target(self, position: np.ndarray, yaw: float) -> None:
        low, high = workspace(self.env.command[0, :3], self.hole_depth)
        if np.any(position < low - 1e-6) or np.any(position > high + 1e-6):
            self.counts["clipped_targets"] += 1
        self.env.target_pos[0] = position
        self.env.target_yaw[0] = yaw
        self.servoing = True
        if self.first_servo_at is None:
            self.first_servo_at = self.time

    def _joints(self, q: np.ndarray) -> None:
        self.env.joint_targets_action(0, q)
        self.servoing = True

    def _hold_now(self) -> None:
        data = self.env.datas[0]
        rot = data.site_xmat[self.env._flange].reshape(3, 3)
        self.env.target_pos[0] = data.site_xpos[self.env._tip]
        self.env.target_yaw[0] = math.atan2(rot[1, 0], rot[0, 0])
        self.servoing = False

    def joint_torques(self) -> np.ndarray:
        return self.env.datas[0].actuator_force[:6].copy()

    def zero_ft(self) -> None:
        self._ft_offset = self._tcp_wrench(self.robot.read())

    def release_protective_stop(self) -> bool:
        was, self.protective_stop = self.protective_stop, False
        return was

    # the servo cycle --------------------------------------------------------------------------------------------
    def step(self) -> bool:
        """Apply the commands now due, advance one servo period; True when this step protective-stopped the arm."""
        while self._queue and self._queue[0][0] <= self.time + 1e-9:
            self._queue.popleft()[1]()
        self.robot.send_action(np.zeros(self.robot.action_dim, dtype=np.float32))
        data = self.env.datas[0]
        if self.servoing:
            self._tracking[0] += float(np.linalg.norm(self.env.target_pos[0] - data.site_xpos[self.env._tip]))
            self._tracking[1] += 1
        if self.inserted_at is None and bool(self.env.success[0]):
            self.inserted_at = self.time
        force = float(np.linalg.norm(data.sensor("ft_force").data))
        self.peak_force_n = max(self.peak_force_n, force)
        if force > self.protective_stop_n and not self.protective_stop:
            self._queue.clear()
            self._hold_now()
            self.protective_stop = True
            self.counts["protective_stops"] += 1
            return True
        return False

    def _tcp_wrench(self, state: Any) -> np.ndarray:
        """The wrench UR reports as actual_TCP_force (before zeroFtSensor's offset): base axes, torque about the TCP."""
        sensor = np.asarray(state.tool_wrench, dtype=np.float64)
        if self.tcp_force == "sensor":
            return sensor
        data = self.env.datas[0]
        rot = data.site_xmat[self._ft_site].reshape(3, 3)
        force, torque = rot @ sensor[:3], rot @ sensor[3:]
        lever = data.site_xpos[self._ft_site] - data.site_xpos[self.env._tip]
        return np.concatenate([force, torque + np.cross(lever, force)])

    def measured(self) -> dict[str, Any]:
        """The RTDE output values of this cycle that come from the simulator."""
        state = self.robot.read()
        data, env = self.env.datas[0], self.env
        pose = np.asarray(state.tool_pose, dtype=np.float64)
        tcp = (*pose[:3], *quaternion_to_rotvec(pose[3:7]))
        twist = np.asarray(state.tool_twist, dtype=np.float64)
        lever = data.site_xpos[env._tip] - data.site_xpos[env._flange]
        speed = (*(twist[:3] + np.cross(twist[3:], lever)), *twist[3:])
        c, s = math.cos(env.target_yaw[0]), math.sin(env.target_yaw[0])
        target_rot = np.array([[c, s, 0.0], [s, -c, 0.0], [0.0, 0.0, -1.0]]).reshape(-1)
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, target_rot)
        q = tuple(float(v) for v in state.joint_positions)
        stamp = self.time
        self.history.append((stamp, q, tuple(float(v) for v in tcp)))
        torques = data.actuator_force[:6]
        return {
            "timestamp": stamp,
            "actual_q": q,
            "actual_qd": tuple(state.joint_velocities),
            "target_q": tuple(env.joint_target[0]),
            "actual_TCP_pose": tcp,
            "actual_TCP_speed": speed,
            "actual_TCP_force": tuple(self._tcp_wrench(state) - self._ft_offset),
            "ft_raw_wrench": tuple(state.tool_wrench),
            "target_TCP_pose": (*env.target_pos[0], *quaternion_to_rotvec(quat)),
            "target_moment": tuple(torques),
            "actual_current_as_torque": tuple(torques),
            "payload": float(env.models[0].body_mass[env._peg_body]),
        }

    def served_at(self, timestamp: float) -> dict[str, tuple[float, ...]] | None:
        """What the emulator served with `timestamp` (its last 4096 cycles): {actual_q, actual_TCP_pose}."""
        for stamp, q, tcp in reversed(self.history):
            if stamp == timestamp:
                return {"actual_q": q, "actual_TCP_pose": tcp}
        return None

    def tracking(self) -> float | None:
        total, count = self._tracking
        return total / count if count else None


# -- the control script's register protocol -------------------------------------------------------------------------
def _offset(program: str, kind: str) -> int:
    """The register offset ur_rtde injected into the script (0, or 24 for the upper range)."""
    found = re.search(rf"reg_offset_{kind}\s*=\s*(?:#[^\n]*\n)?\s*(\d+)", program)
    return int(found.group(1)) if found else 0


class ControlScript:
    """rtde_control.script as the controller would run it: one pass of its main loop per servo cycle."""

    def __init__(
        self,
        arm: EmulatedArm,
        *,
        on_target: Callable[[int, np.ndarray], None] | None = None,
        on_stop: Callable[[str], None] | None = None,
    ) -> None:
        self.arm = arm
        # each servo target once, when it arrives (the script applies it every cycle), and each stop of the arm
        self.on_target, self.on_stop = on_target, on_stop
        self._fresh = False
        self.running = False
        self.executing = False
        self.int_offset = self.float_offset = 0
        self.watchdog_hz = 0.0
        self.starts = 0
        self.commands: dict[str, int] = {}
        self.refused: dict[str, int] = {}
        self.stops: list[str] = []

    def _in_int(self, i: int) -> str:
        return f"input_int_register_{i + self.int_offset}"

    def _out_int(self, i: int) -> str:
        return f"output_int_register_{i + self.int_offset}"

    def _floats(self, inputs: dict[str, Any], first: int, count: int) -> np.ndarray:
        return np.array(
            [inputs[f"input_double_register_{i + self.float_offset}"] for i in range(first, first + count)]
        )

    def received(self, cmd: int) -> None:
        """Count a command a client wrote (once per data package; the script sees it every cycle it stays)."""
        name = COMMAND_NAMES.get(cmd, str(cmd))
        self.commands[name] = self.commands.get(name, 0) + 1
        self._fresh = True

    def start(self, program: str, outputs: dict[str, Any]) -> None:
        self.int_offset, self.float_offset = _offset(program, "int"), _offset(program, "float")
        self.running, self.executing, self.watchdog_hz = True, False, 0.0
        self.starts += 1
        outputs[self._out_int(2)] = 65536  # reset_async_progress(): change count 1, no operation running
        outputs[self._out_int(0)] = SCRIPT_READY

    def stop(self, reason: str, *, quiet: bool = False) -> None:
        if self.running:
            self.running = False
            self.stops.append(reason)
            self.arm.hold()
            if self.on_stop is not None:
                self.on_stop(reason)
            if not quiet:
                _warn(f"the control script stopped: {reason}")

    def cycle(self, inputs: dict[str, Any], outputs: dict[str, Any], now: float, kicked_at: float) -> None:
        if not self.running:
            return
        if self.watchdog_hz > 0 and now - kicked_at > 1.0 / self.watchdog_hz:
            self.stop(f"the RTDE watchdog ({self.watchdog_hz:g} Hz on {self._in_int(0)}) expired")
            return
        cmd = int(inputs.get(self._in_int(0), 0))
        if cmd in REALTIME_COMMANDS:
            self._process(cmd, inputs, outputs)
            if self.running:
                outputs[self._out_int(0)] = SCRIPT_READY
        elif cmd == 0:
            self.executing = False
            outputs[self._out_int(0)] = SCRIPT_READY
        elif not self.executing:
            self.executing = True
            self._process(cmd, inputs, outputs)

    def _process(self, cmd: int, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        if cmd not in COMMAND_NAMES:
            self.refused[str(cmd)] = self.refused.get(str(cmd), 0) + 1
            self.stop(f"command {cmd} of rtde_control.script is not emulated (only {sorted(COMMAND_NAMES)})")
            return
        fresh, self._fresh = self._fresh, False
        try:
            if cmd in (24, 11) and fresh and self.on_target is not None:
                self.on_target(cmd, self._floats(inputs, 0, 6))
            if cmd == 24:
                self.arm.servo_pose(self._floats(inputs, 0, 6))
            elif cmd == 11:
                self.arm.servo_joints(self._floats(inputs, 0, 6))
            elif cmd == 16:
                self.arm.hold()
                if self.on_stop is not None:
                    self.on_stop("servoStop")
            elif cmd == 38:
                for i, torque in enumerate(self.arm.joint_torques()):
                    outputs[f"output_double_register_{i + self.float_offset}"] = float(torque)
            elif cmd == 8:
                self.arm.zero_ft()
            elif cmd == 35:
                self.watchdog_hz = float(self._floats(inputs, 0, 1)[0])
            elif cmd == STOP_SCRIPT:
                self.stop("stopScript", quiet=True)
                return
        except ValueError as exc:  # the script's get_inverse_kin / servoj would fail at run time
            self.stop(str(exc))
            return
        outputs[self._out_int(0)] = SCRIPT_DONE


# -- connections ----------------------------------------------------------------------------------------------------
class _Session:
    def __init__(self, emulator: UR5eEmulator, conn: socket.socket, port: int) -> None:
        self.emulator, self.conn, self.port = emulator, conn, port
        self.peer = "{}:{}".format(*conn.getpeername()[:2])
        self._lock = threading.Lock()

    def send(self, data: bytes) -> None:
        with self._lock:
            self.conn.sendall(data)

    def close(self) -> None:
        try:
            self.conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()

    def serve(self) -> None:
        try:
            self.run()
        except (rtde.ProtocolError, UnicodeDecodeError) as exc:
            _warn(f"port {self.port}, client {self.peer}: {exc}; connection closed")
        except OSError:
            pass
        finally:
            self.emulator._forget(self)
            self.close()

    def run(self) -> None:
        raise NotImplementedError


class RTDESession(_Session):
    """One RTDE client: its recipes, and a stream of data packages once started."""

    def __init__(self, emulator: UR5eEmulator, conn: socket.socket, port: int) -> None:
        super().__init__(emulator, conn, port)
        self.output: rtde.Recipe | None = None
        self.inputs: dict[int, rtde.Recipe] = {}
        self.started = False
        self._pending = b""
        self._next_due = 0.0
        self._outputs_set = self._inputs_set = 0  # recipe ids: outputs and inputs are numbered apart, from 1
        self.sent = self.dropped = 0

    def run(self) -> None:
        buffer = b""
        while data := self.conn.recv(65536):
            packets, buffer = rtde.split_packets(buffer + data)
            for ptype, payload in packets:
                self._handle(ptype, payload)

    def _reply(self, ptype: int, payload: bytes) -> None:
        self.send(rtde.encode(ptype, payload))

    def _handle(self, ptype: int, payload: bytes) -> None:
        kind = rtde.PackageType
        if ptype == kind.REQUEST_PROTOCOL_VERSION:
            self._reply(ptype, rtde.accepted(rtde.parse_protocol_request(payload) == rtde.PROTOCOL_VERSION))
        elif ptype == kind.GET_URCONTROL_VERSION:
            self._reply(ptype, rtde.controller_version(*CONTROLLER_VERSION))
        elif ptype == kind.CONTROL_PACKAGE_SETUP_OUTPUTS:
            frequency, names = rtde.parse_output_setup(payload)
            types = rtde.types_of(names, rtde.OUTPUT_TYPES)
            recipe_id = 0
            if rtde.NOT_FOUND not in types and 0 < frequency <= MAX_RTDE_HZ:
                self._outputs_set += 1
                recipe_id = self._outputs_set
                self.output = rtde.Recipe(recipe_id, names, types, frequency)
            self._reply(ptype, rtde.setup_reply(recipe_id, types))
        elif ptype == kind.CONTROL_PACKAGE_SETUP_INPUTS:
            names = rtde.parse_input_setup(payload)
            types = self.emulator._claim_inputs(self, names)
            recipe_id = 0
            if rtde.NOT_FOUND not in types and rtde.IN_USE not in types:
                self._inputs_set += 1
                recipe_id = self._inputs_set
                self.inputs[recipe_id] = rtde.Recipe(recipe_id, names, types)
            self._reply(ptype, rtde.setup_reply(recipe_id, types))
        elif ptype == kind.CONTROL_PACKAGE_START:
            with self._lock:
                self.conn.sendall(rtde.encode(ptype, rtde.accepted(True)))
                self.started, self._next_due = True, 0.0
        elif ptype == kind.CONTROL_PACKAGE_PAUSE:
            with self._lock:
                self.started = False
                self.conn.sendall(rtde.encode(ptype, rtde.accepted(True)))
        elif ptype == kind.DATA_PACKAGE:
            recipe = self.inputs.get(rtde.recipe_id_of(payload))
            if recipe is None:
                raise rtde.ProtocolError(f"data package for input recipe {payload[0]}, which was not set up")
            self.emulator._write_inputs(recipe.unpack(payload))
        elif ptype == kind.TEXT_MESSAGE:
            rtde.parse_text_message(payload)  # a client's log line: read and dropped (the controller logs it)
        else:
            raise rtde.ProtocolError(f"unknown RTDE package type {ptype}")

    def publish(self, now: float, values: Any) -> None:
        """This cycle's data package, if one is due; never blocks: a client that does not read loses packages."""
        recipe = self.output
        if not self.started or recipe is None or now + 1e-9 < self._next_due:
            return
        period = 1.0 / recipe.frequency
        self._next_due = max(self._next_due + period, now + period / 2)
        packet = rtde.encode(rtde.PackageType.DATA_PACKAGE, recipe.pack(values))
        with self._lock:
            try:
                if self._pending:
                    self._pending = self._pending[self.conn.send(self._pending, socket.MSG_DONTWAIT) :]
                if self._pending:
                    self.dropped += 1
                    return
                self._pending = packet[self.conn.send(packet, socket.MSG_DONTWAIT) :]
                self.sent += 1
            except BlockingIOError:
                self.dropped += 1
            except OSError:
                self.started = False


class DashboardSession(_Session):
    def run(self) -> None:
        self.send(b"Connected: Universal Robots Dashboard Server\n")
        for line in self.conn.makefile("rb"):
            reply = self.emulator._dashboard(line.decode().strip())
            self.send(reply.encode() + b"\n")
            if reply == "Disconnected":
                return


class ScriptSession(_Session):
    """A URScript client: programs are cut out of the stream at their closing top-level `end`."""

    def run(self) -> None:
        text = ""
        while data := self.conn.recv(65536):
            text += data.decode()
            while True:
                program, text = _next_program(text)
                if program is None:
                    break
                self.emulator._run_program(program, self.port)


def _next_program(text: str) -> tuple[str | None, str]:
    """The first complete program (def/sec ... end, or one bare line) in `text`, and the rest."""
    stripped = text.lstrip()
    if not stripped or "\n" not in stripped:
        return None, text
    if not PROGRAM_START.match(stripped):
        line, rest = stripped.split("\n", 1)
        return line, rest
    end = re.search(r"^end[ \t\r]*$", stripped, re.M)
    if end is None:
        return None, text
    return stripped[: end.end()], stripped[end.end() :]


# -- the controller ---------------------------------------------------------------------------------------------------
class UR5eEmulator:
    """One emulated UR5e (e-Series, PolyScope 5.15) on `host`; `serve()` runs it in real time until stopped.

    Args:
        cfg, profile, seed: the task, its dynamics profile and the simulator's seed (as `sim:PROFILE`).
        host: the address it listens on (ur_rtde's ports are fixed).
        servo_hz: the servo cycle (physics steps per cycle times the task's physics_dt); RTDE streams at most at it.
        tcp_force: "base" (UR's actual_TCP_force: base axes, about the TCP) or "sensor" (the simulator's F/T frame).
    """

    def __init__(
        self,
        cfg: TaskConfig,
        profile: str,
        *,
        host: str = "127.0.0.1",
        seed: int = 0,
        servo_hz: float = SERVO_HZ,
        tcp_force: str = "base",
        faults: list[Fault] | None = None,
    ) -> None:
        self.cfg, self.host = cfg, host
        self.arm = EmulatedArm(cfg, profile, seed=seed, servo_hz=servo_hz, tcp_force=tcp_force)
        self.faults = FaultSchedule(faults)  # timed from the first servo target
        self.check = ServoCheck(
            hole=np.asarray(cfg.peg.hole_center),
            hole_depth=cfg.peg.hole_depth,
            step_m=cfg.peg.action_scale_m * cfg.action_clip,
            step_rad=cfg.peg.action_scale_rad * cfg.action_clip,
            control_hz=cfg.control_hz,
        )
        self.script = ControlScript(self.arm, on_target=self._on_target, on_stop=self._on_stop)
        self._vanished = False
        self.period = 1.0 / servo_hz
        self._lock = threading.Lock()  # the controller: registers, script, arm
        self.inputs: dict[str, Any] = {n: ZERO_OUTPUTS[n] for n in rtde.INPUT_TYPES if n in ZERO_OUTPUTS}
        self.outputs: dict[str, Any] = {n: v for n, v in ZERO_OUTPUTS.items() if n.startswith("output_")}
        self._owners: dict[str, RTDESession] = {}
        self._kicked_at = 0.0
        self._listeners: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._sessions: set[_Session] = set()
        self._closing = threading.Event()
        self.counts = {
            "steps": 0,
            "late_steps": 0,
            "rtde_clients": 0,
            "dashboard_clients": 0,
            "script_clients": 0,
            "control_scripts": 0,
            "other_programs": 0,
            "dashboard_unknown": 0,
        }
        self._rtde_sent = self._rtde_dropped = 0

    # -- sockets ------------------------------------------------------------------------------------------------
    def open(self) -> UR5eEmulator:
        servers = [(RTDE_PORT, "RTDE", RTDESession), (DASHBOARD_PORT, "dashboard", DashboardSession)]
        servers += [(port, "script", ScriptSession) for port in SCRIPT_PORTS]
        for port, name, session in servers:
            try:
                listener = socket.create_server((self.host, port), backlog=8)
            except OSError as exc:
                self._close_listeners()
                raise RobotConnectionError(
                    f"cannot listen on {self.host}:{port} ({name}): {os.strerror(exc.errno or 0)}"
                ) from None
            listener.settimeout(0.25)
            self._listeners.append(listener)
            self._spawn(self._accept, listener, port, name, session)
        return self

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(
            target=target, args=args, daemon=True, name=f"ur5e-emulator-{target.__name__}"
        )
        thread.start()
        self._threads.append(thread)

    def _accept(self, listener: socket.socket, port: int, name: str, kind: type[_Session]) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                conn.settimeout(None)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                session = kind(self, conn, port)
            except OSError:  # gone before it was served
                conn.close()
                continue
            with self._lock:
                self._sessions.add(session)
                self.counts[f"{name if name != 'RTDE' else 'rtde'}_clients"] += 1
            self._spawn(session.serve)

    def _forget(self, session: _Session) -> None:
        with self._lock:
            self._sessions.discard(session)
            if isinstance(session, RTDESession):
                self._rtde_sent += session.sent
                self._rtde_dropped += session.dropped
                for name in [n for n, owner in self._owners.items() if owner is session]:
                    del self._owners[name]

    def _close_listeners(self) -> None:
        for listener in self._listeners:
            listener.close()
        self._listeners.clear()

    def _close_sessions(self) -> None:
        with self._lock:
            sessions = list(self._sessions)
        for session in sessions:
            session.close()

    def _set_vanished(self, gone: bool) -> None:
        """The controller leaves the network (every listener and connection closed; the program keeps running, its
        registers keep their last values) or comes back (listening again; clients must reconnect)."""
        if gone == self._vanished:
            return
        self._vanished = gone
        if gone:
            self._close_listeners()
            self._close_sessions()
            self.counts["vanished"] = self.counts.get("vanished", 0) + 1
        else:
            self.open()

    # -- the check at the arm -----------------------------------------------------------------------------------
    def _on_target(self, cmd: int, values: np.ndarray) -> None:
        """A servo target the script applies (called under the controller's lock)."""
        self.faults.begin()
        env = self.arm.env
        if cmd == 24:
            held = np.array([*env.target_pos[0], env.target_yaw[0]], dtype=np.float64)
            self.check.pose(values, self.faults.time(), held)
        else:
            self.check.joints(values, self.faults.time(), np.asarray(env.joint_target[0], dtype=np.float64))

    def _on_stop(self, why: str) -> None:
        self.check.stopped(self.faults.time(), why)

    # -- what the sessions ask of the controller ----------------------------------------------------------------
    def _claim_inputs(self, session: RTDESession, names: list[str]) -> list[str]:
        types = rtde.types_of(names, rtde.INPUT_TYPES)
        with self._lock:
            owners = [self._owners.get(n) for n in names]
            types = [
                rtde.IN_USE if o not in (None, session) else t for o, t in zip(owners, types, strict=True)
            ]
            if rtde.NOT_FOUND not in types and rtde.IN_USE not in types:
                self._owners.update({n: session for n in names})
        return types

    def _write_inputs(self, values: dict[str, Any]) -> None:
        with self._lock:
            self.inputs.update(values)
            command = self.script._in_int(0)
            if command in values:
                self._kicked_at = self.arm.time
                self.script.received(int(values[command]))

    def _run_program(self, program: str, port: int) -> None:
        with self._lock:
            self.script.stop("a new program replaced it", quiet=True)
            if CONTROL_SCRIPT.search(program):
                self.counts["control_scripts"] += 1
                self._kicked_at = self.arm.time
                self.script.start(program, self.outputs)
                return
            self.counts["other_programs"] += 1
        head = program.strip().splitlines()[0][:80] if program.strip() else "(empty)"
        _warn(f"port {port}: a program other than ur_rtde's control script is not run: {head}")

    def _dashboard(self, query: str) -> str:
        with self._lock:
            running, stopped = self.script.running, self.arm.protective_stop
            safety = "PROTECTIVE_STOP" if stopped else "NORMAL"
            replies = {
                "PolyscopeVersion": POLYSCOPE_VERSION,
                "get serial number": SERIAL_NUMBER,
                "get robot model": "UR5",
                "is in remote control": "true",
                "robotmode": "Robotmode: RUNNING",
                "safetystatus": f"Safetystatus: {safety}",
                "safetymode": f"Safetymode: {safety}",
                "programState": f"{'PLAYING' if running else 'STOPPED'} rtde_control",
                "running": f"Program running: {'true' if running else 'false'}",
                "get loaded program": "No program loaded",
                "close popup": "closing popup",
                "close safety popup": "closing safety popup",
                "quit": "Disconnected",
            }
            if query in replies:
                return replies[query]
            if query == "stop":
                self.script.stop("the dashboard's stop", quiet=True)
                return "Stopped" if running else "Failed to execute: Stop"
            if query == "unlock protective stop":
                if self.arm.release_protective_stop():
                    return "Protective stop releasing"
                return "Cannot unlock protective stop: the robot is not protective stopped"
            if query.startswith("popup "):
                return "showing popup"
            if query.split(" ")[0] in ("play", "pause", "load", "power", "brake", "shutdown"):
                return f"Failed to execute: {query}"
            self.counts["dashboard_unknown"] += 1
            return f"could not understand: '{query}'"

    # -- the servo cycle ----------------------------------------------------------------------------------------
    def _status(self) -> dict[str, Any]:
        running, stopped = self.script.running, self.arm.protective_stop
        safety = SAFETY_PROTECTIVE_STOP if stopped else SAFETY_NORMAL
        return {
            "robot_mode": ROBOT_MODE_RUNNING,
            "safety_mode": safety,
            "safety_status": safety,
            "robot_status_bits": STATUS_POWER_ON | (STATUS_PROGRAM_RUNNING if running else 0),
            "safety_status_bits": SAFETY_BIT_PROTECTIVE_STOP if stopped else SAFETY_BIT_NORMAL,
            "runtime_state": RUNTIME_PLAYING if running else RUNTIME_STOPPED,
        }

    def step(self) -> None:
        """One servo cycle: the script's loop pass, one physics period, a data package to each client due one
        (none while a fault cuts the state or the network)."""
        self._set_vanished(self.faults.active("vanish") is not None)
        with self._lock:
            self.script.cycle(self.inputs, self.outputs, self.arm.time, self._kicked_at)
            if self.arm.step():
                reason = f"protective stop: contact force above {self.arm.protective_stop_n:g} N"
                if self.script.running:
                    self.script.stop(reason)
                else:
                    self._on_stop(reason)
            values = {
                **ZERO_OUTPUTS,
                **CONSTANT_OUTPUTS,
                **self.inputs,
                **self.outputs,
                **self.arm.measured(),
                **self._status(),
            }
            sessions = [s for s in self._sessions if isinstance(s, RTDESession)]
            self.counts["steps"] += 1
        if self.faults.active("state_gap") is not None:
            self.counts["states_dropped"] = self.counts.get("states_dropped", 0) + 1
            return
        for session in sessions:
            session.publish(values["timestamp"], values)

    def serve(self, stop: threading.Event, seconds: float | None = None) -> dict[str, Any]:
        """Run the servo cycle in real time until `stop` (or `seconds`); a summary of what happened."""
        if not self._listeners:
            self.open()
        self.counts["late_steps"] += run_paced(self.step, self.period, stop, seconds)
        return self.summary()

    def summary(self) -> dict[str, Any]:
        with self._lock:
            sessions = [s for s in self._sessions if isinstance(s, RTDESession)]
            episodes = []
            while (ended := self.arm.robot.take_episode_end()) is not None:
                episodes.append(ended)
            return {
                **self.counts,
                **self.arm.counts,
                "rtde_packages": self._rtde_sent + sum(s.sent for s in sessions),
                "rtde_dropped": self._rtde_dropped + sum(s.dropped for s in sessions),
                "commands": dict(self.script.commands),
                "refused_commands": dict(self.script.refused),
                "script_stops": list(self.script.stops),
                "script_running": self.script.running,
                "servo_commands": self.check.commands,
                "unsafe_commands": self.check.unsafe,
                "unsafe_reasons": self.check.reasons,
                "stopped_at_s": [round(t, 3) for t, _ in self.check.stops[:10]],
                "stop_reasons": [why for _, why in self.check.stops[:10]],
                "faults": [dataclasses.asdict(f) for f in self.faults.faults],
                "tracking_m": self.arm.tracking(),
                "inserted_at_s": self.arm.inserted_at,
                "peak_force_n": round(self.arm.peak_force_n, 1),  # the largest F/T force seen
                "first_servo_at_s": self.arm.first_servo_at,
                "episodes": episodes,
                "sim_seconds": self.arm.time,
            }

    def close(self) -> None:
        self._closing.set()
        self._close_listeners()
        self._close_sessions()
        for thread in self._threads:
            thread.join(timeout=2.0)
        self.arm.robot.stop()
