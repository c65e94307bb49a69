"""The base policy's chunk advanced by 1..L steps as extra candidates (`policy_max_lead`), for a plant whose commands
take effect later than the policy was trained for."""

from __future__ import annotations

import pytest
import torch
from plan_toys import PointMass, planner_config

from simdist.errors import ConfigError
from simdist.plan import ActionLimits, Planner


class DelayedVelocity(PointMass):
    """The latent is the velocity applied at each step: the chunk's action from `delay` steps before (the actions
    still in flight before the chunk are zero). Rewarded for applying, at each step, the velocity the command asks
    for at that step; the base policy proposes exactly those velocities, for a plant without delay."""

    def __init__(self, delay: int, **kwargs: object) -> None:
        super().__init__(effort=0.0, **kwargs)
        self.delay = delay

    def predict(self, ctx, actions):
        self.predict_calls.append(actions.clone())
        zeros = torch.zeros_like(actions[:, : self.delay])
        return torch.cat([zeros, actions[:, : actions.shape[1] - self.delay]], dim=1)


def _plan(model: PointMass, max_lead: int):
    horizon = model.horizon
    wanted = torch.stack([torch.linspace(1.0, 2.0, horizon), torch.linspace(0.0, -1.0, horizon)], dim=1)
    model.policy = wanted[None].clone()  # each step distinct, so every lead is a different chunk
    cfg = planner_config(
        horizon=horizon,
        num_samples=4,
        num_policy_samples=8,
        policy_std=0.0,
        iterations=1,
        elites=1,
        init_std=1e-3,
        min_std=1e-3,
        policy_max_lead=max_lead,
    )
    planner = Planner(model, cfg, seed=1)
    seen: list[torch.Tensor] = []
    planner.on_candidates = lambda chunks, scores: seen.append(chunks.clone())
    ctx = model.context(torch.zeros(1, 3, 2), torch.zeros(1, 3, 2), torch.ones(1, 3), torch.zeros(1, 2))
    return planner.act(ctx, wanted), seen[0], wanted


def test_the_policy_samples_are_the_chunk_at_each_lead_in_turn() -> None:
    plan, candidates, policy = _plan(PointMass(horizon=6), max_lead=2)
    policy_samples = candidates[4:]  # after the 4 Gaussian samples
    for i, chunk in enumerate(policy_samples):
        lead = i % 3
        expected = torch.cat([policy[lead:], policy[-1:].expand(lead, -1)])
        assert torch.equal(chunk, expected), f"sample {i} is not the chunk advanced by {lead}"


@pytest.mark.parametrize("delay", [0, 1, 2])
def test_a_delayed_plant_executes_the_policy_step_its_delay_needs(delay: int) -> None:
    """The model knows the delay, so the lead that matches it scores best; without leads the planner cannot
    compensate and executes the policy's first step."""
    plan, _, policy = _plan(DelayedVelocity(delay, horizon=8), max_lead=3)
    assert torch.allclose(plan.action, policy[delay], atol=1e-2)
    assert plan.stats.policy_lead == delay  # the delay the model believes in, reported per tick
    plain, _, policy = _plan(DelayedVelocity(delay, horizon=8), max_lead=0)
    assert torch.allclose(plain.action, policy[0], atol=1e-2)
    assert plain.stats.policy_lead is None


