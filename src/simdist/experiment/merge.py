"""`simdist experiment-merge RUN [RUN ...] --out DIR`: one report from runs of the same experiment made apart.

Seeds run in separate processes (`simdist experiment --first-seed S --seeds 1`) and the oracle in its own run each
leave a finished run folder; merged, their rows give the means over seeds, the bands and the targets (SimDist
against the oracle included) that a single run with every seed and method would give. The runs must share the
task, profile, preset, points and metric, and no (method, seed, point) may appear twice. The prediction view is
the first run's that has one (its plots are copied along).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import shutil
from pathlib import Path

from simdist.errors import ConfigError
from simdist.experiment.config import METHODS
from simdist.experiment.report import ExperimentResult, PointResult, write_outputs

SHARED = ("task", "profile", "preset", "points", "budget", "metric")
# what else a run's settings must share with the others' (where both recorded it): the profile's parameters, the
# models, the protocol and every experiment setting but which seeds and methods a run took and its threads
SHARED_SETTINGS = (
    "control_hz",
    "protocol",
    "model",
    "expert",
    "task_overrides",
    "profile_params",
    "evaluation_seed",
)
PER_RUN_EXPERIMENT = ("seeds", "first_seed", "methods", "threads")


def _settings_differ(a: dict, b: dict) -> str | None:
    """The first setting two runs both recorded with different values, as "name B differs from A"; None when none."""
    for key in SHARED_SETTINGS:
        if key in a and key in b and a[key] != b[key]:
            return f"{key} {b[key]!r} differs from {a[key]!r}"
    ea, eb = a.get("experiment") or {}, b.get("experiment") or {}
    for key in sorted(set(ea) & set(eb) - set(PER_RUN_EXPERIMENT)):
        if ea[key] != eb[key]:
            return f"experiment setting {key} {eb[key]!r} differs from {ea[key]!r}"
    return None


PREDICTION_PLOTS = ("latent_error_by_horizon.png", "slip_velocity.png")


def load_result(folder: Path) -> ExperimentResult:
    """A finished run folder's results.json as an ExperimentResult."""
    path = Path(folder) / "results.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{folder}: no results.json (not an experiment run folder)") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: corrupt results ({exc.msg})") from None
    if data.get("partial", False):
        raise ConfigError(f"{folder}: the run is partial (still going, or stopped): merge finished runs")
    try:
        rows = [PointResult(**row) for row in data["rows"]]
        names = {f.name for f in dataclasses.fields(ExperimentResult)} - {"rows"}
        return ExperimentResult(**{k: v for k, v in data.items() if k in names}, rows=rows)
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: not an experiment result ({exc})") from None


def merge(results: list[ExperimentResult], names: list[str], command: str = "") -> ExperimentResult:
    """One result with every row of `results` (named `names` in errors); `command` made it."""
    first = results[0]
    for result, name in zip(results[1:], names[1:], strict=True):
        for key in SHARED:
            if getattr(result, key) != getattr(first, key):
                raise ConfigError(
                    f"{name}: {key} {getattr(result, key)!r} differs from {getattr(first, key)!r} in {names[0]}"
                )
        different = _settings_differ(first.settings, result.settings)
        if different is not None:
            raise ConfigError(f"{name}: {different} in {names[0]} (runs of different experiments)")
    rows: list[PointResult] = []
    seen: dict[tuple[str, int, float], str] = {}
    for result, name in zip(results, names, strict=True):
        for row in result.rows:
            key = (row.method, row.seed, row.minutes)
            if key in seen:
                raise ConfigError(
                    f"{name}: {row.method}, seed {row.seed}, {row.minutes:g} min is also in {seen[key]}"
                )
            seen[key] = name
            rows.append(row)
    methods = [m for m in METHODS if any(m in r.methods for r in results)]
    costs: dict[str, dict[str, float]] = {}
    for result in results:
        for method, phases in result.costs.items():
            bucket = costs.setdefault(method, {})
            for phase, seconds in phases.items():
                bucket[phase] = bucket.get(phase, 0.0) + seconds
    measured = {row.method for row in rows}
    skipped = {m: why for r in results for m, why in r.skipped.items() if m not in measured}
    return ExperimentResult(
        task=first.task,
        profile=first.profile,
        preset=first.preset,
        points=first.points,
        budget=first.budget,
        seeds=sorted({s for r in results for s in r.seeds}),
        methods=methods,
        metric=first.metric,
        rows=rows,
        costs=costs,
        skipped=skipped,
        settings={
            **first.settings,
            "command": command,
            "merged_runs": {name: r.settings.get("command") for name, r in zip(names, results, strict=True)},
        },
        prediction=next((r.prediction for r in results if r.prediction), {}),
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", type=Path, help="finished run folders of `simdist experiment`")
    parser.add_argument("--out", type=Path, required=True, help="the merged run folder (must not exist)")


def run(args: argparse.Namespace) -> int:
    if args.out.exists():
        raise ConfigError(f"--out {args.out} already exists: choose a new folder")
    names = [str(folder) for folder in args.runs]
    results = [load_result(folder) for folder in args.runs]
    command = " ".join(
        ["simdist experiment-merge", *map(shlex.quote, names), "--out", shlex.quote(str(args.out))]
    )
    merged = merge(results, names, command)
    args.out.mkdir(parents=True)
    source = next((f for f, r in zip(args.runs, results, strict=True) if r.prediction), None)
    for plot in PREDICTION_PLOTS if source is not None else ():
        if (source / plot).is_file():
            shutil.copyfile(source / plot, args.out / plot)
    paths = write_outputs(merged, args.out)
    print(
        f"merged {len(results)} runs ({len(merged.rows)} evaluations, seeds {merged.seeds}) -> {paths['report']}"
    )
    return 0
