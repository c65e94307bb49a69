"""The deploy loop: a bag with every schema topic at the control rate, lockstep determinism, holds on errors,
Ctrl-C leaves a readable bag, and a slow planner in real time really misses its deadlines."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from fast_planner import FAST_PLANNER

from simdist.bags import read_episodes, read_topics, schema
from simdist.runtime.deploy import run_deploy
from simdist.runtime.loop import DeployLoop


@pytest.mark.parametrize(
    ("task", "seconds", "fixture"), [("go2_slope", 2.0, "go2_model"), ("ur5e_peg", 1.0, "ur5e_model")]
)
def test_bag_has_every_topic_of_the_robot_at_the_control_rate(
    task: str, seconds: float, fixture: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    model = request.getfixturevalue(fixture)
    result = run_deploy(
        task, "sim:sim", model, seconds=seconds, bag_dir=tmp_path / "bags", planner_overrides=FAST_PLANNER
    )
    assert result.bag is not None and result.bag.name == "run_01"
    robot = "go2" if task.startswith("go2") else "ur5e"
    hz = 50.0 if robot == "go2" else 10.0
    ticks = round(seconds * hz)
    assert result.stats.ticks == ticks and result.stats.fresh == ticks and result.stats.errors == 0
    topics = [t for t in schema.topics_for(robot) if t != schema.EVENTS]
    data = read_topics(result.bag, [*topics, schema.EVENTS])
    for topic in topics:
        times = np.array([t for t, _ in data[topic]])
        assert len(times) == ticks, topic
        np.testing.assert_allclose(np.diff(times) / 1e9, 1.0 / hz, atol=1e-6, err_msg=topic)
    kinds = [__import__("json").loads(m.data)["event"] for _, m in data[schema.EVENTS]]
    assert kinds[0] == schema.RUN_START and kinds[-1] == schema.RUN_END and schema.EPISODE_START in kinds
    episodes = read_episodes(result.bag)
    assert sum(len(e["proprio"]) for e in episodes) == ticks
    assert all((e["model_version"] == "v0000").all() for e in episodes)
    second = run_deploy(
        task, "sim:sim", model, ticks=3, bag_dir=tmp_path / "bags", planner_overrides=FAST_PLANNER
    )
    assert second.bag is not None and second.bag.name == "run_02"


def test_lockstep_runs_are_deterministic(go2_model: Path, tmp_path: Path) -> None:
    runs = [
        run_deploy(
            "go2_slope",
            "sim:ptfe",
            go2_model,
            ticks=40,
            bag_dir=tmp_path / f"b{i}",
            seed=5,
            planner_overrides=FAST_PLANNER,
        ).bag
        for i in range(2)
    ]
    a, b = (read_episodes(p) for p in runs)
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x["proprio"], y["proprio"])
        np.testing.assert_array_equal(x["action"], y["action"])


def test_an_exception_in_a_tick_holds_and_the_loop_carries_on(
    go2_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = DeployLoop._compute
    calls = {"n": 0}

    def flaky(self: DeployLoop, job):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] in (5, 6):
            raise RuntimeError("planner blew up")
        return original(self, job)

    monkeypatch.setattr(DeployLoop, "_compute", flaky)
    holds: list[int] = []
    result = run_deploy(
        "go2_slope",
        "sim:sim",
        go2_model,
        ticks=20,
        bag_dir=tmp_path / "bags",
        planner_overrides=FAST_PLANNER,
        on_tick=lambda k, loop: holds.append(loop.stats.held),
    )
    stats = result.stats
    assert stats.ticks == 20 and stats.errors == 2 and stats.held == 2 and stats.fresh == 18
    episodes = read_episodes(result.bag)
    assert sum(len(e["proprio"]) for e in episodes) == 20  # held ticks are logged too (with the hold action)
    # Ticks 4 and 5 held: the Go2 keeps its last joint targets, so the logged action repeats the previous one.
    flat = np.concatenate([e["action"] for e in episodes])
    np.testing.assert_array_equal(flat[4], flat[3])


def test_ctrl_c_stops_safely_and_leaves_a_complete_bag(go2_model: Path, tmp_path: Path) -> None:
    def interrupt(k: int, loop: DeployLoop) -> None:
        if k == 12:
            raise KeyboardInterrupt

    result = run_deploy(
        "go2_slope",
        "sim:sim",
        go2_model,
        ticks=100,
        bag_dir=tmp_path / "bags",
        planner_overrides=FAST_PLANNER,
        on_tick=interrupt,
    )
    assert result.interrupted and result.stats.ticks == 13
    episodes = read_episodes(result.bag)
    assert sum(len(e["proprio"]) for e in episodes) == 13
    assert (Path(result.bag) / "metadata.yaml").is_file()


def test_a_tick_that_fails_after_its_command_went_out_sends_no_second_command(
    go2_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure after the action was sent (here the bag's write of tick 5) sends no hold on top of it: in lockstep
    a hold would be a second period of physics within one tick. The robot's command stands and the history records it."""
    from simdist.bags.writer import BagWriter
    from simdist.hardware.sim_robot import SimRobot

    original, calls = BagWriter.append, {"n": 0}

    def failing(self: BagWriter, **kw):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 6:
            raise OSError("disk full")
        return original(self, **kw)

    sent: list[str] = []
    send, hold = SimRobot.send_action, SimRobot.hold
    monkeypatch.setattr(BagWriter, "append", failing)
    monkeypatch.setattr(SimRobot, "send_action", lambda self, a: (sent.append("action"), send(self, a))[1])
    monkeypatch.setattr(SimRobot, "hold", lambda self: (sent.append("hold"), hold(self))[1])
    recorded: list[np.ndarray] = []
    result = run_deploy(
        "go2_slope",
        "sim:sim",
        go2_model,
        ticks=10,
        bag_dir=tmp_path / "bags",
        planner_overrides=FAST_PLANNER,
        on_tick=lambda k, loop: recorded.append(loop._prev_action.copy()),
    )
    stats = result.stats
    assert stats.ticks == 10 and stats.errors == 1 and stats.held == 0 and stats.fresh == 10
    # one command per tick, none held (the old code sent a hold after tick 5's action)
    assert sent[:10] == ["action"] * 10
    episodes = read_episodes(result.bag)
    flat = np.concatenate([e["action"] for e in episodes])
    assert len(flat) == 9  # the failed write's tick is missing from the bag, every other tick is there
    assert not np.allclose(recorded[5], recorded[4])  # the history kept tick 5's planned action, not a hold


