"""SafetyFilter with numbers: limits, rate limits, torque bounds, watchdog, stale and non-finite data."""

from __future__ import annotations

import numpy as np
import pytest

from simdist.hardware import JointCommand, RobotState, SafetyFilter, SafetyLimits
from simdist.hardware import safety as S

HZ = 50.0
DT = 1.0 / HZ


def _limits(**overrides) -> SafetyLimits:
    values = dict(
        position_lower=[-1.0, -2.0],
        position_upper=[1.0, 0.5],
        max_step=0.1,
        velocity_limit=[10.0, 2.5],  # joint 1: 2.5 rad/s * 0.02 s = 0.05 rad per step
        torque_limit=None,
        watchdog_periods=3,
        stale_after_s=0.05,
    )
    values.update(overrides)
    return SafetyLimits(**values)


def _state(q=(0.0, 0.0), qd=(0.0, 0.0), t=0.0, tau=None) -> RobotState:
    return RobotState(timestamp=t, joint_positions=q, joint_velocities=qd, joint_torques=tau)


def _filter(limits: SafetyLimits | None = None, q=(0.0, 0.0)) -> SafetyFilter:
    f = SafetyFilter(limits or _limits(), HZ)
    f.reset(_state(q))
    return f


def test_within_limits_passes_unchanged() -> None:
    out = _filter().filter(_state(), 0.0, JointCommand([0.05, -0.03], kp=20.0, kd=0.5))
    assert not out.held and out.flags == frozenset()
    assert out.command.joint_targets.tolist() == [0.05, -0.03]
    assert out.command.kp.tolist() == [20.0, 20.0] and out.command.kd.tolist() == [0.5, 0.5]


def test_rate_limit_is_the_tighter_of_max_step_and_velocity() -> None:
    f = _filter()
    out = f.filter(_state(), 0.0, JointCommand([0.5, -0.5]))
    assert S.RATE_LIMITED in out.flags and not out.held
    assert out.command.joint_targets == pytest.approx([0.1, -0.05])
    # The next step moves on from the last *sent* target, not from the request.
    out = f.filter(_state(), DT, JointCommand([0.5, -0.5]))
    assert out.command.joint_targets == pytest.approx([0.2, -0.1])


def test_position_limits_clip_after_rate_limit() -> None:
    f = _filter(q=(0.95, 0.48))
    out = f.filter(_state((0.95, 0.48)), 0.0, JointCommand([2.0, 0.6]))
    assert out.command.joint_targets == pytest.approx([1.0, 0.5])
    assert {S.POSITION_CLIPPED, S.RATE_LIMITED} <= out.flags


def test_reset_outside_the_range_starts_from_the_nearest_limit() -> None:
    f = _filter(q=(1.3, 0.0))
    out = f.filter(_state((1.3, 0.0)), 0.0, None)  # no command yet: hold
    assert out.held and out.command.joint_targets.tolist() == [1.0, 0.0]


def test_pd_torque_bound_limits_the_target() -> None:
    # tau = kp (target - q) - kd qd + ff; with kp 20, kd 1, qd 0.5, ff 1, tau_max 3:
    # target - q <= (3 + 0.5 - 1) / 20 = 0.125 and >= (-3 + 0.5 - 1) / 20 = -0.175.
    limits = _limits(
        max_step=1.0, velocity_limit=None, torque_limit=3.0, position_lower=[-5, -5], position_upper=[5, 5]
    )
    f = _filter(limits, q=(0.0, 0.0))
    state = _state((0.0, 0.0), (0.5, 0.5))
    out = f.filter(state, 0.0, JointCommand([0.8, -0.8], kp=20.0, kd=1.0, torque_ff=1.0))
    assert S.TORQUE_LIMITED in out.flags
    assert out.command.joint_targets == pytest.approx([0.125, -0.175])
    tau = 20.0 * (out.command.joint_targets - 0.0) - 1.0 * 0.5 + 1.0
    assert np.all(np.abs(tau) <= 3.0 + 1e-12)


