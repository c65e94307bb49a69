"""The planner's plans on fixed inputs, against those the implementation of 2026-12-02 made (tests/plan/golden.json):
a faster kernel, a fused head or another runtime must plan the same chunks to float tolerance.

The fixture is written by `python tests/plan/test_plan_golden.py --write` (only when a change of plans is meant).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch

from simdist.model import WorldModel, load_model_config
from simdist.plan import ActionLimits, Planner, load_planner_config

GOLDEN = Path(__file__).with_name("golden.json")
DIMS = {"obs_dim": 9, "act_dim": 3, "cmd_dim": 2}
# every planner feature on the scoring path: Gaussian and policy samples, iterations with carried elites, coloured
# noise, the ensemble penalty, a rate limit, planning ahead
SETTINGS = {
    "cpu": {},
    "wide": {"num_samples": 24, "num_policy_samples": 6, "iterations": 3, "elites": 6, "keep_elites": True},
    "coloured": {"num_samples": 16, "noise_correlation": 0.9},
    "ensemble": {"num_samples": 16, "disagreement_weight": 2.0},
    "ahead": {"num_samples": 16, "plan_ahead": True},
}


def _model(members: int) -> WorldModel:
    torch.manual_seed(0)
    config = dataclasses.replace(load_model_config("tiny"), dynamics_members=members)
    return WorldModel.build(DIMS, config).eval()


def _inputs(model: WorldModel, i: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(100 + i)
    h, o, a = model.history, model.obs_dim, model.act_dim
    mask = torch.ones(1, h, dtype=torch.bool)
    mask[:, : i % h] = False
    return (
        torch.randn(1, h, o, generator=gen),
        0.5 * torch.randn(1, h, a, generator=gen),
        mask,
        torch.randn(1, o, generator=gen),
    )


def plans() -> dict[str, list[list[list[float]]]]:
    """Three consecutive ticks (warm-started) per setting: each tick's whole planned chunk."""
    out = {}
    for name, changes in SETTINGS.items():
        model = _model(3 if name == "ensemble" else 1)
        base = load_planner_config("cpu", "go2", {"horizon": model.horizon})
        # a sharp temperature: with random weights the scores differ little, and the plan must depend on them
        config = dataclasses.replace(base, **{"elites": min(base.elites, 4), "temperature": 100.0, **changes})
        planner = Planner(model, config, limits=ActionLimits(-1.5, 1.5, max_delta=0.4), seed=1)
        chunks, action = [], torch.zeros(model.act_dim)
        for i in range(3):
            with torch.inference_mode():
                ctx = model.context(*_inputs(model, i))
            pinned = action if config.plan_ahead else None
            plan = planner.act(ctx, torch.tensor([0.6, -0.2]), first_action=pinned)
            action = plan.actions[1] if config.plan_ahead else plan.action
            chunks.append(plan.actions.tolist())
        out[name] = chunks
    return out


@pytest.mark.parametrize("name", list(SETTINGS))
def test_plans_are_the_ones_the_reference_implementation_made(name: str) -> None:
    golden = json.loads(GOLDEN.read_text())
    now = plans()[name]
    assert len(now) == len(golden[name]) == 3
    for tick, (got, want) in enumerate(zip(now, golden[name], strict=True)):
        torch.testing.assert_close(
            torch.tensor(got), torch.tensor(want), atol=1e-4, rtol=1e-4, msg=f"tick {tick}"
        )
    assert max(abs(v) for chunk in now for step in chunk for v in step) > 0.05  # not a trivial all-zero plan


if __name__ == "__main__" and "--write" in sys.argv:
    GOLDEN.write_text(json.dumps(plans(), indent=1) + "\n")
    print(f"wrote {GOLDEN}")
