"""The planner's search at its edges: what a single MPPI iteration, its scoring and the previous action must do
exactly (tests that the mutation check showed were missing)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from plan_toys import PointContext, PointMass, planner_config
from torch import Tensor

from simdist.plan import ActionLimits, Plan, Planner, PlannerConfig

START = torch.tensor([0.0, 0.0])
GOAL = torch.tensor([1.5, -1.0])


def config(**changes: object) -> PlannerConfig:
    return planner_config(**changes)


def tick(planner: Planner, **kwargs: object) -> Plan:
    return planner.act(PointContext(START[None]), GOAL, **kwargs)


def record_candidates(planner: Planner) -> list[tuple[Tensor, Tensor]]:
    seen: list[tuple[Tensor, Tensor]] = []
    planner.on_candidates = lambda chunks, scores: seen.append((chunks.clone(), scores.clone()))
    return seen


# -- _evaluate_eager -------------------------------------------------------------------------------------------------


class Ensemble:
    """Rewards 1 and value `value` at every step; members that disagree by `spread` at every step."""

    def __init__(self, spread: float, value: float = 10.0) -> None:
        self.horizon, self.act_dim, self.cmd_dim = 5, 2, 2
        self.spread, self.value = spread, value
        self.last_value_only: list[object] = []
        self.predict_calls = 0

    def context(self, *args: Tensor) -> PointContext:
        return PointContext(torch.zeros(1, 2))

    def predict(self, ctx: PointContext, actions: Tensor) -> Tensor:
        self.predict_calls += 1
        return actions

    def predict_with_disagreement(self, ctx: PointContext, actions: Tensor) -> tuple[Tensor, Tensor]:
        assert ctx.start.shape[0] == actions.shape[0]  # the context expanded to the samples
        return actions, torch.full(actions.shape[:2], self.spread)

    def score(self, ctx, latents, actions, command, *, last_value_only=False):
        self.last_value_only.append(last_value_only)
        ones = torch.ones(latents.shape[:2])
        return ones, self.value * ones

    def propose(self, ctx, command):
        return torch.zeros(1, self.horizon, 2)


@pytest.mark.parametrize("weight", [0.0, 0.5, 2.0])
def test_each_step_loses_the_disagreement_weight_times_the_spread(weight: float) -> None:
    model = Ensemble(spread=3.0)
    planner = Planner(model, config(horizon=5, discount=0.9, iterations=1, disagreement_weight=weight))
    plan = planner.act(model.context(), GOAL)
    expected = sum(0.9**k * (1.0 - weight * 3.0) for k in range(5)) + 0.9**5 * 10.0
    assert plan.stats.best_score == pytest.approx(expected, rel=1e-6)
    assert model.predict_calls == (1 if weight == 0 else 0)  # no member cost when off, one call when on


def test_the_model_is_asked_for_the_last_value_only() -> None:
    model = Ensemble(spread=0.0)
    Planner(model, config(horizon=5, iterations=3)).act(model.context(), GOAL)
    assert model.last_value_only == [True, True, True]


# -- _act: what is evaluated, counted and reported -------------------------------------------------------------------


def test_on_candidates_sees_each_iterations_evaluated_chunks_and_their_scores() -> None:
    model = PointMass(horizon=4)
    planner = Planner(model, config(num_samples=16, num_policy_samples=4, elites=4, iterations=3))
    seen = record_candidates(planner)
    tick(planner)
    # the policy samples are evaluated in the first iteration only
    assert [chunks.shape[0] for chunks, _ in seen] == [20, 16, 16]
    for (chunks, scores), evaluated in zip(seen, model.predict_calls, strict=True):
        assert torch.equal(chunks, evaluated)
        assert torch.allclose(scores, model.returns(START, GOAL, chunks, 0.99), rtol=1e-5, atol=1e-4)


def test_a_clean_search_counts_no_nonfinite_samples_and_raises_no_flag() -> None:
    plan = tick(Planner(PointMass(horizon=4), config(iterations=3)))
    assert plan.stats.nonfinite_samples == 0 and plan.stats.flags == ()


class HalfNan(PointMass):
    """Scores nan for about half of the chunks wherever the search is: those whose first action's first dimension
    has an even digit in the third decimal."""

    def score(self, ctx, latents, actions, command, last_value_only=False):
        rewards, values = super().score(ctx, latents, actions, command, last_value_only)
        bad = (actions[:, 0, 0] * 1000).floor().remainder(2) == 0
        return torch.where(bad[:, None], torch.nan, rewards), values


def test_nonfinite_samples_are_counted_over_all_iterations() -> None:
    planner = Planner(HalfNan(horizon=4), config(iterations=4, num_samples=64, elites=8))
    seen = record_candidates(planner)
    plan = tick(planner)
    per_iteration = [int((~torch.isfinite(scores)).sum()) for _, scores in seen]
    assert all(count > 0 for count in per_iteration)  # every iteration had some to count
    assert plan.stats.nonfinite_samples == sum(per_iteration)
    assert all(bool((scores[~torch.isfinite(scores)] == -torch.inf).all()) for _, scores in seen)


def test_a_better_base_policy_chunk_beats_the_warm_start() -> None:
    model = PointMass(horizon=4, effort=1.0)
    cfg = config(num_samples=16, num_policy_samples=4, policy_std=0.0, elites=4, iterations=1)
    planner = Planner(model, dataclasses.replace(cfg, temperature=1e4))
    tick(planner)  # the policy proposes zeros: a poor first plan, then the warm start of the second
    optimum = model.optimum(START, GOAL, 0.99)
    model.policy = optimum[None].clone()
    plan = tick(planner, elapsed_steps=0)
    assert plan.stats.warm_start
    assert torch.allclose(plan.actions, optimum, atol=1e-5)  # the four policy copies are the elites


class NanPolicy(PointMass):
    def propose(self, ctx, command):
        return torch.full_like(self.policy, torch.nan)


def test_without_a_usable_policy_the_search_starts_from_the_previous_action() -> None:
    model = NanPolicy(horizon=4)
    plan = tick(Planner(model, config(iterations=1)), prev_action=torch.tensor([0.3, -0.2]))
    assert torch.equal(model.predict_calls[0][0], torch.tensor([[0.3, -0.2]]).expand(4, 2))
    assert plan.stats.flags == ("policy_nonfinite",) and plan.stats.fallback is None


def test_a_policy_chunk_in_float64_still_gives_a_float32_plan() -> None:
    class Float64(PointMass):
        def score(self, ctx, latents, actions, command, last_value_only=False):
            rewards, values = super().score(ctx, latents, actions, command, last_value_only)
            return rewards * torch.nan, values  # nothing scores: the plan is the policy's chunk

        def propose(self, ctx, command):
            return torch.full((1, 4, 2), 0.25, dtype=torch.float64)

    plan = tick(Planner(Float64(horizon=4), config(iterations=1)))
    assert plan.stats.fallback == "policy" and plan.actions.dtype == torch.float32
    assert torch.equal(plan.actions, torch.full((4, 2), 0.25))


class SlowProposal(PointMass):
    """Its base policy takes 50 ms of a fake clock."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__(horizon=4)
        self.clock = clock

    def propose(self, ctx, command):
        self.clock[0] += 0.050
        return super().propose(ctx, command)


