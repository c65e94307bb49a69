"""The stack as a robot runs it: each node its own process over DDS on loopback (a ROS domain per test), started
from the same node specs and parameters as the launch file. Real time: assertions on counts, rates with generous
margins, and the bag's contents, never on absolute times."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = [pytest.mark.ros, pytest.mark.slow]
rclpy = pytest.importorskip("rclpy", reason="rclpy is not installed (`pip install -e '.[ros]'`)")

from simdist_bringup.processes import kill_all, ros_env, start_node, start_stack, stop_all, wait_for  # noqa: E402

from simdist.bags import read_episodes, schema  # noqa: E402
from simdist.bags.reader import read_topics  # noqa: E402

RUN_S = 8.0


def _domain() -> int:
    return 100 + (os.getpid() * 7 + int(time.monotonic() * 1000)) % 100


def _planner_summary(text: str) -> dict[str, int]:
    match = re.search(r"ticks (\d+): fresh (\d+), late (\d+), held (\d+), missed (\d+), errors (\d+)", text)
    assert match, text[-2000:]
    return dict(
        zip(["ticks", "fresh", "late", "held", "missed", "errors"], map(int, match.groups()), strict=True)
    )


def _robot_summary(text: str) -> dict[str, str]:
    match = re.search(
        r"commands (\d+) over ([\d.]+) s, hold requests (\d+), holds (\d+), watchdog stage (\w+)", text
    )
    assert match, text[-2000:]
    return dict(zip(["commands", "span_s", "hold_requests", "holds", "stage"], match.groups(), strict=True))


@pytest.fixture(autouse=True)
def _no_node_outlives_its_test(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Every process a test starts is killed when the test ends, passed or failed."""
    import simdist_bringup.processes as processes

    started: dict[str, Any] = {}
    original = processes.start_node

    def tracking(*args: Any, **kwargs: Any) -> Any:
        proc = original(*args, **kwargs)
        started[f"{proc.name}-{proc.popen.pid}"] = proc
        return proc

    monkeypatch.setattr(processes, "start_node", tracking)
    monkeypatch.setitem(globals(), "start_node", tracking)
    yield
    kill_all(started)


def _events(bag: Path) -> list[dict]:
    return [json.loads(m.data) for _, m in read_topics(bag, [schema.EVENTS])[schema.EVENTS]]


def _run_go2(task: str, folder: Path, model_dir: Path) -> dict:
    """The task's stack for RUN_S seconds, then stopped as an operator would: Ctrl-C to the planner first."""
    bags = folder / "bags"
    values = {"task": task, "model_dir": str(model_dir), "bag_dir": str(bags)}
    procs, rcs = _run_stack(values, folder, _domain())
    return {"rcs": rcs, "out": {k: p.output() for k, p in procs.items()}, "bags": bags, "values": values}


def _run_stack(values: dict, folder: Path, domain: int) -> tuple[dict, dict[str, int]]:
    """Start the launch file's nodes for `values`, run RUN_S seconds once recording, stop the planner, then the rest."""
    procs = start_stack(values, folder=folder, domain=domain)
    try:
        wait_for(procs["planner_node"], "warmed up", 90)
        wait_for(procs["logger_node"], "recording", 30)
        time.sleep(RUN_S)
        planner_rc = stop_all({"planner_node": procs["planner_node"]})
        time.sleep(0.5)
        rcs = stop_all({k: v for k, v in procs.items() if k != "planner_node"}) | planner_rc
    finally:
        kill_all(procs)
    return procs, rcs


@pytest.fixture(scope="module")
def go2_run(tmp_path_factory: pytest.TempPathFactory, _templates: dict[str, Path]) -> dict:
    return _run_go2("go2_slope", tmp_path_factory.mktemp("go2_stack"), _templates["go2_slope"])


