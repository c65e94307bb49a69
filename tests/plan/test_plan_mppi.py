"""The MPPI planner on analytic world models: optimum, warm start, determinism, limits, non-finite outputs."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from plan_toys import PointContext, PointMass, planner_config

from simdist.errors import ConfigError
from simdist.plan import ActionLimits, Planner, PlannerConfig, PlanningModel

START = torch.tensor([0.0, 0.0])
GOAL = torch.tensor([1.5, -1.0])


def config(**changes: object) -> PlannerConfig:
    return planner_config(**changes)


def tick(planner: Planner, model: PointMass, start: torch.Tensor = START, **kwargs: object):
    ctx = model.context(torch.zeros(1, 3, 2), torch.zeros(1, 3, 2), torch.ones(1, 3), start[None])
    return planner.act(ctx, GOAL, **kwargs)


def test_point_mass_satisfies_the_protocol() -> None:
    assert isinstance(PointMass(), PlanningModel)


@pytest.mark.parametrize("keep_elites", [False, True])
def test_converges_to_the_known_optimum(keep_elites: bool) -> None:
    model = PointMass(horizon=4, effort=1.0)
    optimum = model.optimum(START, GOAL, 0.99)
    best = model.returns(START, GOAL, optimum[None], 0.99).item()
    plan = tick(Planner(model, config(keep_elites=keep_elites), limits=ActionLimits(-3.0, 3.0)), model)
    achieved = model.returns(START, GOAL, plan.actions[None], 0.99).item()
    assert torch.allclose(plan.action, optimum[0], atol=0.03)
    assert achieved >= best - 0.01 * abs(best)
    # the reported score is the model's own discounted return of an evaluated sample: near, never above, the optimum
    assert best - 0.01 * abs(best) <= plan.stats.best_score <= best + 1e-4


@pytest.mark.parametrize("keep_elites", [False, True])
def test_more_iterations_do_not_make_it_worse(keep_elites: bool) -> None:
    model = PointMass(horizon=4, effort=1.0)
    returns = []
    for iterations in (1, 2, 4, 8, 12):
        planner = Planner(model, config(iterations=iterations, keep_elites=keep_elites), seed=3)
        plan = tick(planner, model)
        returns.append(model.returns(START, GOAL, plan.actions[None], 0.99).item())
    for fewer, more in zip(returns, returns[1:], strict=False):
        assert more >= fewer - 1e-3 * abs(fewer)
    assert returns[-1] > returns[0] + 1.0


class Constant:
    """Rewards 1 at every step and value `value` at every step, whatever the actions."""

    def __init__(self, horizon: int = 5, value: float = 10.0) -> None:
        self.horizon, self.act_dim, self.cmd_dim, self.value = horizon, 2, 2, value

    def context(self, *args: torch.Tensor) -> PointContext:
        return PointContext(torch.zeros(1, 2))

    def predict(self, ctx: PointContext, actions: torch.Tensor) -> torch.Tensor:
        return actions

    def score(self, ctx, latents, actions, command, last_value_only=False):
        ones = torch.ones(actions.shape[:2])
        return ones, self.value * ones

    def propose(self, ctx, command):
        return torch.zeros(1, self.horizon, 2)


def test_score_discounts_rewards_by_gamma_k_and_the_value_by_gamma_T() -> None:
    model = Constant(horizon=5, value=10.0)
    plan = Planner(model, config(horizon=5, discount=0.9, iterations=1)).act(model.context(), GOAL)
    expected = sum(0.9**k for k in range(5)) + 0.9**5 * 10.0
    assert plan.stats.best_score == pytest.approx(expected, rel=1e-6)


def shifted(actions: torch.Tensor, steps: int) -> torch.Tensor:
    return torch.cat([actions[steps:], actions[-1:].expand(steps, -1)])


@pytest.mark.parametrize("elapsed", [1, 2])
def test_warm_start_is_the_previous_mean_shifted_by_elapsed_steps(elapsed: int) -> None:
    model = PointMass(horizon=6, effort=0.5)
    planner = Planner(model, config(horizon=6, iterations=3))
    first = tick(planner, model)
    model.predict_calls.clear()
    second = tick(planner, model, elapsed_steps=elapsed)
    # row 0 of every iteration is the current mean; in the first iteration it is the warm start
    warm = model.predict_calls[0][0]
    assert torch.allclose(warm, shifted(first.actions, elapsed), atol=1e-6)
    assert not torch.allclose(warm, first.actions, atol=1e-3)  # the shift is real, not a copy or zeros
    assert second.stats.warm_start and second.stats.elapsed_steps == elapsed


def test_late_beyond_the_horizon_starts_cold() -> None:
    model = PointMass(horizon=4)
    model.policy = torch.full((1, 4, 2), 0.3)
    planner = Planner(model, config(iterations=2))
    tick(planner, model)
    model.predict_calls.clear()
    plan = tick(planner, model, elapsed_steps=4)
    assert not plan.stats.warm_start
    assert torch.allclose(model.predict_calls[0][0], model.policy[0])  # cold start from the base policy


def test_same_seed_same_inputs_give_identical_actions() -> None:
    model = PointMass(horizon=4)
    runs = []
    for seed in (7, 7, 8):
        planner = Planner(model, config(iterations=3, num_samples=64, elites=8), seed=seed)
        runs.append([tick(planner, model, start=torch.tensor([0.1 * i, 0.0])).actions for i in range(3)])
    assert all(torch.equal(a, b) for a, b in zip(runs[0], runs[1], strict=True))
    assert not torch.equal(runs[0][0], runs[2][0])
    replay = Planner(model, config(iterations=3, num_samples=64, elites=8), seed=7)
    tick(replay, model)
    replay.reset()
    assert torch.equal(tick(replay, model).actions, runs[0][0])


class Extreme(PointMass):
    """Rewards of huge magnitude that favour bang-bang actions outside any sensible limit."""

    def score(self, ctx, latents, actions, command, last_value_only=False):
        sign = torch.tensor([(-1.0) ** k for k in range(self.horizon)])
        rewards = 1e30 * (actions.sum(-1) * sign)
        return rewards, torch.zeros_like(rewards)


def assert_feasible(actions: torch.Tensor, limits: ActionLimits, prev: torch.Tensor | None) -> None:
    low, high, step = (torch.tensor(v) for v in (limits.low, limits.high, limits.max_delta))
    assert bool(torch.isfinite(actions).all())
    assert bool((actions >= low - 1e-6).all() and (actions <= high + 1e-6).all())
    assert bool((actions.diff(dim=-2).abs() <= step + 1e-5).all())
    if prev is not None:
        assert bool(((actions[..., 0, :] - prev).abs() <= step + 1e-5).all())


def test_bounds_and_rate_limits_hold_under_extreme_model_outputs() -> None:
    model = Extreme(horizon=5)
    limits = ActionLimits(low=[-1.0, 0.2], high=[0.5, 2.0], max_delta=[0.1, 0.3])
    planner = Planner(model, config(horizon=5, iterations=4, init_std=50.0), limits=limits)
    plan = tick(planner, model, prev_action=torch.tensor([0.4, 0.2]))
    assert_feasible(plan.actions, limits, torch.tensor([0.4, 0.2]))
    for call in model.predict_calls:  # every evaluated sample was feasible too
        assert_feasible(call, limits, torch.tensor([0.4, 0.2]))
    for elapsed in (1, 2, 3):
        previous = plan
        plan = tick(planner, model, elapsed_steps=elapsed)
        # by default the rate limit is against the action executed last: the old plan's step elapsed-1
        assert_feasible(plan.actions, limits, previous.actions[elapsed - 1])
    assert plan.stats.fallback is None


def test_first_tick_without_a_previous_action_still_respects_bounds_and_steps() -> None:
    model = Extreme(horizon=5)
    limits = ActionLimits(low=-1.0, high=1.0, max_delta=0.25)
    plan = tick(Planner(model, config(horizon=5, iterations=2), limits=limits), model)
    assert_feasible(plan.actions, ActionLimits([-1.0] * 2, [1.0] * 2, [0.25] * 2), None)


def test_limits_that_do_not_fit_the_model_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        Planner(PointMass(horizon=4), config(), limits=ActionLimits(low=[0.0, 0.0, 0.0]))
    with pytest.raises(ConfigError):
        Planner(PointMass(horizon=4), config(), limits=ActionLimits(low=1.0, high=0.0))
    with pytest.raises(ConfigError):
        Planner(PointMass(horizon=6), config(horizon=4))


class Broken(PointMass):
    """Scores nan for the samples selected by `bad(actions)`, optionally a nan policy."""

    def __init__(self, bad=lambda actions: torch.ones(actions.shape[0], dtype=torch.bool), nan_policy=False):
        super().__init__(horizon=4)
        self.bad, self.nan_policy = bad, nan_policy
        self.policy = torch.tensor([[0.9, -0.9]]).expand(4, 2)[None].clone()

    def score(self, ctx, latents, actions, command, last_value_only=False):
        rewards, values = super().score(ctx, latents, actions, command, last_value_only)
        return torch.where(self.bad(actions)[:, None], torch.nan, rewards), values

    def propose(self, ctx, command):
        return torch.full_like(self.policy, torch.nan) if self.nan_policy else self.policy.clone()


def test_all_nan_scores_fall_back_to_the_clipped_rate_limited_policy() -> None:
    model = Broken()
    limits = ActionLimits(low=-0.5, high=0.5, max_delta=0.2)
    planner = Planner(model, config(), limits=limits)
    plan = tick(planner, model, prev_action=torch.tensor([0.0, 0.0]))
    assert plan.stats.fallback == "policy" and "nonfinite_scores" in plan.stats.flags
    assert torch.allclose(plan.action, torch.tensor([0.2, -0.2]))  # policy 0.9/-0.9, clipped, rate-limited
    assert torch.allclose(plan.actions[-1], torch.tensor([0.5, -0.5]))
    # a fallback plan is not used to warm-start the next tick
    assert not tick(planner, model).stats.warm_start


def test_nan_policy_and_nan_scores_hold_the_previous_action() -> None:
    model = Broken(nan_policy=True)
    planner = Planner(model, config(), limits=ActionLimits(low=-1.0, high=1.0, max_delta=0.1))
    plan = tick(planner, model, prev_action=torch.tensor([0.3, -0.2]))
    assert plan.stats.fallback == "hold" and "policy_nonfinite" in plan.stats.flags
    assert torch.equal(plan.actions, torch.tensor([[0.3, -0.2]]).expand(4, 2))
    # with no previous action known, hold the point of the bounds nearest to zero
    planner = Planner(model, config(), limits=ActionLimits(low=[0.5, -1.0], high=[1.0, 1.0]))
    assert torch.equal(tick(planner, model).action, torch.tensor([0.5, 0.0]))


def test_some_nan_samples_are_ignored_not_fatal() -> None:
    model = Broken(bad=lambda actions: actions[:, 0, 0] > 0.5)
    plan = tick(Planner(model, config(iterations=4)), model)
    assert plan.stats.fallback is None and plan.stats.nonfinite_samples > 0
    assert "nonfinite_scores" in plan.stats.flags
    assert bool(torch.isfinite(plan.actions).all()) and plan.action[0] <= 0.5


def test_nan_everywhere_never_returns_nan() -> None:
    class AllNan(Broken):
        def predict(self, ctx, actions):
            return torch.full(actions.shape, torch.nan)

        def score(self, ctx, latents, actions, command, last_value_only=False):
            return torch.full(actions.shape[:2], torch.nan), torch.full(actions.shape[:2], torch.inf)

    model = AllNan(nan_policy=True)
    planner = Planner(model, config(), limits=ActionLimits(low=-1.0, high=1.0, max_delta=0.1))
    for elapsed in (1, 2):
        plan = tick(planner, model, elapsed_steps=elapsed, prev_action=torch.tensor([float("nan"), 0.0]))
        assert bool(torch.isfinite(plan.actions).all()) and plan.stats.fallback == "hold"


class FakeClock:
    """perf_counter for the planner module: advances only when the model is evaluated (10 ms per call)."""

    def __init__(self) -> None:
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now


class Slow(PointMass):
    def __init__(self, clock: FakeClock, step_s: float = 0.010, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.clock, self.step_s = clock, step_s

    def predict(self, ctx, actions):
        self.clock.now += self.step_s
        return super().predict(ctx, actions)


@pytest.mark.parametrize(("budget", "expected"), [(None, 5), (1000.0, 5), (25.0, 2), (1.0, 1)])
def test_budget_stops_iterating_before_the_deadline(monkeypatch, budget, expected) -> None:
    from simdist.plan import mppi

    clock = FakeClock()
    monkeypatch.setattr(mppi, "_clock", clock.perf_counter)
    model = Slow(clock, horizon=4)
    planner = Planner(model, config(iterations=5, budget_ms=budget), limits=ActionLimits(-3.0, 3.0))
    plan = tick(planner, model)
    # 10 ms per iteration: another one starts only if it would end within the budget; the first always runs
    assert plan.stats.iterations == expected
    assert ("budget" in plan.stats.flags) == (expected < 5)
    assert bool(torch.isfinite(plan.actions).all()) and plan.stats.fallback is None
    # the cut plan is the same as a plan configured with that many iterations from the start
    clock_free = Planner(PointMass(horizon=4), config(iterations=expected), limits=ActionLimits(-3.0, 3.0))
    assert torch.equal(tick(clock_free, PointMass(horizon=4)).actions, plan.actions)


def test_budget_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="budget_ms"):
        config(budget_ms=0.0)


@pytest.mark.parametrize(("budget", "expected"), [(499.0, 1), (500.0, 2), (749.0, 2), (750.0, 3)])
def test_an_iteration_that_would_end_exactly_at_the_budget_still_runs(monkeypatch, budget, expected) -> None:
    from simdist.plan import mppi

    clock = FakeClock()  # 0.25 s per iteration: binary-exact, so "ends at the budget" is an exact equality
    monkeypatch.setattr(mppi, "_clock", clock.perf_counter)
    model = Slow(clock, step_s=0.25, horizon=4)
    planner = Planner(model, config(iterations=5, budget_ms=budget), limits=ActionLimits(-3.0, 3.0))
    assert tick(planner, model).stats.iterations == expected


def test_a_fallback_plan_reports_what_happened() -> None:
    model = Broken()
    planner = Planner(model, config(iterations=3), limits=ActionLimits(low=-0.5, high=0.5, max_delta=0.2))
    plan = tick(planner, model, elapsed_steps=2, prev_action=torch.tensor([0.1, 0.0]))
    stats = plan.stats
    assert stats.fallback == "policy" and stats.warm_start is False and stats.elapsed_steps == 2
    assert stats.iterations == 1 and stats.best_score != stats.best_score  # nan: nothing could be scored
    assert stats.nonfinite_samples == 256 + 8  # every sample of the first iteration
    # the fallback was executed: the next ticks rate-limit from it without being told (0 steps elapsed: from the
    # action before it; 1 step: from its first action), although it never warm-starts them
    assert torch.allclose(plan.action, torch.tensor([0.3, -0.2]))
    again = tick(planner, model, elapsed_steps=0)
    assert torch.allclose(again.action, torch.tensor([0.3, -0.2])) and not again.stats.warm_start
    assert torch.allclose(tick(planner, model, elapsed_steps=1).action, torch.tensor([0.5, -0.4]))


def test_a_hold_without_a_previous_action_respects_both_bounds() -> None:
    model = Broken(nan_policy=True)
    planner = Planner(model, config(), limits=ActionLimits(low=[0.5, -1.0], high=[1.0, -0.25]))
    assert torch.equal(tick(planner, model).actions, torch.tensor([[0.5, -0.25]]).expand(4, 2))


class Extremes(PointMass):
    """Scores a chunk by its squared size: the elites sit in both tails of the samples."""

    def score(self, ctx, latents, actions, command, last_value_only=False):
        return actions.square().sum(-1), torch.zeros(actions.shape[:2])


def _second_iteration_spread(model: PointMass, **changes: object) -> float:
    cfg = config(num_samples=512, num_policy_samples=0, iterations=2, keep_elites=False, **changes)
    tick(Planner(model, cfg), model)
    second = model.predict_calls[1]
    return float((second[1:] - second[0]).std())  # row 0 is the refitted mean itself


def test_the_refitted_std_is_capped_at_init_std_and_floored_at_min_std() -> None:
    # elites from both tails have a spread of about 2 x init_std: the next iteration samples at init_std
    assert 0.85 < _second_iteration_spread(Extremes(horizon=4), elites=32, init_std=1.0, min_std=0.01) < 1.15
    # one elite has no spread at all: the next iteration samples at min_std
    assert 0.25 < _second_iteration_spread(Extremes(horizon=4), elites=1, init_std=1.0, min_std=0.3) < 0.35


def test_the_base_policys_own_chunk_is_scored_and_policy_samples_can_be_off() -> None:
    model = PointMass(horizon=4)
    model.policy = torch.full((1, 4, 2), 0.7)
    planner = Planner(model, config(num_policy_samples=1, iterations=1))
    tick(planner, model)  # cold: the mean starts at the policy's chunk; warm (next tick) it does not
    model.predict_calls.clear()
    assert tick(planner, model).stats.warm_start
    assert any(torch.equal(row, model.policy[0]) for row in model.predict_calls[0])
    model.predict_calls.clear()
    plan = tick(Planner(model, config(num_samples=16, num_policy_samples=0, iterations=1, elites=4)), model)
    assert model.predict_calls[0].shape[0] == 16 and plan.stats.fallback is None


def test_a_high_temperature_makes_the_mean_the_best_elite() -> None:
    model = PointMass(horizon=4)
    cfg = config(num_samples=64, num_policy_samples=0, iterations=1, elites=8, temperature=1e4)
    plan = tick(Planner(model, cfg), model)
    evaluated = model.predict_calls[0]
    best = evaluated[int(model.returns(START, GOAL, evaluated, cfg.discount).argmax())]
    assert torch.allclose(plan.actions, best, atol=1e-5)


@pytest.mark.parametrize("rho", [0.0, 0.9])
def test_correlated_noise_keeps_each_steps_std_and_correlates_consecutive_steps(rho: float) -> None:
    model = PointMass(horizon=4)
    cfg = config(num_samples=4000, num_policy_samples=0, iterations=1, elites=4, init_std=0.5)
    planner = Planner(model, dataclasses.replace(cfg, noise_correlation=rho), seed=1)
    seen: list[torch.Tensor] = []
    planner.on_candidates = lambda chunks, scores: seen.append(chunks.clone())
    tick(planner, model)
    offsets = seen[0][1:] / 0.5  # the mean is the policy's zero chunk; sample 0 is the mean itself
    assert offsets.std(dim=(0, 2)).sub(1.0).abs().max() < 0.05  # every step keeps the std
    lag1 = (offsets[:, 1:] * offsets[:, :-1]).mean() / offsets.square().mean()
    lag3 = (offsets[:, 3:] * offsets[:, :-3]).mean() / offsets.square().mean()
    assert abs(float(lag1) - rho) < 0.03 and abs(float(lag3) - rho**3) < 0.03
    # the dimensions stay independent of each other
    assert abs(float((offsets[..., 0] * offsets[..., 1]).mean())) < 0.03


def test_noise_correlation_must_be_below_one() -> None:
    with pytest.raises(ConfigError, match=r"^planner config: noise_correlation must be in \[0, 1\)$"):
        config(noise_correlation=1.0)


def test_planning_ahead_fixes_step_zero_and_optimises_the_rest() -> None:
    # the return with step 0 given is r_0 + gamma x (the (T-1)-step problem from where step 0 leads), so the
    # best remaining steps are that shorter problem's optimum
    model = PointMass(horizon=4, effort=1.0)
    pinned = torch.tensor([0.7, 0.3])
    planner = Planner(model, config(), limits=ActionLimits(-3.0, 3.0))
    plan = tick(planner, model, first_action=pinned)
    rest = PointMass(horizon=3, effort=1.0).optimum(START + pinned, GOAL, 0.99)
    assert torch.equal(plan.actions[0], pinned)
    assert torch.allclose(plan.actions[1:], rest, atol=0.03)
    # not the unconstrained optimum's next steps: the pinned step changed where the chunk starts from
    free = model.optimum(START, GOAL, 0.99)
    assert (plan.actions[1:] - free[1:]).abs().max() > 0.1
    for call in model.predict_calls:  # every candidate the model saw executes the pinned step first
        assert bool((call[:, 0] == pinned).all())


def test_planning_ahead_rate_limits_from_the_pinned_step() -> None:
    model = Extreme(horizon=5)
    limits = ActionLimits(low=-1.0, high=1.0, max_delta=0.1)
    planner = Planner(model, config(horizon=5, iterations=3, init_std=5.0), limits=limits)
    pinned = torch.tensor([0.9, -0.9])
    # prev_action far from the pinned step: the limit counts from what runs at step 0, not from before it
    plan = tick(planner, model, prev_action=torch.tensor([-1.0, 1.0]), first_action=pinned)
    assert torch.equal(plan.actions[0], pinned)
    assert_feasible(plan.actions[1:], ActionLimits([-1.0] * 2, [1.0] * 2, [0.1] * 2), pinned)
    for call in model.predict_calls:
        assert_feasible(call[:, 1:], ActionLimits([-1.0] * 2, [1.0] * 2, [0.1] * 2), pinned)


def test_planning_ahead_after_a_fallback_still_starts_with_the_pinned_step() -> None:
    model = Broken()  # every score nan: the base policy's chunk (0.9, -0.9), from the pinned step on
    planner = Planner(model, config(), limits=ActionLimits(-1.0, 1.0, max_delta=0.2))
    pinned = torch.tensor([0.5, 0.5])
    plan = tick(planner, model, first_action=pinned)
    assert plan.stats.fallback == "policy"
    assert torch.equal(plan.actions[0], pinned)
    assert torch.allclose(plan.actions[1], torch.tensor([0.7, 0.3]))
    assert bool((plan.actions.diff(dim=0).abs() <= 0.2 + 1e-6).all())


def test_a_nonfinite_pinned_step_is_refused() -> None:
    model = PointMass(horizon=4)
    with pytest.raises(ValueError, match="first_action"):
        tick(Planner(model, config()), model, first_action=torch.tensor([float("nan"), 0.0]))


def test_each_episode_draws_its_own_noise_and_replays_it() -> None:
    model = PointMass(horizon=4)
    planner = Planner(model, config(iterations=1, num_samples=64, elites=8), seed=7)
    first = []
    for episode in (0, 1, 2):
        planner.reset(episode)
        first.append(tick(planner, model).actions)
    assert not torch.equal(first[0], first[1]) and not torch.equal(first[1], first[2])
    planner.reset(1)
    assert torch.equal(tick(planner, model).actions, first[1])  # episode 1 replays as it ran
    other = Planner(model, config(iterations=1, num_samples=64, elites=8), seed=8)
    other.reset(1)
    assert not torch.equal(tick(other, model).actions, first[1])  # another run's episode 1 is another draw