def test_the_robot_is_stopped_whatever_fails_on_the_way_out_and_never_connected_for_bad_settings(
    go2_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second Ctrl-C while the model store's watcher is stopped still stops the robot (last, after the bag is
    closed); a planner setting that is refused is refused before any robot is connected."""
    from simdist.errors import ConfigError
    from simdist.hardware.sim_robot import SimRobot
    from simdist.runtime import deploy
    from simdist.runtime.store import ModelStore

    robot = SimRobot("go2_slope", "sim", seed=0)
    calls: list[str] = []
    stop = robot.stop
    monkeypatch.setattr(robot, "stop", lambda: (calls.append("robot.stop"), stop())[1])

    stop_store = ModelStore.stop

    def interrupted_again(self: ModelStore) -> None:  # the watcher stopped, then the second Ctrl-C
        calls.append("store.stop")
        stop_store(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(ModelStore, "stop", interrupted_again)
    with pytest.raises(KeyboardInterrupt):
        run_deploy(
            "go2_slope",
            "sim:sim",
            go2_model,
            ticks=3,
            robot=robot,
            bag_dir=tmp_path / "bags",
            planner_overrides=FAST_PLANNER,
        )
    assert calls == ["store.stop", "robot.stop"]
    assert (next((tmp_path / "bags").iterdir()) / "metadata.yaml").is_file()  # the bag was closed first

    connected: list[str] = []
    monkeypatch.setattr(deploy, "make_robot", lambda *a, **k: connected.append("robot") or robot)
    with pytest.raises(ConfigError):
        run_deploy("go2_slope", "sim:sim", go2_model, ticks=3, planner_overrides={"num_samples": "many"})
    assert connected == []


def test_a_slow_planner_in_real_time_misses_ticks_and_runs_the_last_plan(
    go2_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = DeployLoop._compute

    def slow(self: DeployLoop, job):  # type: ignore[no-untyped-def]
        time.sleep(2.5 * self.period)  # each plan takes 2.5 control periods
        return original(self, job)

    monkeypatch.setattr(DeployLoop, "_compute", slow)
    result = run_deploy(
        "go2_slope",
        "sim:sim",
        go2_model,
        ticks=25,
        realtime=True,
        bag_dir=tmp_path / "bags",
        planner_overrides=FAST_PLANNER,
    )
    stats = result.stats
    assert (
        stats.fresh == 0 and stats.late > 0
    )  # no plan met its deadline; late ticks ran the last plan's steps
    assert stats.ticks + stats.missed == 25 and stats.errors == 0
    assert sum(len(e["proprio"]) for e in read_episodes(result.bag)) == stats.ticks


def test_a_dead_planner_leaves_the_robot_on_its_last_plan_for_open_loop_s_at_most(
    ur5e_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the planner dies, the last plan's later steps run for OPEN_LOOP_S, then every tick holds (the UR5e's
    plans span 2.5 s; the old loop followed a stale one open loop to its end). The tiny model's horizon is 5 steps,
    so the limit is set to 0.2 s (2 ticks at the peg's 10 Hz) to be seen inside it."""
    from simdist.runtime import loop

    monkeypatch.setattr(loop, "OPEN_LOOP_S", 0.2)
    original = DeployLoop._compute
    calls = {"n": 0}

    def dying(self: DeployLoop, job):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] > 3:
            raise RuntimeError("planner lost")
        return original(self, job)

    monkeypatch.setattr(DeployLoop, "_compute", dying)
    result = run_deploy(
        "ur5e_peg", "sim:sim", ur5e_model, ticks=20, realtime=True, planner_overrides=FAST_PLANNER
    )
    stats = result.stats
    assert stats.fresh + stats.late + stats.held == stats.ticks and stats.ticks + stats.missed == 20
    assert 1 <= stats.late <= 2, (
        stats
    )  # the last plan's next steps, 0.2 s of them, not the rest of its horizon
    assert stats.held >= stats.ticks - stats.fresh - 2 and stats.held >= 10


