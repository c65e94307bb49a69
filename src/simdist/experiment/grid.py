"""`simdist plan-grid`: planning strength against model quality, lockstep, on one profile.

Each named planner setting (the base planner with some keys changed) is evaluated with each dynamics version of one
model folder (the pretrained v0000, then the adapted ones), on the task's evaluation protocol, the same episodes
for every cell. A setting can widen the search (samples, iterations, std); the table says whether better dynamics
give a wider search more to gain. Writes grid.json (atomically, after every cell, so a stopped run keeps what it
measured and resumes) and prints the table.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import Any

from simdist import atomic, robots
from simdist.cli import add_overrides_argument
from simdist.errors import ConfigError


def parse_setting(text: str) -> tuple[str, dict[str, Any]]:
    """'wide:num_samples=32,iterations=3' -> ('wide', {...}); 'cpu' alone is the base planner unchanged; a list
    value keeps its commas inside brackets ('slow:policy_command_scales=[0.75,0.5]')."""
    from simdist.config import parse_overrides

    name, _, keys = text.partition(":")
    if not name.strip():
        raise ConfigError(f"--setting '{text}': give a name, e.g. wide:num_samples=32,iterations=3")
    items, depth, current = [], 0, ""
    for char in keys:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    return name.strip(), parse_overrides([k for k in items if k.strip()])


class PolicyCensus:
    """Per tick, which of the base policy's chunks the model scored best: its lead (`PlanStats.policy_lead`, the
    delay the dynamics believe the robot has) and the factor on its command (`policy_command_scale`, how much
    slower or faster than commanded the dynamics would walk). Attached like the auditor, after the first tick; counts the
    ticks after it."""

    STATS = ("policy_lead", "policy_command_scale")

    def __init__(self) -> None:
        self.counts: dict[str, dict[Any, int]] = {stat: {} for stat in self.STATS}

    def attach(self, loop: Any) -> None:
        act = loop.planner.act

        def act_and_count(*args: Any, **kwargs: Any) -> Any:
            plan = act(*args, **kwargs)
            for stat, counts in self.counts.items():
                choice = getattr(plan.stats, stat)
                if choice is not None:
                    counts[choice] = counts.get(choice, 0) + 1
            return plan

        loop.planner.act = act_and_count

    def shares(self) -> dict[str, dict[str, float]]:
        """{stat: {choice: share of ticks}} for each stat that was reported."""
        out = {}
        for stat, counts in self.counts.items():
            total = sum(counts.values())
            if total:
                out[stat] = {str(k): counts[k] / total for k in sorted(counts)}
        return out


def _versions(text: str) -> list[int]:
    from simdist.model.checkpoint import parse_version

    try:
        versions = [parse_version(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"--versions must be version numbers separated by commas, got '{text}'") from None
    if not versions:
        raise ConfigError("--versions is empty")
    return versions


def measure(
    task: str,
    profile: str,
    model: Path,
    versions: list[int],
    settings: list[tuple[str, dict[str, Any]]],
    *,
    planner: str = "cpu",
    episodes: int | None = None,
    seed: int = 10_000,
    overrides: dict[str, Any] | None = None,
    out: Path | None = None,
    audit_every: int | None = None,
    say: Any = print,
) -> dict[str, Any]:
    """{"cells": {"v0001 wide": {...}}, ...}; cells already in out/grid.json are kept, not measured again.

    `audit_every`: every so many ticks, each candidate chunk is also rolled out in a copy of the simulator and its
    true reward set beside the model's prediction (`simdist.experiment.audit`); the cell gets an "audit" summary.
    """
    from simdist.experiment.audit import auditing, summarise
    from simdist.experiment.run import episode_stats
    from simdist.experts.policy import atomic_json
    from simdist.model.checkpoint import list_versions, rollback, version_label
    from simdist.plan.config import load_planner_config
    from simdist.runtime.adapt import evaluate_on_robot
    from simdist.runtime.store import ModelStore
    from simdist.sim.config import load_task

    cfg = load_task(task, overrides)
    cfg.profile(profile)
    missing = [v for v in versions if v not in list_versions(model)]
    if missing:
        raise ConfigError(f"{model}: no dynamics version {', '.join(version_label(v) for v in missing)}")
    for _name, changes in settings:  # a bad key or value fails here, before any evaluation
        load_planner_config(planner, cfg.robot, {"budget_ms": None, **changes}, task=cfg.task)
    path = None if out is None else out / "grid.json"
    protocol = robots.get(cfg.robot).evaluation(cfg, episodes)
    metric_key = protocol.metric_key
    result: dict[str, Any] = {
        "task": task,
        "profile": profile,
        "model": str(model),
        "seed": seed,
        "episodes_per_cell": protocol.episodes,
        "overrides": dict(overrides or {}),
        "cells": {},
    }
    if path is not None and path.is_file():
        result["cells"] = _resumable(path, result)
        for version in versions:  # a stored cell of the same name must have measured the same setting
            for name, changes in settings:
                stored = result["cells"].get(f"{version_label(version)} {name}")
                wanted = {"name": planner, **changes}
                if stored is not None and stored.get("planner", wanted) != wanted:
                    raise ConfigError(
                        f"{path}: cell '{version_label(version)} {name}' measured planner {stored['planner']!r}, "
                        f"this run asks {wanted!r} under that name (choose another --out or setting name)"
                    )
    todo = sum(f"{version_label(v)} {name}" not in result["cells"] for v in versions for name, _ in settings)
    say(
        f"{task} on sim:{profile}, evaluation seed {seed}: {protocol.description} per cell; "
        f"{todo} cell(s) to measure"
        + (f", {len(result['cells'])} already in {path}" if result["cells"] else "")
    )
    with tempfile.TemporaryDirectory() as scratch:
        for version in versions:
            if all(f"{version_label(version)} {name}" in result["cells"] for name, _ in settings):
                continue  # measured in an earlier run: no copy, no model load
            folder = Path(scratch) / version_label(version)
            shutil.copytree(model, folder, ignore=shutil.ignore_patterns("reports", atomic.TMP_PATTERN))
            rollback(folder, version)  # a copy pointed at this version: the model folder is never touched
            store = ModelStore(folder)
            for name, changes in settings:
                key = f"{version_label(version)} {name}"
                if key in result["cells"]:
                    continue
                planner_overrides = {"budget_ms": None, **changes}
                discount = load_planner_config(planner, cfg.robot, planner_overrides, task=cfg.task).discount
                auditor, attach_auditor = auditing(audit_every, discount)
                census = PolicyCensus()

                def on_start(
                    loop: Any, auditor_start: Any = attach_auditor, census: PolicyCensus = census
                ) -> None:
                    if auditor_start is not None:
                        auditor_start(loop)
                    census.attach(loop)

                metric, value, ended = evaluate_on_robot(
                    cfg,
                    profile,
                    store,
                    overrides=overrides,
                    planner=planner,
                    planner_overrides=planner_overrides,
                    episodes=episodes,
                    seed=seed,
                    on_start=on_start,
                    adapted_planner=False,  # a cell measures its setting as given, on every version
                )
                cell = {
                    **episode_stats(ended, metric_key),
                    "value": value,
                    "planner": {"name": planner, **changes},
                }
                cell.update(census.shares())
                if auditor is not None:
                    cell["audit"] = {"every": audit_every, **summarise(auditor.records)}
                result["metric"] = metric
                result["cells"][key] = cell
                chosen = "".join(
                    f"; best {stat.removeprefix('policy_').replace('_', ' ')} "
                    + ", ".join(f"{k}: {v:.0%}" for k, v in cell[stat].items())
                    for stat in PolicyCensus.STATS
                    if stat in cell
                )
                say(f"{key}: {value:.3f} ({cell['falls']} falls, {cell['episodes']} episodes){chosen}")
                if path is not None:
                    out.mkdir(parents=True, exist_ok=True)  # type: ignore[union-attr]
                    atomic_json(path, result)
    return result


def _resumable(path: Path, result: dict[str, Any]) -> dict[str, Any]:
    """The cells of an earlier grid.json, if it was measured the same way (task, profile, model, seed, episodes,
    overrides)."""
    import json

    try:
        stored = json.loads(path.read_text())
        cells = dict(stored.get("cells", {}))
        stored.setdefault(
            "episodes_per_cell", max((c.get("episodes", 0) for c in cells.values()), default=None)
        )
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        raise ConfigError(f"{path}: not a plan-grid result ({exc}); choose another --out") from None
    for key in ("task", "profile", "model", "seed", "episodes_per_cell", "overrides"):
        if stored.get(key) is not None and stored[key] != result[key]:
            raise ConfigError(
                f"{path}: measured with {key} {stored[key]!r}, this run has {result[key]!r}; "
                "its cells would not pair with this run's (choose another --out)"
            )
    return cells


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True, help="task name (config/tasks/<task>.yaml)")
    parser.add_argument("--profile", required=True, help="the robot: sim:<profile> (e.g. ptfe, foam, real)")
    parser.add_argument("--model", type=Path, required=True, help="model folder with the dynamics versions")
    parser.add_argument("--versions", required=True, help="dynamics versions, comma-separated (0,1,2)")
    parser.add_argument(
        "--setting",
        dest="settings",
        action="append",
        required=True,
        metavar="NAME[:KEY=VALUE,...]",
        help="a planner setting: the base planner with these keys changed (repeatable)",
    )
    parser.add_argument("--planner", default="cpu", help="the base planner (config/planner/<name>.yaml)")
    parser.add_argument("--episodes", type=int, default=None, help="per speed (Go2) or in all (peg)")
    parser.add_argument("--seed", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=None, help="folder for grid.json (resumes from it)")
    parser.add_argument(
        "--audit-every",
        type=int,
        default=None,
        metavar="N",
        help="every N ticks, roll each candidate chunk out in a copy of the simulator: the model's ranking "
        "against the profile's (a second table)",
    )
    add_overrides_argument(parser)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from simdist.config import parse_overrides
    from simdist.model.checkpoint import version_label
    from simdist.runtime.deploy import resolve_model

    settings = [parse_setting(s) for s in args.settings]
    versions = _versions(args.versions)
    if args.audit_every is not None and args.audit_every < 1:
        raise ConfigError(f"--audit-every must be >= 1, got {args.audit_every}")
    model = resolve_model(args.task, args.model)
    result = measure(
        args.task,
        args.profile,
        model,
        versions,
        settings,
        planner=args.planner,
        episodes=args.episodes,
        seed=args.seed,
        overrides=parse_overrides(args.overrides),
        out=args.out,
        audit_every=args.audit_every,
        say=lambda line: print(line, flush=True),  # each cell as it ends, also into a log file
    )
    table = Table(title=f"{args.task} on sim:{args.profile}: {result.get('metric', '')} (falls)")
    table.add_column("dynamics")
    for name, _ in settings:
        table.add_column(name, justify="right")
    for version in versions:
        cells = [result["cells"][f"{version_label(version)} {name}"] for name, _ in settings]
        table.add_row(version_label(version), *(f"{c['value']:.3f} ({c['falls']})" for c in cells))
    Console().print(table)
    if args.audit_every:
        Console().print(_audit_table(result, versions, settings))
    if args.out is not None:
        print(f"wrote {args.out / 'grid.json'}")
    return 0


def _audit_table(result: dict[str, Any], versions: list[int], settings: list[tuple[str, Any]]) -> Any:
    from rich.table import Table

    from simdist.model.checkpoint import version_label

    table = Table(title="candidates rolled out in the simulator (mean, SE over audited ticks)")
    table.add_column("figure")
    cells = [f"{version_label(v)} {name}" for v in versions for name, _ in settings]
    cells = [c for c in cells if "audit" in result["cells"][c]]
    for cell in cells:
        table.add_column(cell, justify="right")
    table.add_row("ticks", *(str(result["cells"][c]["audit"]["ticks"]) for c in cells))
    # every figure any cell has (`audit.figure_keys`: the per-chunk ones differ between settings), in their order
    keys = dict.fromkeys(k for c in cells for k in result["cells"][c]["audit"])
    for key in [k for k in keys if k not in ("ticks", "every")]:
        figures = [result["cells"][c]["audit"].get(key) for c in cells]
        table.add_row(key, *(f"{f['mean']:.3f} ({f['stderr']:.3f})" if f else "-" for f in figures))
    return table