def test_the_first_iteration_runs_even_when_the_budget_is_spent_before_the_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from simdist.plan import mppi

    clock = [100.0]
    monkeypatch.setattr(mppi, "_clock", lambda: clock[0])
    plan = tick(Planner(SlowProposal(clock), config(iterations=3, budget_ms=1.0)))
    assert plan.stats.iterations == 1 and plan.stats.flags == ("budget",)
    assert plan.stats.fallback is None and plan.stats.best_score == plan.stats.best_score  # a real score


# -- _previous_action ------------------------------------------------------------------------------------------------


def test_a_replan_before_any_step_ran_keeps_the_rate_limit_to_the_action_before_the_plan() -> None:
    planner = Planner(PointMass(horizon=4), config(iterations=3), limits=ActionLimits(max_delta=0.05))
    prev = torch.tensor([0.0, 0.0])
    tick(planner, prev_action=prev)
    # nothing of the first plan executed: `prev` is still the last action
    again = tick(planner, elapsed_steps=0)
    assert again.stats.warm_start and float((again.action - prev).abs().max()) <= 0.05 + 1e-6


def test_a_previous_action_outside_the_bounds_is_brought_inside_them_first() -> None:
    planner = Planner(PointMass(horizon=4), config(iterations=2), limits=ActionLimits(-1.0, 1.0, 0.1))
    plan = tick(planner, prev_action=torch.tensor([-5.0, 5.0]))
    assert bool((plan.actions.abs() <= 1.0).all())
    assert float((plan.action - torch.tensor([-1.0, 1.0])).abs().max()) <= 0.1 + 1e-6


def test_a_nonfinite_previous_action_is_flagged_and_ignored() -> None:
    planner = Planner(PointMass(horizon=4), config(iterations=2), limits=ActionLimits(max_delta=0.1))
    plan = tick(planner, prev_action=torch.tensor([float("nan"), 0.0]))
    assert plan.stats.flags == ("prev_action_nonfinite",) and plan.stats.fallback is None
    assert bool(torch.isfinite(plan.actions).all())


