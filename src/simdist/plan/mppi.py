"""MPPI/CEM planning through the world model: sample action chunks, score them, refit, execute the mean's first action.

score = sum_k gamma^k r_hat(k) + gamma^T V_hat(T) for k = 0..T-1. Every evaluated sample is first projected onto
the action bounds and rate limits, so the refitted mean (a convex combination of feasible chunks) is feasible too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from simdist.errors import ConfigError
from simdist.plan.config import ActionLimits, Limit, PlannerConfig
from simdist.plan.protocol import Context, PlanningModel

_clock = time.perf_counter  # the budget's clock (a module attribute, so tests can give a fake one)


@dataclass(frozen=True)
class PlanStats:
    iterations: int  # iterations run (fewer than configured when the budget ran out: flag "budget")
    best_score: float  # best discounted return seen in the last iteration (nan after a fallback)
    warm_start: bool  # the initial mean came from the previous plan
    elapsed_steps: int
    nonfinite_samples: int  # evaluated samples whose score was nan/inf (ignored)
    fallback: str | None  # None, "policy" (base policy's chunk) or "hold" (previous action)
    flags: tuple[str, ...]
    # with `policy_max_lead`: the lead (steps) whose own policy chunk the model scored best this tick, i.e. the
    # delay the dynamics believe the robot has; None without leads (or without a usable policy chunk)
    policy_lead: int | None = None
    # with `policy_command_scales`: the factor on the command of the policy chunk the model scored best this tick
    # (1.0: the command as given); None without them
    policy_command_scale: float | None = None


@dataclass(frozen=True)
class Plan:
    action: Tensor  # (A,) the first action, to execute now
    actions: Tensor  # (T,A) the whole mean sequence, for late ticks and visualisation
    stats: PlanStats


def _ar1_filter(rho: float, horizon: int, device: torch.device) -> Tensor | None:
    """L with L L^T = the AR(1) correlation matrix rho^|i-j| (T,T): L @ white noise is unit-variance noise whose
    consecutive steps correlate by rho. None for rho = 0 (white noise, nothing to do)."""
    if rho == 0:
        return None
    lags = torch.arange(horizon, dtype=torch.float64)
    corr = rho ** (lags[:, None] - lags[None, :]).abs()
    return torch.linalg.cholesky(corr).to(device, torch.float32)


def episode_seed(seed: int, episode: int) -> int:
    """A well-mixed seed of the planner's noise for one episode of a run (seed, episode >= 0)."""
    return int(np.random.SeedSequence([seed & 0xFFFF_FFFF_FFFF_FFFF, episode]).generate_state(1)[0])


