"""`SimRobot`: one member of a MuJoCo task env behind the `Robot` protocol, the embedded default robot `sim:<profile>`.

It measures what the real robot measures (a `RobotState` from the env's `measure`, with the task's sensor noise
added to the raw fields) and takes the task action in task units (`send_action`): Go2 joint offsets, UR5e
Cartesian tool deltas that the simulator turns into joint targets by IK at the physics rate. `send(JointCommand)`
also works (the env's `joint_targets_action`), so the hardware path (safety filter, joint targets) can run
against it.

Lockstep (default): every `send_action` advances the physics by one control period and `timestamp` is the
simulated clock. Real time (`start()`): a physics thread steps at the control rate with the latest action held,
like a robot's own servo loop, and `timestamp` is `time.monotonic()`.

Each measurement carries the task reward of the latest control step (`RobotState.reward`), computed by the
simulator from its state: what a real robot's side would compute from its state estimate (the Go2's body velocity,
the UR5e's tool pose against the hole). Runs record it, so finetuning that trains the reward head has targets.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from simdist import robots
from simdist.hardware.state import JointCommand, RobotState
from simdist.sim.config import TaskConfig

# real time: the physics steps this share of a period before the loop's ticks (see SimRobot._physics)
PHYSICS_LEAD = 0.1


class SimRobot:
    """A simulated robot (the task's) for a task and dynamics profile.

    Args:
        task, profile, seed, overrides: as for `simdist.sim.make_env` (one env member); `task` a name or the
            command's TaskConfig.
        commands: optional task commands given to successive episodes in turn (e.g. the Go2's evaluation speeds);
            default: the env's own command of each episode.
        realtime: step the physics in a thread at the control rate (call `start()`), instead of in `send_action`.
    """

    reports_reward = True  # its states carry the task reward (`RobotState.reward`); bags record it

    def __init__(
        self,
        task: str | TaskConfig,
        profile: str = "sim",
        *,
        seed: int = 0,
        overrides: Mapping[str, Any] | None = None,
        commands: Sequence[Sequence[float]] | None = None,
        realtime: bool = False,
    ) -> None:
        from simdist.sim import make_env

        self.env = make_env(task, profile, num_envs=1, seed=seed, overrides=overrides)
        self.cfg = self.env.cfg
        self.robot = self.cfg.robot
        self.description = robots.get(self.robot)
        self.joint_names: tuple[str, ...] = self.description.joint_names
        self.task = self.cfg.task
        self.profile = profile
        self.control_hz = float(self.cfg.control_hz)
        self.realtime = realtime
        self._commands = [np.asarray(c, dtype=np.float64) for c in commands] if commands else None
        self._noise_rng = np.random.default_rng([seed, 1])
        self._lock = threading.RLock()
        self._steps = 0
        self._obs, _ = self.env.reset(seed=seed)
        self._episodes = 0
        self._apply_command()
        self._action = np.zeros(self.env.action_dim, dtype=np.float32)
        self._ended: list[dict[str, Any]] = []
        self._stamp = self.sim_time
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._closed = False
        self._damped = False
        self._reward: float | None = None  # the latest step's task reward (None before the first step)
        # the running episode's task reward so far (each ended episode reports it as its "return")
        self._return = 0.0

    # -- clock and episodes ---------------------------------------------------------------------------------
    @property
    def sim_time(self) -> float:
        """Simulated seconds since the robot was created (all episodes)."""
        return self._steps / self.control_hz

    @property
    def action_dim(self) -> int:
        return int(self.env.action_dim)

    def _apply_command(self) -> None:
        if self._commands is not None:
            self.env.command[0] = self._commands[self._episodes % len(self._commands)]

    def command(self) -> np.ndarray:
        """The task command of the current episode (Go2 speeds, or the peg's hole-pose estimate), float32."""
        with self._lock:
            return self.env.command[0].astype(np.float32)

    def take_episode_end(self) -> dict[str, Any] | None:
        """The oldest episode that ended since the last call: {episode, metrics, terminated}; the robot has reset."""
        with self._lock:
            return self._ended.pop(0) if self._ended else None

    @property
    def episodes_ended(self) -> int:
        return self._episodes

    def episode_so_far(self) -> dict[str, Any]:
        """The running episode's metrics so far (the Go2's progress_m, ...) and its length in seconds."""
        with self._lock:
            metrics = {k: float(np.asarray(v).reshape(-1)[0]) for k, v in self.env.metrics().items()}
            return {**metrics, "seconds": float(self.env.steps[0]) / self.control_hz}

    # -- stepping ----------------------------------------------------------------------------------------------
    def _step(self, action: np.ndarray) -> None:
        obs, reward, terminated, truncated, info = self.env.step(action[None])
        self._steps += 1
        self._reward = float(reward[0])
        self._return += self._reward
        if info["done"][0]:
            metrics = {k: v[0].item() for k, v in info["final_metrics"].items()}
            self._ended.append(
                {
                    "episode": self._episodes,
                    "metrics": metrics,
                    "seconds": float(info["step"][0]) / self.control_hz,
                    "terminated": bool(terminated[0]),
                    "truncated": bool(truncated[0]),
                    "return": self._return,  # what the planner is told to maximise, beside the task's metric
                }
            )
            self._return = 0.0
            self._episodes += 1
            self._apply_command()
            if self._damped:  # the reset restored the profile's gains; a damped robot stays damped
                self._set_damping()
        self._obs = obs
        self._stamp = time.monotonic() if self.realtime else self.sim_time

    def send_action(self, action: np.ndarray) -> None:
        """The task action (task units); lockstep: advance one control period now, real time: hold it from now."""
        if self._closed:
            from simdist.errors import RobotConnectionError

            raise RobotConnectionError(f"SimRobot {self.task}: stopped")
        action = np.asarray(action, dtype=np.float32).reshape(self.env.action_dim)
        with self._lock:
            self._action = action.copy()
            if not self.realtime:
                self._step(self._action)

    def hold_action(self) -> np.ndarray:
        """The task action that keeps the robot where it is: the Go2's last joint targets, the UR5e's zero delta."""
        return self.description.hold_action(self._action, self.env.action_dim)

    def start(self) -> None:
        """Real time only: start the physics thread (idempotent)."""
        if not self.realtime or self._thread is not None:
            return
        now = time.monotonic()
        with self._lock:  # a robot streams its state: the one it stands in is current at start
            self._stamp = now
        self._thread = threading.Thread(target=self._physics, args=(now,), name="sim-physics", daemon=True)
        self._thread.start()

    def _physics(self, started: float) -> None:
        period = 1.0 / self.control_hz
        # The first step a period after start() less a lead: a loop that starts the robot just before its first tick
        # (DeployLoop.run) then reads, at every tick, the state of a step that ended just before it, and its command
        # acts from the next step on: the lockstep order (read, plan, act for a period) kept in real time. Stepped at
        # the ticks' own instants, a tick read a state a whole period old on about half the ticks (whichever thread
        # ran first). A plan later than the next step leaves the previous command acting a period more, as on a robot.
        next_time = started + period * (1.0 - PHYSICS_LEAD)
        while True:
            delay = next_time - time.monotonic()
            if delay > 0:
                if self._stop.wait(delay):
                    return
            elif delay < -period:  # the physics itself fell behind: no catch-up burst
                next_time = time.monotonic()
            if self._stop.is_set():
                return
            with self._lock:
                self._step(self._action)
            next_time += period

    # -- Robot protocol -----------------------------------------------------------------------------------------
    def read(self) -> RobotState:
        with self._lock:
            return self._measure()

    def send(self, command: JointCommand) -> None:
        """Joint targets (the hardware path): Go2 targets become offsets; UR5e targets become a tool target by FK."""
        targets = np.asarray(command.joint_targets, dtype=np.float64)
        if targets.shape != (len(self.joint_names),):
            raise ValueError(f"{self.robot} takes {len(self.joint_names)} joint targets, got {targets.shape}")
        with self._lock:
            action = self.env.joint_targets_action(0, targets)
        self.send_action(action)

    def send_tool_pose(self, pose: np.ndarray) -> None:
        """A Cartesian tool target (the UR5e's servoL pose), so that the robot's own actuator can drive the simulator
        (`simdist deploy --safety`); only for a task whose simulator has a tool target."""
        if not hasattr(self.env, "tool_pose_action"):
            raise ValueError(f"a {self.robot} simulator takes no tool pose")
        with self._lock:
            action = self.env.tool_pose_action(0, np.asarray(pose, dtype=np.float64))
        self.send_action(action)

    def hold(self) -> None:
        self.send_action(self.hold_action())

    def damp(self, kd: float = 3.0) -> None:
        """The motors' damping mode (kp 0, kd per joint, like the real Go2's), until the robot is stopped; only for a
        robot that has one (`can_damp`). The UR5e has none: its safe stop is `hold` (servoStop on the arm)."""
        if not self.description.can_damp:
            raise NotImplementedError(f"a {self.robot} has no damping mode; it stops with hold()")
        with self._lock:
            self._damped, self._damping_kd = True, float(kd)
            self._set_damping()

    def _set_damping(self) -> None:
        model = self.env.models[0]
        model.actuator_gainprm[:, 0] = 0.0
        model.actuator_biasprm[:, 1] = 0.0
        model.actuator_biasprm[:, 2] = -self._damping_kd

    def stop(self) -> None:
        if self._closed:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._closed = True
        self.env.close()

    def image(self) -> np.ndarray | None:
        """The latest camera frame (H, W, 3) uint8 when the task's camera is enabled."""
        with self._lock:
            return self._obs["image"][0].copy() if "image" in self._obs else None

    # -- measurement --------------------------------------------------------------------------------------------
    def _noise(self, key: str, shape: tuple[int, ...]) -> np.ndarray:
        std = self.cfg.observation_noise.get(key, 0.0) * float(self.env.params["sensor_noise_scale"][0])
        if std == 0.0:
            return np.zeros(shape)
        return self._noise_rng.normal(0.0, std, shape)

    def _measure(self) -> RobotState:
        state = self.env.measure(0, self._noise, timestamp=self._stamp, robot_time=self.sim_time)
        state.reward = self._reward
        return state
