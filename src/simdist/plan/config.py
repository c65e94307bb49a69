"""Planner settings: config/planner/<name>.yaml built into a frozen `PlannerConfig`.

A file holds shared settings at the top level, per-robot differences under `robots.<robot>` and per-task ones
(a task's deployed choice, measured on it) under `tasks.<task>`; `extends: <name>` starts from another file so that
no setting is written twice. Merge order: parent top level, parent robot section, parent task section, own top
level, own robot section, own task section, then `--set` overrides.

Any level may hold an `adapted:` mapping: the search the planner is given once the dynamics in force were adapted
on real data (a version the finetuning gate published after the pretrained one: `ModelStore.adapted`). A wider
search exploits the pretrained dynamics' errors and pays only through dynamics that real data corrected
(docs/results.md, "Planning strength against model quality"), so the gate's decision is what grants it. `adapted`
blocks merge in the same order, after the plain settings and before `--set` overrides.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simdist import robots
from simdist.config import apply_overrides, build, load_named
from simdist.errors import ConfigError
from simdist.sim.config import CommandConfig

Limit = float | Sequence[float] | None
PRECISIONS = ("float32", "bfloat16")


@dataclass(frozen=True)
class ActionLimits:
    """Per-dimension action bounds and the largest change per control step, in raw action units; and the range of
    commands the base policy was pretrained on, which its scaled candidates stay inside.

    `max_delta` limits both the first action against the previously executed one and consecutive plan steps.
    A scalar applies to every dimension; None means unlimited. `command_low`/`command_high` (raw command units,
    one value per command dimension, or None): a chunk the policy proposes for a command it never saw is an
    extrapolation of the network, not a gait, so `policy_command_scales` candidates are clamped into this range
    (widened to take in the command as given, which always competes unchanged).
    """

    low: Limit = None
    high: Limit = None
    max_delta: Limit = None
    command_low: Sequence[float] | None = None
    command_high: Sequence[float] | None = None


@dataclass(frozen=True)
class PlannerConfig:
    """MPPI/CEM settings. Sample counts are per iteration; std values are in raw action units."""

    num_samples: int  # Gaussian samples around the current mean, per iteration
    num_policy_samples: int  # samples around the base policy's chunk, drawn once per tick
    policy_std: float
    iterations: int
    elites: int
    temperature: float  # weights exp(temperature * (score - best)), as in TD-MPC2 (an inverse temperature)
    init_std: float  # also the ceiling of the refitted std
    min_std: float
    horizon: int  # must equal the world model's horizon
    discount: float
    keep_elites: bool = False  # carry each iteration's elites (with their scores) into the next one
    compile: bool = False  # torch.compile the model evaluation (slow first ticks)
    # torch intra-op threads of the planning process (process-wide); never left to torch's default, which takes
    # every core and, beside any other process, made ticks 5-7x slower here
    num_threads: int = 1
    # Anytime planning: after the first iteration, start another only if it is expected to end within this many
    # ms of the call (the longest iteration so far as the estimate). None: always run every iteration (exactly
    # reproducible; with a budget the number of iterations depends on the machine's speed at that moment).
    budget_ms: float | None = None
    # Disagreement-aware scoring (PETS/MOPO): with an ensemble world model, each step's score loses this weight
    # times the members' disagreement (their variance in the normalised latent space, discounted like the
    # rewards), so a wide search stays away from chunks the model does not know. 0: off (and no member cost).
    disagreement_weight: float = 0.0
    # Time-correlated sampling noise (as iCEM's coloured noise): the Gaussian samples' offsets from the mean follow
    # an AR(1) process along the horizon with this lag-one correlation, each step keeping its std. White noise (0)
    # on 50 Hz joint targets mostly averages out in the servos, so its chunks differ little on the robot.
    noise_correlation: float = 0.0
    # Plan one tick ahead (real time and lockstep alike): the plan computed from tick k's state starts with the
    # action tick k executes (fixed, not searched) and its step 1 is tick k+1's action, so a plan may take almost a
    # whole control period instead of the part of it before the tick's deadline; the price is one period of delay
    # between a state and the first action planned from it. The first tick of an episode plans its own action.
    plan_ahead: bool = False
    # The base policy's chunk also advanced by 1..policy_max_lead control steps (its step k first, the last step
    # repeated at the end), the policy samples spread evenly over the leads, each lead's own chunk among them.
    # A robot whose commands take effect later than in pretraining (actuator delay, a planning computer beside the
    # robot) wants the policy's later steps now; which lead pays is for the dynamics to say, so a model that has
    # learnt the delay from real data can choose it. 0: the chunk as the policy proposes it (the authors' planner).
    policy_max_lead: int = 0
    # The base policy's chunk also proposed for the command scaled by each of these factors (a velocity-commanded
    # robot: the policy asked to walk slower, or faster, than commanded), every such chunk with its leads among the policy
    # samples and all of them scored against the real command. Where the commanded gait is more than the ground
    # allows (a slippery slope, a delay the policy never saw), the dynamics can say that a slower gait scores
    # better than a fall; with the pretrained dynamics it rarely does. Empty: the command as given only.
    policy_command_scales: tuple[float, ...] = ()
    # The arithmetic of scoring the samples (dynamics, reward and value heads): "float32", or "bfloat16" under
    # torch.autocast, where the CPU has bf16 instructions (AVX512-BF16, AMX) or on a GPU; scores, sampling and the
    # refit stay float32. bf16 keeps 8 bits of mantissa: scores move by ~0.3 % of their spread, plans differ.
    precision: str = "float32"
    # Collection only: the action executed each tick is the plan's first action plus white Gaussian noise of this
    # std (raw action units), kept within the action bounds and the rate limit; the plan and its warm start are not
    # changed. The search scores Gaussian samples around its mean, but real data collected without noise show the
    # dynamics little beyond the chunks the planner executes (docs/results.md: after 30 minutes on the slope the
    # latent error on the Gaussian samples stays 2.4x that on the policy's). Evaluation never explores
    # (`evaluate_on_robot` sets it to 0). 0: off. Measured on the slope at 0.5 (2026-12-06): the loop walked 0.34 m
    # less at 30 minutes (4.3 SE; its adapted dynamics chose the half-speed gait on 96 % of ticks), so no task uses it.
    exploration_std: float = 0.0

    @property
    def policy_chunks(self) -> int:
        """How many distinct base-policy chunks compete: (1 + command scales) x (1 + leads)."""
        return (1 + len(self.policy_command_scales)) * (self.policy_max_lead + 1)

    def __post_init__(self) -> None:
        checks = [
            (self.num_samples >= 1, "num_samples must be >= 1"),
            (self.num_policy_samples >= 0, "num_policy_samples must be >= 0"),
            (self.iterations >= 1, "iterations must be >= 1"),
            (1 <= self.elites <= self.num_samples, "elites must be in [1, num_samples]"),
            (self.temperature > 0, "temperature must be > 0"),
            (0 < self.min_std <= self.init_std, "need 0 < min_std <= init_std"),
            (self.policy_std >= 0, "policy_std must be >= 0"),
            (self.horizon >= 1, "horizon must be >= 1"),
            (0 < self.discount <= 1, "discount must be in (0, 1]"),
            (self.num_threads >= 1, "num_threads must be >= 1"),
            (self.disagreement_weight >= 0, "disagreement_weight must be >= 0"),
            (self.exploration_std >= 0, "exploration_std must be >= 0"),
            (
                self.exploration_std == 0 or not self.plan_ahead,
                "exploration_std needs plan_ahead false (the noise goes on the step planned for this tick)",
            ),
            (0 <= self.noise_correlation < 1, "noise_correlation must be in [0, 1)"),
            (self.budget_ms is None or self.budget_ms > 0, "budget_ms must be > 0 (or null: no deadline)"),
            (0 <= self.policy_max_lead < self.horizon, "policy_max_lead must be in [0, horizon)"),
            (self.precision in PRECISIONS, f"precision must be one of {', '.join(PRECISIONS)}"),
            (
                all(0 <= k < 1 or 1 < k <= 2 for k in self.policy_command_scales),
                "policy_command_scales must be in [0, 2] and not 1 (the command as given always competes)",
            ),
            (
                self.num_policy_samples == 0 or self.num_policy_samples >= self.policy_chunks,
                "num_policy_samples must be >= (1 + len(policy_command_scales)) x (policy_max_lead + 1) "
                "(one sample per policy chunk at least)",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(f"planner config: {message}")


_FIELDS = {f.name for f in dataclasses.fields(PlannerConfig)}
ADAPTED = "adapted"
# settings of the control process as a whole, which a change of dynamics version cannot change mid-run
PROCESS_WIDE = ("num_threads", "plan_ahead", "horizon", "compile")


def _sections(data: dict[str, Any], kind: str, name: str) -> Mapping[str, Any]:
    """The `robots` or `tasks` mapping of a planner file, each section's keys checked."""
    sections = data.pop(kind, {}) or {}
    if not isinstance(sections, Mapping):
        what = kind.removesuffix("s")
        raise ConfigError(f"planner config '{name}': '{kind}' must be a mapping of {what} -> settings")
    for section_name, section in sections.items():
        if not isinstance(section, Mapping):
            raise ConfigError(f"planner config '{name}': {kind}.{section_name} must be a mapping")
        unknown = sorted(set(section) - _FIELDS - {ADAPTED})
        if unknown:
            raise ConfigError(
                f"unknown key '{kind}.{section_name}.{unknown[0]}' in planner config '{name}' "
                f"(valid: {', '.join(sorted(_FIELDS))})"
            )
    return sections


