"""`simdist bench faults --task ur5e_peg`: the UR5e emulator's faults as the real ur_rtde client sees them (the state
stops advancing; the controller's sockets close, and a reconnect works once they are back), the check at the arm,
and one scenario end to end: the state dropped for good ends in a stop at the emulated arm, no unsafe target."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simdist.hardware import faults
from simdist.robots.ur5e.emulator import UR5eEmulator
from simdist.robots.ur5e.servo_check import ServoCheck
from simdist.sim.config import load_task

_hosts = iter(range(1, 250))


def _host() -> str:
    """A loopback address of its own (ur_rtde's ports are fixed)."""
    return f"127.{os.getpid() % 200 + 20}.{next(_hosts)}.3"


def _client(code: str, host: str, emu: UR5eEmulator) -> dict[str, Any]:
    """ur_rtde in a process of its own (its constructors hold the GIL); the fault clock starts as it does (as at a
    first command)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code, host], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    emu.faults.begin()
    stdout, stderr = proc.communicate(timeout=40)
    assert proc.returncode == 0, stdout[-2000:] + stderr[-2000:]
    return json.loads(stdout.strip().splitlines()[-1])


def test_the_check_at_the_arm_flags_each_unsafe_target() -> None:
    cfg = load_task("ur5e_peg")
    hole = np.array(cfg.peg.hole_center)
    check = ServoCheck(hole=hole, hole_depth=0.04, step_m=0.01, step_rad=0.05, control_hz=10.0)
    down = [np.pi, 0.0, 0.0]  # the tool pointing down, yaw 0
    start = np.array([*hole[:2], hole[2] + 0.08])
    held = np.array([*start, 0.0])
    assert check.pose(np.array([*start, *down]), 0.0, held)
    assert check.pose(np.array([*(start + [0.009, 0.0, -0.009]), *down]), 0.1, held)
    assert not check.pose(np.array([*(start + [0.009, 0.0, -0.021]), *down]), 0.2, held)  # a 12 mm step
    assert not check.pose(np.array([np.nan] * 6), 0.3, held)
    assert not check.pose(np.array([*start, 0.0, 0.0, 0.0]), 0.4, held)  # tool up: tilted, and a jump
    far = np.array([*(hole + [0.2, 0.0, 0.1]), *down])
    check.stopped(0.5, "servoStop")  # after a stop the step counts from where the arm holds
    assert not check.pose(far, 0.6, np.array([*far[:3], 0.0]))  # outside the workspace box, no step
    assert check.unsafe == 4 and check.commands == 6
    assert "12.0 mm > 10 mm" in check.reasons[0] and "tilted" in check.reasons[2]
    assert "outside the workspace" in check.reasons[3] and "step" not in check.reasons[3]
    assert check.stops == [(0.5, "servoStop")]
    q = np.zeros(6)
    assert check.joints(q + 0.3, 0.7, q) and not check.joints(q + 0.7, 0.8, q)  # pi rad/s for 0.1 s: 0.314
    assert check.unsafe == 5


GAP = """
import json, sys, time
import rtde_receive
r = rtde_receive.RTDEReceiveInterface(sys.argv[1], 125)
samples = []
t0 = time.monotonic()
while time.monotonic() - t0 < 3.0:
    samples.append(r.getTimestamp())
    time.sleep(0.02)
print(json.dumps({"stamps": samples, "connected": r.isConnected()}))
r.disconnect()
"""


def test_a_state_gap_stops_the_stream_then_it_resumes(running: Any) -> None:
    pytest.importorskip("rtde_receive", reason="ur-rtde not installed")
    emu = running(_host(), faults=("state_gap:1.0:1.0",))
    out = _client(GAP, emu.host, emu)
    stamps = np.array(out["stamps"])
    steps = np.diff(stamps)
    assert out["connected"] and np.all(steps >= 0)
    dropped = emu.summary()["states_dropped"]
    assert dropped >= 0.8 * 125  # the emulator served nothing for about the fault's second
    # the client's stamp stood still across the gap, then jumped by the controller time that passed meanwhile
    assert steps.max() == pytest.approx(dropped / 125.0, abs=0.1)
    frozen = int(np.sum(steps == 0))
    assert frozen >= 0.5 * (dropped / 125.0) / 0.02  # reads that saw no new sample: most of the gap's
    assert stamps[-1] > stamps[np.argmax(steps) + 1]  # and it advanced again after


VANISH = """
import json, sys, time
import rtde_receive
r = rtde_receive.RTDEReceiveInterface(sys.argv[1], 125)
out = {"before": r.getTimestamp(), "lost": False}
t0 = time.monotonic()
while time.monotonic() - t0 < 3.0 and r.isConnected():
    time.sleep(0.02)
out["lost"] = not r.isConnected()
out["stamp_at_loss"] = r.getTimestamp()
time.sleep(1.5)  # the sockets are back 1 s after they closed
out["reconnected"] = r.reconnect()
time.sleep(0.3)
out["after"] = r.getTimestamp()
out["connected"] = r.isConnected()
r.disconnect()
print(json.dumps(out))
"""


def test_vanished_sockets_lose_the_client_and_a_reconnect_works(running: Any) -> None:
    pytest.importorskip("rtde_receive", reason="ur-rtde not installed")
    emu = running(_host(), faults=("vanish:1.0:1.0",))
    out = _client(VANISH, emu.host, emu)
    assert out["lost"] and out["reconnected"] and out["connected"]
    assert out["after"] > out["stamp_at_loss"] > out["before"]
    summary = emu.summary()
    assert summary["vanished"] == 1 and summary["rtde_clients"] == 2  # the first client, then its reconnect


def test_a_dropped_state_ends_in_a_stop_at_the_emulated_arm(tmp_path: Path) -> None:
    pytest.importorskip("rtde_control", reason="ur-rtde not installed")
    from simdist.runtime.deploy import resolve_model

    scenario = next(s for s in faults.ROBOTS["ur5e"].scenarios if s.name == "state_dropped")
    outcome = faults.run_scenario(
        scenario,
        task="ur5e_peg",
        model=str(resolve_model("ur5e_peg", None)),
        seconds=6.0,
        address=_host(),
        out_dir=tmp_path,
    )
    assert outcome.unsafe_commands == 0 and outcome.safe_stop and outcome.exit_code == 0, outcome
    assert outcome.time_to_safe_stop_s is not None  # the arm was stopped after the fault began
    assert outcome.time_to_safe_stop_s <= scenario.stop_within_s, outcome
    # stale after 0.1 s, the safe stop 1 s after the last good tick: 8-13 held ticks at 10 Hz
    assert 5 <= outcome.held <= 15 and outcome.stale >= 5, outcome
    assert outcome.ticks == outcome.bag_ticks and outcome.commands >= outcome.ticks - outcome.held - 2