class Planner:
    """MPPI/CEM hybrid over `model`'s action chunks; stateful only in its warm start and random generator."""

    def __init__(
        self,
        model: PlanningModel,
        config: PlannerConfig,
        *,
        limits: ActionLimits | None = None,
        seed: int = 0,
        device: str | torch.device = "cpu",
    ) -> None:
        if config.horizon != model.horizon:
            raise ConfigError(f"planner horizon {config.horizon} != world model horizon {model.horizon}")
        # process-wide on purpose: the planner owns the control process's compute
        torch.set_num_threads(config.num_threads)
        self.model = model
        self.config = config
        self.device = torch.device(device)
        self.horizon = config.horizon
        self.act_dim = model.act_dim
        limits = limits or ActionLimits()
        self._low = self._limit(limits.low, -torch.inf, "low")
        self._high = self._limit(limits.high, torch.inf, "high")
        if bool((self._low > self._high).any()):
            raise ConfigError("action limits: low > high")
        self._max_delta = (
            None if limits.max_delta is None else self._limit(limits.max_delta, torch.inf, "max_delta")
        )
        if self._max_delta is not None and bool((self._max_delta < 0).any()):
            raise ConfigError("action limits: max_delta must be >= 0")
        gamma = config.discount
        self._discounts = gamma ** torch.arange(self.horizon, dtype=torch.float32, device=self.device)
        self._terminal = gamma**self.horizon  # gamma^T (the public code's gamma^(T+1) is a bug)
        self._noise_filter = _ar1_filter(config.noise_correlation, self.horizon, self.device)
        self._command_scales = (
            torch.tensor((1.0, *config.policy_command_scales), device=self.device)[:, None, None]
            if config.policy_command_scales
            else None
        )
        self._command_range = self._commands(limits)
        self._seed = seed
        self._generator = torch.Generator(self.device)
        # exploration's own stream: exploring leaves the search's noise as it was
        self._exploration = torch.Generator(self.device)
        n_extra = max(config.num_policy_samples, config.elites if config.keep_elites else 0)
        with torch.inference_mode():
            # preallocated: Gaussian samples first, then policy samples or carried elites
            self._pool = torch.zeros(
                config.num_samples + n_extra, self.horizon, self.act_dim, device=self.device
            )
            self._scores = torch.zeros(config.num_samples + n_extra, device=self.device)
        # a diagnostic's view of the search (`simdist plan-audit`): called with each iteration's newly evaluated
        # chunks (n,T,A) and their scores (n,), views of the planner's buffers, to be copied if kept
        self.on_candidates: Callable[[Tensor, Tensor], None] | None = None
        self._bf16 = config.precision == "bfloat16"
        self._evaluate = self._evaluate_eager
        if config.compile:
            self._evaluate = torch.compile(self._evaluate_eager, dynamic=False)
        self.reset()

    def _limit(self, value: Limit, default: float, name: str) -> Tensor:
        if value is None:
            return torch.full((self.act_dim,), default, device=self.device)
        out = torch.as_tensor(value, dtype=torch.float32, device=self.device).flatten()
        if out.numel() == 1:
            out = out.expand(self.act_dim).clone()
        if out.numel() != self.act_dim:
            raise ConfigError(
                f"action limits: '{name}' has {out.numel()} values, the model has {self.act_dim} actions"
            )
        return out

    def _commands(self, limits: ActionLimits) -> tuple[Tensor, Tensor] | None:
        if limits.command_low is None and limits.command_high is None:
            return None
        if limits.command_low is None or limits.command_high is None:
            raise ConfigError("action limits: command_low and command_high go together")
        low, high = (
            torch.as_tensor(v, dtype=torch.float32, device=self.device).flatten()
            for v in (limits.command_low, limits.command_high)
        )
        if low.numel() != self.model.cmd_dim or high.numel() != self.model.cmd_dim:
            raise ConfigError(
                f"action limits: the command range has {low.numel()}/{high.numel()} values, the model has "
                f"{self.model.cmd_dim} command dimensions"
            )
        if bool((low > high).any()):
            raise ConfigError("action limits: command_low > command_high")
        return low, high

    def reset(self, episode: int | None = None) -> None:
        """Forget the warm start and reseed, so an episode replays exactly.

        With `episode`, the noise is that episode's own (drawn from the planner's seed and the episode's index):
        episodes of one run are independent draws, and episode k of a run replays as it did. Without it, every
        reset starts the same noise again, and a run's episodes would all share one draw of the search's noise,
        a per-run effect that no count of episodes averages away.
        """
        seed = self._seed if episode is None else episode_seed(self._seed, episode)
        self._generator.manual_seed(seed)
        self._exploration.manual_seed(seed ^ 0x5EED)
        self._last: Tensor | None = None  # the previous plan's actions (T,A) as executed, None after a reset
        self._last_prev: Tensor | None = None
        # a fallback plan is executed (the next ticks rate-limit from it) but never warm-started from
        self._last_was_fallback = False

    def act(
        self,
        ctx: Context,
        command: Tensor,
        elapsed_steps: int = 1,
        *,
        prev_action: Tensor | None = None,
        first_action: Tensor | None = None,
    ) -> Plan:
        """Plan from context `ctx` for `command` ((C,), (T,C) or (1,T,C), raw units).

        Args:
            elapsed_steps: control steps executed since the previous plan was computed; its mean is shifted by this
                many steps to warm-start (the executed ones are dropped, the last action is repeated at the end).
            prev_action: the action the robot executed last, for the rate limit. Default: the previous plan's
                action at step `elapsed_steps - 1`, i.e. the last one executed if the caller followed the plan.
            first_action: planning one tick ahead: the action being executed at the context's step, fixed as step 0
                of every candidate (the search optimises steps 1..T-1 and the rate limit counts from it); the plan's
                step 1 is the next tick's action. None: step 0 is planned too (the usual case).
        """
        if elapsed_steps < 0:
            raise ValueError(f"elapsed_steps must be >= 0, got {elapsed_steps}")
        with torch.inference_mode():
            return self._act(ctx, command, elapsed_steps, prev_action, _clock(), first_action)

    # -- internals -------------------------------------------------------------------------------------------------

    def _command(self, command: Tensor) -> Tensor:
        cmd = torch.as_tensor(command, dtype=torch.float32, device=self.device)
        if cmd.dim() == 1:
            cmd = cmd[None, None]
        elif cmd.dim() == 2:
            cmd = cmd[None]
        if cmd.dim() != 3 or cmd.shape[0] != 1 or cmd.shape[1] not in (1, self.horizon):
            raise ValueError(
                f"command must be (C,), (T,C) or (1,T,C) with T={self.horizon}, got {tuple(command.shape)}"
            )
        return cmd.expand(1, self.horizon, cmd.shape[2]).contiguous()

    def _project_(self, x: Tensor, prev: Tensor | None, pinned: Tensor | None = None) -> None:
        """Make chunks (n,T,A) feasible in place: each step clipped to the bounds, then to within max_delta of the
        step before it (the first: of `prev`). With `pinned` (planning ahead), step 0 becomes that action and the
        later steps are made feasible from it.

        The result equals clipping each step to the intersection of both intervals in turn (what a rate-limited
        actuator tracking the sample would do): a value inside the bounds, clipped towards a previous step that is
        also inside them, stays inside. A sequential loop, because a cumulative-sum projection would lose a
        sample's offset for good once one step is clipped.
        """
        if pinned is not None:
            x[:, 0] = pinned
            x, prev = x[:, 1:], pinned
        x.clamp_(self._low, self._high)
        if self._max_delta is None:
            return
        last = prev
        for k in range(x.shape[1]):
            step = x[:, k]
            if last is not None:
                step.clamp_(last - self._max_delta, last + self._max_delta)
            last = step

    def _evaluate_eager(self, ctx: Context, actions: Tensor, command: Tensor) -> Tensor:
        weight = self.config.disagreement_weight
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self._bf16):
            if weight > 0:
                latents, spread = self.model.predict_with_disagreement(ctx, actions)
            else:
                latents = self.model.predict(ctx, actions)
            rewards, values = self.model.score(ctx, latents, actions, command, last_value_only=True)
        rewards, values = rewards.float(), values.float()  # the discounted sum in float32 (bf16: ~3 digits)
        if weight > 0:
            rewards = rewards - weight * spread.float()
        return rewards @ self._discounts + self._terminal * values[:, -1]

    def _previous_action(self, prev_action: Tensor | None, elapsed: int, flags: list[str]) -> Tensor | None:
        if prev_action is not None:
            prev = torch.as_tensor(prev_action, dtype=torch.float32, device=self.device).reshape(self.act_dim)
            if not bool(torch.isfinite(prev).all()):
                flags.append("prev_action_nonfinite")
                return None
        elif self._last is None:
            return None
        elif elapsed == 0:
            prev = self._last_prev
            if prev is None:
                return None
        else:
            prev = self._last[min(elapsed, self.horizon) - 1]
        # bounds win over the rate limit if the robot was somehow outside them
        return prev.clamp(self._low, self._high)

    def _out_of_time(self, start: float, longest: float) -> bool:
        """Would one more iteration, as long as the longest so far, end after the budget?"""
        budget = self.config.budget_ms
        return budget is not None and (_clock() - start + longest) * 1e3 > budget

    def _pinned(self, first_action: Tensor | None) -> Tensor | None:
        if first_action is None:
            return None
        pinned = torch.as_tensor(first_action, dtype=torch.float32, device=self.device).reshape(self.act_dim)
        if not bool(torch.isfinite(pinned).all()):
            raise ValueError("first_action must be finite (it is the action the robot is executing)")
        return pinned

    def _act(
        self,
        ctx: Context,
        command: Tensor,
        elapsed: int,
        prev_action: Tensor | None,
        start: float,
        first_action: Tensor | None = None,
    ) -> Plan:
        cfg = self.config
        n_gauss, n_policy, horizon = cfg.num_samples, cfg.num_policy_samples, self.horizon
        flags: list[str] = []
        cmd = self._command(command)
        pinned = self._pinned(first_action)  # planning ahead: step 0 is given, the rate limit counts from it
        prev = self._previous_action(prev_action, elapsed, flags)

        proposals = self._proposals(ctx, cmd)  # (1 + command scales, T, A); row 0: the command as given
        policy = proposals[0]
        policy_ok = bool(torch.isfinite(proposals).all())
        if not policy_ok:
            flags.append("policy_nonfinite")

        warm = self._last is not None and not self._last_was_fallback and elapsed < horizon
        if warm:
            assert self._last is not None
            mean = torch.cat([self._last[elapsed:], self._last[-1:].expand(elapsed, -1)])
        elif policy_ok:
            mean = policy
        else:
            mean = self._hold(prev)
        std = torch.full_like(mean, cfg.init_std)

        pool, scores = self._pool, self._scores
        n_extra = 0
        if n_policy > 0 and policy_ok:
            extra = pool[n_gauss : n_gauss + n_policy]
            torch.randn(extra.shape, generator=self._generator, out=extra)
            extra.mul_(cfg.policy_std)
            if cfg.policy_chunks == 1:
                extra.add_(policy)
                extra[0] = policy  # the base policy's chunk itself always competes
            else:  # sample i around chunk i mod K (each command's chunk advanced by 0..L); each chunk competes
                chunks = self._leads(proposals).reshape(-1, horizon, self.act_dim)
                extra.add_(chunks[torch.arange(n_policy, device=self.device) % chunks.shape[0]])
                extra[: chunks.shape[0]] = chunks
            n_extra = n_policy
        contexts = {n: ctx.expand(n) for n in {n_gauss, n_gauss + n_extra}}
        commands = {n: cmd.expand(n, -1, -1) for n in contexts}

        nonfinite = 0
        lead: int | None = None
        scale: float | None = None
        best = torch.tensor(float("nan"))
        done, longest = 0, 0.0
        for iteration in range(cfg.iterations):
            if iteration > 0 and self._out_of_time(start, longest):
                flags.append("budget")
                break
            began = _clock()
            gauss = pool[:n_gauss]
            torch.randn(gauss.shape, generator=self._generator, out=gauss)
            if self._noise_filter is not None:  # white -> AR(1) along the horizon, unit variance per step
                gauss.copy_(torch.einsum("ts,nsa->nta", self._noise_filter, gauss))
            gauss.mul_(std).add_(mean)
            gauss[0] = mean  # the current mean (at first: the warm start) is always evaluated
            # new samples, plus at first the policy samples, projected and scored together; carried ones keep
            # their projection and score
            n_eval = n_gauss + (n_extra if iteration == 0 else 0)
            self._project_(pool[:n_eval], prev, pinned)
            new_scores = self._evaluate(contexts[n_eval], pool[:n_eval], commands[n_eval])
            finite = torch.isfinite(new_scores)
            n_bad = int(n_eval - finite.sum())
            if n_bad:
                nonfinite += n_bad
                new_scores = torch.where(finite, new_scores, -torch.inf)
            scores[:n_eval] = new_scores
            if iteration == 0 and n_extra and cfg.policy_chunks > 1:
                best_chunk = int(new_scores[n_gauss : n_gauss + cfg.policy_chunks].argmax())
                scale_index, lead = divmod(best_chunk, cfg.policy_max_lead + 1)
                scale = (1.0, *cfg.policy_command_scales)[scale_index] if cfg.policy_command_scales else None
                if not cfg.policy_max_lead:
                    lead = None
            if self.on_candidates is not None:
                self.on_candidates(pool[:n_eval], new_scores)
            n_pool = n_gauss + n_extra
            top = torch.topk(scores[:n_pool], cfg.elites)
            if not bool(torch.isfinite(top.values[0])):
                return self._fallback(
                    policy if policy_ok else None,
                    prev,
                    elapsed,
                    iteration + 1,
                    nonfinite,
                    flags,
                    "nonfinite_scores",
                    pinned,
                )
            elites = pool[:n_pool].index_select(0, top.indices)
            weights = torch.softmax(cfg.temperature * top.values, dim=0)
            mean = torch.einsum("k,kta->ta", weights, elites)
            std = torch.einsum("k,kta->ta", weights, (elites - mean).square_()).sqrt_()
            std.clamp_(cfg.min_std, cfg.init_std)
            best = top.values[0]
            if cfg.keep_elites:
                pool[n_gauss : n_gauss + cfg.elites] = elites
                scores[n_gauss : n_gauss + cfg.elites] = top.values
                n_extra = cfg.elites
            done += 1
            longest = max(longest, _clock() - began)
        if nonfinite:
            flags.append("nonfinite_scores")
        # a convex combination of feasible chunks is feasible; clip away the rounding, re-project only if a bug
        # (or rounding beyond 1e-6) broke a rate limit
        actions = mean.clamp(self._low, self._high)
        if pinned is not None:
            actions[0] = pinned  # exactly (every candidate had it, the weights' rounding aside)
        tail, tail_prev = (actions, prev) if pinned is None else (actions[1:], pinned)
        if self._rate_violation(tail, tail_prev) > 1e-6:
            self._project_(actions[None], prev, pinned)
        if not bool(torch.isfinite(actions).all()):
            # finite scores of samples that overflowed (an absurd init_std) can still refit a non-finite mean
            return self._fallback(
                policy if policy_ok else None, prev, elapsed, done, nonfinite, flags, "nonfinite_plan", pinned
            )
        return self._finish(
            actions, prev, warm, elapsed, done, float(best), nonfinite, None, flags, lead, scale
        )

    def _proposals(self, ctx: Context, cmd: Tensor) -> Tensor:
        """(1+S,T,A): the base policy's chunk for the command (row 0) and for it scaled by each of the S
        `policy_command_scales` (clamped into the pretraining's command range), in one batch."""
        scales = self._command_scales
        commands = cmd if scales is None else cmd * scales
        if scales is not None and self._command_range is not None:
            # scaled commands stay where the policy was trained; the command as given (row 0) is never changed
            low, high = self._command_range
            commands = commands.clamp(torch.minimum(low, cmd), torch.maximum(high, cmd))
        rows = commands.shape[0]
        return (
            self.model.propose(ctx, commands)
            .reshape(rows, self.horizon, self.act_dim)
            .to(self.device, torch.float32)
        )

    def _leads(self, chunks: Tensor) -> Tensor:
        """(P,L+1,T,A): each of the P chunks advanced by 0..L steps, each padded by repeating its last step."""
        n = self.config.policy_max_lead + 1
        index = torch.arange(n, device=self.device)[:, None] + torch.arange(self.horizon, device=self.device)
        return chunks[:, index.clamp_(max=self.horizon - 1)]

    def _rate_violation(self, actions: Tensor, prev: Tensor | None) -> float:
        if self._max_delta is None:
            return 0.0
        steps = torch.diff(actions, dim=0) if prev is None else torch.diff(actions, dim=0, prepend=prev[None])
        if steps.numel() == 0:  # one step and no previous action: nothing to limit
            return 0.0
        return float((steps.abs() - self._max_delta).max())

    def _hold(self, prev: Tensor | None) -> Tensor:
        """Repeat the previous action; with none known, the point of the bounds nearest to zero."""
        base = prev if prev is not None else torch.zeros(self.act_dim, device=self.device)
        return base.clamp(self._low, self._high).expand(self.horizon, -1).clone()

    def _fallback(
        self,
        policy: Tensor | None,
        prev: Tensor | None,
        elapsed: int,
        iterations: int,
        nonfinite: int,
        flags: list[str],
        reason: str,
        pinned: Tensor | None = None,
    ) -> Plan:
        """The base policy's chunk (or a hold) instead of the search's plan; `reason` is the flag that says why:
        "nonfinite_scores" (no finite score at all) or "nonfinite_plan" (the refitted mean was not finite)."""
        flags.append(reason)
        kind = "policy" if policy is not None else "hold"
        actions = policy.clone() if policy is not None else self._hold(prev if pinned is None else pinned)
        self._project_(actions[None], prev, pinned)
        return self._finish(actions, prev, False, elapsed, iterations, float("nan"), nonfinite, kind, flags)

    def _finish(
        self,
        actions: Tensor,
        prev: Tensor | None,
        warm: bool,
        elapsed: int,
        iterations: int,
        best: float,
        nonfinite: int,
        fallback: str | None,
        flags: list[str],
        policy_lead: int | None = None,
        policy_command_scale: float | None = None,
    ) -> Plan:
        actions = actions.clone()
        self._last, self._last_prev = actions, prev
        if self.config.exploration_std > 0 and fallback is None:  # collection: the executed step explores
            actions = actions.clone()  # the warm start above keeps the plan itself
            noise = torch.randn(actions[0].shape, generator=self._exploration, device=self.device)
            actions[0].add_(noise * self.config.exploration_std)
            self._project_(actions[None], prev)  # within the bounds, and the rate limit from `prev` on
        self._last_was_fallback = fallback is not None  # the model could not score it: no warm start from it
        stats = PlanStats(
            iterations,
            best,
            warm,
            elapsed,
            nonfinite,
            fallback,
            tuple(flags),
            policy_lead,
            policy_command_scale,
        )
        return Plan(action=actions[0].clone(), actions=actions, stats=stats)
