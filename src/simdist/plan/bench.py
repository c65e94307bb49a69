"""`simdist bench planner`: tick latency (context + plan) of the planner through the world model, as a ratio to the
control period, with the authors' `gpu` settings measured in the same run as the baseline.

Without `--model` the world model is the `default` preset (or `--model-preset NAME`, e.g. `gpu` for the authors' size)
with random weights: latency only, no quality claim.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from simdist import robots
from simdist.config import parse_overrides, read_yaml
from simdist.errors import ConfigError
from simdist.plan.config import PlannerConfig, load_planner_config, task_action_limits
from simdist.plan.mppi import Planner
from simdist.runtime.realtime import Scheduling, parse_cpus, scheduled
from simdist.sim.config import load_task, task_files

BASELINE = "gpu"
BASELINE_TICKS = 10
AGAINST = "against"  # the name of `--against`'s variant in the table and the JSON
INTERLEAVED_BLOCKS = 4
MODEL_PRESET = "default"
_DEFAULT_THREADS = torch.get_num_threads()
PROFILED_PARTS = ("encoder", "history_tokens", "dynamics", "reward", "value", "policy")


def task_settings(task: str) -> dict[str, Any]:
    """The task YAML (robot, control_hz, action_clip, ...), or the robot's nominal figures for a bare robot name."""
    files = task_files()
    data = read_yaml(files[task]) if task in files else {}
    name = data.get("robot", task.split("_")[0])
    if name not in robots.names():
        raise ConfigError(f"unknown task '{task}' (valid: {', '.join([*files, *robots.names()])})")
    robot = robots.get(name)
    dims = {"obs_dim": robot.proprio_dim, "act_dim": robot.action_dim, "cmd_dim": robot.command_dim}
    settings = {
        "task": task,
        "robot": name,
        "dims": dims,
        "control_hz": robot.control_hz,
        "action_clip": robot.action_clip,
    }
    settings.update(
        {k: v for k, v in data.items() if k in ("control_hz", "action_clip", "action_max_delta", "command")}
    )
    return settings


