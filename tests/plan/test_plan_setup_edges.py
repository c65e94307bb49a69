"""The planner's set-up at its edges: limits, commands, holds and resets exactly as documented (tests that the
mutation check showed were missing)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from plan_toys import PointContext, PointMass, planner_config
from torch import Tensor

from simdist.errors import ConfigError
from simdist.plan import ActionLimits, Plan, Planner, PlannerConfig

START = torch.tensor([0.0, 0.0])
GOAL = torch.tensor([1.5, -1.0])


def config(**changes: object) -> PlannerConfig:
    return planner_config(**changes)


def context(start: Tensor = START) -> PointContext:
    return PointContext(start.reshape(1, -1).float())


def tick(planner: Planner, command: Tensor = GOAL, **kwargs: object) -> Plan:
    return planner.act(context(), command, **kwargs)


# -- __init__ and _limit ---------------------------------------------------------------------------------------------


def test_a_horizon_mismatch_names_both_horizons() -> None:
    with pytest.raises(ConfigError, match=r"^planner horizon 4 != world model horizon 6$"):
        Planner(PointMass(horizon=6), config(horizon=4))


@pytest.mark.parametrize("name", ["low", "high", "max_delta"])
def test_a_limit_of_the_wrong_size_names_the_limit_and_both_sizes(name: str) -> None:
    limits = ActionLimits(**{name: [0.1, 0.2, 0.3]})
    message = rf"^action limits: '{name}' has 3 values, the model has 2 actions$"
    with pytest.raises(ConfigError, match=message):
        Planner(PointMass(horizon=4), config(), limits=limits)


def test_low_above_high_is_an_error_and_low_equal_to_high_pins_the_action() -> None:
    with pytest.raises(ConfigError, match=r"^action limits: low > high$"):
        Planner(PointMass(horizon=4), config(), limits=ActionLimits(low=[0.0, 0.5], high=[1.0, 0.4]))
    plan = tick(Planner(PointMass(horizon=4), config(iterations=2), limits=ActionLimits(low=0.25, high=0.25)))
    assert torch.equal(plan.actions, torch.full((4, 2), 0.25))


def test_a_negative_max_delta_is_an_error_and_zero_freezes_the_action() -> None:
    with pytest.raises(ConfigError, match=r"^action limits: max_delta must be >= 0$"):
        Planner(PointMass(horizon=4), config(), limits=ActionLimits(max_delta=[0.1, -0.1]))
    planner = Planner(PointMass(horizon=4), config(iterations=2), limits=ActionLimits(max_delta=0.0))
    plan = tick(planner, prev_action=torch.tensor([0.3, -0.2]))
    assert torch.allclose(plan.actions, torch.tensor([[0.3, -0.2]]).expand(4, 2), rtol=0.0, atol=1e-6)


def test_float64_limits_still_give_a_float32_plan() -> None:
    low, high, max_delta = (np.full(2, value) for value in (-1.0, 1.0, 0.3))  # float64 arrays
    limits = ActionLimits(low=low, high=high, max_delta=max_delta)
    plan = tick(Planner(PointMass(horizon=4), config(iterations=2), limits=limits))
    assert plan.actions.dtype == torch.float32 and plan.action.dtype == torch.float32


def test_the_device_is_a_torch_device() -> None:
    assert Planner(PointMass(horizon=4), config(), device="cpu").device == torch.device("cpu")


@pytest.mark.parametrize(("threads", "expected"), [(1, [1]), (3, [3])])
def test_num_threads_always_sets_torchs_threads(
    monkeypatch: pytest.MonkeyPatch, threads: int, expected: list[int]
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    Planner(PointMass(horizon=4), config(num_threads=threads))
    assert calls == expected


def test_compile_plans_through_one_static_shape_compiled_evaluation(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[tuple[object, list[tuple[object, ...]]]] = []

    def fake_compile(fn: Callable[..., Tensor], *, dynamic: object) -> Callable[..., Tensor]:
        calls: list[tuple[object, ...]] = []
        compiled.append((dynamic, calls))

        def wrapped(*args: object) -> Tensor:
            calls.append(args)
            return fn(*args)

        return wrapped

    monkeypatch.setattr(torch, "compile", fake_compile)
    plan = tick(Planner(PointMass(horizon=4), config(compile=True, iterations=3)))
    [(dynamic, calls)] = compiled
    assert dynamic is False and len(calls) == 3  # every iteration evaluated through the compiled function
    eager = tick(Planner(PointMass(horizon=4), config(iterations=3)))
    assert torch.equal(plan.actions, eager.actions)


# -- act's arguments and _command ------------------------------------------------------------------------------------


def test_a_negative_elapsed_steps_is_rejected_with_its_value() -> None:
    with pytest.raises(ValueError, match=r"^elapsed_steps must be >= 0, got -1$"):
        tick(Planner(PointMass(horizon=4), config()), elapsed_steps=-1)


def test_elapsed_steps_defaults_to_one() -> None:
    model = PointMass(horizon=4)
    planner = Planner(model, config(iterations=2))
    first = tick(planner)
    model.predict_calls.clear()
    second = tick(planner)
    assert second.stats.elapsed_steps == 1 and second.stats.warm_start
    shifted = torch.cat([first.actions[1:], first.actions[-1:]])
    assert torch.allclose(model.predict_calls[0][0], shifted, atol=1e-6)


class CommandRecorder(PointMass):
    """A point mass that keeps each command the planner scores with."""

    def __init__(self) -> None:
        super().__init__(horizon=4)
        self.commands: list[Tensor] = []

    def score(self, ctx, latents, actions, command, last_value_only=False):
        self.commands.append(command.clone())
        return super().score(ctx, latents, actions, command, last_value_only)


def test_a_command_of_any_accepted_shape_is_broadcast_over_samples_and_steps() -> None:
    plans = []
    for command in (GOAL, GOAL.expand(4, 2), GOAL.expand(1, 4, 2), GOAL.double()):
        model = CommandRecorder()
        plans.append(tick(Planner(model, config(iterations=2, num_samples=16, elites=4)), command))
        seen = model.commands[0]
        assert seen.dtype == torch.float32 and seen.shape == (16 + 8, 4, 2)
        assert torch.equal(seen, GOAL.expand(24, 4, 2))
    assert all(torch.equal(plan.actions, plans[0].actions) for plan in plans)


def test_a_per_step_command_reaches_the_model_step_by_step() -> None:
    goals = torch.tensor([[0.0, 0.0], [0.5, 0.0], [1.0, 0.0], [1.5, 0.0]])
    for command in (goals, goals[None]):
        model = CommandRecorder()
        tick(Planner(model, config(iterations=1, num_samples=8, elites=2, num_policy_samples=0)), command)
        assert torch.equal(model.commands[0], goals.expand(8, 4, 2))


@pytest.mark.parametrize("shape", [(2, 4, 2), (1, 3, 2), (3, 2), (1, 1, 4, 2)])
def test_a_command_of_another_shape_is_rejected_with_its_shape(shape: tuple[int, ...]) -> None:
    pattern = rf"^command must be \(C,\), \(T,C\) or \(1,T,C\) with T=4, got {re_tuple(shape)}$"
    with pytest.raises(ValueError, match=pattern):
        tick(Planner(PointMass(horizon=4), config()), torch.zeros(shape))


def re_tuple(shape: tuple[int, ...]) -> str:
    return str(shape).replace("(", r"\(").replace(")", r"\)")


# -- _hold, _finish after a fallback ---------------------------------------------------------------------------------


class NanPolicy(PointMass):
    """A point mass whose base policy proposes nan: the search starts from a hold."""

    def propose(self, ctx, command):
        return torch.full_like(self.policy, torch.nan)


def test_a_hold_search_samples_around_the_held_point_inside_the_bounds() -> None:
    # no previous action: the hold is the point of the bounds nearest to zero, (0.5, -0.25); samples with a small
    # std around it fall on both sides of each bound (around zero itself, they would all be clipped to the bound)
    model = NanPolicy(horizon=4)
    limits = ActionLimits(low=[0.5, -1.0], high=[1.0, -0.25])
    tick(Planner(model, config(iterations=1, init_std=0.05), limits=limits))
    first = model.predict_calls[0]
    assert torch.equal(first[0], torch.tensor([[0.5, -0.25]]).expand(4, 2))  # the mean itself
    assert float((first[..., 0] > 0.5).float().mean()) > 0.3
    assert float((first[..., 1] < -0.25).float().mean()) > 0.3


class Switchable(PointMass):
    """A point mass that scores nan everywhere while `broken` is set."""

    def __init__(self) -> None:
        super().__init__(horizon=4)
        self.broken = True
        self.policy = torch.full((1, 4, 2), 0.4)

    def score(self, ctx, latents, actions, command, last_value_only=False):
        rewards, values = super().score(ctx, latents, actions, command, last_value_only)
        return (rewards * torch.nan if self.broken else rewards), values


def test_the_tick_after_a_fallback_starts_cold_from_the_policy_even_once_the_model_recovers() -> None:
    model = Switchable()
    planner = Planner(model, config(iterations=2))
    assert tick(planner).stats.fallback == "policy"
    model.broken = False
    model.predict_calls.clear()
    plan = tick(planner)
    assert plan.stats.fallback is None and not plan.stats.warm_start
    assert torch.equal(model.predict_calls[0][0], model.policy[0])  # the cold start: the base policy's chunk


# -- the fallback after a search that diverged -----------------------------------------------------------------------


class Blind(PointMass):
    """Scores every chunk the same, whatever its actions, infinite ones included."""

    def __init__(self, policy: float) -> None:
        super().__init__(horizon=4)
        self.policy = torch.full((1, 4, 2), policy)

    def score(self, ctx, latents, actions, command, last_value_only=False):
        ones = torch.ones(actions.shape[:2])
        return ones, ones


def test_a_search_that_diverges_to_infinite_actions_falls_back_to_the_policy() -> None:
    # an absurd init_std overflows the samples to +-inf; the model still scores them, so the refitted mean is
    # not finite: the planner executes the base policy's chunk instead and says why
    planner = Planner(Blind(policy=0.25), config(iterations=2, init_std=3e38, min_std=1.0))
    plan = tick(planner, elapsed_steps=3)
    assert torch.equal(plan.actions, torch.full((4, 2), 0.25))
    stats = plan.stats
    assert (stats.fallback, stats.iterations, stats.elapsed_steps) == ("policy", 2, 3)
    assert stats.nonfinite_samples == 0 and stats.flags == ("nonfinite_plan",)  # every score was finite
    assert stats.best_score != stats.best_score and not stats.warm_start  # nan: no score to report


def test_a_diverged_search_with_a_nan_policy_holds_the_previous_action() -> None:
    planner = Planner(Blind(policy=float("nan")), config(iterations=2, init_std=3e38, min_std=1.0))
    plan = tick(planner, prev_action=torch.tensor([0.1, -0.1]))
    assert plan.stats.fallback == "hold" and plan.stats.flags == ("policy_nonfinite", "nonfinite_plan")
    assert torch.equal(plan.actions, torch.tensor([[0.1, -0.1]]).expand(4, 2))


# -- _rate_violation -------------------------------------------------------------------------------------------------


def test_a_one_step_horizon_with_a_rate_limit_plans_without_a_previous_action() -> None:
    # the first tick has no previous action, so a one-step chunk has no step to limit (this used to crash: the
    # largest of no steps)
    limits = ActionLimits(max_delta=0.1)
    planner = Planner(PointMass(horizon=1), config(horizon=1, iterations=2), limits=limits)
    first = tick(planner)
    assert first.stats.fallback is None and first.actions.shape == (1, 2)
    second = tick(planner)  # from then on the previous plan's action is the one to limit against
    assert float((second.action - first.action).abs().max()) <= 0.1 + 1e-6
