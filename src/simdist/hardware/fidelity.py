"""`simdist bench fidelity`: does a plan sent over the robot's own protocol do to the emulated robot what it does in
the in-process simulation? The same task, profile, model, command and simulator seed, one real-time run each:

- in process: `simdist deploy --robot sim:PROFILE --realtime --safety` (through the robot's own actuator: the Go2's
  safety filter, the UR5e's Cartesian target with its press guard);
- over the robot's link: `simdist emulate` (the MuJoCo Go2 behind rt/lowstate and rt/lowcmd on DDS, or the UR5e
  behind RTDE) driven by `simdist deploy --robot go2:lo:D` or `ur5e:HOST`, each its own process.

Both runs last one task episode (8 s) from the same start; `--seeds N` repeats the pair for seeds 0..N-1, judges each
pair and pools each side over the seeds (one real-time run varies from the next at the same seed). The figures and
their tolerances, written down before they were first measured (docs/results.md):
- Go2: the forward progress over the run, falls included (a fallen robot's episode ends where it fell and the next
  one starts from the beginning), with no finish marker (`terrain.finish_m=0` unless `--set` says otherwise: a
  capped progress would hide a difference). Over DDS at least 75 % of the in-process progress, at most one more fall.
- UR5e: whether the peg is inserted (the task's success depth reached), and the time from the first command to
  that, with the hole at the task's nominal pose (where the emulator keeps it). Over RTDE inserted exactly when in
  process, and within 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from simdist.atomic import write_text
from simdist.hardware.faults import _env, _error_line, _last_json, _run_module, _simdist, _stop_emulator

MIN_SHARE = 0.75  # Go2: over DDS at least this share of the in-process progress
MAX_EXTRA_FALLS = 1
MAX_INSERT_DIFF_S = 2.0  # UR5e: the times to insertion differ by at most this
DEFAULT_SETS = {
    "go2": ["terrain.finish_m=0"],
    "ur5e": ["peg.ranges.narrow=0.0", "peg.hole_yaw_range=0.0"],  # the hole where the emulator keeps it
}


def _inserted_after(summary: dict[str, Any]) -> float | None:
    """Seconds from the first command to the peg's first insertion (None: not inserted): the in-process run watched
    its first episode tick by tick; the emulator keeps its own clock."""
    if "inserted_at_s" in summary:
        at, first = summary.get("inserted_at_s"), summary.get("first_servo_at_s")
        return None if at is None or first is None else float(at - first)
    return summary.get("inserted_after_s")


def _progress(summary: dict[str, Any]) -> tuple[float, int]:
    """(forward progress over every episode of a run, falls) from a robot's summary: its ended episodes and the one
    it was in when the run ended. The emulator's run ends at its controller's first damping command (the deploy's
    stop: a damped Go2 folds, which is not a fall of the run), so what came after it is left out."""
    ended = summary.get("episodes", [])
    current = summary.get("episode_so_far") or {}
    let_go = summary.get("at_first_damping")
    if let_go is not None:
        ended, current = ended[: let_go["episodes_ended"]], let_go
    progress = sum(e["metrics"]["progress_m"] for e in ended) + current.get("progress_m", 0.0)
    falls = sum(1 for e in ended if e.get("terminated"))
    return float(progress), falls


def _ended_episodes(seen: list[dict[str, Any]], robot: Any) -> list[dict[str, Any]]:
    """The in-process run's ended episodes: those the deploy loop saw, then any that ended after its last tick (the
    physics steps just ahead of the ticks, so a run as long as an episode can end it between the last tick and the
    stop; it is then still queued at the robot)."""
    ended = list(seen)
    while (late := robot.take_episode_end()) is not None:
        ended.append(late)
    return [
        {"metrics": e["metrics"], "seconds": e.get("seconds"), "terminated": e.get("terminated", False)}
        for e in ended
    ]


def child(argv: list[str]) -> int:
    """`python -m simdist.hardware.fidelity TASK PROFILE MODEL SECONDS SEED SETS_JSON`: the in-process real-time run,
    its robot's summary (episodes and the episode it ended in) as one JSON line."""
    task, profile, model, seconds, seed, sets = argv
    from simdist import robots
    from simdist.config import parse_overrides
    from simdist.hardware.sim_robot import SimRobot
    from simdist.runtime.deploy import run_deploy
    from simdist.sim.config import load_task

    cfg = load_task(task, parse_overrides(json.loads(sets)))
    command = robots.get(cfg.robot).default_command(cfg).tolist()
    robot = SimRobot(cfg, profile, seed=int(seed), commands=[command], realtime=True)
    # the peg: seconds from the first command to the first tick at which it is inserted (its success)
    inserted: list[float] = []

    def watch(k: int, loop: Any) -> None:
        if inserted or robot.episodes_ended:
            return
        so_far = robot.episode_so_far()
        if so_far.get("success"):
            inserted.append(so_far["seconds"])

    result = run_deploy(
        cfg,
        f"sim:{profile}",
        model,
        seconds=float(seconds),
        realtime=True,
        safety=True,  # the robot's own actuator: the Go2's safety filter, the UR5e's press guard
        robot=robot,
        seed=int(seed),
        on_tick=watch if cfg.robot == "ur5e" else None,
    )
    episodes = _ended_episodes(result.stats.episodes, robot)
    summary = {
        "episodes": episodes,
        "episode_so_far": robot.episode_so_far(),
        "inserted_after_s": inserted[0] if inserted else None,
        "stats": result.stats.summary(),
    }
    print(json.dumps(summary), flush=True)
    return 0


