"""Start a task's stack the way its launch file does, each node its own process over DDS on loopback, without
`launch` or ros2cli (for the process-level tests and `simdist bench ros`): the nodes and parameters from
`simdist_bringup.stack` (what the launch file uses), each executable's entry point from its package's setup.py
(a checkout) or installed module, a parameters file as launch writes one, and a ROS domain of the caller's own."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

SRC = Path(__file__).resolve().parents[2]  # a checkout's src/ (or an install's site-packages)
PACKAGES = ("simdist_nodes", "simdist_finetune", "simdist_bringup")
PACKAGE_PATHS = [str(SRC / p) for p in PACKAGES if (SRC / p / "setup.py").is_file()]


def console_scripts(package: str) -> dict[str, str]:
    """executable -> "module:function", read from the package's setup.py (in a checkout)."""
    setup = SRC / package / "setup.py"
    if not setup.is_file():  # installed by colcon: the executables are the packages' modules' `main`
        return {
            e: f"{package}.{e}:main"
            for e in (
                "camera_node",
                "proprio_node",
                "sim_robot_node",
                "planner_node",
                "logger_node",
                "finetune_dynamics",
            )
        }
    tree = ast.parse(setup.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "console_scripts":
                    entries = [e.value for e in value.elts]  # type: ignore[attr-defined]
                    return {n.strip(): t.strip() for n, _, t in (e.partition("=") for e in entries)}
    raise AssertionError(f"{package}: no console_scripts")


# Fast DDS kept to UDP on loopback: the repository's config/dds, or an install's share/simdist_bringup/config/dds
# (colcon: install/simdist_bringup/lib/pythonX.Y/site-packages/simdist_bringup/processes.py).
_PROFILE = Path("config") / "dds" / "fastdds_loopback_udp.xml"
_SHARE = Path(__file__).resolve().parents[4] / "share" / "simdist_bringup"
LOOPBACK_PROFILE = next((d / _PROFILE for d in (SRC.parent, _SHARE) if (d / _PROFILE).is_file()), None)


def ros_env(domain: int) -> dict[str, str]:
    """The environment of a stack's processes: the caller's, in ROS domain `domain`, on this computer only. Not
    ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST: under it rmw_fastrtps adds shared memory, whose writes stalled the
    control loop (config/dds/fastdds_loopback_udp.xml says how); that profile keeps Fast DDS to UDP on loopback
    unless the caller chose Fast DDS transports or profiles."""
    from simdist_nodes.ros_common import FASTDDS_CHOICES

    env = dict(os.environ)
    if LOOPBACK_PROFILE is not None and not any(key in env for key in FASTDDS_CHOICES):
        env["FASTRTPS_DEFAULT_PROFILES_FILE"] = str(LOOPBACK_PROFILE)
    env.update(
        ROS_DOMAIN_ID=str(domain),
        PYTHONPATH=os.pathsep.join([*PACKAGE_PATHS, env.get("PYTHONPATH", "")]),
        PYTHONUNBUFFERED="1",
        RCUTILS_COLORIZED_OUTPUT="0",
        MUJOCO_GL=env.get("MUJOCO_GL", "egl"),
    )
    return env


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def wait(self, timeout: float = 20.0) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
            raise AssertionError(
                f"{self.name} did not exit within {timeout} s:\n{self.output()[-3000:]}"
            ) from None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def start_node(
    package: str,
    executable: str,
    name: str,
    parameters: dict,
    *,
    folder: Path,
    domain: int,
    extra: list[str] | None = None,
) -> Proc:
    """`ros2 run package executable --ros-args -r __node:=name --params-file F` without ros2cli."""
    module, _, function = console_scripts(package)[executable].partition(":")
    params = folder / f"{name}.params.yaml"
    params.write_text(yaml.safe_dump({name: {"ros__parameters": parameters}}))
    code = f"import sys; from {module} import {function} as main; sys.exit(main())"
    args = [sys.executable, "-c", code, "--ros-args", "-r", f"__node:={name}", "--params-file", str(params)]
    log = folder / f"{name}.log"
    stream = log.open("w")
    popen = subprocess.Popen(
        args + (extra or []),
        env=ros_env(domain),
        stdout=stream,
        stderr=subprocess.STDOUT,
        cwd=folder,
        preexec_fn=_die_with_parent,
    )
    return Proc(name, popen, log)


def _die_with_parent() -> None:
    """Linux: the node gets SIGKILL when the process that started it dies (a test run that aborts)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def kill_all(procs: dict[str, Proc]) -> None:
    """SIGKILL whatever is still running (cleanup after a failure)."""
    for proc in procs.values():
        if proc.popen.poll() is None:
            proc.popen.kill()
            proc.popen.wait()


def start_stack(values: dict[str, str], *, folder: Path, domain: int) -> dict[str, Proc]:
    from simdist_bringup.stack import stack_nodes

    procs = {}
    for spec in stack_nodes(values):
        procs[spec.executable] = start_node(
            spec.package, spec.executable, spec.name, spec.parameters, folder=folder, domain=domain
        )
    return procs


def stop_all(procs: dict[str, Proc], sig: int = signal.SIGINT) -> dict[str, int]:
    for proc in procs.values():
        proc.signal(sig)
    return {name: proc.wait() for name, proc in procs.items()}


def wait_for(proc: Proc, text: str, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if text in proc.output():
            return
        if proc.popen.poll() is not None:
            break
        time.sleep(0.1)
    raise AssertionError(f"{proc.name}: no '{text}' within {timeout} s:\n{proc.output()[-3000:]}")