def _split(section: Mapping[str, Any], where: str, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A section's own settings and its `adapted` ones, both checked."""
    plain = dict(section)
    adapted = plain.pop(ADAPTED, None) or {}
    if not isinstance(adapted, Mapping):
        raise ConfigError(f"planner config '{name}': {where}{ADAPTED} must be a mapping of settings")
    unknown = sorted(set(adapted) - _FIELDS)
    if unknown:
        raise ConfigError(
            f"unknown key '{where}{ADAPTED}.{unknown[0]}' in planner config '{name}' "
            f"(valid: {', '.join(sorted(_FIELDS))})"
        )
    fixed = sorted(set(adapted) & set(PROCESS_WIDE))
    if fixed:
        raise ConfigError(
            f"planner config '{name}': {where}{ADAPTED}.{fixed[0]} cannot change with the dynamics version "
            f"(it is the control process's, set once: {', '.join(PROCESS_WIDE)})"
        )
    return plain, dict(adapted)


def _flatten(
    name: str, robot: str, task: str | None, seen: tuple[str, ...] = ()
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(settings, adapted settings) of a file for a robot and task, its parents' first."""
    if name in seen:
        raise ConfigError(f"planner config '{name}' extends itself ({' -> '.join((*seen, name))})")
    data = load_named("planner", name)
    merged: dict[str, Any] = {}
    adapted: dict[str, Any] = {}
    parent = data.pop("extends", None)
    if parent is not None:
        if not isinstance(parent, str):
            raise ConfigError(f"planner config '{name}': 'extends' must be a config name")
        merged, adapted = _flatten(parent, robot, task, (*seen, name))
    robots = _sections(data, "robots", name)
    tasks = _sections(data, "tasks", name)
    layers = [("", data), (f"robots.{robot}.", robots.get(robot, {}))]
    if task is not None:
        layers.append((f"tasks.{task}.", tasks.get(task, {})))
    for where, section in layers:
        plain, more = _split(section, where, name)
        merged.update(plain)
        adapted.update(more)
    return merged, adapted


def load_planner_config(
    name: str,
    robot: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    task: str | None = None,
    adapted: bool = False,
) -> PlannerConfig:
    """Build the planner settings of config/planner/<name>.yaml for `robot` (go2, ur5e, ...) and, when given,
    `task` (its `tasks.<task>` section: what was measured to suit that task); with `adapted`, the search the file
    grants dynamics adapted on real data (its `adapted` blocks), `overrides` still last.

    Raises:
        ConfigError: unknown file, key, robot-section key or value, or a wrong type.
    """
    defaults = {
        f.name: f.default for f in dataclasses.fields(PlannerConfig) if f.default is not dataclasses.MISSING
    }
    plain, more = _flatten(name, robot, task)
    # defaults first so that `--set compile=true` works when the file leaves a field at its default
    data = {**defaults, **plain, **(more if adapted else {})}
    if overrides:
        data = apply_overrides(data, overrides)
    return build(PlannerConfig, data, "planner")


def load_planner_configs(
    name: str, robot: str, overrides: Mapping[str, Any] | None = None, *, task: str | None = None
) -> tuple[PlannerConfig, PlannerConfig | None]:
    """The planner for the pretrained dynamics and the one for adapted dynamics (None where the file grants
    nothing more, or `overrides` make them the same)."""
    base = load_planner_config(name, robot, overrides, task=task)
    adapted = load_planner_config(name, robot, overrides, task=task, adapted=True)
    return base, (None if adapted == base else adapted)


def task_action_limits(task: Any) -> ActionLimits:
    """The planner's action limits from a task: bounds +-`action_clip`, the rate limit `action_max_delta`
    (largest change of an action per control step, raw action units) and the pretraining's command range (the
    robot's `command_range` of the task's `command` section). The one place every path that plans
    (deploy, the planner node, adapt, bench) gets them from. `task`: a TaskConfig, or a task YAML's mapping."""
    if isinstance(task, Mapping):
        clip, max_delta = task.get("action_clip"), task.get("action_max_delta")
        robot, command = task.get("robot"), task.get("command")
        if isinstance(command, Mapping):
            command = build(CommandConfig, command, "command")
    else:
        clip, max_delta = task.action_clip, task.action_max_delta
        robot, command = task.robot, task.command
    commands = None if robot is None or command is None else robots.get(robot).command_range(command)
    return ActionLimits(
        low=None if clip is None else -float(clip),
        high=None if clip is None else float(clip),
        max_delta=None if max_delta is None else float(max_delta),
        command_low=None if commands is None else tuple(float(v) for v in commands[0]),
        command_high=None if commands is None else tuple(float(v) for v in commands[1]),
    )