def test_a_float64_previous_action_is_held_and_rate_limited_in_float32() -> None:
    prev = torch.tensor([0.3, -0.2], dtype=torch.float64)
    limits = ActionLimits(max_delta=0.1)
    plan = tick(Planner(PointMass(horizon=4), config(iterations=2), limits=limits), prev_action=prev)
    assert plan.actions.dtype == torch.float32
    assert float((plan.action - prev.float()).abs().max()) <= 0.1 + 1e-6

    # a hold (nan policy, nan scores) executes the previous action itself
    class Dead(NanPolicy):
        def score(self, ctx, latents, actions, command, last_value_only=False):
            rewards, values = super().score(ctx, latents, actions, command, last_value_only)
            return rewards * torch.nan, values

    hold = tick(Planner(Dead(horizon=4), config(iterations=1), limits=limits), prev_action=prev)
    assert hold.stats.fallback == "hold" and hold.actions.dtype == torch.float32
    assert torch.equal(hold.actions, prev.float().expand(4, 2))


# -- the final clamp and re-projection, at offsets where float32 rounds at 1e-3 --------------------------------------

OFFSET = 12345.0  # float32 spacing there: 2^-10


class Ramp(PointMass):
    """Rewards `sign` x the actions, later steps more: the elites push against the bounds and rate limits.
    `start`: the policy chunk's value per action dimension (OFFSET in both by default)."""

    def __init__(
        self, horizon: int, sign: float = 1.0, start: tuple[float, float] = (OFFSET, OFFSET)
    ) -> None:
        super().__init__(horizon=horizon)
        self.sign = sign
        self.policy = torch.tensor(start, dtype=torch.float32).expand(1, horizon, 2).clone()

    def score(self, ctx, latents, actions, command, last_value_only=False):
        rewards = self.sign * actions.sum(-1) * torch.arange(1, self.horizon + 1, dtype=torch.float32)
        return rewards, torch.zeros_like(rewards)


def ramp_config(
    horizon: int, samples: int, elites: int, temperature: float, iterations: int = 2
) -> PlannerConfig:
    return config(
        horizon=horizon, iterations=iterations, init_std=1.0, num_samples=samples, elites=elites,
        num_policy_samples=0, temperature=temperature,
    )  # fmt: skip


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_the_refitted_mean_is_clipped_to_the_bounds_even_where_rounding_pushes_it_out(sign: float) -> None:
    # the first action dimension starts 50 beyond a bound, so every sample is projected exactly onto it; the second
    # is free, so the elites' weights differ and their weighted mean of that one value rounds to an ulp either side
    # of it, beyond it for some seeds (recomputed here as the planner refits, so the edge is exercised on any CPU)
    near, far = (0.3, 100.0) if sign > 0 else (100.0, 0.3)
    limits = ActionLimits(OFFSET - far, OFFSET + near)
    low, high = torch.tensor(limits.low), torch.tensor(limits.high)
    bound = float(high if sign > 0 else low)  # in float32, as the planner holds it
    ulp = 2.0**-10
    beyond = 0
    for seed in range(24):
        model = Ramp(4, sign, start=(OFFSET + sign * 50.0, OFFSET))
        planner = Planner(model, ramp_config(4, 64, 16, 5.0, iterations=1), limits=limits, seed=seed)
        seen = record_candidates(planner)
        plan = tick(planner, prev_action=torch.full((2,), OFFSET))
        chunks, scores = seen[-1]
        assert bool((chunks[..., 0] == bound).all())  # every candidate on the bound
        top = torch.topk(scores, 16)
        refit = torch.einsum("k,kta->ta", torch.softmax(5.0 * top.values, dim=0), chunks[top.indices])
        beyond += int(bool((sign * (refit[:, 0] - bound) > 0).any()))
        assert bool((plan.actions >= low).all() and (plan.actions <= high).all())  # exactly, no tolerance
        assert (
            float((plan.actions[:, 0] - bound).abs().max()) <= 4 * ulp
        )  # at it, up to the sum's rounding inwards
    assert beyond > 0  # the mean rounded out of the bounds at least once and was clipped back


@pytest.mark.parametrize("horizon", [6, 1])
def test_a_rate_limit_broken_by_rounding_the_mean_is_restored(horizon: int) -> None:
    # the mean's steps differ by more than max_delta by two ulps (from each other; with one step, from the previous
    # action); re-projected, by at most half an ulp
    prev = torch.full((2,), OFFSET)
    limits = ActionLimits(OFFSET - 100.0, OFFSET + 100.0, 0.3)
    planner = Planner(Ramp(horizon), ramp_config(horizon, 128, 32, 5.0), limits=limits)
    plan = tick(planner, prev_action=prev)
    steps = torch.diff(plan.actions.double(), dim=0, prepend=prev[None].double()).abs()
    assert float(steps.max()) > 0.29  # the limit is what holds it back
    assert float((steps - 0.3).max()) <= 2.0**-11