def _over_link(
    task: str, robot: str, profile: str, model: str, seconds: float, seed: int, address: str, sets: list[str]
) -> dict[str, Any]:
    overrides = [arg for item in sets for arg in ("--set", item)]
    emulate = _simdist("emulate", "--task", task, "--profile", profile, *overrides)
    emulate += ["--address", address, "--seed", str(seed), "--seconds", str(seconds + 60.0)]
    emulator = subprocess.Popen(
        emulate, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    deploy = _simdist("deploy", "--task", task, "--robot", f"{robot}:{address}", *overrides)
    deploy += ["--model", model, "--minutes", str(seconds / 60.0), "--no-bag", "--seed", str(seed)]
    try:
        assert emulator.stdout is not None
        emulator.stdout.readline()  # "emulating a <robot> ..."
        done = subprocess.run(deploy, capture_output=True, text=True, env=_env(), timeout=seconds + 120)
    finally:
        stdout, stderr = _stop_emulator(emulator)
    summary = _last_json(stdout)
    if summary is None:
        raise RuntimeError(f"the emulator gave no summary: {(stderr.strip().splitlines() or ['?'])[-1]}")
    if done.returncode != 0:
        raise RuntimeError(_error_line(done.stderr) or f"deploy over the link exited {done.returncode}")
    # the deploy's own tick line (fresh / late / held, plan times): how the controller kept up over the link
    summary["deploy_ticks"] = next((ln for ln in done.stdout.splitlines() if ln.startswith("ticks ")), None)
    return summary


def _in_process(
    task: str, profile: str, model: str, seconds: float, seed: int, sets: list[str]
) -> dict[str, Any]:
    args = [task, profile, model, str(seconds), str(seed), json.dumps(sets)]
    done = _run_module("simdist.hardware.fidelity", args, timeout=seconds + 120)
    summary = _last_json(done.stdout)
    if summary is None:
        raise RuntimeError(
            _error_line(done.stderr) or (done.stderr.strip().splitlines() or ["no summary"])[-1]
        )
    return summary


def measure(
    task: str,
    profile: str,
    model: str,
    *,
    seconds: float,
    seed: int = 0,
    address: str | None = None,
    sets: list[str] | None = None,
) -> dict[str, Any]:
    """One run each way (over the link first), their figures, and whether the tolerance holds. `address`: the
    emulator's (default a DDS domain or a loopback address of this process's own); `sets`: task overrides
    (KEY=VALUE) for both runs, default `DEFAULT_SETS`."""
    from simdist.sim.config import load_task

    robot = load_task(task).robot
    if robot not in DEFAULT_SETS:
        from simdist.errors import ConfigError

        raise ConfigError(f"bench fidelity: no emulator link for the {robot} ({task})")
    sets = list(DEFAULT_SETS[robot]) if sets is None else list(sets)
    if address is None:
        address = f"lo:{60 + os.getpid() % 100}" if robot == "go2" else f"127.{os.getpid() % 200 + 20}.250.1"
    link = _over_link(task, robot, profile, model, seconds, seed, address, sets)
    local = _in_process(task, profile, model, seconds, seed, sets)
    result: dict[str, Any] = {
        "task": task,
        "robot": robot,
        "profile": profile,
        "model": model,
        "seconds": seconds,
        "seed": seed,
        "overrides": sets,
    }
    if robot == "go2":
        (link_m, link_falls), (local_m, local_falls) = _progress(link), _progress(local)
        share = link_m / local_m if local_m > 0 else float("nan")
        result["in_process"] = {"progress_m": local_m, "falls": local_falls, "stats": local.get("stats")}
        result["over_link"] = {
            "progress_m": link_m,
            "falls": link_falls,
            "commands": link.get("lowcmd"),
            "bad_crc": link.get("bad_crc"),
            "tracking_rad": link.get("tracking_rad"),
            "deploy_ticks": link.get("deploy_ticks"),
        }
        result["share"] = share
        result["within_tolerance"] = bool(share >= MIN_SHARE and link_falls <= local_falls + MAX_EXTRA_FALLS)
    else:
        local_s, link_s = _inserted_after(local), _inserted_after(link)
        result["in_process"] = {"inserted_after_s": local_s, "stats": local.get("stats")}
        result["over_link"] = {
            "inserted_after_s": link_s,
            "commands": link.get("servo_commands"),
            "protective_stops": link.get("protective_stops"),
            "unsafe_commands": link.get("unsafe_commands"),
            "tracking_m": link.get("tracking_m"),
        }
        both = local_s is not None and link_s is not None
        result["within_tolerance"] = bool(
            (local_s is None and link_s is None) or (both and abs(link_s - local_s) <= MAX_INSERT_DIFF_S)
        )
    return result


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The seeds' runs together: how many pairs hold the tolerance, and each way's figures over the seeds (Go2:
    mean progress and falls; UR5e: insertions and the median time to one)."""
    out: dict[str, Any] = {"seeds": len(runs), "within": sum(bool(r["within_tolerance"]) for r in runs)}
    for way in ("in_process", "over_link"):
        if runs[0]["robot"] == "go2":
            out[way] = {
                "progress_m": float(np.mean([r[way]["progress_m"] for r in runs])),
                "falls": int(sum(r[way]["falls"] for r in runs)),
            }
        else:
            times = [r[way]["inserted_after_s"] for r in runs if r[way]["inserted_after_s"] is not None]
            out[way] = {
                "inserted": len(times),
                "median_s": float(np.median(times)) if times else None,
                "times_s": [r[way]["inserted_after_s"] for r in runs],
            }
    return out


def bench(args: argparse.Namespace) -> dict[str, Any]:
    from simdist.errors import ConfigError
    from simdist.runtime.deploy import resolve_model
    from simdist.sim.config import load_task

    cfg = load_task(args.task)
    model = str(resolve_model(args.task, getattr(args, "model", None)))
    seconds = float(getattr(args, "seconds", None) or cfg.episode_seconds)
    sets = list(DEFAULT_SETS.get(cfg.robot, [])) + list(getattr(args, "overrides", None) or [])
    seeds = getattr(args, "seeds", None) or 1
    if seeds < 1:
        raise ConfigError(f"bench fidelity: --seeds must be >= 1, got {seeds}")
    runs = [
        measure(args.task, args.profile or "sim", model, seconds=seconds, seed=s, sets=sets)
        for s in range(seeds)
    ]
    if seeds == 1:
        result = runs[0]
    else:  # what the runs share, then each run and the pool (no one seed's figures at the top)
        shared = ("task", "robot", "profile", "model", "seconds", "overrides")
        result = {**{k: runs[0][k] for k in shared}, "runs": runs, "pooled": pooled(runs)}
    out = Path(getattr(args, "out", None) or "runs/fidelity")
    out.mkdir(parents=True, exist_ok=True)
    result["saved"] = str(out / "fidelity.json")
    write_text(out / "fidelity.json", json.dumps(result, indent=1) + "\n")
    return result


def summary(result: dict[str, Any]) -> str:
    if "runs" in result:  # several seeds: each pair, then the seeds together
        lines = [summary({**r, "saved": None}) for r in result["runs"]]
        p = result["pooled"]
        if result["robot"] == "go2":
            ways = [
                f"{w}: {p[w]['progress_m']:.2f} m a run, {p[w]['falls']} falls"
                for w in ("in_process", "over_link")
            ]
        else:
            ways = [
                f"{w}: inserted in {p[w]['inserted']} of {p['seeds']}"
                + (
                    ""
                    if p[w]["median_s"] is None
                    else f", median {p[w]['median_s']:.1f} s after the first command"
                )
                for w in ("in_process", "over_link")
            ]
        pairs = f"{p['seeds']} seeds: {p['within']} pairs within tolerance; " + "; ".join(ways)
        return "\n".join([*lines, pairs, f"saved: {result['saved']}"])
    local, link = result["in_process"], result["over_link"]
    lines = [
        f"{result['task']} on {result['profile']}, {result['seconds']:g} s each, seed {result['seed']}, "
        f"{' '.join(result['overrides']) or 'no overrides'}"
    ]
    verdict = "within" if result["within_tolerance"] else "NOT within"
    if result["robot"] == "go2":
        lines += [
            f"in process (sim:{result['profile']}, safety filter): {local['progress_m']:.2f} m, {local['falls']} falls",
            f"over DDS (emulator): {link['progress_m']:.2f} m, {link['falls']} falls, {link['commands']} commands, "
            f"{link['bad_crc']} bad CRC",
            f"share {result['share']:.0%} (tolerance: >= {MIN_SHARE:.0%}, at most {MAX_EXTRA_FALLS} more fall): "
            + verdict,
        ]
        stats = local.get("stats") or {}
        if "fresh" in stats:
            lines.append(
                f"controller in process: ticks {stats['ticks']}: fresh {stats['fresh']}, late {stats['late']}, "
                f"held {stats['held']}; plan p50 {stats['plan_ms_p50']:.1f} ms"
            )
        if link.get("deploy_ticks"):
            lines.append(f"controller over DDS: {link['deploy_ticks']}")
    else:

        def when(t: float | None) -> str:
            return "not inserted" if t is None else f"inserted {t:.1f} s after the first command"

        lines += [
            f"in process (sim:{result['profile']}): {when(local['inserted_after_s'])}",
            f"over RTDE (emulator): {when(link['inserted_after_s'])}, {link['commands']} servo targets, "
            f"{link['protective_stops']} protective stops, {link['unsafe_commands']} unsafe",
            f"tolerance (inserted both ways within {MAX_INSERT_DIFF_S:g} s of each other, or neither): "
            + verdict,
        ]
    if result.get("saved"):
        lines.append(f"saved: {result['saved']}")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    sys.exit(child(sys.argv[1:]))