def test_torque_window_never_widens_a_rate_limited_step() -> None:
    # last target 0, measured 0.5 (the joint was pushed away), kp 20, tau_max 3: the torque window is
    # [0.5 - 3/20, 0.5 + 3/20] = [0.35, 0.65], outside the rate window [-0.1, 0.1]; the step stays 0.1
    limits = _limits(
        max_step=0.1, velocity_limit=None, torque_limit=3.0, position_lower=[-5, -5], position_upper=[5, 5]
    )
    f = _filter(limits, q=(0.0, 0.0))
    out = f.filter(_state((0.5, -0.5)), 0.0, JointCommand([0.0, 0.0], kp=20.0, kd=0.0))
    assert out.command.joint_targets == pytest.approx([0.1, -0.1])
    assert {S.TORQUE_LIMITED, S.RATE_LIMITED} <= out.flags and not out.held
    # and the next step moves on by at most max_step again
    out = f.filter(_state((0.5, -0.5), t=DT), DT, JointCommand([0.0, 0.0], kp=20.0, kd=0.0))
    assert out.command.joint_targets == pytest.approx([0.2, -0.2])


def test_position_limits_clip_both_ways() -> None:
    f = _filter(q=(-0.95, -1.95))
    out = f.filter(_state((-0.95, -1.95)), 0.0, JointCommand([-2.0, -3.0]))
    assert out.command.joint_targets == pytest.approx([-1.0, -2.0])
    assert {S.POSITION_CLIPPED, S.RATE_LIMITED} <= out.flags


def test_feed_forward_torque_is_clipped() -> None:
    limits = _limits(torque_limit=[2.0, 4.0])
    out = _filter(limits).filter(_state(), 0.0, JointCommand([0.0, 0.0], torque_ff=[-5.0, 3.0]))
    assert out.command.torque_ff.tolist() == [-2.0, 3.0] and S.TORQUE_LIMITED in out.flags


def test_watchdog_holds_after_n_periods_without_a_fresh_command() -> None:
    f = _filter()
    first = f.filter(_state(t=0.0), 0.0, JointCommand([0.05, 0.02], kp=30.0))
    assert not first.held
    for k in (1, 2, 3):  # the last fresh command is re-sent for up to 3 periods
        out = f.filter(_state(t=k * DT), k * DT, None)
        assert not out.held and out.command.joint_targets == pytest.approx([0.05, 0.02])
    out = f.filter(_state(t=4 * DT), 4 * DT, None)
    assert out.held and out.flags == {S.WATCHDOG}
    assert out.command.joint_targets == pytest.approx([0.05, 0.02])  # hold the last sent target: no jump
    assert out.command.kp.tolist() == [30.0, 30.0]
    recovered = f.filter(_state(t=5 * DT), 5 * DT, JointCommand([0.06, 0.02]))
    assert not recovered.held


def test_stale_state_holds_and_flags() -> None:
    f = _filter()
    fresh = f.filter(_state(t=1.0), 1.04, JointCommand([0.05, 0.0]))
    assert not fresh.held
    out = f.filter(_state(t=1.0), 1.06, JointCommand([0.1, 0.0]))
    assert out.held and S.STALE_STATE in out.flags
    assert out.command.joint_targets == pytest.approx([0.05, 0.0])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_command_holds_and_does_not_feed_the_watchdog(bad: float) -> None:
    f = _filter()
    f.filter(_state(), 0.0, JointCommand([0.05, 0.0]))
    out = f.filter(_state(t=DT), DT, JointCommand([bad, 0.0]))
    assert out.held and S.NON_FINITE_COMMAND in out.flags
    assert np.all(np.isfinite(out.command.joint_targets))
    assert f.filter(_state(t=2 * DT), 2 * DT, JointCommand([0.0, 0.0], kp=[1.0, bad])).held
    # Only non-finite commands since t=0: at 4 periods the watchdog trips even though commands kept coming.
    out = f.filter(_state(t=4 * DT), 4 * DT, JointCommand([0.0, np.nan]))
    assert {S.WATCHDOG, S.NON_FINITE_COMMAND} <= out.flags


def test_non_finite_state_holds() -> None:
    out = _filter().filter(_state((np.nan, 0.0)), 0.0, JointCommand([0.0, 0.0]))
    assert out.held and S.NON_FINITE_STATE in out.flags