def test_without_leads_the_policy_samples_are_unchanged() -> None:
    """policy_max_lead 0 is the authors' planner: noise around the policy's chunk, the chunk itself first."""
    model = PointMass(horizon=5)
    model.policy = torch.randn(1, 5, 2, generator=torch.Generator().manual_seed(0))
    cfg = planner_config(horizon=5, num_samples=4, num_policy_samples=6, iterations=1, elites=2)
    planner = Planner(model, cfg, seed=3)
    seen: list[torch.Tensor] = []
    planner.on_candidates = lambda chunks, scores: seen.append(chunks.clone())
    ctx = model.context(torch.zeros(1, 3, 2), torch.zeros(1, 3, 2), torch.ones(1, 3), torch.zeros(1, 2))
    planner.act(ctx, torch.ones(2))
    policy_samples = seen[0][4:]
    assert torch.equal(policy_samples[0], model.policy[0])
    spread = (policy_samples[1:] - model.policy[0]).std()
    assert 0.02 < float(spread) < 0.08  # policy_std 0.05 around the same chunk, not around advanced ones


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"policy_max_lead": -1}, "policy_max_lead must be in"),
        ({"policy_max_lead": 4}, "policy_max_lead must be in"),
        ({"policy_max_lead": 3, "num_policy_samples": 3}, "num_policy_samples must be >="),
        (
            {"policy_max_lead": 1, "policy_command_scales": (0.5,), "num_policy_samples": 3},
            "num_policy_samples must be >=",
        ),
        ({"policy_command_scales": (1.0,), "num_policy_samples": 4}, "policy_command_scales must be"),
        ({"policy_command_scales": (-0.5,), "num_policy_samples": 4}, "policy_command_scales must be"),
    ],
)
def test_bad_leads_are_refused_in_one_line(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        planner_config(**changes)


class SlipperyGround(PointMass):
    """A velocity-commanded robot: the base policy proposes the commanded velocity at every step, the latent is the
    velocity applied, and the reward tracks the command, except that any speed above `limit` slips (a fall's
    penalty). The policy was trained where every commanded speed was safe."""

    def __init__(self, limit: float, **kwargs: object) -> None:
        super().__init__(effort=0.0, **kwargs)
        self.limit = limit
        self.proposed_for: list[torch.Tensor] = []

    def propose(self, ctx, command):
        self.proposed_for.append(command.clone())
        return command.expand(-1, self.horizon, -1).clone()

    def predict(self, ctx, actions):
        return actions.clone()

    def score(self, ctx, latents, actions, command, last_value_only=False):
        track = -(latents - command).square().sum(-1)
        slip = -100.0 * (latents.abs() - self.limit).clamp(min=0).sum(-1)
        return track + slip, torch.zeros_like(track)


def _plan_on_slippery_ground(speed: float, scales: tuple[float, ...], limits: ActionLimits | None = None):
    model = SlipperyGround(limit=1.5, horizon=6, dim=1)
    cfg = planner_config(
        horizon=6,
        num_samples=4,
        num_policy_samples=2 * (1 + len(scales)),
        policy_std=0.0,
        iterations=1,
        elites=1,
        init_std=1e-3,
        min_std=1e-3,
        policy_max_lead=1,
        policy_command_scales=scales,
    )
    planner = Planner(model, cfg, limits=limits, seed=0)
    ctx = model.context(torch.zeros(1, 3, 1), torch.zeros(1, 3, 1), torch.ones(1, 3), torch.zeros(1, 1))
    return planner.act(ctx, torch.tensor([speed])), model


def test_the_policy_is_asked_for_each_scaled_command_in_one_batch() -> None:
    _, model = _plan_on_slippery_ground(2.0, (0.75, 0.5))
    (asked,) = model.proposed_for
    assert asked.shape == (3, 6, 1)
    assert torch.allclose(asked[:, 0, 0], torch.tensor([2.0, 1.5, 1.0]))


@pytest.mark.parametrize(
    ("speed", "asked"),
    [
        (0.4, [0.4, 0.6, 0.5, 0.3]),  # every scaled command inside the trained range: as scaled
        (0.7, [0.7, 0.8, 0.8, 0.525]),  # 1.05 and 0.875 would leave it: the range's edge
        # the command as given is beyond it: never scaled further out, never changed
        (1.2, [1.2, 1.2, 1.2, 0.9]),
        (-0.2, [-0.2, -0.2, -0.2, -0.15]),  # and below it likewise
    ],
)
def test_scaled_commands_stay_where_the_policy_was_trained(speed: float, asked: list[float]) -> None:
    """go2_foam's `fast3` asks the policy for 1.5 and 1.25 x the command: at 0.7 m/s, 1.05 and 0.875 m/s, beyond the
    0.8 m/s the pretraining drew. Those chunks are the network's extrapolation, not gaits; they are asked for at the
    edge of the range instead, and the command as given is never touched."""
    limits = ActionLimits(command_low=[0.0], command_high=[0.8])
    _, model = _plan_on_slippery_ground(speed, (1.5, 1.25, 0.75), limits)
    (proposed,) = model.proposed_for
    assert torch.allclose(proposed[:, 0, 0], torch.tensor(asked), atol=1e-6)
    _, unbounded = _plan_on_slippery_ground(speed, (1.5, 1.25, 0.75))
    assert torch.allclose(unbounded.proposed_for[0][:, 0, 0], speed * torch.tensor([1.0, 1.5, 1.25, 0.75]))


@pytest.mark.parametrize(
    ("low", "high", "message"),
    [
        ([0.0], None, "go together"),
        ([0.0, 0.0], [1.0, 1.0], "command range has 2/2"),
        ([1.0], [0.0], "low > "),
    ],
)
def test_a_bad_command_range_is_refused_in_one_line(low, high, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _plan_on_slippery_ground(0.5, (1.5,), ActionLimits(command_low=low, command_high=high))


@pytest.mark.parametrize(("speed", "scale", "executed"), [(2.0, 0.5, 1.0), (1.0, 1.0, 1.0), (1.4, 1.0, 1.4)])
def test_a_slower_gait_is_chosen_only_where_the_commanded_one_slips(
    speed: float, scale: float, executed: float
):
    """Scored against the real command: at 2.0 (over the 1.5 limit) the policy's chunk for half the command wins
    over a slip; where the commanded speed is safe, the command as given wins."""
    plan, _ = _plan_on_slippery_ground(speed, (0.5,))
    assert plan.stats.policy_command_scale == scale
    assert torch.allclose(plan.action, torch.tensor([executed]), atol=1e-2)
    without, _ = _plan_on_slippery_ground(speed, ())
    assert without.stats.policy_command_scale is None
    assert torch.allclose(without.action, torch.tensor([speed]), atol=1e-2)  # no slower gait to choose


@pytest.mark.parametrize(("goal", "kept"), [(3.0, "policy"), (0.0, "last plan")])
def test_the_pegs_shipped_planner_keeps_the_policys_new_chunk_or_the_rest_of_its_last_plan(
    goal: float, kept: str
) -> None:
    """config/planner/cpu.yaml's ur5e_peg setting: two candidates a tick, the base policy's chunk and the last plan's
    remaining steps (a Gaussian sample at a vanishing std), and the dynamics keep the better one."""
    from simdist.plan import load_planner_config

    peg = load_planner_config("cpu", "ur5e", task="ur5e_peg")
    assert (peg.num_samples, peg.num_policy_samples, peg.elites, peg.iterations) == (1, 1, 1, 1)
    cfg = planner_config(
        horizon=6,
        **{
            k: getattr(peg, k)
            for k in ("num_samples", "num_policy_samples", "policy_std", "iterations", "elites")
            + ("temperature", "init_std", "min_std", "keep_elites")
        },
    )
    model = PointMass(horizon=6, effort=0.01)
    planner = Planner(model, cfg, seed=0)
    seen: list[torch.Tensor] = []
    planner.on_candidates = lambda chunks, scores: seen.append(chunks.clone())
    ctx = model.context(torch.zeros(1, 3, 2), torch.zeros(1, 3, 2), torch.ones(1, 3), torch.zeros(1, 2))
    command = torch.full((2,), goal)
    first = torch.zeros(1, 6, 2)  # the policy first proposes to stay
    model.policy = first.clone()
    plan = planner.act(ctx, command)
    assert len(seen[0]) == 2 and torch.allclose(seen[0], first.expand(2, -1, -1), atol=1e-4)
    assert torch.allclose(plan.actions, first[0], atol=1e-4)
    model.policy = torch.full((1, 6, 2), 0.5)  # then to move towards (3, 3)
    plan = planner.act(ctx, command)
    last_rest = first[0]  # staying, shifted by one step, is staying
    assert len(seen[1]) == 2
    assert torch.equal(seen[1][1], model.policy[0])  # the policy's chunk itself competes
    assert torch.allclose(seen[1][0], last_rest, atol=1e-4)
    expected = model.policy[0] if kept == "policy" else last_rest
    assert torch.allclose(plan.actions, expected, atol=1e-4)