@pytest.fixture(scope="module")
def go2_foam_run(tmp_path_factory: pytest.TempPathFactory, _templates: dict[str, Path]) -> dict:
    return _run_go2("go2_foam", tmp_path_factory.mktemp("go2_foam_stack"), _templates["go2_foam"])


@pytest.mark.parametrize("run", ["go2_run", "go2_foam_run"])
def test_go2_stack_records_every_tick_from_the_first_at_the_ticks_times(
    run: str, request: pytest.FixtureRequest
) -> None:
    go2_run = request.getfixturevalue(run)
    out = go2_run["out"]
    assert go2_run["rcs"] == {"sim_robot_node": 0, "planner_node": 0, "logger_node": 0}, out
    planner = _planner_summary(out["planner_node"])
    robot = _robot_summary(out["sim_robot_node"])
    assert planner["errors"] == 0
    # 50 Hz at the robot, with a generous margin for a loaded CI machine (measured here: 50.1 Hz, 0 % missed,
    # `simdist bench ros`)
    assert planner["ticks"] + planner["missed"] > 0.5 * 50 * RUN_S
    assert int(robot["commands"]) / float(robot["span_s"]) > 35.0, (robot, planner)
    # keep-last 1: a command superseded before the robot node took it is dropped, never queued behind
    sent = planner["ticks"] - planner["held"]
    assert 0.8 * sent <= int(robot["commands"]) <= sent
    assert int(robot["hold_requests"]) >= 1  # the planner's final hold reached the robot
    (bag,) = sorted(go2_run["bags"].glob("run_*"))
    match = re.search(r"(\d+) ticks written, (\d+) lost", out["logger_node"])
    assert match and (int(match[1]), int(match[2])) == (planner["ticks"], 0)
    episodes = read_episodes(bag)
    assert len({int(e["episode_index"][0]) for e in episodes}) >= 2  # a random policy falls often
    assert int(episodes[0]["episode_index"][0]) == 0 and episodes[0]["step"][0] == 0  # the first episode
    in_episodes = sum(len(e["proprio"]) for e in episodes)
    observations = read_topics(bag, [schema.OBSERVATION])[schema.OBSERVATION]
    assert len(observations) == planner["ticks"] and in_episodes >= planner["ticks"] - 2
    # each missed period is in the bag as a gap, so no stretch joins ticks across it
    events = _events(bag)
    gaps = [e for e in events if e["event"] == schema.TICKS_GAP]
    assert sum(e["ticks"] for e in gaps) <= planner["missed"] and all(e["reason"] == "missed" for e in gaps)
    # stamps are the ticks' own times: 20 ms apart within a stretch (not the logger's write times)
    periods = np.concatenate(
        [np.diff(e["timestamp_ns"]) / (np.diff(e["step"]) * 1e6) for e in episodes if len(e["step"]) > 1]
    )
    assert 14.0 < float(np.median(periods)) < 30.0, np.percentile(periods, [10, 50, 90])
    assert float(np.percentile(periods, 5)) > 5.0  # no burst of write-time stamps


