"""When the emulated Go2 steps its physics (`simdist.robots.go2.emulator.StepClock`), in simulated time: a real Go2's
kHz motor loop applies a command as it arrives, so a controller at the task's rate must start every step of the
50 Hz emulator whatever the two clocks' phase, and no controller may run the physics off real time."""

from __future__ import annotations

import numpy as np
import pytest

from simdist.robots.go2.emulator import StepClock

PERIOD = 0.02


def run(arrivals: list[float], until: float) -> list[tuple[float, bool]]:
    """The emulator's decisions against commands arriving at `arrivals` (seconds): each step's time and whether a
    command started it, until `until`."""
    clock, pending, steps = StepClock(PERIOD, 0.0), list(arrivals), []
    while True:
        latest = clock.window()[1]
        pending = [a for a in pending if a > clock.last] if steps else pending
        first = next((a for a in pending if a <= latest), None)
        at = clock.due(first)
        if at > until:
            return steps
        steps.append((at, first is not None and first <= at))
        pending = [a for a in pending if a > at]
        clock.stepped(at, by_command=steps[-1][1])


@pytest.mark.parametrize("phase", [0.0, 0.003, 0.009, 0.0101, 0.013, 0.019, 0.0199])
def test_a_controller_at_the_task_rate_starts_every_step_as_its_command_arrives(phase: float) -> None:
    rng = np.random.default_rng(int(phase * 1e4))
    # a 50 Hz controller whose commands arrive `phase` after the emulator's start, with 3 ms of jitter either way
    arrivals = sorted(phase + 0.1 + k * PERIOD + rng.uniform(-0.003, 0.003) for k in range(200))
    steps = run(arrivals, until=arrivals[-1])
    by_command = [at for at, started in steps if started]
    # after the first few steps every step is a command's, at its arrival, one step per command
    assert len(by_command) >= 195
    later = [at for at, _ in steps if at > arrivals[5]]
    assert all(started for at, started in steps if at > arrivals[5])
    assert np.allclose(later, [a for a in arrivals if a > arrivals[5]][: len(later)])


def test_without_commands_the_robot_steps_on_its_own_period() -> None:
    steps = run([], until=1.0)
    assert len(steps) == 50
    assert np.allclose(np.diff([at for at, _ in steps]), PERIOD)
    assert not any(started for _, started in steps)


def test_when_commands_stop_the_physics_goes_on_at_the_period() -> None:
    arrivals = [0.013 + k * PERIOD for k in range(25)]  # half a second of commands, then none
    steps = run(arrivals, until=2.0)
    after = [at for at, _ in steps if at > arrivals[-1]]
    assert len(steps) in range(99, 102)  # 2 s of physics at 50 Hz
    assert max(np.diff(after)) <= 1.5 * PERIOD + 1e-9
    assert np.allclose(np.diff(after)[1:], PERIOD)


@pytest.mark.parametrize("rate", [500.0, 100.0, 40.0, 25.0])
def test_a_faster_or_slower_controller_cannot_run_the_physics_off_real_time(rate: float) -> None:
    arrivals = [0.005 + k / rate for k in range(int(4.0 * rate))]
    steps = run(arrivals, until=4.0)
    assert abs(len(steps) - 4.0 / PERIOD) <= 2  # 200 steps in 4 s, give or take a period either way
    gaps = np.diff([at for at, _ in steps])
    assert gaps.min() >= 0.5 * PERIOD - 1e-9
