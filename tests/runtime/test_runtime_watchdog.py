"""The shared watchdog: armed by the first good command, hold after `hold_after_s`, safe stop `stop_after_s` after
the last good command (final), each stage entered once per outage; a good command ends a hold."""

from __future__ import annotations

import pytest

from simdist.runtime.watchdog import HOLD, SAFE_STOP, Watchdog


def test_nothing_to_guard_before_the_first_good_command() -> None:
    dog = Watchdog(0.1, 1.0)
    assert dog.check(100.0) is None and not dog.armed and dog.age(100.0) == 0.0


def test_hold_then_safe_stop_counted_from_the_last_good_command() -> None:
    dog = Watchdog(0.1, 1.0)
    assert dog.good(0.0) is None  # no hold to end
    assert dog.check(0.1) is None  # exactly the hold limit: not yet
    assert dog.check(0.11) == HOLD and dog.stage == HOLD
    assert dog.check(0.5) is None  # entered once, not at every check
    assert dog.good(0.6) == pytest.approx(0.6) and dog.stage is None  # commands are back: a 0.6 s outage ends
    assert dog.check(0.65) is None
    assert dog.check(0.75) == HOLD
    assert dog.check(1.59) is None  # 0.99 s after the last good command
    assert dog.check(1.6) == SAFE_STOP and dog.stopped
    assert dog.age(1.6) == pytest.approx(1.0)
    assert dog.good(1.7) is None and dog.stopped  # final: nothing resumes after a safe stop
    assert dog.check(10.0) is None


def test_a_late_check_goes_straight_to_the_safe_stop() -> None:
    dog = Watchdog(0.1, 1.0)
    dog.good(0.0)
    assert dog.check(2.0) == SAFE_STOP


def test_without_a_stop_limit_it_only_holds() -> None:
    dog = Watchdog(0.0, None)
    dog.good(0.0)
    assert dog.check(0.02) == HOLD
    assert dog.check(1e6) is None and not dog.stopped


@pytest.mark.parametrize(("hold", "stop"), [(-0.1, 1.0), (0.5, 0.2)])
def test_limits_out_of_order_are_refused(hold: float, stop: float) -> None:
    with pytest.raises(ValueError, match="hold_after_s|stop_after_s"):
        Watchdog(hold, stop)
