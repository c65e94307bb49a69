"""`simdist plan-grid-read`: plan-grid results read over seeds, the way the pre-registered rules in docs/results.md
read them.

Each grid.json is one seed's grid (`simdist plan-grid --out`), every cell measured on the same evaluation episodes.
A cell's per-episode values are averaged over the seeds episode by episode; each setting is then compared with a
reference setting on the same dynamics version, paired by episode: the mean difference and its standard error
(the spread of the per-episode differences over the square root of their number). `--beside` adds another model's
grids (one per seed, on the same episodes), so that model's cell can be the reference.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simdist.errors import ConfigError


@dataclass(frozen=True)
class Cell:
    version: str  # "v0002"
    setting: str  # "s32it3"
    mean: float  # over episodes of the seeds' per-episode mean
    falls: int  # summed over the seeds
    episodes: int  # per seed
    diff: float | None = None  # against the reference setting of the same version, paired by episode
    diff_se: float | None = None


def load(paths: list[Path]) -> list[dict[str, Any]]:
    grids = []
    for path in paths:
        try:
            grid = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{path}: not a plan-grid result ({exc})") from None
        if not isinstance(grid, dict) or not isinstance(grid.get("cells"), dict):
            raise ConfigError(f"{path}: not a plan-grid result (no cells)")
        grids.append(grid)
    return grids


def put_beside(
    grids: list[dict[str, Any]],
    beside: list[dict[str, Any]],
    prefix: str,
    versions: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Each seed's grid with the cells of another grid of the same seed (another model, the same episodes) added,
    their settings named `prefix` + setting, so another model's cell can be the reference. `versions` renames the
    other model's versions where the two folders number the same stage differently (an ensemble is one later)."""
    versions = versions or {}
    if len(beside) != len(grids):
        raise ConfigError(
            f"--beside: {len(beside)} grid(s) for {len(grids)} seed(s); give one per seed, in order"
        )
    merged = []
    for grid, other in zip(grids, beside, strict=True):
        for field in ("task", "profile", "metric", "seed", "episodes_per_cell", "overrides"):
            if grid.get(field) != other.get(field):
                raise ConfigError(
                    f"--beside: {field} '{other.get(field)}' against the grid's '{grid.get(field)}'; "
                    "only grids of the same evaluation pair"
                )
        cells = dict(grid["cells"])
        for key, cell in other["cells"].items():
            version, _, setting = key.partition(" ")
            cells[f"{versions.get(version, version)} {prefix}{setting}"] = cell
        merged.append({**grid, "cells": cells})
    return merged


def read(grids: list[dict[str, Any]], reference: str) -> list[Cell]:
    """The cells present in every grid, each with its paired difference to `reference` on its version."""
    if not grids:
        raise ConfigError("no grids to read")
    for field in ("task", "profile", "metric", "episodes_per_cell", "overrides"):  # seeds of one evaluation
        if len({repr(g.get(field)) for g in grids}) > 1:
            raise ConfigError(
                f"the grids differ in {field} ({[g.get(field) for g in grids]}); average like with like"
            )
    keys = [k for k in grids[0]["cells"] if all(k in g["cells"] for g in grids)]
    per_episode: dict[str, np.ndarray] = {}
    for key in keys:
        rows = [np.asarray(g["cells"][key]["per_episode"], dtype=float) for g in grids]
        if len({len(r) for r in rows}) != 1:
            raise ConfigError(
                f"cell '{key}': the grids have {[len(r) for r in rows]} episodes; pair equal ones"
            )
        per_episode[key] = np.mean(rows, axis=0)
    cells = []
    for key in keys:
        version, _, setting = key.partition(" ")
        values = per_episode[key]
        ref = per_episode.get(f"{version} {reference}")
        diff = diff_se = None
        if ref is not None and setting != reference:
            if len(ref) != len(values):
                raise ConfigError(f"cell '{key}': {len(values)} episodes against the reference's {len(ref)}")
            d = values - ref
            diff = float(d.mean())
            diff_se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")
        cells.append(
            Cell(
                version=version,
                setting=setting,
                mean=float(values.mean()),
                falls=sum(int(g["cells"][key]["falls"]) for g in grids),
                episodes=len(values),
                diff=diff,
                diff_se=diff_se,
            )
        )
    return cells


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("grids", nargs="+", type=Path, help="grid.json files, one per seed")
    parser.add_argument("--reference", required=True, help="the setting every other is compared with")
    parser.add_argument(
        "--beside",
        nargs="+",
        type=Path,
        default=[],
        help="another model's grid.json per seed (same order, same episodes): its cells join, named with --prefix",
    )
    parser.add_argument("--prefix", default="beside_", help="prepended to the --beside grids' setting names")
    parser.add_argument(
        "--beside-version",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="read the --beside grids' version OLD as NEW (e.g. v0002=v0003), so the stages pair",
    )


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    grids = load(args.grids)
    if args.beside:
        versions = dict(_version_pair(text) for text in args.beside_version)
        grids = put_beside(grids, load(args.beside), args.prefix, versions)
    cells = read(grids, args.reference)
    if not any(c.setting == args.reference for c in cells):
        raise ConfigError(f"--reference {args.reference}: no such setting in every grid")
    table = Table(title=f"{len(args.grids)} seed(s), per-episode values averaged over the seeds")
    for column in ("dynamics", "setting", "mean", "falls", f"- {args.reference} (paired)", "SE", "in SE"):
        table.add_column(column, justify="left" if column in ("dynamics", "setting") else "right")
    for c in cells:
        paired = (
            ("", "", "")
            if c.diff is None
            else (f"{c.diff:+.3f}", f"{c.diff_se:.3f}", _in_se(c.diff, c.diff_se))
        )
        table.add_row(c.version, c.setting, f"{c.mean:.3f}", str(c.falls), *paired)
    Console().print(table)
    return 0


def _version_pair(text: str) -> tuple[str, str]:
    old, sep, new = text.partition("=")
    if not sep or not old or not new:
        raise ConfigError(f"--beside-version {text}: expected OLD=NEW, e.g. v0002=v0003")
    return old, new


def _in_se(diff: float, se: float | None) -> str:
    """The difference in standard errors; blank where the SE is zero or unknown (one episode, identical pairs)."""
    return f"{diff / se:+.1f}" if se and np.isfinite(se) else ""
