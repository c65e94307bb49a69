"""`bench planner` pieces that need no timing: task settings and a tiny measured run's report."""

from __future__ import annotations

import pytest
import torch

from simdist.errors import ConfigError
from simdist.model import WorldModel, load_model_config
from simdist.plan import bench as plan_bench
from simdist.plan.config import PlannerConfig


def test_task_settings_come_from_the_task_yaml_or_the_robot_table() -> None:
    assert plan_bench.task_settings("go2_slope")["control_hz"] == 50
    assert plan_bench.task_settings("ur5e_peg")["control_hz"] == 10
    assert plan_bench.task_settings("ur5e")["robot"] == "ur5e"
    with pytest.raises(ConfigError, match="unknown task 'mars_rover'"):
        plan_bench.task_settings("mars_rover")


def test_the_measured_latency_is_the_ticks_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planner made 15 ms slower is measured 15 ms slower (what is timed is the tick, not something beside it)."""
    import time

    from simdist.plan.mppi import Planner

    settings = plan_bench.task_settings("ur5e")
    torch.manual_seed(0)
    model = WorldModel.build(settings["dims"], load_model_config("tiny")).eval()
    cfg = PlannerConfig(8, 2, 0.05, 2, 4, 0.25, 1.0, 0.05, model.horizon, 0.99, keep_elites=True)
    fast = plan_bench.measure(model, cfg, settings, ticks=8, warmup=1, paced=False)
    act = Planner.act

    def slow(self: Planner, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        time.sleep(0.015)
        return act(self, *args, **kwargs)

    monkeypatch.setattr(Planner, "act", slow)
    slowed = plan_bench.measure(model, cfg, settings, ticks=8, warmup=1, paced=False)
    # every slowed tick holds the sleep; the fastest ticks of each (the least disturbed by other processes on a
    # loaded machine, where the p50 of 8 ticks can move by more than the sleep) differ by it
    assert min(slowed["raw"]["total"]) >= 15.0
    assert min(slowed["raw"]["total"]) - min(fast["raw"]["total"]) >= 10.0


def test_a_tiny_run_reports_every_number_the_summary_prints() -> None:
    settings = plan_bench.task_settings("ur5e")
    torch.manual_seed(0)
    model = WorldModel.build(settings["dims"], load_model_config("tiny")).eval()
    cfg = PlannerConfig(8, 2, 0.05, 2, 4, 0.25, 1.0, 0.05, model.horizon, 0.99, keep_elites=True)
    result = plan_bench.measure(model, cfg, settings, ticks=5, warmup=1, paced=False)
    assert result["ticks"] == 5 and result["fallbacks"] == 0 and not result["paced"]
    assert result["samples_per_tick"] == 8 * 2 + 2
    assert result["p99_to_p50"] == pytest.approx(result["p99_ms"] / result["p50_ms"])
    assert result["p99_to_period"] == pytest.approx(result["p99_ms"] / 100.0)  # 10 Hz
    assert result["machine_jitter_p99_to_p50"] >= 1.0 and result["iterations_mean"] == 2
    assert result["scheduling"] == "normal" and result["steal"] >= 0.0
    shares = plan_bench.profile(model, cfg, settings, ticks=2)
    assert {"dynamics", "reward", "value", "policy"} <= set(shares)
    assert abs(sum(shares.values()) - 1.0) < 1e-9
    report = {
        "task": "ur5e",
        "robot": "ur5e",
        "control_hz": 10,
        "period_ms": 100.0,
        "model": {"source": "tiny", "trained": False, "parameters": 1},
        "quality": "not measured",
        "configs": {"cpu": result},
        "profile": {"cpu": shares},
    }
    text = plan_bench.summary(report)
    assert "RANDOM weights" in text and "dynamics" in text and "cpu" in text


def test_quality_runs_each_config_on_the_same_sim_episodes(tmp_path) -> None:
    from fast_planner import FAST_PLANNER

    from simdist.runtime.scratch import write_random_checkpoint

    model_dir = write_random_checkpoint(tmp_path / "model", "ur5e_peg")
    same = {**FAST_PLANNER, "budget_ms": None}  # no deadline: lockstep runs are then exactly reproducible
    result = plan_bench.quality("ur5e_peg", str(model_dir), {"cpu": same, "gpu": same}, episodes=1)
    assert set(result) == {"cpu", "gpu"}
    for entry in result.values():
        assert entry["metric"] == "success rate" and entry["episodes"] == 1
        assert entry["value"] in (0.0, 1.0)
        assert 0.0 <= entry["mean_dist_xy_m"] < 0.5
    # the same config on the same episodes again: the same outcome, to the last bit
    again = plan_bench.quality("ur5e_peg", str(model_dir), {"cpu": same}, episodes=1)["cpu"]
    assert again["mean_dist_xy_m"] == result["cpu"]["mean_dist_xy_m"]
    assert again["mean_depth_m"] == result["cpu"]["mean_depth_m"]


def test_quality_without_a_trained_model_is_a_one_line_error(capsys) -> None:
    from simdist.cli import main

    assert main(["bench", "planner", "--task", "go2_slope", "--ticks", "1", "--quality-episodes", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--quality-episodes needs a trained model (--model DIR)" in err[0]


def test_a_run_under_fifo_says_so_and_gives_the_thread_back() -> None:
    import os

    from simdist.runtime.realtime import Scheduling, current_thread_policy

    if not hasattr(os, "SCHED_FIFO"):
        pytest.skip("Linux scheduling")
    settings = plan_bench.task_settings("ur5e")
    torch.manual_seed(0)
    model = WorldModel.build(settings["dims"], load_model_config("tiny")).eval()
    cfg = PlannerConfig(4, 2, 0.05, 1, 2, 0.25, 1.0, 0.05, model.horizon, 0.99)
    before = os.sched_getaffinity(0)
    cpu = min(before)
    result = plan_bench.measure(
        model, cfg, settings, ticks=3, warmup=1, scheduling=Scheduling(priority=30, cpus=(cpu,))
    )
    label = result["scheduling"]
    assert label == f"SCHED_FIFO 30, cpus {cpu}" or label.startswith("normal (bench thread")  # no right
    assert current_thread_policy() == ("SCHED_OTHER", 0) and os.sched_getaffinity(0) == before


def test_paced_work_starts_on_the_period_grid_and_reanchors_after_an_overrun(monkeypatch) -> None:
    now = [100.0]
    slept: list[float] = []
    monkeypatch.setattr(plan_bench.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(plan_bench.time, "sleep", lambda s: (slept.append(s), now.__setitem__(0, now[0] + s)))
    pacer = plan_bench._Pacer(0.02)
    starts = []
    for work in (0.005, 0.012, 0.030, 0.001, 0.065, 0.0):  # seconds each piece of work takes
        pacer.wait()
        starts.append(round(now[0] - 100.0, 6))
        now[0] += work
    # 0, 20, 40 ms on the grid; the 30 ms piece ends at 70 ms, 10 ms late: the next starts at once on its own
    # grid point's behalf (60 ms) and the grid holds; the 65 ms piece overruns whole periods: re-anchored at 145 ms
    assert starts == [0.0, 0.02, 0.04, 0.07, 0.08, 0.145]
    assert slept == pytest.approx([0.015, 0.008, 0.009])
    plain = plan_bench._Pacer(None)
    plain.wait()
    assert now[0] == pytest.approx(100.145) and len(slept) == 3  # unpaced: no waiting


def test_a_paced_run_waits_for_the_period_before_every_tick_and_probe(monkeypatch) -> None:
    waits = {"paced": 0, "unpaced": 0}
    original = plan_bench._Pacer.wait

    def counting(self) -> None:  # type: ignore[no-untyped-def]
        waits["paced" if self.period is not None else "unpaced"] += 1
        original(self)

    monkeypatch.setattr(plan_bench._Pacer, "wait", counting)
    settings = plan_bench.task_settings("ur5e")
    torch.manual_seed(0)
    model = WorldModel.build(settings["dims"], load_model_config("tiny")).eval()
    cfg = PlannerConfig(4, 2, 0.05, 1, 2, 0.25, 1.0, 0.05, model.horizon, 0.99)
    monkeypatch.setattr(plan_bench.time, "sleep", lambda s: None)  # the grid is tested above; no waiting here
    paced = plan_bench.measure(model, cfg, settings, ticks=4, warmup=2, paced=True)
    assert paced["paced"] and waits == {"paced": 2 + 4 + 4, "unpaced": 0}  # warm-up, ticks, reference probes
    plan_bench.measure(model, cfg, settings, ticks=4, warmup=2, paced=False)
    assert waits == {"paced": 10, "unpaced": 2 + 4}


def test_a_random_model_of_any_preset_and_its_refusals() -> None:
    settings = plan_bench.task_settings("go2")
    tiny, info = plan_bench._model(settings, None, "tiny")
    default, _ = plan_bench._model(settings, None)
    assert info == {"source": "config/model/tiny.yaml", "trained": False, "parameters": info["parameters"]}
    assert (
        info["parameters"]
        == sum(p.numel() for p in tiny.parameters())
        < sum(p.numel() for p in default.parameters())
    )
    again, _ = plan_bench._model(settings, None, "tiny")
    assert all(
        torch.equal(a, b) for a, b in zip(tiny.parameters(), again.parameters(), strict=True)
    )  # seeded
    with pytest.raises(ConfigError, match="exclude each other"):
        plan_bench._model(settings, "models/go2_slope", "tiny")
    with pytest.raises(ConfigError, match="unknown model preset 'huge'"):
        plan_bench._model(settings, None, "huge")


def test_interleaved_blocks_alternate_and_count_every_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    """A B A B ...: each variant gets its ticks in `blocks` blocks of its own, and a variant with 4x the samples
    measures slower than its reference within the same run."""
    settings = plan_bench.task_settings("ur5e")
    torch.manual_seed(0)
    model = WorldModel.build(settings["dims"], load_model_config("tiny")).eval()
    common = dict(policy_std=0.05, iterations=1, elites=2, temperature=0.25, init_std=1.0, min_std=0.05)
    small = PlannerConfig(num_samples=8, num_policy_samples=2, horizon=model.horizon, discount=0.99, **common)
    large = PlannerConfig(
        num_samples=256, num_policy_samples=8, horizon=model.horizon, discount=0.99, **common
    )
    order: list[int] = []
    measure = plan_bench.measure

    def logged(model: object, config: PlannerConfig, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        order.append(config.num_samples)
        return measure(model, config, *args, **kwargs)

    monkeypatch.setattr(plan_bench, "measure", logged)
    out = plan_bench.measure_interleaved(
        {"a": (model, small), "b": (model, large)}, settings, ticks=12, blocks=3, paced=False
    )
    assert order == [8, 256, 8, 256, 8, 256]
    assert out["a"]["ticks"] == out["b"]["ticks"] == 12 and out["a"]["blocks"] == 3
    assert out["a"]["samples_per_tick"] == 10 and out["b"]["samples_per_tick"] == 264
    assert out["b"]["p50_ms"] > out["a"]["p50_ms"] and "raw" in out["a"]
    # the arithmetic grows with the samples (the context and the policy's chunk are shared): 264 / 10 samples
    assert 10 < out["b"]["mflop_per_tick"] / out["a"]["mflop_per_tick"] < 264 / 10 + 1


def test_against_compares_planner_settings_and_model_sizes_in_one_run() -> None:
    import argparse

    args = argparse.Namespace(
        task="ur5e",
        config="gpu",  # the baseline itself: no third, slow config in the run
        overrides=[
            "num_samples=8",
            "num_policy_samples=2",
            "iterations=1",
            "elites=4",
            "horizon=5",
            "precision=float32",
        ],
        ticks=8,
        model=None,
        model_preset="tiny",
        rt_priority=None,
        cpus=None,
        unpaced=True,
        against=["model.dynamics_heads=1", "precision=bfloat16"],
    )
    result = plan_bench.bench(args)
    assert set(result["configs"]) == {"gpu", plan_bench.AGAINST}
    assert result["configs"][plan_bench.AGAINST]["precision"] == "bfloat16"
    assert result["configs"]["gpu"]["precision"] == "float32"
    assert result["configs"]["gpu"]["ticks"] == result["configs"][plan_bench.AGAINST]["ticks"] == 8
    assert result["model_against"]["changes"] == {"dynamics_heads": 1}
    assert (
        result["model_against"]["parameters"] == result["model"]["parameters"]
    )  # heads: the same parameters
    ratio = result["against"]["p50_ms_ratio"]
    assert ratio == pytest.approx(
        result["configs"][plan_bench.AGAINST]["p50_ms"] / result["configs"]["gpu"]["p50_ms"]
    )
    assert all("raw" not in measured for measured in result["configs"].values())
    text = plan_bench.summary(result)
    assert (
        "against = gpu with model.dynamics_heads=1, precision=bfloat16" in text
        and f"p50 {ratio:.2f}x" in text
    )
    args.model, args.model_preset = "models/ur5e_peg", None
    with pytest.raises(ConfigError, match="changes a random-weights preset; not with --model"):
        plan_bench.bench(args)