def test_measured_overspeed_and_overtorque_trip_a_hold() -> None:
    limits = _limits(torque_limit=[10.0, 10.0])  # trip at 1.2 x limit
    f = _filter(limits)
    assert not f.filter(_state(qd=(11.9, 2.9)), 0.0, JointCommand([0.0, 0.0])).held
    assert S.OVERSPEED in f.filter(_state(qd=(0.0, 3.1)), 0.0, JointCommand([0.0, 0.0])).flags
    out = f.filter(_state(tau=(-12.5, 0.0)), 0.0, JointCommand([0.0, 0.0]))
    assert out.held and S.OVERTORQUE in out.flags


def test_limits_and_sizes_are_checked() -> None:
    with pytest.raises(ValueError, match="lower <= upper"):
        _limits(position_lower=[1.0, 0.0], position_upper=[0.0, 1.0])
    with pytest.raises(ValueError, match="max_step"):
        _limits(max_step=[0.1, 0.1, 0.1])
    with pytest.raises(ValueError, match="3 joints"):
        _filter().filter(_state((0.0, 0.0, 0.0), (0.0, 0.0, 0.0)), 0.0, None)


# -- the contract at its edges (written against the mutation check of `simdist.hardware.safety`, docs/testing.md) --


def test_limits_are_stored_as_float_arrays_per_joint() -> None:
    limits = SafetyLimits(
        position_lower=(-1, -2), position_upper=[1, 2], max_step=1, velocity_limit=[3, 4], torque_limit=5
    )
    for name in ("position_lower", "position_upper", "max_step", "velocity_limit", "torque_limit"):
        value = getattr(limits, name)
        assert isinstance(value, np.ndarray) and value.dtype == np.float64 and value.shape == (2,), name
    one = SafetyLimits(position_lower=-0.5, position_upper=0.5, max_step=0.1)  # scalars: a one-joint robot
    assert one.num_joints == 1 and one.position_lower.tolist() == [-0.5]


def test_limit_values_at_their_edges() -> None:
    SafetyLimits(position_lower=[0.3], position_upper=[0.3], max_step=0.1)  # a locked joint: lower == upper
    SafetyLimits(position_lower=[0.0], position_upper=[1.0], max_step=0.1, watchdog_periods=1)
    for bad, match in (
        (dict(max_step=0.0), r"max_step must be positive"),
        (dict(max_step=[0.1] * 3), r"max_step must be a scalar or have 2 values, got shape \(3,\)"),
        (dict(watchdog_periods=0), r"watchdog_periods must be >= 1 and stale_after_s > 0"),
        (dict(stale_after_s=0.0), r"watchdog_periods must be >= 1 and stale_after_s > 0"),
        (dict(velocity_limit=[1.0, 2.0, 3.0]), r"velocity_limit must be a scalar or have 2 values.*"),
        (dict(torque_limit=[1.0, 2.0, 3.0]), r"torque_limit must be a scalar or have 2 values.*"),
        (
            dict(position_upper=[1.0, 0.5, 0.0]),
            r"position_lower and position_upper must have equal length and lower <= upper",
        ),
    ):
        with pytest.raises(ValueError, match=f"^{match}$"):  # the whole message, as the user reads it
            _limits(**bad)
    with pytest.raises(ValueError, match="^control_hz must be positive$"):
        SafetyFilter(_limits(), 0.0)
    SafetyFilter(_limits(), 0.5)  # a slow loop is still a loop
    with pytest.raises(
        RuntimeError, match=r"^SafetyFilter\.reset\(state\) must be called before the first filter\(\)$"
    ):
        SafetyFilter(_limits(), HZ).hold_command()


def test_reset_below_the_range_starts_from_the_lower_limit() -> None:
    f = _filter(q=(-1.3, -2.5))
    out = f.filter(_state((-1.3, -2.5)), 0.0, None)
    assert out.held and out.command.joint_targets.tolist() == [-1.0, -2.0]


def test_a_hold_keeps_both_gains_and_a_shaped_command_is_not_a_hold() -> None:
    f = _filter()
    sent = f.filter(_state(), 0.0, JointCommand([0.05, 0.0], kp=30.0, kd=0.7))
    assert sent.held is False
    held = f.filter(_state(t=0.1), 0.1, None)
    assert (
        held.held is True and held.command.kd.tolist() == [0.7, 0.7] and held.command.kp.tolist() == [30, 30]
    )


