"""Real-time scheduling of the deploy loop: validated settings, the control thread and the planner thread really run
under SCHED_FIFO one level apart (or say why not), a bench block restores the thread, and memory locking is taken
only under an unlimited memlock limit."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from fast_planner import FAST_PLANNER

from simdist.errors import ConfigError
from simdist.runtime.deploy import run_deploy
from simdist.runtime.loop import DeployLoop
from simdist.runtime.realtime import (
    Scheduling,
    apply_to_this_thread,
    current_thread_policy,
    parse_cpus,
    scheduled,
)

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_FIFO"), reason="Linux scheduling")


def test_cpu_lists_parse_and_bad_ones_are_one_clear_error() -> None:
    assert parse_cpus("1") == (1,)
    assert parse_cpus("3,0-1") == (0, 1, 3)
    assert parse_cpus("") is None and parse_cpus(None) is None
    with pytest.raises(ConfigError, match="expected a list like"):
        parse_cpus("one")


def test_settings_are_validated() -> None:
    with pytest.raises(ConfigError, match="outside 2..99"):
        Scheduling(priority=1)  # the planner would get 0, which SCHED_FIFO does not have
    with pytest.raises(ConfigError, match="outside"):
        Scheduling(priority=100)
    missing = max(os.sched_getaffinity(0)) + 1
    with pytest.raises(ConfigError, match=f"cpus \\[{missing}\\] are not available"):
        Scheduling(cpus=(missing,))
    assert Scheduling(priority=40, cpus=(0,)).planner() == Scheduling(priority=39, cpus=(0,))
    assert not Scheduling().requested and Scheduling(lock_memory=True).requested


def _in_thread(scheduling: Scheduling) -> tuple[list[str], tuple[str, int], set[int]]:
    out: dict[str, object] = {}

    def work() -> None:
        out["problems"] = apply_to_this_thread(scheduling, "test")
        out["policy"] = current_thread_policy()
        out["cpus"] = os.sched_getaffinity(threading.get_native_id())

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    return out["problems"], out["policy"], out["cpus"]  # type: ignore[return-value]


def test_a_thread_gets_fifo_and_its_cpus_or_reports_why_not() -> None:
    cpu = min(os.sched_getaffinity(0))
    problems, policy, cpus = _in_thread(Scheduling(priority=10, cpus=(cpu,)))
    assert cpus == {cpu}
    if problems:  # no CAP_SYS_NICE: the report says so and the thread is unchanged
        assert policy == ("SCHED_OTHER", 0) and "SCHED_FIFO priority 10" in problems[0]
    else:
        assert policy == ("SCHED_FIFO", 10)
    assert current_thread_policy() == ("SCHED_OTHER", 0)  # only that thread changed


def test_a_scheduled_block_restores_the_thread() -> None:
    before = os.sched_getaffinity(0)
    with scheduled(Scheduling(priority=5, cpus=(min(before),)), "bench") as problems:
        inside = current_thread_policy(), os.sched_getaffinity(0)
    assert inside[1] == {min(before)}
    assert inside[0] == (("SCHED_OTHER", 0) if problems else ("SCHED_FIFO", 5))
    assert current_thread_policy() == ("SCHED_OTHER", 0) and os.sched_getaffinity(0) == before


def _realtime_run(model: Path, scheduling: Scheduling):  # type: ignore[no-untyped-def]
    """Ten real-time ticks of the simulated Go2 with the fast planner under `scheduling`."""
    return run_deploy(
        "go2_slope",
        "sim:sim",
        model,
        ticks=10,
        realtime=True,
        planner_overrides=FAST_PLANNER,
        scheduling=scheduling,
    )


def _spy_policies(monkeypatch: pytest.MonkeyPatch) -> dict[str, set[tuple[str, int]]]:
    """The scheduling policies the control thread (tick) and the planner thread (_compute) ran under."""
    seen: dict[str, set[tuple[str, int]]] = {"control": set(), "planner": set()}
    compute, tick = DeployLoop._compute, DeployLoop.tick

    def compute_spy(self: DeployLoop, job):  # type: ignore[no-untyped-def]
        seen["planner"].add(current_thread_policy())
        return compute(self, job)

    def tick_spy(self: DeployLoop, k: int, deadline: float | None = None) -> None:
        tick(self, k, deadline)
        seen["control"].add(current_thread_policy())

    monkeypatch.setattr(DeployLoop, "_compute", compute_spy)
    monkeypatch.setattr(DeployLoop, "tick", tick_spy)
    return seen


def test_the_loop_runs_control_and_planner_one_level_apart(
    go2_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    if _in_thread(Scheduling(priority=20))[0]:
        pytest.skip("SCHED_FIFO is not granted here (needs CAP_SYS_NICE); the denied path is tested below")
    seen = _spy_policies(monkeypatch)
    result = _realtime_run(go2_model, Scheduling(priority=20))
    assert result.stats.errors == 0 and result.stats.ticks + result.stats.missed == 10
    assert seen == {"control": {("SCHED_FIFO", 20)}, "planner": {("SCHED_FIFO", 19)}}
    assert result.scheduling_problems == []
    assert current_thread_policy() == ("SCHED_OTHER", 0)  # the run's own thread is given back


def test_a_denied_fifo_leaves_both_threads_normal_and_says_why(
    go2_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    real = os.sched_setscheduler

    def denied(tid: int, policy: int, param: os.sched_param) -> None:  # as without CAP_SYS_NICE
        if policy == os.SCHED_FIFO:
            raise PermissionError(1, "Operation not permitted")
        real(tid, policy, param)

    monkeypatch.setattr(os, "sched_setscheduler", denied)
    seen = _spy_policies(monkeypatch)
    result = _realtime_run(go2_model, Scheduling(priority=20))
    assert result.stats.errors == 0 and result.stats.ticks + result.stats.missed == 10
    assert seen == {"control": {("SCHED_OTHER", 0)}, "planner": {("SCHED_OTHER", 0)}}
    assert len(result.scheduling_problems) == 2  # one line per thread, each saying why
    assert all("SCHED_FIFO" in p or "permit" in p.lower() for p in result.scheduling_problems)


_LOCK = """
import resource, sys
from simdist.runtime.realtime import lock_memory
if sys.argv[1] == "limited":
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (1 << 16, resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]))
else:
    try:  # root (CAP_SYS_RESOURCE) may lift the limit; otherwise there is nothing to lock under
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except (ValueError, OSError):
        print("cannot 0")
        sys.exit()
