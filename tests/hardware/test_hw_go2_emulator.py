"""The MuJoCo Go2 emulator on the robot's own DDS topics: `simdist deploy --robot go2:lo:D` drives it in real time as
it would drive the robot, and a command with a bad CRC is ignored (each in its own process: unitree_sdk2py's DDS
factory is one per process)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simdist.bags import read_episodes

pytest.importorskip("unitree_sdk2py", reason="unitree-sdk2py-dimos not installed")
pytest.importorskip("cyclonedds", reason="cyclonedds not installed")

BAD_CRC = """
import sys, time
import numpy as np
from simdist.hardware.state import JointCommand
from simdist.robots.go2.hardware import Go2Robot, build_lowcmd
robot = Go2Robot.connect("lo", int(sys.argv[1]), timeout_s=8.0)
msg = build_lowcmd(JointCommand(np.full(12, 0.5)))  # far from standing
msg.crc ^= 1
for _ in range(20):
    robot._publisher.Write(msg)
    time.sleep(0.02)
robot._stopped = True  # leave without the damping command: only the corrupt ones were sent
print("sent", flush=True)
"""


def test_deploy_drives_the_emulated_go2_over_its_dds_and_a_bad_crc_is_ignored(tmp_path: Path) -> None:
    domain = 130 + os.getpid() % 60
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    simdist = [sys.executable, "-m", "simdist.cli"]
    emulator = subprocess.Popen(
        [*simdist, "emulate", "--task", "go2_slope", "--profile", "sim", "--address", f"lo:{domain}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert emulator.stdout is not None
        first = emulator.stdout.readline()
        assert first.startswith("emulating a go2 for go2_slope on sim:sim"), first + emulator.stderr.read()
        bad = subprocess.run(
            [sys.executable, "-c", BAD_CRC, str(domain)], capture_output=True, text=True, timeout=60, env=env
        )
        assert bad.returncode == 0 and "sent" in bad.stdout, bad.stderr[-2000:]
        deploy = subprocess.run(
            [
                *simdist,
                "deploy",
                "--task",
                "go2_slope",
                "--robot",
                f"go2:lo:{domain}",
                "--minutes",
                "0.08",
                "--bag-dir",
                str(tmp_path / "bags"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        emulator.send_signal(signal.SIGINT)
        out, err = emulator.communicate(timeout=30)
    finally:
        if emulator.poll() is None:
            emulator.kill()
    assert deploy.returncode == 0, deploy.stderr[-3000:]
    assert emulator.returncode == 0, err[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    ticks = int(deploy.stdout.split("ticks ")[1].split(":")[0])
    assert ticks >= 150  # 4.8 s at 50 Hz (240), less missed periods on a loaded machine
    # every corrupt command was seen and none moved the robot; every tick's command arrived intact
    assert 10 <= summary["bad_crc"] <= 20 and summary["bad_header"] == 0
    assert summary["lowcmd"] - summary["bad_crc"] >= 0.95 * ticks  # DDS on loopback may drop the odd one
    assert summary["steps"] >= ticks and summary["late_steps"] <= summary["steps"] // 10
    # the emulated motors followed the planner's targets (PD servos at the trained gains, on a walking robot)
    assert summary["tracking_rad"] is not None and summary["tracking_rad"] < 0.4
    (bag,) = sorted((tmp_path / "bags").glob("run_*"))
    episodes = read_episodes(bag)
    proprio = np.concatenate([e["proprio"] for e in episodes])
    assert len(proprio) >= ticks - 5  # the bag holds the run (the last ticks may still be in flight at stop)
    joints = proprio[:, 6:18]  # joint positions relative to the stand pose
    assert np.ptp(joints, axis=0).max() > 0.2  # the legs moved: a measured robot, not a replayed constant
    assert np.isfinite(proprio).all()


def test_a_bad_address_is_one_line() -> None:
    from simdist.cli import main

    assert main(["emulate", "--task", "go2_slope", "--address", "lo:one"]) == 2
    assert main(["deploy", "--task", "go2_slope", "--robot", "go2:lo:one", "--minutes", "0.01"]) == 2
    assert main(["emulate", "--task", "ur5e_peg"]) == 2  # the UR5e needs its host: said, not a traceback
