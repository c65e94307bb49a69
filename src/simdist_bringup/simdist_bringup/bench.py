"""`simdist bench ros`: the ROS 2 stack (robot, planner and logger nodes, each its own process over DDS on
loopback, started as the launch file starts them) against the in-process deploy loop (`simdist deploy --realtime`
with the same robot, model, planner and bag logging), in interleaved blocks of the same length.

Reported per variant: the command rate at the robot (commands the robot executed per second of the run), the share
of control periods missed, and CPU per process (cores, from /proc over the measured window). The ratio is the ROS
stack's rate at the robot over the in-process loop's, measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from simdist_bringup.processes import Proc, start_stack, stop_all, wait_for

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    """utime + stime of a process (all its threads), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _summary(pattern: str, text: str, names: list[str]) -> dict[str, float]:
    match = re.search(pattern, text)
    if not match:
        raise RuntimeError(f"no summary matching {pattern!r} in:\n{text[-2000:]}")
    return dict(zip(names, map(float, match.groups()), strict=True))


def _in_process(task: str, profile: str, model: str, seconds: float, bag_dir: Path) -> dict[str, Any]:
    from simdist.runtime.deploy import run_deploy

    before, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    result = run_deploy(task, f"sim:{profile}", model, seconds=seconds, realtime=True, bag_dir=bag_dir)
    after, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - wall
    s = result.stats
    periods = s.ticks + s.missed
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {
        "variant": "in_process",
        "rate_hz": (s.ticks - s.held) / seconds,
        "missed_pct": 100.0 * s.missed / max(periods, 1),
        "late_pct": 100.0 * s.late / max(s.ticks, 1),
        "cpu_cores": {"deploy": cpu / wall},
    }


def _ros_stack(
    task: str, profile: str, model: str, seconds: float, folder: Path, domain: int
) -> dict[str, Any]:
    values = {"task": task, "profile": profile, "model_dir": model, "bag_dir": str(folder / "bags")}
    procs: dict[str, Proc] = start_stack(values, folder=folder, domain=domain)
    try:
        wait_for(procs["planner_node"], "warmed up", 120)
        wait_for(procs["logger_node"], "recording", 60)
        start = {name: _cpu_s(p.popen.pid) for name, p in procs.items()}
        time.sleep(seconds)
        end = {name: _cpu_s(p.popen.pid) for name, p in procs.items()}
        rcs = stop_all({"planner_node": procs["planner_node"]})
        time.sleep(0.5)
        rcs |= stop_all({k: v for k, v in procs.items() if k != "planner_node"})
    except BaseException:
        for p in procs.values():
            p.signal(signal.SIGKILL)
        raise
    if any(rcs.values()):
        raise RuntimeError(f"a node exited with an error: {rcs}")
    robot_node = next(k for k in procs if k.endswith("robot_node") or k == "proprio_node")
    planner = _summary(
        r"ticks (\d+): fresh (\d+), late (\d+), held (\d+), missed (\d+)",
        procs["planner_node"].output(),
        ["ticks", "fresh", "late", "held", "missed"],
    )
    robot = _summary(r"commands (\d+) over ([\d.]+) s", procs[robot_node].output(), ["commands", "seconds"])
    periods = planner["ticks"] + planner["missed"]
    return {
        "variant": "ros",
        "rate_hz": robot["commands"] / max(robot["seconds"], 1e-9),
        "missed_pct": 100.0 * planner["missed"] / max(periods, 1),
        "late_pct": 100.0 * planner["late"] / max(planner["ticks"], 1),
        "cpu_cores": {name: (end[name] - start[name]) / seconds for name in procs},
    }


def bench(args: argparse.Namespace) -> dict[str, Any]:
    from simdist.runtime.deploy import resolve_model
    from simdist.sim.config import load_task

    task = args.task
    cfg = load_task(task)
    profile = getattr(args, "profile", None) or "sim"
    model = str(resolve_model(task, Path(args.model) if args.model else None))
    seconds = args.seconds or 20.0
    repeats = 2
    blocks: list[dict[str, Any]] = []
    domain = 150 + os.getpid() % 50
    with tempfile.TemporaryDirectory(prefix="simdist-bench-ros-") as tmp:
        for r in range(repeats):  # interleaved: A B A B, the same load on both
            folder = Path(tmp) / f"block{r}"
            folder.mkdir()
            blocks.append(_in_process(task, profile, model, seconds, folder / "inproc_bags"))
            blocks.append(_ros_stack(task, profile, model, seconds, folder, domain))
    out: dict[str, Any] = {"task": task, "profile": profile, "control_hz": cfg.control_hz, "seconds": seconds}
    for variant in ("in_process", "ros"):
        mine = [b for b in blocks if b["variant"] == variant]
        out[variant] = {
            "rate_hz": [round(b["rate_hz"], 2) for b in mine],
            "missed_pct": [round(b["missed_pct"], 2) for b in mine],
            "late_pct": [round(b["late_pct"], 2) for b in mine],
            "cpu_cores": {k: [round(b["cpu_cores"][k], 3) for b in mine] for k in mine[0]["cpu_cores"]},
        }
    out["ratio_rate"] = round(
        float(np.mean(out["ros"]["rate_hz"]) / max(np.mean(out["in_process"]["rate_hz"]), 1e-9)), 3
    )
    return out


def summary(result: dict[str, Any]) -> str:
    lines = [
        f"{result['task']} on sim:{result['profile']} at {result['control_hz']:g} Hz, "
        f"{result['seconds']:g} s per block, blocks interleaved"
    ]
    for variant in ("in_process", "ros"):
        r = result[variant]
        cpu = ", ".join(f"{k} {'/'.join(f'{v:.2f}' for v in vals)}" for k, vals in r["cpu_cores"].items())
        lines.append(
            f"  {variant:10s} rate at robot {'/'.join(f'{v:.1f}' for v in r['rate_hz'])} Hz, "
            f"missed {'/'.join(f'{v:.1f}' for v in r['missed_pct'])} %, "
            f"late {'/'.join(f'{v:.1f}' for v in r['late_pct'])} %; CPU (cores) {cpu}"
        )
    lines.append(f"  ratio (ros / in-process rate at the robot): {result['ratio_rate']:.3f}")
    return "\n".join(lines)