def test_go2_planner_killed_robot_holds_then_damps_and_says_so(
    tmp_path: Path, _templates: dict[str, Path]
) -> None:
    values = {
        "task": "go2_slope",
        "model_dir": str(_templates["go2_slope"]),
        "bag_dir": str(tmp_path / "bags"),
    }
    procs = start_stack(values, folder=tmp_path, domain=_domain())
    wait_for(procs["planner_node"], "warmed up", 90)
    wait_for(procs["logger_node"], "recording", 30)
    time.sleep(2.0)
    killed_ns = time.time_ns()
    procs["planner_node"].signal(signal.SIGKILL)
    assert procs["planner_node"].wait() == -signal.SIGKILL
    wait_for(procs["sim_robot_node"], "safe stop", 5.0)  # hold after 0.1 s, damping after 1 s
    time.sleep(0.5)
    rcs = stop_all({k: v for k, v in procs.items() if k != "planner_node"})
    assert rcs == {"sim_robot_node": 0, "logger_node": 0}
    robot_log = procs["sim_robot_node"].output()
    assert "holding" in robot_log and robot_log.index("holding") < robot_log.index("safe stop")
    assert _robot_summary(robot_log)["stage"] == "safe_stop"
    (bag,) = sorted((tmp_path / "bags").glob("run_*"))
    watchdog = [e for e in _events(bag) if e["event"] == schema.WATCHDOG]
    # the last outage: after the last resume (a planner slowed by load may have held the robot just before the
    # kill, so the outage's hold can come before the kill; its safe stop cannot)
    resumes = [i for i, e in enumerate(watchdog) if e["stage"] == "resume"]
    outage = watchdog[resumes[-1] + 1 :] if resumes else watchdog
    stages = [(e["stage"], e["age_s"]) for e in outage]
    assert [s for s, _ in stages] == ["hold", "safe_stop"] and outage[-1]["time_ns"] > killed_ns
    assert 0.1 <= stages[0][1] < 0.5 and 1.0 <= stages[1][1] < 1.5


UR5E_RUN_S = 18.0  # two 8 s episodes of the peg at 10 Hz and the start of a third


@pytest.fixture(scope="module")
def ur5e_run(tmp_path_factory: pytest.TempPathFactory, _templates: dict[str, Path]) -> dict:
    """The ur5e_peg stack for UR5E_RUN_S seconds, then a terminal's Ctrl-C plus the launcher's to the planner (two
    SIGINTs 10 ms apart) and SIGTERM to the others."""
    folder = tmp_path_factory.mktemp("ur5e_stack")
    values = {"task": "ur5e_peg", "model_dir": str(_templates["ur5e_peg"]), "bag_dir": str(folder / "bags")}
    procs = start_stack(values, folder=folder, domain=_domain())
    try:
        wait_for(procs["planner_node"], "warmed up", 90)
        wait_for(procs["logger_node"], "recording", 30)
        time.sleep(UR5E_RUN_S)
        procs["planner_node"].signal(signal.SIGINT)
        time.sleep(0.01)
        procs["planner_node"].signal(signal.SIGINT)
        planner_rc = procs["planner_node"].wait()
        time.sleep(0.5)
        rcs = stop_all({k: v for k, v in procs.items() if k != "planner_node"}, signal.SIGTERM)
    finally:
        kill_all(procs)
    rcs["planner_node"] = planner_rc
    return {"rcs": rcs, "out": {k: p.output() for k, p in procs.items()}, "bags": folder / "bags"}


def test_stack_exits_zero_on_sigterm_and_a_double_sigint(ur5e_run: dict) -> None:
    out = ur5e_run["out"]
    assert ur5e_run["rcs"] == {"sim_robot_node": 0, "planner_node": 0, "logger_node": 0}, out
    assert int(_robot_summary(out["sim_robot_node"])["hold_requests"]) >= 1
    planner = _planner_summary(out["planner_node"])
    assert f"{planner['ticks']} ticks written, 0 lost" in out["logger_node"]


def test_ur5e_stack_records_every_tick_from_the_first_at_the_ticks_times(ur5e_run: dict) -> None:
    out = ur5e_run["out"]
    planner = _planner_summary(out["planner_node"])
    robot = _robot_summary(out["sim_robot_node"])
    assert planner["errors"] == 0
    # 10 Hz at the robot, with the same generous margins as the Go2's
    assert planner["ticks"] + planner["missed"] > 0.7 * 10 * UR5E_RUN_S
    assert int(robot["commands"]) / float(robot["span_s"]) > 7.0
    assert planner["missed"] <= 0.05 * planner["ticks"]
    sent = planner["ticks"] - planner["held"]
    assert 0.8 * sent <= int(robot["commands"]) <= sent
    (bag,) = sorted(ur5e_run["bags"].glob("run_*"))
    episodes = read_episodes(bag)
    assert len({int(e["episode_index"][0]) for e in episodes}) >= 2  # 8 s episodes: the time limit ends them
    assert int(episodes[0]["episode_index"][0]) == 0 and episodes[0]["step"][0] == 0
    observations = read_topics(bag, [schema.OBSERVATION])[schema.OBSERVATION]
    assert len(observations) == planner["ticks"]
    assert sum(len(e["proprio"]) for e in episodes) >= planner["ticks"] - 2
    periods = np.concatenate(
        [np.diff(e["timestamp_ns"]) / (np.diff(e["step"]) * 1e6) for e in episodes if len(e["step"]) > 1]
    )
    assert 70.0 < float(np.median(periods)) < 150.0, np.percentile(periods, [10, 50, 90])
    assert float(np.percentile(periods, 5)) > 25.0