def _model(
    settings: dict[str, Any],
    model_dir: str | None,
    preset: str | None = None,
    changes: dict[str, Any] | None = None,
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The trained model of `model_dir`, or a model of `preset` (default: `MODEL_PRESET`, with `changes` to its
    keys) with random weights (seed 0): the size-matched row of a comparison with another implementation needs no
    training."""
    if model_dir and preset:
        raise ConfigError("--model and --model-preset exclude each other (a checkpoint has its own size)")
    if model_dir:
        from simdist.model import load_checkpoint, read_description

        model = load_checkpoint(model_dir)
        info = {
            "source": str(Path(model_dir)),
            "trained": True,
            "task": read_description(model_dir).get("task"),
        }
    else:
        from simdist.model import WorldModel, load_model_config

        name = preset or MODEL_PRESET
        torch.manual_seed(0)
        model = WorldModel.build(settings["dims"], load_model_config(name, changes))
        info = {"source": f"config/model/{name}.yaml", "trained": False}
        if changes:
            info["changes"] = {key: changes[key] for key in sorted(changes)}
    model.eval()
    info["parameters"] = sum(p.numel() for p in model.parameters())
    return model, info


def _inputs(model: Any, count: int = 16, seed: int = 0) -> list[tuple[torch.Tensor, ...]]:
    """Varied histories (some with padded starts) and commands, so no tick replays a cached answer."""
    gen = torch.Generator().manual_seed(seed)
    h, o, a, c = model.history, model.obs_dim, model.act_dim, model.cmd_dim
    out = []
    for i in range(count):
        mask = torch.ones(1, h, dtype=torch.bool)
        mask[:, : (i * 3) % h] = False
        out.append(
            (
                torch.randn(1, h, o, generator=gen),
                0.5 * torch.randn(1, h, a, generator=gen),
                mask,
                torch.randn(1, o, generator=gen),
                torch.rand(c, generator=gen),
            )
        )
    return out


def _machine_ticks() -> tuple[int, int]:
    """Busy CPU time of the whole machine (every process, not just this one) and the hypervisor's steal, in clock
    ticks: /proc/stat's user nice system idle iowait irq softirq steal ..."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    return sum(fields) - fields[3] - fields[4], fields[7]  # busy: minus idle and iowait (steal included)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _reference_work(a: torch.Tensor, repeats: int) -> float:
    """Seconds for a fixed piece of work (`repeats` 256 x 256 matrix products), the machine's own jitter probe."""
    start = time.perf_counter()
    for _ in range(repeats):
        torch.mm(a, a)
    return time.perf_counter() - start


def measure(
    model: Any,
    config: PlannerConfig,
    settings: dict[str, Any],
    *,
    ticks: int,
    warmup: int,
    scheduling: Scheduling | None = None,
    paced: bool = True,
) -> dict[str, Any]:
    """Latency of `ticks` full ticks (context + act) after `warmup` ones, in ms, and the machine's other load.

    `paced`: each tick starts on the control period's grid, as in the deploy loop, idle in between (on this VM a
    tick that follows an idle gap is markedly slower than one run back to back on a hot core: the robot's number).
    A fixed reference work about as long as a warm-up tick is timed as well, `ticks` times under the same pacing
    (unpaced: after every tick): its p99 / p50 is the jitter of the machine itself (on a shared VM the cores slow
    down in bursts), to read the planner's tail against. `scheduling`: SCHED_FIFO priority and CPUs of this
    thread while it measures.
    """
    with scheduled(scheduling or Scheduling(), "bench") as problems:
        result = _measure(model, config, settings, ticks=ticks, warmup=warmup, paced=paced)
    result["scheduling"] = _policy_label(scheduling, problems)
    return result


def measure_interleaved(
    variants: dict[str, tuple[Any, PlannerConfig]],
    settings: dict[str, Any],
    *,
    ticks: int,
    blocks: int = INTERLEAVED_BLOCKS,
    scheduling: Scheduling | None = None,
    paced: bool = True,
) -> dict[str, dict[str, Any]]:
    """`measure` for two or more (model, config) variants in alternating blocks (A B A B ...), each variant's
    `ticks` split over `blocks` blocks of its own (each after a short warm-up with a fresh planner), so that a change
    of the machine's speed during the run falls on every variant alike; the figures are over all of its blocks."""
    per_block = max(1, ticks // blocks)
    raw: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    label = "normal"
    for block in range(blocks):
        for name, (model, config) in variants.items():
            result = measure(
                model,
                config,
                settings,
                ticks=per_block,
                warmup=20 if block == 0 else 5,
                scheduling=scheduling,
                paced=paced,
            )
            raw[name].append(result["raw"])
            label = result["scheduling"]
    out = {}
    for name, (_, config) in variants.items():
        out[name] = _summarise(_combine(raw[name]), config, settings, paced=paced)
        out[name]["scheduling"] = label
        out[name]["blocks"] = blocks
    return out


def _policy_label(scheduling: Scheduling | None, problems: list[str]) -> str:
    if scheduling is None or not scheduling.requested:
        return "normal"
    if problems:
        return "normal (" + "; ".join(problems) + ")"
    return scheduling.describe()


class _Pacer:
    """Starts work on a fixed period's grid, as the deploy loop starts ticks; after an overrun of whole periods it
    re-anchors on the present instead of bursting to catch up. `period_s=None`: no waiting at all."""

    def __init__(self, period_s: float | None) -> None:
        self.period = period_s
        self.next: float | None = None

    def wait(self) -> None:
        if self.period is None:
            return
        now = time.perf_counter()
        if self.next is None or now - self.next >= self.period:
            self.next = now
        elif self.next > now:
            time.sleep(self.next - now)
        self.next += self.period


def _measure(
    model: Any, config: PlannerConfig, settings: dict[str, Any], *, ticks: int, warmup: int, paced: bool
) -> dict[str, Any]:
    torch.set_num_threads(config.num_threads)
    planner = Planner(model, config, limits=task_action_limits(settings), seed=0)
    inputs = _inputs(model)
    reference = torch.rand(256, 256, generator=torch.Generator().manual_seed(0))
    total, context, cpu, ref = [], [], [], []
    repeats = 1
    fallbacks, iterations = 0, []
    pacer = _Pacer(1.0 / settings["control_hz"] if paced else None)
    own0, (busy0, steal0), wall0 = sum(os.times()[:2]), _machine_ticks(), time.perf_counter()
    for i in range(warmup + ticks):
        if i == warmup:
            unit = min(_reference_work(reference, 1) for _ in range(5))
            repeats = max(1, round(statistics.median(total or [unit * 1e3]) / (1e3 * unit)))
            total.clear()
            own0, (busy0, steal0), wall0 = sum(os.times()[:2]), _machine_ticks(), time.perf_counter()
        obs_hist, act_hist, mask, obs, command = inputs[i % len(inputs)]
        pacer.wait()
        cpu_start, start = time.process_time(), time.perf_counter()
        with torch.inference_mode():
            ctx = model.context(obs_hist, act_hist, mask, obs)
        mid = time.perf_counter()
        plan = planner.act(ctx, command)
        end, cpu_end = time.perf_counter(), time.process_time()
        total.append(1e3 * (end - start))
        if i >= warmup:
            cpu.append(1e3 * (cpu_end - cpu_start))
            context.append(1e3 * (mid - start))
            fallbacks += plan.stats.fallback is not None
            iterations.append(plan.stats.iterations)
            if not paced:
                ref.append(_reference_work(reference, repeats))
    for _ in range(ticks if paced else 0):  # the jitter probe under the same pacing, right after the ticks
        pacer.wait()
        ref.append(_reference_work(reference, repeats))
    wall = time.perf_counter() - wall0
    hz = os.sysconf("SC_CLK_TCK")
    busy, steal = _machine_ticks()
    obs_hist, act_hist, mask, obs, command = inputs[0]
    with FlopCounterMode(display=False) as flops:  # one more tick, counted: what the arithmetic alone asks
        with torch.inference_mode():
            ctx = model.context(obs_hist, act_hist, mask, obs)
        planner.act(ctx, command)
    raw = {
        "mflop": [flops.get_total_flops() / 1e6],
        "total": total,
        "context": context,
        "cpu": cpu,
        "ref": ref,
        "iterations": iterations,
        "fallbacks": fallbacks,
        "other_s": (busy - busy0) / hz - (sum(os.times()[:2]) - own0),
        "steal_s": (steal - steal0) / hz,
        "wall_s": wall,
    }
    return _summarise(raw, config, settings, paced=paced)


def _combine(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """The raw measurements of several blocks of one config as one."""
    out: dict[str, Any] = {}
    for key, value in blocks[0].items():
        parts = [block[key] for block in blocks]
        out[key] = [x for part in parts for x in part] if isinstance(value, list) else sum(parts)
    return out


def _summarise(
    raw: dict[str, Any], config: PlannerConfig, settings: dict[str, Any], *, paced: bool
) -> dict[str, Any]:
    total, context, cpu, ref, iterations = (raw[k] for k in ("total", "context", "cpu", "ref", "iterations"))
    ticks, wall = len(total), raw["wall_s"]
    period = 1e3 / settings["control_hz"]
    evaluated = config.num_samples * config.iterations + config.num_policy_samples
    return {
        "raw": raw,
        "ticks": ticks,
        "p50_ms": statistics.median(total),
        "p90_ms": _percentile(total, 0.90),
        "p99_ms": _percentile(total, 0.99),
        "max_ms": max(total),
        "context_p50_ms": statistics.median(context),
        # CPU time of this process per tick: with one thread, what the tick takes on an otherwise idle machine
        "cpu_p50_ms": statistics.median(cpu),
        "cpu_p99_ms": _percentile(cpu, 0.99),
        "p99_to_period": _percentile(total, 0.99) / period,
        "p99_to_p50": _percentile(total, 0.99) / statistics.median(total),
        "machine_jitter_p99_to_p50": _percentile(ref, 0.99) / statistics.median(ref),
        "missed_deadlines": sum(t > period for t in total) / ticks,
        "samples_per_tick": evaluated,
        # floating-point operations of one tick (torch.utils.flop_counter: matrix products and attention), and the
        # rate they ran at in this process's CPU time: a tick far below the core's peak is overhead, not arithmetic
        "mflop_per_tick": statistics.median(raw["mflop"]),
        "gflops_at_cpu_p50": statistics.median(raw["mflop"]) / statistics.median(cpu),
        "iterations": config.iterations,
        "iterations_mean": statistics.fmean(iterations),  # fewer than configured where the budget cut a tick
        "budget_ms": config.budget_ms,
        # planning ahead, a plan has the whole period (it is made between two ticks); otherwise it must end before
        # the tick's deadline, 80 % of the period after the tick began, with the robot read and ingested first
        "plan_ahead": config.plan_ahead,
        "threads": config.num_threads,
        "precision": config.precision,
        "fallbacks": raw["fallbacks"],
        # CPU seconds per second used by other processes meanwhile (2.0 = both cores taken from us)
        "other_load": max(0.0, raw["other_s"] / wall),
        "paced": paced,
        # of which the hypervisor kept the VM's cores for other guests (no priority inside the VM helps)
        "steal": raw["steal_s"] / wall,
    }


def profile(model: Any, config: PlannerConfig, settings: dict[str, Any], *, ticks: int) -> dict[str, float]:
    """Share of tick time per model part (forward hooks) and for the planner's own work (the rest)."""
    torch.set_num_threads(config.num_threads)
    spent: dict[str, float] = defaultdict(float)
    starts: dict[str, float] = {}
    handles = []
    for name in PROFILED_PARTS:
        part = getattr(model, name, None)
        if isinstance(part, torch.nn.Module):
            handles.append(part.register_forward_pre_hook(_pre(name, starts)))
            handles.append(part.register_forward_hook(_post(name, starts, spent)))
    planner = Planner(model, config, limits=task_action_limits(settings), seed=0)
    inputs = _inputs(model)
    whole = 0.0
    try:
        for i in range(ticks + 3):
            obs_hist, act_hist, mask, obs, command = inputs[i % len(inputs)]
            if i == 3:
                spent.clear()
            start = time.perf_counter()
            with torch.inference_mode():
                ctx = model.context(obs_hist, act_hist, mask, obs)
            planner.act(ctx, command)
            if i >= 3:
                whole += time.perf_counter() - start
    finally:
        for handle in handles:
            handle.remove()
    shares = {name: spent[name] / whole for name in PROFILED_PARTS if name in spent}
    shares["rest (planner, normaliser, glue)"] = 1.0 - sum(shares.values())
    return shares


def _pre(name: str, starts: dict[str, float]) -> Callable[..., None]:
    def hook(*_: Any) -> None:
        starts[name] = time.perf_counter()

    return hook


def _post(name: str, starts: dict[str, float], spent: dict[str, float]) -> Callable[..., None]:
    def hook(*_: Any) -> None:
        spent[name] += time.perf_counter() - starts[name]

    return hook


def quality(
    task: str,
    model_dir: str,
    config_overrides: dict[str, dict[str, Any]],
    *,
    episodes: int,
    seed: int = 10_000,
) -> dict[str, Any]:
    """Closed-loop performance per planner config on the `sim` profile, the same episodes for each (lockstep:
    the simulator waits for every plan, so a slow config is judged on its plans, not on its lateness).

    Go2: forward progress (m) over the task's speeds x `episodes`; peg: success over `episodes`, with the final
    depth and lateral distance from the hole as a finer view.
    """
    from simdist.runtime.adapt import evaluate_on_robot
    from simdist.runtime.store import ModelStore

    out: dict[str, Any] = {}
    for name, overrides in config_overrides.items():
        start = time.perf_counter()
        metric, value, ended = evaluate_on_robot(
            task,
            "sim",
            ModelStore(model_dir),
            planner=name,
            planner_overrides=overrides,
            episodes=episodes,
            seed=seed,
            adapted_planner=False,  # the config as given, whatever the model's version
        )
        entry = {
            "metric": metric,
            "value": value,
            "episodes": len(ended),
            "seconds": time.perf_counter() - start,
        }
        for key in ("depth_m", "dist_xy_m", "fell"):
            values = [float(e["metrics"][key]) for e in ended if key in e["metrics"]]
            if values:
                entry[f"mean_{key}"] = statistics.fmean(values)
        out[name] = entry
    return out


def bench(args: argparse.Namespace) -> dict[str, Any]:
    episodes = getattr(args, "quality_episodes", None)
    if episodes and not getattr(args, "model", None):  # before minutes of latency measurement
        raise ConfigError("--quality-episodes needs a trained model (--model DIR)")
    settings = task_settings(args.task)
    name = args.config or "cpu"
    overrides = parse_overrides(getattr(args, "overrides", []) or [])
    ticks = getattr(args, "ticks", None) or 500
    scheduling = Scheduling(
        priority=getattr(args, "rt_priority", None), cpus=parse_cpus(getattr(args, "cpus", None))
    )
    model, model_info = _model(settings, getattr(args, "model", None), getattr(args, "model_preset", None))
    configs = {name: load_planner_config(name, settings["robot"], overrides, task=settings["task"])}
    if name != BASELINE:
        # the authors' settings at one thread (gpu.yaml's), like ours: torch's default threads on a shared 2-core
        # machine made its ticks 5-7x slower and the baseline alone minutes long
        configs[BASELINE] = load_planner_config(BASELINE, settings["robot"])
    result: dict[str, Any] = {
        "task": settings["task"],
        "robot": settings["robot"],
        "control_hz": settings["control_hz"],
        "period_ms": 1e3 / settings["control_hz"],
        "model": model_info,
        "quality": "not measured (closed-loop episodes: --model DIR --quality-episodes N)",
        "cpu_count": os.cpu_count(),
        "configs": {},
    }
    against = getattr(args, "against", None) or []
    if against:  # the variant and its reference in alternating blocks; the baseline after them, as usual
        changes = parse_overrides(against)
        model_changes = {k.removeprefix("model."): v for k, v in changes.items() if k.startswith("model.")}
        planner_changes = {k: v for k, v in changes.items() if not k.startswith("model.")}
        variant_model = model
        if model_changes:
            if getattr(args, "model", None):
                raise ConfigError(
                    "--against model.KEY=VALUE changes a random-weights preset; not with --model DIR"
                )
            variant_model, result["model_against"] = _model(
                settings, None, getattr(args, "model_preset", None), model_changes
            )
        variant = load_planner_config(
            name, settings["robot"], {**overrides, **planner_changes}, task=settings["task"]
        )
        pair = measure_interleaved(
            {name: (model, configs[name]), AGAINST: (variant_model, variant)},
            settings,
            ticks=ticks,
            scheduling=scheduling,
            paced=not getattr(args, "unpaced", False),
        )
        result["configs"].update(pair)
        result["against"] = {
            "settings": list(against),
            **{f"{k}_ratio": pair[AGAINST][k] / pair[name][k] for k in ("p50_ms", "p99_ms", "cpu_p50_ms")},
        }
    for config_name, config in configs.items():
        if config_name in result["configs"]:
            continue
        baseline_only = config_name == BASELINE and name != BASELINE
        # the authors' settings take ~1 s a tick here: a short run is enough for a ratio
        n = min(ticks, BASELINE_TICKS) if baseline_only else ticks
        result["configs"][config_name] = measure(
            model,
            config,
            settings,
            ticks=n,
            warmup=2 if baseline_only else 20,
            scheduling=None if baseline_only else scheduling,
            paced=not getattr(args, "unpaced", False),
        )
    if name != BASELINE:
        result["speedup_p50_vs_gpu_config"] = (
            result["configs"][BASELINE]["p50_ms"] / result["configs"][name]["p50_ms"]
        )
    if episodes:
        asked = (
            configs if getattr(args, "quality_baseline", False) or name == BASELINE else {name: configs[name]}
        )
        per_config = {n: (overrides if n == name else {}) for n in asked}
        result["quality"] = quality(args.task, args.model, per_config, episodes=episodes)
        if BASELINE not in asked:
            cfg = load_task(args.task)
            ticks_per_episode = cfg.episode_steps
            per_tick = result["configs"][BASELINE]["p50_ms"] / 1e3
            runs = robots.get(cfg.robot).evaluation(cfg, episodes).episodes
            result["quality"][BASELINE] = {
                "value": None,
                "note": f"not measured (about {runs * ticks_per_episode * per_tick / 60:.0f} min here: "
                "--quality-baseline)",
            }
        if name != BASELINE and result["quality"][BASELINE]["value"]:
            result["quality_ratio_vs_gpu_config"] = (
                result["quality"][name]["value"] / result["quality"][BASELINE]["value"]
            )
    if getattr(args, "breakdown", False):
        result["profile"] = {name: profile(model, configs[name], settings, ticks=min(ticks, 100))}
    for measured in result["configs"].values():
        measured.pop("raw", None)
    torch.set_num_threads(_DEFAULT_THREADS)
    return result


def summary(result: dict[str, Any]) -> str:
    model = result["model"]
    weights = "trained" if model["trained"] else "RANDOM weights (no trained model yet): latency only"
    lines = [
        f"planner tick latency, {result['task']} ({result['robot']}), {result['control_hz']} Hz = "
        f"{result['period_ms']:.0f} ms period; world model {model['source']}, {model['parameters']} parameters, {weights}",
        f"{'config':8} {'ticks':>5} {'samples':>7} {'iters':>9} {'thr':>3} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'max ms':>8} {'p99/period':>10} {'missed':>7} {'ctx ms':>7} {'cpu p50/p99 ms':>15} {'other load':>10} "
        f"{'steal':>5}",
    ]
    for name, r in result["configs"].items():
        lines.append(
            f"{name:8} {r['ticks']:5d} {r['samples_per_tick']:7d} {r['iterations_mean']:4.1f}/{r['iterations']:<4d} {r['threads']:3d} "
            f"{r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {r['max_ms']:8.2f} {r['p99_to_period']:10.2f} "
            f"{100 * r['missed_deadlines']:6.1f}% {r['context_p50_ms']:7.2f} "
            f"{r['cpu_p50_ms']:7.2f}/{r['cpu_p99_ms']:7.2f} {r['other_load']:10.2f} {r['steal']:5.2f}"
        )
    for name, r in result["configs"].items():
        if r.get("plan_ahead"):
            lines.append(
                f"{name} plans one tick ahead: its plan has the whole {result['period_ms']:.0f} ms period, and the "
                "tick sends a command planned in the period before without waiting (state to command ~1 ms)"
            )
    first = next(iter(result["configs"].values()))
    lines.append(
        f"ticks: one per {result['period_ms']:.0f} ms control period, idle in between, as in the deploy loop"
        if first.get("paced", True)
        else "ticks: back to back on a hot core (--unpaced; the deploy loop idles between ticks and is slower)"
    )
    for name, r in result["configs"].items():
        lines.append(
            f"{name}: p99/p50 {r['p99_to_p50']:.2f}; a fixed reference work timed as often, the same way: "
            f"p99/p50 {r['machine_jitter_p99_to_p50']:.2f} (the machine's own jitter); scheduling: {r['scheduling']}"
        )
    lines.append(
        "arithmetic per tick (torch.utils.flop_counter): "
        + ", ".join(
            f"{name} {r['mflop_per_tick']:.1f} MFLOP ({r['gflops_at_cpu_p50']:.1f} GFLOP/s at its cpu p50)"
            for name, r in result["configs"].items()
        )
    )
    if "against" in result:
        a = result["against"]
        first = next(iter(result["configs"]))
        lines.append(
            f"{AGAINST} = {first} with {', '.join(a['settings'])}; the two in alternating blocks of "
            f"{result['configs'][AGAINST]['ticks'] // result['configs'][AGAINST]['blocks']} ticks: "
            f"{AGAINST} / {first}: p50 {a['p50_ms_ratio']:.2f}x, p99 {a['p99_ms_ratio']:.2f}x, "
            f"cpu p50 {a['cpu_p50_ms_ratio']:.2f}x"
        )
        if "model_against" in result:
            lines.append(
                f"{AGAINST}'s world model: {result['model_against']['parameters']} parameters, random weights"
            )
    if "speedup_p50_vs_gpu_config" in result:
        lines.append(
            f"speed-up of p50 over the gpu config in this run: {result['speedup_p50_vs_gpu_config']:.1f}x"
        )
    for name, shares in result.get("profile", {}).items():
        parts = ", ".join(f"{part} {100 * share:.0f}%" for part, share in shares.items())
        lines.append(f"profile ({name}): {parts}")
    quality = result["quality"]
    if isinstance(quality, str):
        lines.append(f"quality: {quality}")
    else:
        for name, q in quality.items():
            if q.get("value") is None:
                lines.append(f"quality ({name}): {q['note']}")
                continue
            extra = ", ".join(f"{k[5:]} {v:.3f}" for k, v in q.items() if k.startswith("mean_"))
            lines.append(
                f"quality ({name}, sim profile, {q['episodes']} episodes, {q['seconds']:.0f} s): "
                f"{q['metric']} {q['value']:.3f}" + (f" ({extra})" if extra else "")
            )
        if "quality_ratio_vs_gpu_config" in result:
            lines.append(
                f"quality of {next(iter(quality))} / gpu: {result['quality_ratio_vs_gpu_config']:.2f}"
            )
    lines.append(
        "other load: CPU seconds per second taken by other processes meanwhile (high = wall times inflated), "
        "steal: the part of it the hypervisor gave to other virtual machines; "
        "cpu p50/p99: this process's CPU time per tick (with one thread, about the latency on an idle machine)"
    )
    return "\n".join(lines)
