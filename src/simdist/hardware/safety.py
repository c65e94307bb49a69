"""The last word before a command reaches a robot: limits, rate limits, a watchdog and stale-data checks.

Every control period the loop calls `SafetyFilter.filter(state, now, command)` with the latest state and, when the
planner produced one in time, a fresh command. The output is always a command that is safe to send: either the
command clipped to the limits, or a hold at the last safe targets, with flags saying why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simdist.hardware.state import JointCommand, RobotState

# Flags a SafetyOutput can carry. Hold flags replace the command; clip flags only shape it.
WATCHDOG = "watchdog"  # no fresh command within `watchdog_periods`
STALE_STATE = "stale_state"  # state older than `stale_after_s`
NON_FINITE_COMMAND = "non_finite_command"
NON_FINITE_STATE = "non_finite_state"
OVERSPEED = "overspeed"  # a measured joint velocity above its limit
OVERTORQUE = "overtorque"  # a measured joint torque above its limit
POSITION_CLIPPED = "position_clipped"
RATE_LIMITED = "rate_limited"
TORQUE_LIMITED = "torque_limited"
HOLD_FLAGS = frozenset({WATCHDOG, STALE_STATE, NON_FINITE_COMMAND, NON_FINITE_STATE, OVERSPEED, OVERTORQUE})


def _per_joint(value: float | np.ndarray | None, n: int, name: str) -> np.ndarray | None:
    if value is None:
        return None
    array = np.asarray(value, dtype=np.float64)
    if array.ndim == 0:
        return np.full(n, float(array))
    if array.shape != (n,):
        raise ValueError(f"{name} must be a scalar or have {n} values, got shape {array.shape}")
    return array.copy()


@dataclass(frozen=True)
class SafetyLimits:
    """Per-joint limits (scalars broadcast to every joint).

    Args:
        position_lower, position_upper: joint target bounds, rad.
        max_step: the most a target may move in one control period, rad.
        velocity_limit: rad/s; also bounds the target rate (velocity_limit / control_hz) and trips a hold when a
            measured velocity exceeds it by `trip_factor`.
        torque_limit: N m; bounds the PD torque a target implies (when gains are known) and the feed-forward
            torque, and trips a hold when a measured torque exceeds it by `trip_factor`.
        watchdog_periods: hold when no fresh command arrived for more than this many control periods.
        stale_after_s: hold when the state is older than this.
    """

    position_lower: np.ndarray
    position_upper: np.ndarray
    max_step: np.ndarray | float
    velocity_limit: np.ndarray | float | None = None
    torque_limit: np.ndarray | float | None = None
    watchdog_periods: int = 3
    stale_after_s: float = 0.1
    trip_factor: float = 1.2

    def __post_init__(self) -> None:
        lower = np.asarray(self.position_lower, dtype=np.float64).reshape(-1)
        upper = np.asarray(self.position_upper, dtype=np.float64).reshape(-1)
        if lower.shape != upper.shape or np.any(lower > upper):
            raise ValueError("position_lower and position_upper must have equal length and lower <= upper")
        n = lower.shape[0]
        object.__setattr__(self, "position_lower", lower)
        object.__setattr__(self, "position_upper", upper)
        object.__setattr__(self, "max_step", _per_joint(self.max_step, n, "max_step"))
        object.__setattr__(self, "velocity_limit", _per_joint(self.velocity_limit, n, "velocity_limit"))
        object.__setattr__(self, "torque_limit", _per_joint(self.torque_limit, n, "torque_limit"))
        if np.any(self.max_step <= 0):  # type: ignore[operator]
            raise ValueError("max_step must be positive")
        if self.watchdog_periods < 1 or self.stale_after_s <= 0:
            raise ValueError("watchdog_periods must be >= 1 and stale_after_s > 0")

    @property
    def num_joints(self) -> int:
        return int(self.position_lower.shape[0])


@dataclass
class SafetyOutput:
    """What to send this period, whether it is a hold, and every reason that shaped it."""

    command: JointCommand
    held: bool
    flags: frozenset[str] = field(default_factory=frozenset)


class SafetyFilter:
    """Clip commands to the limits and fall back to a hold when anything is wrong; stateful per run.

    The hold target is the last target that was sent (not the measured position) so that a hold never jumps;
    before any command it is the measured position at `reset`.
    """

    def __init__(self, limits: SafetyLimits, control_hz: float) -> None:
        if control_hz <= 0:
            raise ValueError("control_hz must be positive")
        self.limits = limits
        self.control_hz = float(control_hz)
        self._last_target: np.ndarray | None = None
        self._last_gains: tuple[np.ndarray | None, np.ndarray | None] = (None, None)
        self._fresh: JointCommand | None = None
        self._fresh_time: float | None = None

    @property
    def started(self) -> bool:
        """Whether the filter has a last target (from `reset` or a first `filter`)."""
        return self._last_target is not None

    def reset(self, state: RobotState, *, last_target: np.ndarray | None = None) -> None:
        """Start a run from `last_target`, the target the robot holds now (what it was last sent), or else from the
        measured posture, clipped into the limits; forget old commands. The first step is rate-limited from there,
        so it never jumps further than `max_step` from what the robot is tracking."""
        lim = self.limits
        self._check_size(state.num_joints)
        start = state.joint_positions if last_target is None else np.asarray(last_target, dtype=np.float64)
        if start.shape != state.joint_positions.shape or not np.isfinite(start).all():
            start = state.joint_positions
        # nothing to rate-limit from: the caller holds (the robot's own hold) until a state is finite
        if not np.isfinite(start).all():
            raise ValueError("the safety filter cannot start from a non-finite measured posture")
        self._last_target = np.clip(start, lim.position_lower, lim.position_upper)
        self._last_gains = (None, None)
        self._fresh = None
        self._fresh_time = None

    def _check_size(self, n: int) -> None:
        if n != self.limits.num_joints:
            raise ValueError(f"{n} joints given, the safety limits are for {self.limits.num_joints}")

    def hold_command(self) -> JointCommand:
        if self._last_target is None:
            raise RuntimeError("SafetyFilter.reset(state) must be called before the first filter()")
        kp, kd = self._last_gains
        return JointCommand(self._last_target.copy(), kp=kp, kd=kd)

    def _hold(self, flags: set[str]) -> SafetyOutput:
        return SafetyOutput(self.hold_command(), held=True, flags=frozenset(flags))

    def filter(self, state: RobotState, now: float, command: JointCommand | None = None) -> SafetyOutput:
        """The command to send this period.

        Args:
            state: the latest measurement (`state.timestamp` on the same clock as `now`).
            now: the control loop's time, s (time.monotonic()).
            command: a fresh command from the planner, or None when none arrived this period.
        """
        if self._last_target is None:
            self.reset(state)
        assert self._last_target is not None
        lim = self.limits
        self._check_size(state.num_joints)
        flags: set[str] = set()

        if command is not None:
            self._check_size(command.joint_targets.shape[0])
            if not command.is_finite():
                # A NaN from the planner is never sent, and it does not refresh the watchdog either.
                flags.add(NON_FINITE_COMMAND)
            else:
                self._fresh, self._fresh_time = command, now

        if not state.is_finite():
            flags.add(NON_FINITE_STATE)
        elif now - state.timestamp > lim.stale_after_s:
            flags.add(STALE_STATE)
        if not flags & {NON_FINITE_STATE}:
            if lim.velocity_limit is not None and np.any(
                np.abs(state.joint_velocities) > lim.trip_factor * lim.velocity_limit
            ):
                flags.add(OVERSPEED)
            if (
                lim.torque_limit is not None
                and state.joint_torques is not None
                and np.any(np.abs(state.joint_torques) > lim.trip_factor * lim.torque_limit)
            ):
                flags.add(OVERTORQUE)
        period = 1.0 / self.control_hz
        # A small tolerance so that a loop running exactly at the rate never trips on float rounding.
        if self._fresh_time is None or now - self._fresh_time > lim.watchdog_periods * period + 1e-9:
            flags.add(WATCHDOG)
        if flags & HOLD_FLAGS:
            return self._hold(flags)

        assert self._fresh is not None
        return self._shape(self._fresh, state, flags)

    def _shape(self, command: JointCommand, state: RobotState, flags: set[str]) -> SafetyOutput:
        lim = self.limits
        assert self._last_target is not None and lim.max_step is not None
        wanted = command.joint_targets
        target = wanted.copy()

        step = lim.max_step.copy()  # type: ignore[union-attr]
        if lim.velocity_limit is not None:
            step = np.minimum(step, lim.velocity_limit / self.control_hz)
        target = np.clip(target, self._last_target - step, self._last_target + step)
        if not np.allclose(target, wanted):
            flags.add(RATE_LIMITED)

        before = target.copy()
        target = np.clip(target, lim.position_lower, lim.position_upper)
        if not np.array_equal(target, before):
            flags.add(POSITION_CLIPPED)

        torque_ff = command.torque_ff
        if lim.torque_limit is not None:
            tau_max = lim.torque_limit
            if torque_ff is not None:
                clipped = np.clip(torque_ff, -tau_max, tau_max)
                if not np.array_equal(clipped, torque_ff):
                    flags.add(TORQUE_LIMITED)
                torque_ff = clipped
            if command.kp is not None:
                # PD torque = kp (target - q) - kd qd + ff must stay within +-tau_max: bound the target accordingly.
                kp = np.maximum(command.kp, 1e-9)
                kd = command.kd if command.kd is not None else np.zeros_like(kp)
                ff = torque_ff if torque_ff is not None else np.zeros_like(kp)
                bias = kd * state.joint_velocities - ff
                low = state.joint_positions + (-tau_max + bias) / kp
                high = state.joint_positions + (tau_max + bias) / kp
                bounded = np.clip(target, low, high)
                if not np.array_equal(bounded, target):
                    flags.add(TORQUE_LIMITED)
                    # The torque window comes from the measurement: it may lie outside the rate window (a joint
                    # far from its last target) or the joint range. It never widens either: both win over it.
                    stepped = np.clip(bounded, self._last_target - step, self._last_target + step)
                    if not np.array_equal(stepped, bounded):
                        flags.add(RATE_LIMITED)
                    target = np.clip(stepped, lim.position_lower, lim.position_upper)
                    if not np.array_equal(target, stepped):
                        flags.add(POSITION_CLIPPED)

        self._last_target = target
        self._last_gains = (command.kp, command.kd)
        out = JointCommand(target.copy(), kp=command.kp, kd=command.kd, torque_ff=torque_ff)
        return SafetyOutput(out, held=False, flags=frozenset(flags))