@pytest.mark.parametrize(
    ("executable", "parameter", "value"),
    [
        ("planner_node", "warmup_plans", "many"),
        ("sim_robot_node", "watchdog_s", "soon"),
        ("logger_node", "camera", "maybe"),
        ("camera_node", "rate_hz", "fast"),
        ("planner_node", "task", "go2_moon"),
        ("sim_robot_node", "stop_s", "0.01"),
    ],
)
def test_bad_parameter_is_one_line_naming_node_and_parameter(
    tmp_path: Path, executable: str, parameter: str, value: str
) -> None:
    names = {
        "planner_node": "simdist_planner",
        "sim_robot_node": "simdist_sim_robot",
        "logger_node": "simdist_logger",
        "camera_node": "simdist_camera",
    }
    proc = start_node(
        "simdist_nodes",
        executable,
        names[executable],
        {},
        folder=tmp_path,
        domain=_domain(),
        extra=["-p", f"{parameter}:={value}"],
    )
    assert proc.wait(60) == 2, proc.output()[-2000:]
    lines = [
        line
        for line in proc.output().splitlines()
        if line.strip() and "Warning" not in line and "warn(" not in line
    ]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{names[executable]}: error:") and (
        parameter in lines[0] or value in lines[0]
    )
    assert "Traceback" not in proc.output()


def test_unreachable_robot_is_one_line_and_exit_1(tmp_path: Path) -> None:
    """A proprio node whose UR5e does not answer exits 1 (the robot failed), not 2 (the user's input), as
    `simdist deploy` does, with one line naming the node and the address."""
    proc = start_node(
        "simdist_nodes",
        "proprio_node",
        "simdist_proprio",
        {"task": "ur5e_peg", "robot_ip": "127.0.0.1"},  # nothing listens on RTDE's port here
        folder=tmp_path,
        domain=_domain(),
    )
    assert proc.wait(60) == 1, proc.output()[-2000:]
    errors = [line for line in proc.output().splitlines() if line.startswith("simdist_proprio: error:")]
    assert len(errors) == 1 and "127.0.0.1" in errors[0], proc.output()[-2000:]
    assert "Traceback" not in proc.output()


