"""Planning one tick ahead in the deploy loop: tick k+1 executes step 1 of the plan made from tick k's state, whose
step 0 is tick k's own action; in real time a plan then has the period between two ticks, not the part of a tick
before its deadline."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch
from fast_planner import FAST_PLANNER

from simdist.bags import read_episodes
from simdist.plan.mppi import Planner
from simdist.runtime.deploy import run_deploy
from simdist.runtime.loop import DeployLoop

AHEAD = {**FAST_PLANNER, "plan_ahead": True}


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[torch.Tensor | None, torch.Tensor]]:
    """Every plan the planner makes: (its pinned first action, its actions)."""
    calls: list[tuple[torch.Tensor | None, torch.Tensor]] = []
    original = Planner.act

    def spy(self: Planner, ctx, command, elapsed_steps=1, **kwargs):  # type: ignore[no-untyped-def]
        plan = original(self, ctx, command, elapsed_steps, **kwargs)
        first = kwargs.get("first_action")
        calls.append((None if first is None else first.clone(), plan.actions.clone()))
        return plan

    monkeypatch.setattr(Planner, "act", spy)
    return calls


def test_lockstep_plans_ahead_each_tick_runs_step_one_of_the_plan_from_the_tick_before(
    go2_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _spy(monkeypatch)
    result = run_deploy(
        "go2_slope", "sim:ptfe", go2_model, ticks=30, bag_dir=tmp_path / "b", seed=3, planner_overrides=AHEAD
    )
    assert result.stats.fresh == 30 and result.stats.errors == 0
    episodes = read_episodes(result.bag)
    assert sum(len(e["action"]) for e in episodes) == 30
    # each episode: its first tick plans its own action, then every tick (the first too) plans ahead once
    assert len(calls) == 30 + len(episodes)
    for episode in episodes:
        executed = episode["action"]
        own, *ahead = calls[: 1 + len(executed)]
        del calls[: 1 + len(executed)]
        assert own[0] is None
        np.testing.assert_array_equal(executed[0], own[1][0].numpy())
        for k, (pinned, actions) in enumerate(ahead):
            assert pinned is not None
            np.testing.assert_array_equal(
                pinned.numpy(), executed[k]
            )  # made from tick k, with tick k's action
            assert torch.equal(actions[0], pinned)
            if k + 1 < len(executed):
                np.testing.assert_array_equal(executed[k + 1], actions[1].numpy())  # tick k+1 runs its step 1
    # not the same controller as planning each tick's own action
    calls.clear()
    own = run_deploy(
        "go2_slope",
        "sim:ptfe",
        go2_model,
        ticks=30,
        bag_dir=tmp_path / "c",
        seed=3,
        planner_overrides=FAST_PLANNER,
    )
    first, other = read_episodes(result.bag)[0], read_episodes(own.bag)[0]
    assert np.array_equal(other["action"][0], first["action"][0])  # the same first plan
    assert not np.array_equal(other["action"][1:3], first["action"][1:3])


def test_lockstep_planning_ahead_is_deterministic(go2_model: Path, tmp_path: Path) -> None:
    bags = [
        run_deploy(
            "go2_slope",
            "sim:ptfe",
            go2_model,
            ticks=25,
            bag_dir=tmp_path / f"b{i}",
            seed=5,
            planner_overrides=AHEAD,
        ).bag
        for i in range(2)
    ]
    a, b = (read_episodes(p) for p in bags)
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x["action"], y["action"])
        np.testing.assert_array_equal(x["proprio"], y["proprio"])


def test_a_failed_plan_ahead_runs_the_older_plans_next_step_and_the_loop_carries_on(
    go2_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = DeployLoop._compute
    count = {"n": 0}

    def flaky(self: DeployLoop, job):  # type: ignore[no-untyped-def]
        count["n"] += 1
        if count["n"] == 6:  # the plan ahead made at tick 4
            raise RuntimeError("planner blew up")
        return original(self, job)

    monkeypatch.setattr(DeployLoop, "_compute", flaky)
    result = run_deploy(
        "go2_slope", "sim:sim", go2_model, ticks=12, bag_dir=tmp_path / "b", planner_overrides=AHEAD
    )
    stats = result.stats
    assert stats.ticks == 12 and stats.errors == 1
    assert stats.late == 1 and stats.fresh == 11 and stats.held == 0  # tick 5: step 2 of tick 3's plan


@pytest.mark.parametrize("ahead", [False, True])
def test_real_time_a_plan_longer_than_the_deadline_is_fresh_only_when_planned_ahead(
    ur5e_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ahead: bool
) -> None:
    """Every plan takes 0.85 of a period (10 Hz: 85 ms): past the 0.8-period deadline of a tick that plans its own
    action, well within the period between two ticks when planning ahead."""
    original = DeployLoop._compute

    def slow(self: DeployLoop, job):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        plan = original(self, job)
        time.sleep(max(0.0, 0.85 * self.period - (time.perf_counter() - start)))
        return plan

    monkeypatch.setattr(DeployLoop, "_compute", slow)
    ticks = 30
    result = run_deploy(
        "ur5e_peg",
        "sim:sim",
        ur5e_model,
        ticks=ticks,
        realtime=True,
        bag_dir=tmp_path / "b",
        planner_overrides=AHEAD if ahead else FAST_PLANNER,
    )
    stats = result.stats
    assert stats.ticks + stats.missed == ticks and stats.errors == 0
    assert sum(len(e["proprio"]) for e in read_episodes(result.bag)) == stats.ticks
    if ahead:
        assert stats.fresh >= 0.7 * stats.ticks, stats.summary()
        # the tick sends its command without waiting for a plan: in a small part of this run's own plan time
        assert np.median(stats.act_seconds) < 0.4 * np.median(stats.plan_seconds), stats.summary()
    else:
        assert stats.fresh <= 0.2 * stats.ticks and stats.late > 0.5 * stats.ticks, stats.summary()
        # it waited out the deadline, most of a plan
        assert np.median(stats.act_seconds) > 0.7 * np.median(stats.plan_seconds), stats.summary()


def test_a_plan_that_finished_a_moment_ago_is_still_outstanding_until_taken() -> None:
    """The planner thread goes idle just before it puts its result: in that moment a tick planning ahead must
    still wait for the result (and adopt it) rather than count the plan as late."""
    import queue
    import threading

    from simdist.runtime.plan_thread import PlanThread

    class SlowToPut(queue.Queue):  # type: ignore[type-arg]
        def put(self, item: object, block: bool = True, timeout: float | None = None) -> None:
            time.sleep(0.2)  # the thread is idle already, its result not yet put
            super().put(item, block, timeout)

    thread = PlanThread(lambda job: job)  # type: ignore[arg-type, return-value]
    thread.results = SlowToPut()
    thread.submit("job")  # type: ignore[arg-type]
    idle = threading.Event()
    for _ in range(100):
        if not thread.busy:
            idle.set()
            break
        time.sleep(0.001)
    assert idle.is_set() and thread.outstanding  # idle, yet its result is still to be taken
    job, result, _ = thread.take(5.0)
    assert job == result == "job" and not thread.outstanding
    thread.close()
