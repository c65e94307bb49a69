"""The experiment's outputs: results.json, report.md (tables, settings, seeds, costs) and PNG curves."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from simdist import atomic

LABELS = {
    "zero_shot": "zero-shot (pretrained, no adaptation)",
    "simdist": "SimDist (dynamics-only finetuning)",
    "full_finetune": "full finetuning (all world-model weights)",
    "rl_finetune": "RL finetuning (PPO from the expert)",
    "oracle": "oracle (real profile in the pretraining randomisation)",
}
ADAPTIVE = ("simdist", "full_finetune", "rl_finetune", "oracle")


@dataclass
class PointResult:
    """One evaluation: a method, a seed and a point of real data."""

    method: str
    seed: int
    minutes: float  # minutes of real data at this point (the budget)
    steps: int  # real-profile environment steps the method's data came from, counted where they were executed
    metric: str
    performance: float
    # the metric per evaluation episode (their mean is `performance`)
    episodes: list[float] = field(default_factory=list)
    latent_error: float | None = None  # mean held-out latent MSE on the fixed real-profile rollouts
    data_steps: int | None = None  # steps in the bags the world model was finetuned on (world-model methods)
    version: str = ""
    note: str = ""


@dataclass
class ExperimentResult:
    task: str
    profile: str
    preset: str
    points: list[float]
    budget: list[int]  # cumulative real steps at each point
    seeds: list[int]
    methods: list[str]
    metric: str
    rows: list[PointResult] = field(default_factory=list)
    costs: dict[str, dict[str, float]] = field(default_factory=dict)  # method -> phase -> seconds
    skipped: dict[str, str] = field(default_factory=dict)  # method -> reason
    settings: dict[str, Any] = field(default_factory=dict)
    prediction: dict[str, Any] = field(default_factory=dict)

    def values(self, method: str, minutes: float) -> list[float]:
        return [r.performance for r in self.rows if r.method == method and r.minutes == minutes]

    def mean(self, method: str, minutes: float) -> float:
        values = self.values(method, minutes)
        return float(np.mean(values)) if values else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rows": [asdict(r) for r in self.rows], "targets": targets(self)}


def save_png(fig: Any, path: Path) -> None:
    """Write a matplotlib figure atomically and close it."""
    atomic.write_figure(fig, path)


def _atomic_text(path: Path, text: str) -> None:
    atomic.write_text(path, text)


def standard_error(result: ExperimentResult, method: str, minutes: float) -> float | None:
    """Standard error of a point's mean over its evaluation episodes (every seed's pooled); None where the rows
    hold no per-episode values (runs from before they were recorded)."""
    rows = [r for r in result.rows if r.method == method and r.minutes == minutes]
    values = [v for r in rows for v in r.episodes]
    if not rows or any(not r.episodes for r in rows) or len(values) < 2:
        return None
    return float(np.std(values, ddof=1) / math.sqrt(len(values)))


def paired_standard_error(result: ExperimentResult, method: str, first: float, second: float) -> float | None:
    """Standard error of the change of a method's mean from point `first` to `second`, from the per-episode
    differences: every point of a seed is evaluated on the same episodes, so the spread between easy and hard
    episodes cancels. Falls back to the unpaired error where a seed's two points do not hold the same number of
    episodes; None where the rows hold no per-episode values."""
    pairs, differences = {}, []
    for r in result.rows:
        if r.method == method and r.minutes in (first, second):
            pairs.setdefault(r.seed, {})[r.minutes] = r.episodes
    for seed_points in pairs.values():
        a, b = seed_points.get(first), seed_points.get(second)
        if not a or not b or len(a) != len(b):
            ea, eb = standard_error(result, method, first), standard_error(result, method, second)
            return math.hypot(ea, eb) if ea is not None and eb is not None else None
        differences += [y - x for x, y in zip(a, b, strict=True)]
    if len(differences) < 2:
        return None
    return float(np.std(differences, ddof=1) / math.sqrt(len(differences)))


def targets(result: ExperimentResult) -> dict[str, Any]:
    """The issue's targets, checked on the means over seeds (None where a method was not run).

    "Improves from round to round" means no drop from one point to the next larger than the evaluation noise, taken
    as two standard errors of the difference of the two means, paired by episode (`paired_standard_error`);
    without per-episode values, any drop counts.
    """
    last = result.points[-1]
    simdist = [result.mean("simdist", p) for p in result.points]
    out: dict[str, Any] = {"last_minutes": last}
    errors = [
        paired_standard_error(result, "simdist", a, b)
        for a, b in zip(result.points[:-1], result.points[1:], strict=True)
    ]
    allowances = [2.0 * e if e is not None else 0.0 for e in errors]
    drops = [a - b for a, b in zip(simdist[:-1], simdist[1:], strict=True)]
    worst = int(np.argmax(drops)) if drops and all(map(math.isfinite, drops)) else None
    out["simdist_largest_drop"] = drops[worst] if worst is not None else None
    # the noise allowed at that same pair of points (each pair is judged against its own)
    out["simdist_drop_allowance"] = (
        allowances[worst] if worst is not None and all(e is not None for e in errors) else None
    )
    out["simdist_improves_each_round"] = (
        bool(all(d <= a for d, a in zip(drops, allowances, strict=True)) and simdist[-1] >= simdist[0])
        if len(simdist) > 1 and all(map(math.isfinite, simdist))
        else None
    )
    oracle = result.mean("oracle", last)
    # a ratio only means something for a positive oracle (progress in metres, success rate)
    out["simdist_over_oracle"] = simdist[-1] / oracle if math.isfinite(oracle) and oracle > 0 else None
    out["simdist_reaches_90pct_of_oracle"] = (
        out["simdist_over_oracle"] >= 0.9 if out["simdist_over_oracle"] is not None else None
    )
    for other in ("zero_shot", "full_finetune", "rl_finetune"):
        value = result.mean(other, last)
        out[f"simdist_beats_{other}"] = bool(simdist[-1] > value) if math.isfinite(value) else None
    return out


# -- plots ---------------------------------------------------------------------------------------------------------


def performance_plot(result: ExperimentResult, path: Path) -> None:
    """Performance against minutes of real data: one line per method (mean), seeds as a min-max band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method in result.methods:
        points = [p for p in result.points if result.values(method, p)]
        if not points:
            continue
        mean = np.array([result.mean(method, p) for p in points])
        lo = np.array([min(result.values(method, p)) for p in points])
        hi = np.array([max(result.values(method, p)) for p in points])
        style = {"ls": "--", "marker": None} if method == "zero_shot" else {"marker": "o"}
        (line,) = ax.plot(points, mean, label=LABELS.get(method, method), **style)
        if len(result.seeds) > 1:
            ax.fill_between(points, lo, hi, color=line.get_color(), alpha=0.15)
    ax.set_xlabel("minutes of real data")
    ax.set_ylabel(result.metric)
    ax.set_title(f"{result.task} on sim:{result.profile} ({len(result.seeds)} seed(s); band: min-max)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_png(fig, path)


def latent_by_minutes_plot(result: ExperimentResult, path: Path) -> None:
    """Held-out latent error (fixed real-profile rollouts) against minutes of data, world-model methods."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method in ("zero_shot", "simdist", "full_finetune", "oracle"):
        points = [
            p
            for p in result.points
            if any(r.latent_error is not None for r in result.rows if r.method == method and r.minutes == p)
        ]
        if not points:
            continue
        mean = [
            float(np.mean([r.latent_error for r in result.rows if r.method == method and r.minutes == p]))
            for p in points
        ]
        note = " (own encoder)" if method in ("full_finetune", "oracle") else ""
        ax.plot(points, mean, marker="o", label=LABELS[method] + note)
    ax.set_xlabel("minutes of real data")
    ax.set_ylabel("held-out latent MSE (mean over horizon)")
    ax.set_yscale("log")
    ax.set_title("prediction error on held-out real-profile rollouts")
    ax.grid(alpha=0.3)
    if ax.lines:  # a partial run may have no latent error yet
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_png(fig, path)


# -- markdown ------------------------------------------------------------------------------------------------------


def _fmt(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.{digits}f}"


def performance_table(result: ExperimentResult) -> list[str]:
    """One row per method and point: per-seed values, mean, std over seeds, the mean's standard error over the
    evaluation episodes, steps, held-out latent error."""
    seeds = " | ".join(f"seed {s}" for s in result.seeds)
    lines = [
        f"| method | minutes | real steps | {seeds} | mean | std (seeds) | s.e. (episodes) | held-out latent MSE |",
        "|---|---:|---:|" + "---:|" * len(result.seeds) + "---:|---:|---:|---:|",
    ]
    for method in result.methods:
        if method in result.skipped:
            continue
        for p in result.points:
            rows = {r.seed: r for r in result.rows if r.method == method and r.minutes == p}
            if not rows:
                continue
            values = [r.performance for r in rows.values()]
            steps = sorted({r.steps for r in rows.values()})
            latent = [r.latent_error for r in rows.values() if r.latent_error is not None]
            per_seed = " | ".join(_fmt(rows[s].performance) if s in rows else "-" for s in result.seeds)
            lines.append(
                f"| {method} | {p:g} | {'/'.join(str(s) for s in steps)} | {per_seed} | "
                f"{_fmt(float(np.mean(values)))} | {_fmt(float(np.std(values)))} | "
                f"{_fmt(standard_error(result, method, p))} | "
                f"{_fmt(float(np.mean(latent)), 4) if latent else '-'} |"
            )
    return lines


def headline_table(result: ExperimentResult) -> list[str]:
    """Means over seeds: methods as rows, points as columns (the compact table for docs/results.md)."""
    lines = [
        "| method | " + " | ".join(f"{p:g} min" for p in result.points) + " |",
        "|---|" + "---:|" * len(result.points),
    ]
    for method in result.methods:
        if method in result.skipped:
            continue
        lines.append(
            f"| {method} | " + " | ".join(_fmt(result.mean(method, p)) for p in result.points) + " |"
        )
    return lines


def cost_table(result: ExperimentResult) -> list[str]:
    phases = sorted({phase for costs in result.costs.values() for phase in costs})
    lines = [
        "| method | " + " | ".join(f"{p} (s)" for p in phases) + " | total (s) |",
        "|---|" + "---:|" * (len(phases) + 1),
    ]
    order = [m for m in result.methods if m in result.costs] + [
        m for m in result.costs if m not in result.methods
    ]
    for method in order:
        costs = result.costs[method]
        cells = " | ".join(f"{costs.get(p, 0.0):.1f}" for p in phases)
        lines.append(f"| {method} | {cells} | {sum(costs.values()):.1f} |")
    return lines


def markdown(result: ExperimentResult) -> str:
    s = result.settings
    t = targets(result)
    per_step = " / ".join(str(b) for b in result.budget)
    lines = [
        f"# Sim-to-real experiment: {result.task} on sim:{result.profile}",
        "",
        f"Preset `{result.preset}`, seeds {', '.join(str(x) for x in result.seeds)}, points "
        f"{', '.join(f'{p:g}' for p in result.points)} minutes of real data = {per_step} environment steps "
        f"at {s.get('control_hz')} Hz. Metric: {result.metric} ({s.get('protocol')}).",
        "",
        *([f"Command: `{s['command']}`", ""] if s.get("command") else []),
        "![performance](performance.png)",
        "",
        "## Performance by method and minutes of real data",
        "",
        *performance_table(result),
        "",
        "Means over seeds:",
        "",
        *headline_table(result),
        "",
    ]
    if result.skipped:
        lines += ["Not run:", ""] + [f"- {m}: {why}" for m, why in result.skipped.items()] + [""]
    lines += [
        "## Targets (means over seeds, at the last point)",
        "",
        "| target | value |",
        "|---|---|",
        f"| SimDist improves from round to round: no drop beyond the evaluation noise (largest drop "
        f"{_fmt(t['simdist_largest_drop'])}, allowed {_fmt(t['simdist_drop_allowance'])}: two standard errors of "
        f"the difference, paired by episode), and the last point not below the first | "
        f"{t['simdist_improves_each_round']} |",
        f"| SimDist / oracle at {t['last_minutes']:g} min | {_fmt(t['simdist_over_oracle'])} |",
        f"| SimDist reaches >= 90 % of the oracle | {t['simdist_reaches_90pct_of_oracle']} |",
        f"| SimDist beats zero-shot | {t['simdist_beats_zero_shot']} |",
        f"| SimDist beats full finetuning | {t['simdist_beats_full_finetune']} |",
        f"| SimDist beats RL finetuning | {t['simdist_beats_rl_finetune']} |",
        "",
        "## Real-data budget (environment steps on the real profile, per seed)",
        "",
        "| method | " + " | ".join(f"{p:g} min" for p in result.points) + " |",
        "|---|" + "---:|" * len(result.points),
    ]
    for method in result.methods:
        if method in result.skipped:
            continue
        cells = []
        for p in result.points:
            steps = sorted({r.steps for r in result.rows if r.method == method and r.minutes == p})
            cells.append("/".join(str(x) for x in steps) or "-")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "zero_shot uses no real data. simdist and oracle collect their own data with their current model through "
        "the planner; full_finetune trains on exactly simdist's bags; rl_finetune's PPO steps the real profile "
        f"in {s.get('rl_geometry', '-')} (environments x steps per iteration).",
        "",
        "## Wall-clock cost",
        "",
        *cost_table(result),
        "",
        "full_finetune has no collection cost of its own (it reuses simdist's bags); the oracle's pretraining "
        "cost is its corpus generation and pretraining (zero when `--oracle-model` was given).",
        "",
    ]
    lines += _prediction_section(result.prediction)
    lines += [
        "## Settings",
        "",
        "```json",
        json.dumps(s, indent=1, sort_keys=True, default=str),
        "```",
        "",
    ]
    return "\n".join(lines)


def _prediction_section(prediction: dict[str, Any]) -> list[str]:
    if not prediction:
        return []
    lines = [
        "## Prediction view",
        "",
        f"Held-out data: {prediction.get('heldout', '')}",
        "",
        "![latent error by horizon](latent_error_by_horizon.png)",
        "![latent error by minutes](latent_error_by_minutes.png)",
        "",
        "| model | step 1 | middle step | last step | mean |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, values in prediction.get("latent_by_horizon", {}).items():
        lines.append(
            f"| {name} | {_fmt(values[0], 4)} | {_fmt(values[len(values) // 2], 4)} | {_fmt(values[-1], 4)} | "
            f"{_fmt(float(np.mean(values)), 4)} |"
        )
    lines += [
        "",
        "full finetuning is measured against its own, changed encoder: its numbers are not comparable with the others "
        "(a collapsed encoder makes this error small while the reward and value heads lose their inputs).",
        "",
    ]
    slip = prediction.get("slip")
    if slip:
        r2 = ", ".join(_fmt(x) for x in slip["probe_r2"])
        lines += [
            "### Base velocity during a slip (Go2)",
            "",
            prediction.get("probe", ""),
            "",
            f"Probe R^2 on held-out simulation episodes (v_x, v_y, v_z): {r2}. Largest slip: held-out episode "
            f"{slip['episode']}, step {slip['slip_step']}, {slip['slip_deficit_mps']:.2f} m/s below the command.",
            "",
            f"![slip]({slip['png']})",
            "",
            f"RMSE over all held-out steps (m/s) of probe(z_hat(t given t-{slip['k']})) against the actual v_x, and "
            "against probe(E(o_t)), the probe applied to the encoder's latent of the actual observation: the first "
            "includes the probe's own error on this profile, the second is the dynamics' prediction error alone, "
            "as the probe sees it.",
            "",
            "| model | vs actual v_x | vs probe(E(o_t)) |",
            "|---|---:|---:|",
            *[
                f"| {name} | {_fmt(v)} | {_fmt(slip.get('rmse_vs_probe_of_encoder_mps', {}).get(name))} |"
                for name, v in slip["rmse_mps"].items()
            ],
            f"| probe(E(o_t)) itself | {_fmt(slip.get('probe_rmse_mps'))} | 0 |",
            "",
        ]
    return lines


def write_outputs(result: ExperimentResult, out: Path, *, partial: bool = False) -> dict[str, Path]:
    """results.json, report.md, performance.png and latent_error_by_minutes.png in `out` (each replaced whole);
    `partial`: the run is still going, and the report says so at the top."""
    paths = {
        "json": out / "results.json",
        "report": out / "report.md",
        "performance": out / "performance.png",
        "latent_by_minutes": out / "latent_error_by_minutes.png",
    }
    _atomic_text(paths["json"], json.dumps({**result.to_dict(), "partial": partial}, indent=1, default=str))
    performance_plot(result, paths["performance"])
    latent_by_minutes_plot(result, paths["latent_by_minutes"])
    report = markdown(result)
    if partial:
        report = (
            f"> PARTIAL: the run is still going ({len(result.rows)} evaluations so far); the prediction view "
            "comes at the end.\n\n" + report
        )
    _atomic_text(paths["report"], report)
    return paths