def test_camera_node_takes_a_device_index_and_streams_a_video(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `-p source:=0` is an integer to ROS: taken as device 0 (absent here), not refused as a wrong type
    proc = start_node(
        "simdist_nodes",
        "camera_node",
        "simdist_camera",
        {},
        folder=tmp_path,
        domain=_domain(),
        extra=["-p", "source:=0"],
    )
    # a device that cannot be opened is the hardware failing: exit 1, as `simdist deploy --camera 0` says
    assert proc.wait(30) == 1 and "simdist_camera: error: camera 0: cannot open" in proc.output()

    import imageio.v2 as imageio

    video = tmp_path / "clip.mp4"
    frames = [np.full((48, 64, 3), (10 * i) % 250, np.uint8) for i in range(300)]
    imageio.mimwrite(video, frames, fps=30)
    domain = _domain()
    proc = start_node(
        "simdist_nodes",
        "camera_node",
        "simdist_camera",
        {"source": str(video), "width": 32, "height": 24},
        folder=tmp_path,
        domain=domain,
    )
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image

    for key in ("ROS_DOMAIN_ID", "FASTRTPS_DEFAULT_PROFILES_FILE"):  # this process joins the node's graph
        if key in (env := ros_env(domain)):
            monkeypatch.setenv(key, env[key])
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    try:
        node = rclpy.create_node("camera_probe", context=context)
        got: list = []
        node.create_subscription(Image, schema.CAMERA, got.append, qos_profile_sensor_data)
        executor = rclpy.executors.SingleThreadedExecutor(context=context)
        executor.add_node(node)
        end = time.monotonic() + 20.0
        while len(got) < 10 and time.monotonic() < end:
            executor.spin_once(timeout_sec=0.1)
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)
    # Fast DDS in the node kept to UDP: no shared-memory threads (the transport that stalled the control loop)
    threads = {p.read_text().strip() for p in Path(f"/proc/{proc.popen.pid}/task").glob("*/comm")}
    proc.signal(signal.SIGINT)
    assert proc.wait(20) == 0, proc.output()[-2000:]
    assert len(got) >= 10, proc.output()[-2000:]
    assert any(t.startswith("dds.udp") for t in threads) and not any(t.startswith("dds.shm") for t in threads)
    assert (got[0].width, got[0].height, got[0].encoding) == (32, 24, "rgb8")
    assert len({bytes(m.data[:3]) for m in got}) > 1  # the frames change: a live stream, not one frame again