problem = lock_memory()
locked = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmLck:")][0]
print(problem or "locked", locked)
"""


def test_memory_is_locked_only_under_an_unlimited_limit() -> None:
    def run(mode: str) -> str:
        return subprocess.run(
            [sys.executable, "-c", _LOCK, mode], capture_output=True, text=True, check=True
        ).stdout.strip()

    problem, locked = run("limited").rsplit(" ", 1)
    assert problem.startswith("memory not locked: the memlock limit is 65536 bytes") and locked == "0"
    outcome, locked = run("unlimited").rsplit(" ", 1)
    if outcome == "cannot":
        pytest.skip(
            "the memlock limit cannot be lifted here (needs CAP_SYS_RESOURCE): the locked path is untested"
        )
    assert outcome == "locked" and int(locked) > 10_000  # kB: the interpreter and its libraries


def test_a_scheduling_failure_never_stops_control(go2_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import simdist.runtime.loop as loop_module
    import simdist.runtime.plan_thread as plan_thread_module

    def broken(scheduling: Scheduling, role: str) -> list[str]:
        raise RuntimeError(f"{role}: no scheduler today")

    monkeypatch.setattr(loop_module, "apply_to_this_thread", broken)  # the control thread's
    monkeypatch.setattr(plan_thread_module, "apply_to_this_thread", broken)  # the planner thread's
    result = _realtime_run(go2_model, Scheduling(priority=20))
    stats = result.stats
    assert stats.errors == 0 and stats.ticks + stats.missed == 10 and stats.fresh + stats.late > 0
    problems = result.scheduling_problems
    assert any("control thread: scheduling failed" in p for p in problems)
    assert any("planner thread: scheduling failed" in p for p in problems)
    assert current_thread_policy() == ("SCHED_OTHER", 0)


def test_settings_describe_themselves() -> None:
    assert Scheduling().describe() == "normal"
    assert (
        Scheduling(priority=50, cpus=(0,), lock_memory=True).describe()
        == "SCHED_FIFO 50, cpus 0, memory locked"
    )
    assert Scheduling(priority=50, cpus=(0,)).planner().describe() == "SCHED_FIFO 49, cpus 0"


def test_a_tick_longer_than_its_period_is_counted_and_said_with_its_phases(
    go2_model: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Real time, 20 periods of 20 ms, two ticks held up 60 ms in the actuator: both are counted as slow, and each
    (having missed a period) is said with the phase its time went to."""
    import logging
    import time

    from simdist.runtime.actuation import SimActuator

    apply = SimActuator.apply
    calls = {"n": 0}

    def slow_apply(self, action, state, now):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] in (5, 9):
            time.sleep(0.06)
        return apply(self, action, state, now)

    monkeypatch.setattr(SimActuator, "apply", slow_apply)
    with caplog.at_level(logging.WARNING, logger="simdist.runtime.loop"):
        result = run_deploy(
            "go2_slope", "sim:sim", go2_model, ticks=20, realtime=True, planner_overrides=FAST_PLANNER
        )
    assert result.stats.slow_ticks >= 2 and result.stats.summary()["slow_ticks"] == result.stats.slow_ticks
    slow = [r.getMessage() for r in caplog.records if "took" in r.getMessage()]

    def largest_phase(
        message: str,
    ) -> str:  # "(swap 0.0, read 0.4, plan 3.1, actuate 61.2, log 0.3)" -> actuate
        phases = message.split("(")[1].split(")")[0].split(", ")
        return max(phases, key=lambda p: float(p.split()[1])).split()[0]

    long = [m for m in slow if largest_phase(m) == "actuate"]
    assert len(long) == 2, slow  # the two held-up ticks, each said with the phase that held it up