def test_a_real_time_sim_robot_gives_every_tick_the_state_of_the_step_just_before_it(
    ur5e_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real time, 10 Hz: the simulated arm steps its physics just before each of the loop's ticks, so a tick reads a
    state a few ms old, never one a period old (stepped at the ticks' own instants, about half the ticks read one
    ~100 ms old, whichever thread ran first)."""
    import threading

    from simdist.hardware.sim_robot import SimRobot

    ages: list[float] = []
    read = SimRobot.read

    def timed(self: SimRobot):  # type: ignore[no-untyped-def]
        state = read(self)
        if threading.current_thread() is threading.main_thread():  # the ticks' reads, the first included
            ages.append(time.monotonic() - state.timestamp)
        return state

    monkeypatch.setattr(SimRobot, "read", timed)
    result = run_deploy(
        "ur5e_peg", "sim:sim", ur5e_model, ticks=30, realtime=True, planner_overrides=FAST_PLANNER
    )
    assert result.stats.ticks + result.stats.missed == 30 and len(ages) >= 25
    period = 0.1  # the UR5e's 10 Hz
    old = sum(age > 0.5 * period for age in ages)
    assert old <= 2, sorted(ages)[-5:]
    assert sum(age < 0.3 * period for age in ages) > len(ages) / 2, ages  # most states fresh: the median age


def test_real_time_warm_start_shifts_by_the_ticks_since_the_plan_it_shifts(
    go2_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plans that take 0.3 to 2.6 control periods: every plan's warm start is shifted by exactly the ticks between
    the tick it plans for and the tick of the plan computed before it (adopted in time or not)."""
    from simdist.plan.mppi import Planner

    original_compute, original_act = DeployLoop._compute, Planner.act
    durations = [0.3, 0.9, 1.4, 0.95, 2.6, 0.2, 1.1]
    computed: list[tuple[int, int]] = []
    shifts: list[int] = []

    def timed(self: DeployLoop, job):  # type: ignore[no-untyped-def]
        time.sleep(durations[len(computed) % len(durations)] * self.period)
        computed.append((job.tick, job.episode))
        return original_compute(self, job)

    def spy(self: Planner, ctx, command, elapsed_steps=1, **kwargs):  # type: ignore[no-untyped-def]
        shifts.append(elapsed_steps)
        return original_act(self, ctx, command, elapsed_steps, **kwargs)

    monkeypatch.setattr(DeployLoop, "_compute", timed)
    monkeypatch.setattr(Planner, "act", spy)
    result = run_deploy(
        "go2_slope", "sim:sim", go2_model, ticks=60, realtime=True, planner_overrides=FAST_PLANNER
    )
    assert result.stats.errors == 0 and len(computed) >= 15 and result.stats.late > 0
    assert len(shifts) == len(computed)
    for i in range(1, len(computed)):
        (tick, episode), (before, before_episode) = computed[i], computed[i - 1]
        if episode == before_episode:
            assert shifts[i] == tick - before, (i, computed[i - 1 : i + 1], shifts[i])
    assert max(shifts) >= 2  # some plans came late, so the next one had to skip ahead


def test_open_then_run_starts_one_planner_thread(go2_model: Path) -> None:
    import threading

    from simdist.hardware.sim_robot import SimRobot
    from simdist.plan.config import load_planner_config, task_action_limits
    from simdist.runtime.deploy import default_command, make_actuator
    from simdist.runtime.store import ModelStore
    from simdist.sim.config import load_task

    cfg = load_task("go2_slope")
    robot = SimRobot("go2_slope", "sim", realtime=True)
    store = ModelStore(go2_model)
    command = default_command(cfg).copy
    loop = DeployLoop(
        robot=robot,
        robot_kind="go2",
        actuator=make_actuator(robot, cfg, command, safety=False),
        store=store,
        planner_config=load_planner_config("cpu", "go2", {**FAST_PLANNER, "horizon": store.model.horizon}),
        limits=task_action_limits(cfg),
        command=command,
        control_hz=cfg.control_hz,
        realtime=True,
    )
    loop.open(warmup=1)
    loop.run(ticks=5)
    robot.stop()
    assert [t.name for t in threading.enumerate()].count("planner") == 0  # the one thread was closed by run()
    assert loop.stats.ticks == 5


@pytest.mark.parametrize("max_delta", [0.05, 0.3])
def test_the_task_rate_limit_reaches_the_planner(go2_model: Path, tmp_path: Path, max_delta: float) -> None:
    """`--set action_max_delta=X` bounds every step-to-step change of the action the robot gets."""
    result = run_deploy(
        "go2_slope",
        "sim:sim",
        go2_model,
        ticks=40,
        bag_dir=tmp_path / "bags",
        overrides={"action_max_delta": max_delta},
        planner_overrides=FAST_PLANNER,
    )
    for episode in read_episodes(result.bag):
        steps = np.abs(np.diff(episode["action"], axis=0))
        assert steps.max() <= max_delta + 1e-5
    assert (
        max(
            np.abs(np.diff(e["action"], axis=0)).max()
            for e in read_episodes(result.bag)
            if len(e["action"]) > 1
        )
        > 0.5 * max_delta
    )


def test_a_hold_that_lasts_becomes_a_safe_stop_that_ends_the_run(
    go2_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No usable plan from tick 5 on: the loop holds, and 0.2 s after the last planned tick (10 periods) damps the Go2
    once, records both steps in the bag and ends the run; no hold afterwards stiffens the damped robot again."""
    from simdist.hardware.sim_robot import SimRobot

    original = DeployLoop._compute
    calls = {"n": 0}

    def dying(self: DeployLoop, job):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] > 5:
            raise RuntimeError("planner lost")
        return original(self, job)

    monkeypatch.setattr(DeployLoop, "_compute", dying)
    robot = SimRobot("go2_slope", "sim", seed=0)
    sent: list[str] = []
    hold, damp = robot.hold, robot.damp
    robot.hold = lambda: (sent.append("hold"), hold())[1]  # type: ignore[method-assign]
    robot.damp = lambda kd=3.0: (sent.append("damp"), damp(kd))[1]  # type: ignore[method-assign]
    result = run_deploy(
        "go2_slope",
        "sim:sim",
        go2_model,
        ticks=100,
        bag_dir=tmp_path / "bags",
        planner_overrides=FAST_PLANNER,
        robot=robot,
        safe_stop_after_s=0.2,
    )
    stats = result.stats
    assert stats.safe_stops == 1 and stats.fresh == 5 and stats.held == 10 and stats.ticks == 15
    # every held tick held; the 10th (0.2 s after tick 4, the last planned one) then damped, and nothing after
    assert sent == ["hold"] * 10 + ["damp"]
    events = [json.loads(m.data) for _, m in read_topics(result.bag, [schema.EVENTS])[schema.EVENTS]]
    steps = [(e["stage"], e["age_s"]) for e in events if e["event"] == schema.WATCHDOG]
    assert steps == [("hold", 0.02), ("safe_stop", 0.2)]
    # without the setting (simulation's default) the same failure only holds, for the whole run
    calls["n"] = 0
    again = run_deploy("go2_slope", "sim:sim", go2_model, ticks=30, planner_overrides=FAST_PLANNER)
    assert again.stats.safe_stops == 0 and again.stats.ticks == 30 and again.stats.held == 25
    # armed by the first tick that was not a hold: a robot that never got a plan is not stopped (it never moved)
    monkeypatch.setattr(
        DeployLoop, "_compute", lambda self, job: (_ for _ in ()).throw(RuntimeError("no plan"))
    )
    never = run_deploy(
        "go2_slope", "sim:sim", go2_model, ticks=20, planner_overrides=FAST_PLANNER, safe_stop_after_s=0.2
    )
    assert never.stats.safe_stops == 0 and never.stats.held == 20


def test_a_corrupt_state_holds_that_tick_and_a_lasting_one_ends_in_a_safe_stop(
    go2_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Non-finite joint readings: the tick holds (the same path as stale data), the history does not keep the NaN
    (the next good reading plans at once), and readings that stay corrupt escalate to the safe stop."""
    from simdist.hardware.sim_robot import SimRobot

    class Corrupt(SimRobot):
        def __init__(self, bad: Callable[[int], bool]) -> None:
            super().__init__("go2_slope", "sim", seed=0)
            self.reads, self.bad = 0, bad

        def read(self):  # type: ignore[no-untyped-def]
            state = super().read()
            self.reads += 1
            if self.bad(self.reads - 1):
                state.joint_positions = np.full_like(state.joint_positions, np.nan)
            return state

    from simdist.plan.mppi import Planner

    fallbacks: list[str | None] = []
    act = Planner.act

    def spy(self: Planner, *args, **kwargs):  # type: ignore[no-untyped-def]
        plan = act(self, *args, **kwargs)
        fallbacks.append(plan.stats.fallback)
        return plan

    monkeypatch.setattr(Planner, "act", spy)
    once = run_deploy(
        "go2_slope",
        "sim:sim",
        go2_model,
        ticks=20,
        bag_dir=tmp_path / "once",
        planner_overrides=FAST_PLANNER,
        robot=Corrupt(lambda k: k == 6),
        safe_stop_after_s=0.2,
    )
    assert once.stats.stale == 1 and once.stats.held == 1 and once.stats.fresh == 19
    assert once.stats.safe_stops == 0 and once.stats.ticks == 20
    # the bag says when the hold began and when plans came back (0.04 s after the last planned tick, tick 5)
    events = [json.loads(m.data) for _, m in read_topics(once.bag, [schema.EVENTS])[schema.EVENTS]]
    steps = [(e["stage"], e["age_s"]) for e in events if e["event"] == schema.WATCHDOG]
    assert steps == [("hold", 0.02), ("resume", 0.04)]
    assert fallbacks == [None] * 19  # every plan after the bad reading scored its samples (no NaN context)
    lasting = run_deploy(
        "go2_slope",
        "sim:sim",
        go2_model,
        ticks=40,
        bag_dir=tmp_path / "bags",
        planner_overrides=FAST_PLANNER,
        robot=Corrupt(lambda k: k >= 6),
        safe_stop_after_s=0.2,
    )
    assert lasting.stats.safe_stops == 1 and lasting.stats.fresh == 6 and lasting.stats.ticks == 16
    events = [json.loads(m.data) for _, m in read_topics(lasting.bag, [schema.EVENTS])[schema.EVENTS]]
    assert [e["stage"] for e in events if e["event"] == schema.WATCHDOG] == ["hold", "safe_stop"]


def test_a_model_that_outputs_nan_holds_and_escalates_to_the_safe_stop(
    go2_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From tick 5 every model output is NaN: the planner can only hold, which the loop counts as a hold (not a
    fresh plan), so the watchdog stops the robot safely instead of it holding a mid-gait target for ever."""
    import torch

    from simdist.model.world_model import WorldModel

    calls = {"n": 0}
    predict, propose = WorldModel.predict, WorldModel.propose

    def broken(original):  # type: ignore[no-untyped-def]
        def call(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            out = original(self, *args, **kwargs)
            return torch.full_like(out, torch.nan) if calls["n"] >= 5 else out

        return call

    def count(self: DeployLoop, job, original=DeployLoop._compute):  # type: ignore[no-untyped-def]
        plan = original(self, job)
        calls["n"] += 1
        return plan

    monkeypatch.setattr(WorldModel, "predict", broken(predict))
    monkeypatch.setattr(WorldModel, "propose", broken(propose))
    monkeypatch.setattr(DeployLoop, "_compute", count)
    result = run_deploy(
        "go2_slope", "sim:sim", go2_model, ticks=60, planner_overrides=FAST_PLANNER, safe_stop_after_s=0.2
    )
    stats = result.stats
    assert stats.fresh == 5 and stats.safe_stops == 1 and stats.held == 10 and stats.ticks == 15


def test_the_episodes_of_a_run_do_not_share_the_planners_noise(
    ur5e_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reseed to the same value at every episode would give all of a run's episodes one draw of the search's
    noise (on the peg, a bad draw failed 110 of 113 episodes of one run); each episode gets its own, and a run
    replays its episodes' draws exactly."""
    from simdist.plan.mppi import Planner

    seeds: list[int] = []
    reset = Planner.reset

    def recording(self: Planner, episode: int | None = None) -> None:
        reset(self, episode)
        seeds.append(self._generator.initial_seed())

    monkeypatch.setattr(Planner, "reset", recording)
    runs = []
    for _ in range(2):
        seeds.clear()
        result = run_deploy(
            "ur5e_peg", "sim:sim", ur5e_model, ticks=250, planner_overrides=FAST_PLANNER, seed=3
        )
        assert result.stats.errors == 0 and len(result.stats.episodes) >= 3
        runs.append(seeds[-len(result.stats.episodes) :])  # after the warm-up's resets, one per episode
    assert len(set(runs[0])) == len(runs[0])
    assert runs[0] == runs[1]


def test_a_lockstep_run_of_n_ticks_steps_the_simulator_n_times(go2_model: Path, tmp_path: Path) -> None:
    """The budget counts a run's ticks: the hold at its end ran one more period of physics that no bag counted."""
    from simdist.hardware.sim_robot import SimRobot
    from simdist.sim.config import load_task

    robot = SimRobot(load_task("go2_slope"), "ptfe", seed=0)
    result = run_deploy(
        "go2_slope",
        "sim:ptfe",
        go2_model,
        ticks=7,
        robot=robot,
        bag_dir=tmp_path,
        planner_overrides=FAST_PLANNER,
    )
    assert result.stats.ticks == 7 and robot.sim_time == pytest.approx(
        7 / 50
    )  # 7 periods of physics at 50 Hz
    assert sum(len(e["proprio"]) for e in read_episodes(result.bag)) == 7
