"""`exploration_std`: collection's executed step explores; the search, its warm start and evaluation do not."""

from __future__ import annotations

import pytest
import torch
from plan_toys import PointMass, planner_config

from simdist.errors import ConfigError
from simdist.plan import ActionLimits, Planner


def _run(std: float, ticks: int = 6, max_delta: float | None = 0.3) -> list:
    model = PointMass(horizon=6)
    cfg = planner_config(horizon=6, num_samples=16, iterations=2, elites=4, exploration_std=std)
    limits = ActionLimits(low=-1.0, high=1.0, max_delta=max_delta)
    planner = Planner(model, cfg, limits=limits, seed=7)
    goal = torch.tensor([3.0, -2.0])
    ctx = model.context(torch.zeros(1, 3, 2), torch.zeros(1, 3, 2), torch.ones(1, 3), torch.zeros(1, 2))
    return [planner.act(ctx, goal) for _ in range(ticks)]


def test_only_the_executed_step_explores_within_the_limits() -> None:
    clean, explored = _run(0.0, ticks=1)[0], _run(0.5, ticks=1)[0]
    moved = (explored.actions[0] - clean.actions[0]).abs()
    assert float(moved.max()) > 0.05, moved
    assert torch.equal(explored.action, explored.actions[0])
    # within the bounds, and the rate limit along the chunk from the explored step on
    assert float(explored.actions.abs().max()) <= 1.0 + 1e-6
    assert float(explored.actions.diff(dim=0).abs().max()) <= 0.3 + 1e-6


def test_exploring_changes_neither_the_search_nor_its_warm_start() -> None:
    # no rate limit, so the explored step does not move the steps after it: tick after tick the search draws the
    # same samples, warm-starts from the same plan and refits the same chunk; only the executed step differs
    clean, explored = _run(0.0, max_delta=None), _run(0.5, max_delta=None)
    for c, e in zip(clean, explored, strict=True):
        assert torch.equal(c.actions[1:], e.actions[1:])
        assert float((c.actions[0] - e.actions[0]).abs().max()) > 0
    noise = [e.actions[0] - c.actions[0] for c, e in zip(clean, explored, strict=True)]
    assert not torch.allclose(noise[0], noise[1])  # fresh noise each tick
    assert all(p.stats.best_score == q.stats.best_score for p, q in zip(clean, explored, strict=True))


def test_exploration_needs_a_step_to_explore() -> None:
    with pytest.raises(ConfigError, match="exploration_std must be >= 0"):
        planner_config(exploration_std=-0.1)
    with pytest.raises(ConfigError, match="plan_ahead"):
        planner_config(exploration_std=0.1, plan_ahead=True)


def test_evaluation_never_explores(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from simdist.runtime import adapt

    seen = {}

    def fake_deploy(*args: object, **kwargs: object) -> SimpleNamespace:
        seen.update(kwargs["planner_overrides"])  # type: ignore[arg-type]
        finished = [{"metrics": {"progress_m": 1.0}}] * 15  # the protocol's 3 speeds x 5 episodes
        return SimpleNamespace(stats=SimpleNamespace(episodes=finished), interrupted=False)

    monkeypatch.setattr(adapt, "run_deploy", fake_deploy)
    monkeypatch.setattr("simdist.hardware.sim_robot.SimRobot", lambda *a, **k: None)
    adapt.evaluate_on_robot(
        "go2_slope", "ptfe", None, planner_overrides={"exploration_std": 0.5, "iterations": 3}
    )  # type: ignore[arg-type]
    assert seen == {"exploration_std": 0.0, "iterations": 3}
