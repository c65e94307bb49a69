"""Unitree Go2 over unitree_sdk2py (CycloneDDS): rt/lowstate in, rt/lowcmd (PD targets with CRC) out.

Joint order is Unitree's motor order, FR, FL, RR, RL x hip, thigh, calf (motors 0-11), which is also the order of
the MuJoCo model; motors 12-19 of LowCmd_ do not exist on the Go2 and are sent in stop mode.
A stock Go2 speaks CycloneDDS 0.10.x, which does not discover cyclonedds 11 peers: on the robot's network use
cyclonedds 0.10.x with Unitree's unitree_sdk2py (same modules and calls as the `unitree-sdk2py-dimos` build).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import numpy as np

from simdist.errors import RobotConnectionError
from simdist.hardware.state import JointCommand, RobotState
from simdist.robots.go2 import JOINT_NAMES

log = logging.getLogger(__name__)

NUM_MOTORS = 12
LOWCMD_TOPIC = "rt/lowcmd"
LOWSTATE_TOPIC = "rt/lowstate"
PIP_PACKAGE = "unitree-sdk2py-dimos==1.0.3 cyclonedds==11.0.1"

# Values from Unitree's SDK examples: frame header and low-level flag of LowCmd_, servo mode of a motor, and the
# "no position / no velocity" sentinels the motor driver ignores.
HEAD = (0xFE, 0xEF)
LEVEL_LOW = 0xFF
MODE_SERVO = 0x01
MODE_STOP = 0x00
POS_STOP_F = 2.146e9
VEL_STOP_F = 16000.0

# The Go2 motor drivers' gains the model was trained with (see assets/go2.xml).
DEFAULT_KP = 25.0
DEFAULT_KD = 0.5


def _sdk() -> dict[str, Any]:
    """Import unitree_sdk2py lazily, so the core imports without it."""
    try:
        from unitree_sdk2py.core.channel import ChannelFactoryInitialize, ChannelPublisher, ChannelSubscriber
        from unitree_sdk2py.idl.default import unitree_go_msg_dds__LowCmd_
        from unitree_sdk2py.idl.unitree_go.msg.dds_ import LowCmd_, LowState_
        from unitree_sdk2py.utils.crc import CRC
    except ImportError as exc:
        raise RobotConnectionError(
            f"the Go2 adapter needs unitree_sdk2py: pip install {PIP_PACKAGE} ({exc})"
        ) from None
    return {
        "init": ChannelFactoryInitialize,
        "Publisher": ChannelPublisher,
        "Subscriber": ChannelSubscriber,
        "new_lowcmd": unitree_go_msg_dds__LowCmd_,
        "LowCmd_": LowCmd_,
        "LowState_": LowState_,
        "crc": CRC(),
    }


def build_lowcmd(
    command: JointCommand, *, default_kp: float = DEFAULT_KP, default_kd: float = DEFAULT_KD, msg: Any = None
) -> Any:
    """A LowCmd_ carrying `command` for motors 0-11 (servo mode), motors 12-19 stopped, CRC filled in.

    `msg` reuses an existing LowCmd_ (the control loop allocates one); gains left None use the defaults.
    """
    sdk = _sdk()
    if command.joint_targets.shape != (NUM_MOTORS,):
        raise ValueError(f"Go2 takes {NUM_MOTORS} joint targets, got {command.joint_targets.shape[0]}")
    kp = command.kp if command.kp is not None else np.full(NUM_MOTORS, default_kp)
    kd = command.kd if command.kd is not None else np.full(NUM_MOTORS, default_kd)
    tau = command.torque_ff if command.torque_ff is not None else np.zeros(NUM_MOTORS)
    for name, values in (("targets", command.joint_targets), ("kp", kp), ("kd", kd), ("torque", tau)):
        if not np.isfinite(np.asarray(values, dtype=np.float64)).all():  # never to the motors
            raise ValueError(f"Go2 command has non-finite {name}: {np.asarray(values).tolist()}")
    cmd = msg if msg is not None else sdk["new_lowcmd"]()
    cmd.head[0], cmd.head[1] = HEAD
    cmd.level_flag = LEVEL_LOW
    cmd.gpio = 0
    for i, motor in enumerate(cmd.motor_cmd):
        if i < NUM_MOTORS:
            motor.mode = MODE_SERVO
            motor.q = float(command.joint_targets[i])
            motor.dq = 0.0
            motor.kp = float(kp[i])
            motor.kd = float(kd[i])
            motor.tau = float(tau[i])
        else:
            motor.mode = MODE_STOP
            motor.q = POS_STOP_F
            motor.dq = VEL_STOP_F
            motor.kp = motor.kd = motor.tau = 0.0
    cmd.crc = sdk["crc"].Crc(cmd)
    return cmd


def lowstate_to_robot_state(msg: Any, received_at: float) -> RobotState:
    """RobotState from a LowState_ (motors 0-11; quaternion already (w, x, y, z); tick is ms)."""
    motors = msg.motor_state[:NUM_MOTORS]
    imu = msg.imu_state
    return RobotState(
        timestamp=received_at,
        joint_positions=[m.q for m in motors],
        joint_velocities=[m.dq for m in motors],
        joint_torques=[m.tau_est for m in motors],
        imu_quaternion=list(imu.quaternion),
        imu_gyro=list(imu.gyroscope),
        imu_accel=list(imu.accelerometer),
        foot_forces=list(msg.foot_force),
        joint_names=JOINT_NAMES,
        robot_time=float(msg.tick) / 1000.0,
    )


class Go2Robot:
    """A Go2 in low-level mode (sport mode must be released first, as in Unitree's examples).

    Construct with `Go2Robot.connect(network_interface, domain_id)`; the real robot is domain 0 on the wired
    interface, unitree_mujoco and the emulators use domain 1 on `lo`. unitree_sdk2py's channel factory is one per
    process: the first `connect` fixes the domain and interface for the process's lifetime.
    """

    joint_names = JOINT_NAMES

    def __init__(
        self,
        *,
        control_hz: float = 50.0,
        kp: float = DEFAULT_KP,
        kd: float = DEFAULT_KD,
        damping_kd: float = 3.0,
    ) -> None:
        self.control_hz = float(control_hz)
        self.kp = float(kp)
        self.kd = float(kd)
        self.damping_kd = float(damping_kd)
        self._sdk = _sdk()
        self._lock = threading.Lock()
        self._latest: tuple[Any, float] | None = None
        self._arrived = threading.Event()
        self._msg = self._sdk["new_lowcmd"]()
        self._last_target: np.ndarray | None = None
        self._publisher: Any = None
        self._subscriber: Any = None
        self._stopped = False

    @classmethod
    def connect(
        cls, network_interface: str | None, domain_id: int = 0, *, timeout_s: float = 2.0, **kwargs: Any
    ) -> Go2Robot:
        """Join the DDS domain, subscribe to rt/lowstate and wait for the first state.

        Raises:
            RobotConnectionError: unitree_sdk2py missing, DDS cannot start, or no rt/lowstate within `timeout_s`.
        """
        robot = cls(**kwargs)
        sdk = robot._sdk
        try:
            sdk["init"](domain_id, network_interface)
        except Exception as exc:  # the SDK raises a bare Exception when the DDS domain cannot be created
            raise RobotConnectionError(
                f"Go2: cannot start DDS on interface {network_interface!r}, domain {domain_id}: {exc}"
            ) from None
        robot._publisher = sdk["Publisher"](LOWCMD_TOPIC, sdk["LowCmd_"])
        robot._publisher.Init()
        robot._subscriber = sdk["Subscriber"](LOWSTATE_TOPIC, sdk["LowState_"])
        robot._subscriber.Init(robot._on_lowstate, 10)
        if not robot._arrived.wait(timeout_s):
            robot.stop()
            raise RobotConnectionError(
                f"Go2: no {LOWSTATE_TOPIC} on interface {network_interface!r}, domain {domain_id} within "
                f"{timeout_s:g} s (robot on, cable in, sport mode released?)"
            )
        return robot

    def _on_lowstate(self, msg: Any) -> None:
        # Called on a DDS thread: keep it to a stamp and a swap.
        with self._lock:
            self._latest = (msg, time.monotonic())
        self._arrived.set()

    def read(self) -> RobotState:
        with self._lock:
            latest = self._latest
        if latest is None:
            raise RobotConnectionError(f"Go2: no {LOWSTATE_TOPIC} received yet")
        return lowstate_to_robot_state(*latest)

    def _publish(self, command: JointCommand) -> None:
        if self._stopped or self._publisher is None:
            raise RobotConnectionError("Go2 is stopped or not connected; connect again to command it")
        build_lowcmd(command, default_kp=self.kp, default_kd=self.kd, msg=self._msg)
        if self._publisher.Write(self._msg) is False:
            raise RobotConnectionError(f"Go2: writing {LOWCMD_TOPIC} failed")

    def send(self, command: JointCommand) -> None:
        self._publish(command)
        self._last_target = command.joint_targets.copy()

    @property
    def last_target(self) -> np.ndarray | None:
        """The joint targets last sent (None before the first command)."""
        return None if self._last_target is None else self._last_target.copy()

    def hold(self) -> None:
        """PD-hold the last target sent, or the measured posture if none was sent yet; a joint whose measured
        position is not finite is damped instead (kp 0 at Unitree's stop position), never held at NaN."""
        target = self._last_target if self._last_target is not None else self.read().joint_positions
        kp, kd = np.full(NUM_MOTORS, self.kp), np.full(NUM_MOTORS, self.kd)
        unknown = ~np.isfinite(target)
        if unknown.any():
            log.warning(
                "Go2: no finite position to hold for joints %s; damping them", np.flatnonzero(unknown)
            )
            kp[unknown], kd[unknown] = 0.0, self.damping_kd
            # not a target to hold later (only the measurement was unknown: nothing was sent before)
            self._publish(JointCommand(np.where(unknown, POS_STOP_F, target), kp=kp, kd=kd))
            return
        self.send(JointCommand(target, kp=kp, kd=kd))

    def damp(self) -> None:
        """Damping mode (kp 0, kd `damping_kd`): the motors only resist motion and the robot sinks down slowly.
        The safe stop when commands stopped coming; the channels stay open, so the state is still read."""
        if self._publisher is not None and self._latest is not None:
            measured = self.read().joint_positions
            damping = JointCommand(
                np.where(np.isfinite(measured), measured, POS_STOP_F),  # kp 0: the position is not used
                kp=np.zeros(NUM_MOTORS),
                kd=np.full(NUM_MOTORS, self.damping_kd),
            )
            self._publish(damping)

    def stop(self) -> None:
        """Damping mode (`damp`), then close the channels."""
        if self._stopped:
            return
        try:
            self.damp()
        finally:
            self._stopped = True
            for channel in (self._subscriber, self._publisher):
                if channel is not None:
                    channel.Close()