def test_stale_overspeed_and_overtorque_trip_only_beyond_their_limits() -> None:
    limits = _limits(torque_limit=10.0, stale_after_s=0.25)  # exact binary values: equality is not a trip
    f = _filter(limits)
    assert not f.filter(_state(t=1.0), 1.25, JointCommand([0.0, 0.0])).held  # 0.25 s old: not stale yet
    assert S.STALE_STATE in f.filter(_state(t=1.0), 1.2500001, JointCommand([0.0, 0.0])).flags
    f = _filter(limits)
    assert not f.filter(_state(qd=(12.0, 3.0)), 0.0, JointCommand([0.0, 0.0])).held  # 1.2 x 10 and 1.2 x 2.5
    assert not f.filter(
        _state(tau=(12.0, -5.0)), 0.0, JointCommand([0.0, 0.0])
    ).held  # 1.2 x 10, and well under
    assert S.OVERTORQUE in f.filter(_state(tau=(0.0, -12.01)), 0.0, JointCommand([0.0, 0.0])).flags


def test_feed_forward_within_the_limit_is_untouched_and_above_it_clipped() -> None:
    limits = _limits(torque_limit=[2.0, 4.0])
    out = _filter(limits).filter(_state(), 0.0, JointCommand([0.0, 0.0], torque_ff=[1.5, -3.0]))
    assert out.command.torque_ff.tolist() == [1.5, -3.0] and S.TORQUE_LIMITED not in out.flags
    out = _filter(limits).filter(_state(), 0.0, JointCommand([0.0, 0.0], torque_ff=[5.0, 3.0]))
    assert out.command.torque_ff.tolist() == [2.0, 3.0] and S.TORQUE_LIMITED in out.flags


def test_pd_torque_bound_with_soft_gains_and_without_kd_or_feed_forward() -> None:
    # kp 0.5, no kd, no ff, tau_max 0.2, q 0: target within +-0.2 / 0.5 = +-0.4 (a wide rate window)
    limits = _limits(
        max_step=5.0, velocity_limit=None, torque_limit=0.2, position_lower=[-5, -5], position_upper=[5, 5]
    )
    out = _filter(limits).filter(_state(qd=(1.0, 1.0)), 0.0, JointCommand([1.0, 0.3], kp=0.5))
    assert out.command.joint_targets == pytest.approx([0.4, 0.3])
    assert out.flags == {S.TORQUE_LIMITED}  # neither the rate window nor the joint range was involved
    inside = _filter(limits).filter(_state(), 0.0, JointCommand([0.1, -0.1], kp=0.5))
    assert S.TORQUE_LIMITED not in inside.flags and inside.command.joint_targets.tolist() == [0.1, -0.1]


def test_torque_window_outside_the_joint_range_gives_way_to_it() -> None:
    # measured beyond the range on both sides (q 1.4 and -2.4, ranges [-1, 1] and [-2, 0.5]): the torque window
    # [q - 0.15, q + 0.15] lies outside the range; the target stays inside it
    limits = _limits(max_step=5.0, velocity_limit=None, torque_limit=3.0)
    f = _filter(limits, q=(0.9, -1.9))
    out = f.filter(_state((1.4, -2.4)), 0.0, JointCommand([0.9, -1.9], kp=20.0, kd=0.0))
    assert out.command.joint_targets == pytest.approx([1.0, -2.0])
    assert out.flags == {S.TORQUE_LIMITED, S.POSITION_CLIPPED}


def test_the_watchdog_trips_only_after_its_periods() -> None:
    f = SafetyFilter(_limits(watchdog_periods=3), 4.0)  # 0.25 s periods: binary-exact times
    f.reset(_state())
    f.filter(_state(), 0.0, JointCommand([0.0, 0.0]))
    edge = 3 * 0.25 + 1e-9  # exactly the allowance: not yet
    assert not f.filter(_state(t=edge), edge, None).held
    assert S.WATCHDOG in f.filter(_state(t=0.76), 0.76, None).flags
