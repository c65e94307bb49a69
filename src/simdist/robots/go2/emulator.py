"""The project's MuJoCo Go2 behind the real robot's DDS interface: `simdist emulate --task go2_slope --address lo:1`.

It speaks what `Go2Robot` (and Unitree's own examples) speak: it subscribes to rt/lowcmd (`unitree_go` LowCmd_) and
publishes rt/lowstate (LowState_) with the SDK's message types and CRC, on the given interface and DDS domain.
A command with a bad CRC or header is ignored, as the robot ignores it, and counted. The motors follow the
robot's command law, tau = kp (q_des - q) + kd (dq_des - dq) + tau_ff, on each of motors 0-11 in servo mode: the
gains reach MuJoCo's position servos (scaled by the profile's kp_scale / kd_scale, as the simulator's own motors
are) and tau_ff and kd * dq_des are applied as joint torques; kp 0 with kd > 0 is the damping mode. Everything else
of the dynamics profile (friction, ground, latency, servo lag, sensor noise) is the simulator's, so a run against
the emulator is the in-process `sim:PROFILE` run with the DDS transport and the real-time clock in between.

What differs from a real Go2, stated: the physics advances one control period per step (not at the motors'
kHz rate), so lowstate is published at the task's control rate rather than 500 Hz. A real Go2's motor loop applies
a command within a couple of milliseconds of its arrival; stepping on its own 50 Hz clock, the emulator would apply
it at its next step, up to a whole period later depending on how the two clocks happen to be phased (one extra
period of delay in most of some runs, none in others). So a step runs when a new command arrives (`StepClock`: not
sooner than half a period after the last step, nor later than 1.5 periods after a step a command started, and
never more than a period off the wall clock), and on its own period while none comes: the command acts from the
state it was computed from, as in the in-process simulation, whose profile models the delay (`latency_steps`).
Foot forces are integers (the message's int16) in newtons; there is no sport mode to release (the adapter never asks for it). A real robot
keeps walking where the task's episode would end on time, so the emulator's episodes end only on a fall (the
robot is then set back on its feet at the start, which a real one is not; the controller is not told, as it is
not on a robot). Measured against in-process real time: docs/results.md, "The Go2 emulator".

For fault injection (`simdist bench faults`), `faults` makes the emulated robot misbehave on schedule (seconds after
the first command): `state_gap` publishes no state for the duration (the state is delayed by that much, or with a
duration past the run's end, dropped for good), `vanish` closes its DDS channels (the peer leaves) and opens them
again after the duration. Every
command it applies is checked here, at the robot, against the Go2's joint and motor limits (`unsafe` counts and
the first reasons), and the times of damping commands are kept, so a fault's time to a safe stop is measured where
the robot would feel it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any

import numpy as np

from simdist.hardware.emulated_faults import Fault, FaultSchedule, UnsafeTally
from simdist.hardware.sim_robot import SimRobot
from simdist.hardware.state import RobotState
from simdist.robots.go2.hardware import HEAD, LOWCMD_TOPIC, LOWSTATE_TOPIC, MODE_SERVO, NUM_MOTORS, _sdk
from simdist.sim.config import TaskConfig

log = logging.getLogger(__name__)
RUN_FOREVER_S = 1e7  # an episode "time limit" no run reaches
__all__ = ["CommandCheck", "Fault", "Go2Emulator"]


class CommandCheck(UnsafeTally):
    """Each applied LowCmd_ against the Go2's limits, at the robot: finite, targets inside the joint range, a servo
    target moving at most `max_step` from the last servo target, kp and kd within the motors' sensible range, feed-
    forward torque within the torque limit."""

    def __init__(self, *, max_step: float, kp_max: float = 100.0, kd_max: float = 10.0) -> None:
        from simdist.robots.go2 import joint_limits

        self.lower, self.upper, self.torque = (np.asarray(v, dtype=np.float64) for v in joint_limits())
        self.max_step, self.kp_max, self.kd_max = max_step, kp_max, kd_max
        super().__init__()
        self._last: np.ndarray | None = None

    def __call__(
        self, q: np.ndarray, kp: np.ndarray, kd: np.ndarray, tau: np.ndarray, t: float = 0.0
    ) -> bool:
        problems = []
        if not all(np.isfinite(v).all() for v in (q, kp, kd, tau)):
            problems.append("non-finite")
        else:
            servo = kp > 0
            if np.any((q < self.lower - 1e-6)[servo] | (q > self.upper + 1e-6)[servo]):
                problems.append("target outside the joint range")
            if self._last is not None and servo.any():
                step = np.abs(q - self._last)[servo & np.isfinite(self._last)]
                if step.size and step.max() > self.max_step + 1e-6:
                    moved = np.where(servo & np.isfinite(self._last), np.abs(q - self._last), -1.0)
                    joint = int(np.argmax(moved))
                    problems.append(
                        f"target step {step.max():.3f} > {self.max_step} rad (motor {joint}: "
                        f"{self._last[joint]:.3f} -> {q[joint]:.3f})"
                    )
            if np.any(kp > self.kp_max) or np.any(kd > self.kd_max) or np.any(kp < 0) or np.any(kd < 0):
                problems.append("gains out of range")
            if np.any(np.abs(tau) > self.torque + 1e-6):
                problems.append("feed-forward torque over the limit")
            # the step limit applies between servo targets; damping in between does not reset it
            if servo.any():
                self._last = np.where(servo, q, np.nan)
        return self.record(problems, t)


class StepClock:
    """When the emulated robot's next physics step runs: at a new command's arrival, or on its own period.

    Step k (k steps done since `start`) runs at the first new command at or after `earliest`, and at `latest` if none
    comes: `earliest` is half a period after the last step and not more than a period ahead of the wall clock
    (`start + (k - 1) period`); `latest` is a period after the last step (1.5 periods after a step a command
    started, so a controller at the same rate, with its jitter, starts every step) and not more than a period behind
    the wall clock (`start + (k + 1) period`). A controller at the task's rate thus starts each step as its command
    arrives, whatever the two clocks' phase; a faster one cannot run the physics ahead of real time, a slower or
    silent one cannot hold it back.
    """

    def __init__(self, period: float, start: float) -> None:
        self.period, self.start = period, start
        self.last, self.steps, self.by_command = start, 0, False

    def window(self) -> tuple[float, float]:
        """(earliest, latest) wall time of the next step."""
        p = self.period
        earliest = max(self.last + 0.5 * p, self.start + (self.steps - 1) * p)
        latest = min(self.last + (1.5 if self.by_command else 1.0) * p, self.start + (self.steps + 1) * p)
        return earliest, max(earliest, latest)

    def due(self, arrival: float | None) -> float:
        """When the next step runs, given the arrival time of the first new command since the last step (None:
        none came before `latest`)."""
        earliest, latest = self.window()
        return latest if arrival is None or arrival > latest else max(earliest, arrival)

    def stepped(self, at: float, *, by_command: bool) -> None:
        """Step k ran at `at`. One that ran more than a period behind the wall clock (the process did not get the
        CPU) re-anchors the clock on the present rather than catching up in a burst."""
        if at > self.start + (self.steps + 1) * self.period:
            self.start = at - self.steps * self.period
        self.last, self.by_command = at, by_command
        self.steps += 1


class Go2Emulator:
    """One emulated Go2 on `iface` / `domain`; `serve()` runs it in real time until stopped.

    Args:
        cfg, profile, seed: the task, its dynamics profile and the simulator's seed (as `sim:PROFILE`).
        commands: the task command of successive episodes (for the emulator's own episode metrics; default: the
            middle evaluation speed, what a hardware run is commanded without --command).
    """

    def __init__(
        self,
        cfg: TaskConfig,
        profile: str,
        *,
        iface: str = "lo",
        domain: int = 1,
        seed: int = 0,
        commands: list[list[float]] | None = None,
        faults: list[Fault] | None = None,
    ) -> None:
        from simdist import robots
        from simdist.robots.go2 import safety_limits

        cfg = dataclasses.replace(
            cfg, episode_seconds=RUN_FOREVER_S
        )  # no reset on time: only a fall ends one
        self.cfg = cfg
        self.sdk = _sdk()
        default = robots.get(cfg.robot).default_command(cfg).tolist()
        self.robot = SimRobot(cfg, profile, seed=seed, commands=commands or [default])
        self.period = 1.0 / float(cfg.control_hz)
        self.iface, self.domain = iface, domain
        self._lock = threading.Lock()
        self._command: Any = None  # the latest valid LowCmd_
        self._new_command = threading.Event()  # a valid LowCmd_ came since the last step
        self._arrived_at = 0.0  # when the first of them came
        self.counts = {"lowcmd": 0, "bad_crc": 0, "bad_header": 0, "steps": 0, "late_steps": 0, "damping": 0}
        self._tracking: list[float] = []  # per servo step: mean |q_des - q| over motors in servo with kp > 0
        self.faults = FaultSchedule(faults)  # timed from the first valid command
        self.check = CommandCheck(max_step=float(np.max(safety_limits().max_step)))
        self.damping_at: list[float] = []  # seconds after the first command when damping began (each time)
        self.let_go: dict[str, Any] | None = None  # the episode so far at the first damping command
        self._damping = False
        self._vanished = False
        from unitree_sdk2py.idl.default import unitree_go_msg_dds__LowState_

        self._state = unitree_go_msg_dds__LowState_()
        self._state.head = list(HEAD)
        self._publisher: Any = None
        self._subscriber: Any = None

    # -- DDS ------------------------------------------------------------------------------------------------------
    def open(self) -> Go2Emulator:
        self.sdk["init"](self.domain, self.iface)
        self._publisher = self.sdk["Publisher"](LOWSTATE_TOPIC, self.sdk["LowState_"])
        self._publisher.Init()
        self._subscriber = self.sdk["Subscriber"](LOWCMD_TOPIC, self.sdk["LowCmd_"])
        self._subscriber.Init(self._on_lowcmd, 10)
        return self

    def _on_lowcmd(self, msg: Any) -> None:
        try:
            self._receive(msg)
        except Exception:  # the SDK's reader thread dies on an exception: count it, keep receiving
            self.counts["errors"] = self.counts.get("errors", 0) + 1
            log.exception("go2 emulator: a lowcmd could not be handled")

    def _receive(self, msg: Any) -> None:
        with self._lock:
            if self._vanished:
                return
            self.counts["lowcmd"] += 1
            if self.sdk["crc"].Crc(msg) != msg.crc:
                self.counts["bad_crc"] += 1
                return
            if tuple(msg.head[:2]) != HEAD:
                self.counts["bad_header"] += 1
                return
            now = time.monotonic()
            self.faults.begin(now)
            t = self.faults.time(now)
            motors = msg.motor_cmd[:NUM_MOTORS]
            kp = np.array([m.kp if m.mode == MODE_SERVO else 0.0 for m in motors])
            kd = np.array([m.kd if m.mode == MODE_SERVO else 0.0 for m in motors])
            self.check(
                np.array([m.q for m in motors]),
                kp,
                kd,
                np.array([m.tau if m.mode == MODE_SERVO else 0.0 for m in motors]),
                t,
            )
            damping = not np.any(kp > 0) and bool(np.any(kd > 0))
            if damping and not self._damping:
                self.damping_at.append(t)
                # where the robot was when its controller first let go (a stop, a fault)
                if self.let_go is None:
                    self.let_go = {
                        "at_s": t,
                        "episodes_ended": self.robot.episodes_ended,
                        **self.robot.episode_so_far(),
                    }
            self._damping = damping
            self._command = msg
            if not self._new_command.is_set():
                self._arrived_at = now
                self._new_command.set()

    def _publish(self, state: RobotState) -> None:
        msg = self._state
        for i, motor in enumerate(msg.motor_state[:NUM_MOTORS]):
            motor.mode = MODE_SERVO
            motor.q = float(state.joint_positions[i])
            motor.dq = float(state.joint_velocities[i])
            motor.tau_est = float(state.joint_torques[i]) if state.joint_torques is not None else 0.0
        imu = msg.imu_state
        imu.quaternion = [float(v) for v in state.imu_quaternion]  # type: ignore[union-attr]
        imu.gyroscope = [float(v) for v in state.imu_gyro]  # type: ignore[union-attr]
        imu.accelerometer = [float(v) for v in state.imu_accel]  # type: ignore[union-attr]
        msg.foot_force = [int(np.clip(round(float(f)), -32768, 32767)) for f in state.foot_forces]  # type: ignore[union-attr]
        msg.tick = int(round(self.robot.sim_time * 1000.0)) & 0xFFFFFFFF
        msg.crc = self.sdk["crc"].Crc(msg)
        self._publisher.Write(msg)

    # -- the motors' command law ------------------------------------------------------------------------------------
    def _apply(self, command: Any) -> None:
        """Motors 0-11 of the latest LowCmd_: servo targets and gains into the simulator, torques as joint forces."""
        env = self.robot.env
        model, data = env.models[0], env.datas[0]
        motors = command.motor_cmd[:NUM_MOTORS]
        servo = np.array([m.mode == MODE_SERVO for m in motors])
        q = np.array([m.q for m in motors])
        kp = np.where(servo, [m.kp for m in motors], 0.0)
        kd = np.where(servo, [m.kd for m in motors], 0.0)
        tau = np.where(servo, [m.tau + m.kd * m.dq for m in motors], 0.0)
        params = {k: float(v[0]) for k, v in env.params.items()}
        model.actuator_gainprm[:, 0] = kp * params["kp_scale"]
        model.actuator_biasprm[:, 1] = -kp * params["kp_scale"]
        model.actuator_biasprm[:, 2] = -kd * params["kd_scale"]
        data.qfrc_applied[6:] = tau
        if not np.any(kp > 0):
            self.counts["damping"] += 1
        # targets where kp > 0, else the measured position (no pull): the env's action is the targets' offset
        targets = np.where(kp > 0, q, data.qpos[7:])
        if np.any(kp > 0):
            self._tracking.append(float(np.abs(q - data.qpos[7:])[kp > 0].mean()))
        self.robot.send_action(env.joint_targets_action(0, targets))

    def _set_vanished(self, gone: bool) -> None:
        """The DDS peer leaves (its channels closed) or comes back (opened again)."""
        if gone == self._vanished:
            return
        with self._lock:
            self._vanished = gone  # the motors keep the last command they had, as a real Go2's do
        if gone:
            for channel in (self._subscriber, self._publisher):
                channel.Close()
            self.counts["vanished"] = self.counts.get("vanished", 0) + 1
        else:
            self._publisher = self.sdk["Publisher"](LOWSTATE_TOPIC, self.sdk["LowState_"])
            self._publisher.Init()
            self._subscriber = self.sdk["Subscriber"](LOWCMD_TOPIC, self.sdk["LowCmd_"])
            self._subscriber.Init(self._on_lowcmd, 10)

    def step(self) -> None:
        """One control period: apply the latest command (or stand while none came), step, publish the state
        (unless a fault drops, delays or cuts it)."""
        self._set_vanished(self.faults.active("vanish") is not None)
        with self._lock:
            command = self._command
            self._new_command.clear()
        if command is None:
            self.robot.send_action(np.zeros(self.robot.action_dim, dtype=np.float32))  # the stand pose
        else:
            self._apply(command)
        self.counts["steps"] += 1
        state = self.robot.read()
        if self._vanished:
            return
        if self.faults.active("state_gap") is not None:
            self.counts["states_dropped"] = self.counts.get("states_dropped", 0) + 1
            return
        self._publish(state)

    def serve(self, stop: threading.Event, seconds: float | None = None) -> dict[str, Any]:
        """Step in real time until `stop` (or `seconds`), each step at a new command's arrival or on the period
        (`StepClock`); a summary of what happened. `late_steps`: steps that began more than half a period after
        they were due (this process did not get the CPU)."""
        if self._publisher is None:
            self.open()
        now = time.monotonic()
        end = None if seconds is None else now + seconds
        clock = StepClock(self.period, now)
        while not stop.is_set() and (end is None or now < end):
            latest = clock.window()[1]
            while not self._new_command.is_set() and not stop.is_set() and (now := time.monotonic()) < latest:
                self._new_command.wait(min(latest - now, self.period))
            arrival = self._arrived_at if self._new_command.is_set() else None
            at = clock.due(arrival)
            if (wait := at - time.monotonic()) > 0:
                stop.wait(wait)
            if stop.is_set():
                break
            started = max(at, time.monotonic())
            if started - at > 0.5 * self.period:
                self.counts["late_steps"] += 1
            self.step()
            clock.stepped(started, by_command=arrival is not None and arrival <= at)
            now = time.monotonic()
        return self.summary()

    def summary(self) -> dict[str, Any]:
        episodes = []
        while (ended := self.robot.take_episode_end()) is not None:
            episodes.append(ended)
        tracking = float(np.mean(self._tracking)) if self._tracking else None
        return {
            **self.counts,
            "unsafe_commands": self.check.unsafe,
            "unsafe_reasons": self.check.reasons,
            "damping_at_s": [round(t, 3) for t in self.damping_at[:10]],
            "faults": [dataclasses.asdict(f) for f in self.faults.faults],
            "tracking_rad": tracking,
            "episodes": episodes,
            "episode_so_far": self.robot.episode_so_far(),
            "at_first_damping": self.let_go,
            "sim_seconds": self.robot.sim_time,
        }

    def close(self) -> None:
        for channel in (self._subscriber, self._publisher):
            if channel is not None:
                channel.Close()
        self.robot.stop()