def test_finetune_process_hot_swaps_into_the_running_planner(go2_run: dict, tmp_path: Path) -> None:
    """finetune_dynamics in its own process while the stack runs: the version goes live and the confirmation
    reaches the finetune process, the swap stalls no tick; a version that does not beat the gate is refused;
    rolling back is one command."""
    (bag,) = sorted(go2_run["bags"].glob("run_*"))
    model = Path(go2_run["values"]["model_dir"])
    values = {**go2_run["values"], "bag_dir": str(tmp_path / "bags")}
    domain = _domain()
    procs = start_stack(values, folder=tmp_path, domain=domain)
    wait_for(procs["planner_node"], "warmed up", 90)
    wait_for(procs["logger_node"], "recording", 30)
    finetune = [
        sys.executable,
        "-m",
        "simdist_finetune.finetune_dynamics",
        "--bag",
        str(bag),
        "--model-dir",
        str(model),
    ]
    refused = subprocess.run(
        [*finetune, "--max-steps", "5", "--min-improvement", "0.99", "--wait", "5"],
        env=ros_env(domain),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode == 0 and "nothing published" in refused.stdout, refused.stdout + refused.stderr
    done = subprocess.run(
        [*finetune, "--max-steps", "40", "--min-improvement", "0.0", "--wait", "20"],
        env=ros_env(domain),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the planner now plans with v0001" in done.stdout, done.stdout
    rollback = subprocess.run(
        [sys.executable, "-m", "simdist_finetune.rollback", "--model-dir", str(model), "--wait", "20"],
        env=ros_env(domain),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rollback.returncode == 0, rollback.stdout + rollback.stderr
    assert "v0001 -> v0000" in rollback.stdout and "the planner now plans with v0000" in rollback.stdout
    time.sleep(1.0)
    planner_rc = stop_all({"planner_node": procs["planner_node"]})
    time.sleep(0.5)
    rcs = stop_all({k: v for k, v in procs.items() if k != "planner_node"}) | planner_rc
    assert set(rcs.values()) == {0}
    planner = _planner_summary(procs["planner_node"].output())
    assert "swaps 2" in procs["planner_node"].output() and planner["errors"] == 0
    (new_bag,) = sorted((tmp_path / "bags").glob("run_*"))
    versions = [e["model_version"] for e in _events(new_bag) if e["event"] == schema.MODEL_VERSION]
    assert versions == ["v0001", "v0000"]  # the finetuned version, then the rollback, both in the bag
    # The swap stalls no tick beyond what the machine costs the loop anyway: within half a second of either swap,
    # no more ticks lost than the rest of the run makes likely (two plus the 99.9 % Poisson bound at the run's own
    # rate away from the swaps). A loaded 2-core CI machine loses a tick a second with no swap near; the sharp
    # property (a swap that loaded or validated on the control thread misses the ticks right at it) is asserted in
    # process, without DDS, by tests/runtime/test_runtime_hot_swap.py.
    events = _events(new_bag)
    swaps = [e["time_ns"] for e in events if e["event"] == schema.MODEL_VERSION]
    gaps = [(e["time_ns"], e["ticks"]) for e in events if e["event"] == schema.TICKS_GAP]
    span = [e["time_ns"] for e in events if e["event"] in (schema.RUN_START, schema.RUN_END)]
    assert len(swaps) == 2 and len(span) == 2, (swaps, span)
    # No DDS write may block the control loop: Fast DDS's shared memory did, ~330 ms inside rclpy's publish while
    # another process joined or died, until the stack kept to UDP (docs/results.md "A hot swap across processes").
    stalls = _publish_stalls(procs["planner_node"].output())
    assert not stalls, f"publishes stalled the control loop at {stalls} (ns, the bag's clock)"
    near = [(i, round((g - t) / 1e6), n) for g, n in gaps for i, t in enumerate(swaps) if abs(g - t) < 0.5e9]
    per_swap = [sum(n for i, _, n in near if i == j) for j in range(2)]
    away = sum(n for g, n in gaps if all(abs(g - t) >= 0.5e9 for t in swaps))
    rate = away / max((span[1] - span[0]) / 1e9 - 2.0, 1.0)  # ticks lost per second away from the swaps
    allowed = 2 + _poisson_bound(rate * 1.0, 1e-3)
    assert max(per_swap) <= allowed, (
        f"gaps (swap, ms from it, ticks): {near}; {len(gaps)} gaps, {away} ticks lost away from the swaps "
        f"({rate:.2f}/s), {allowed} allowed per swap"
    )


def _publish_stalls(log: str) -> list[int]:
    """Wall-clock times (ns, as the bag's) of the planner's slow ticks that spent 90 % of their time, and at least
    ten periods, publishing ("actuate": the command; "log": the per-tick topics)."""
    times = []
    pattern = (
        r"\[(\d+)\.(\d+)\] \[simdist_planner\]: .*? took ([\d.]+) ms "
        r"\(swap [\d.]+, read [\d.]+, plan [\d.]+, actuate ([\d.]+), log ([\d.]+)"
    )
    for sec, nsec, took, actuate, logged in re.findall(pattern, log):
        if float(actuate) + float(logged) >= 0.9 * float(took) and float(took) >= 200.0:
            times.append(int(sec) * 1_000_000_000 + int(nsec))
    return times


def _poisson_bound(mean: float, tail: float) -> int:
    """The smallest k with P(X > k) < tail for X ~ Poisson(mean)."""
    k, term = 0, math.exp(-mean)
    total = term
    while 1.0 - total >= tail:
        k += 1
        term *= mean / k
        total += term
    return k


def test_poisson_bound_is_the_upper_quantile() -> None:
    assert _poisson_bound(0.0, 1e-3) == 0
    assert _poisson_bound(1.0, 1e-3) == 5  # P(X > 4) = 3.7e-3, P(X > 5) = 5.9e-4
    assert _poisson_bound(0.2, 1e-3) == 3


def test_go2_proprio_node_drives_the_robot_over_its_own_dds(
    tmp_path: Path, _templates: dict[str, Path]
) -> None:
    """robot:=real for the Go2: the proprio node speaks unitree_sdk2py over CycloneDDS on loopback (rt/lowstate,
    rt/lowcmd with CRCs) to the Go2 stand-in of the hardware tests, the planner and logger over ROS as the launch
    file starts them. The stand-in follows PD targets without physics (the MuJoCo emulator of the hardware issue is
    to take its place); what is checked is the path: every command reaches the robot with a valid CRC at the
    control rate, the bag records the robot's own state, and stopping ends in the motors' damping mode."""
    pytest.importorskip("unitree_sdk2py", reason="the Go2 SDK is not installed (`pip install -e '.[go2]'`)")
    domain = _domain()
    go2_domain = 200 + (domain % 30)  # CycloneDDS's own domain, away from the ROS one (the same RTPS ports)
    emulator = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).parents[1] / "hardware" / "go2_echo_emulator.py"),
            str(go2_domain),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert emulator.stdout is not None and emulator.stdout.readline().strip() == "ready"
        values = {
            "task": "go2_slope",
            "robot": "real",
            "network_interface": "lo",
            "go2_domain_id": str(go2_domain),
            "camera": "",
            "model_dir": str(_templates["go2_slope"]),
            "bag_dir": str(tmp_path / "bags"),
        }
        procs, rcs = _run_stack(values, tmp_path, domain)
        assert set(procs) == {"proprio_node", "planner_node", "logger_node"}
        out, _ = emulator.communicate(input="", timeout=30)
    finally:
        emulator.kill()
    assert set(rcs.values()) == {0}, {k: p.output()[-1500:] for k, p in procs.items()}
    received = json.loads(out.strip().splitlines()[-1])
    planner = _planner_summary(procs["planner_node"].output())
    robot = _robot_summary(procs["proprio_node"].output())
    assert planner["errors"] == 0
    assert planner["ticks"] + planner["missed"] > 0.5 * 50 * RUN_S
    assert received["crc_ok"] == received["received"] >= int(robot["commands"]) > 0.5 * 50 * RUN_S
    last = received["last"]  # the proprio node's stop: damping mode on every motor (kp 0, kd > 0)
    assert last["mode"][:12] == [1] * 12
    assert last["kp"][:12] == [0.0] * 12 and min(last["kd"][:12]) > 0.0
    (bag,) = sorted((tmp_path / "bags").glob("run_*"))
    episodes = read_episodes(bag)
    proprio = np.concatenate([e["proprio"] for e in episodes])
    assert len(proprio) >= planner["ticks"] - 2 and np.isfinite(proprio).all()
    # the robot's joints were measured moving (the stand-in follows the targets the planner sent)
    assert float(proprio[:, 6:18].std(axis=0).max()) > 1e-3  # gyro 3, gravity 3, then joints - stand


def test_stall_probe_times_every_publish_while_peers_come_and_go(tmp_path: Path) -> None:
    """`python -m simdist_nodes.stall_probe` (docs/results.md, "A hot swap across processes"): paced publishes, all
    timed, while peer processes join the domain and leave or die; its figures saved as JSON."""
    domain, out, seconds = _domain(), tmp_path / "probe.json", 6.0
    cmd = [sys.executable, "-m", "simdist_nodes.stall_probe", "--seconds", str(seconds), "--busy", "0"]
    cmd += ["--domain", str(domain), "--transport", "udp", "--out", str(out)]
    run = subprocess.run(cmd, env=ros_env(domain), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(out.read_text())
    assert got["transport"] == "UDPv4"
    # four topics a period at 50 Hz, paced: a slow machine may lose periods, never add them
    assert 0.5 * seconds * 50 * 4 <= got["publishes"] <= (seconds * 50 + 2) * 4
    assert got["peers_joined"] >= 1 and got["over_10_periods"] == len(got["stalls"])
    assert 0 < got["p50_us"] <= got["max_ms"] * 1000
    bad = subprocess.run([*cmd[:3], "--seconds", "0"], env=ros_env(domain), capture_output=True, text=True)
    assert bad.returncode == 2 and "--seconds must be > 0" in bad.stderr
