"""The MuJoCo UR5e behind a UR controller's RTDE, dashboard and script ports: the protocol on bytes, then the real
ur_rtde 1.6.5 client against it (the emulator in a thread here, the client in its own process: ur_rtde's
constructors hold the GIL while they wait for the controller), then `simdist deploy --robot ur5e:HOST` against
`simdist emulate`. Each emulator gets a loopback address of its own (ur_rtde's ports are fixed)."""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simdist.errors import ConfigError, RobotConnectionError
from simdist.robots.ur5e import rtde_protocol as rtde
from simdist.robots.ur5e.emulator import (
    SCRIPT_DONE,
    SCRIPT_READY,
    ControlScript,
    UR5eEmulator,
    _next_program,
    _offset,
    parse_host,
)
from simdist.sim.config import load_task

_hosts = iter(range(1, 250))


def _host() -> str:
    """A loopback address no other test run here uses (127.<pid>.<n>.1)."""
    return f"127.{os.getpid() % 200 + 20}.{next(_hosts)}.1"


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _client(code: str, host: str, timeout: float = 25.0) -> dict[str, Any]:
    """Run ur_rtde in a process of its own; its last stdout line is a JSON result."""
    done = subprocess.run([sys.executable, "-c", code, host], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- (1) the protocol, on bytes ---------------------------------------------------------------------------------------
def test_packets_round_trip_through_a_split_stream() -> None:
    stream = rtde.encode(rtde.PackageType.REQUEST_PROTOCOL_VERSION, struct.pack(">H", 2))
    stream += rtde.encode(rtde.PackageType.CONTROL_PACKAGE_START)
    assert stream[:3] == b"\x00\x05V" and stream[5:] == b"\x00\x03S"  # size big-endian, header included
    packets, rest = rtde.split_packets(stream[:4])
    assert packets == [] and rest == stream[:4]  # a partial packet waits for its bytes
    packets, rest = rtde.split_packets(stream + b"\x00")
    assert packets == [(ord("V"), b"\x00\x02"), (ord("S"), b"")] and rest == b"\x00"
    assert rtde.parse_protocol_request(packets[0][1]) == 2
    with pytest.raises(rtde.ProtocolError, match="less than the header"):
        rtde.split_packets(b"\x00\x01U")
    message = rtde.text_message("hello", "controller", rtde.TextLevel.WARNING)
    assert rtde.parse_text_message(message) == ("hello", "controller", rtde.TextLevel.WARNING)


def test_setup_replies_carry_the_types_and_not_found() -> None:
    names = [
        "timestamp",
        "actual_q",
        "robot_mode",
        "robot_status_bits",
        "joint_mode",
        "elbow_position",
        "nope",
    ]
    frequency, parsed = rtde.parse_output_setup(rtde.output_setup_request(125.0, names))
    assert frequency == 125.0 and parsed == names
    types = rtde.types_of(parsed, rtde.OUTPUT_TYPES)
    assert types == ["DOUBLE", "VECTOR6D", "INT32", "UINT32", "VECTOR6INT32", "VECTOR3D", rtde.NOT_FOUND]
    assert rtde.parse_setup_reply(rtde.setup_reply(0, types)) == (0, types)
    assert rtde.types_of(
        ["input_int_register_0", "input_double_register_23", "actual_q"], rtde.INPUT_TYPES
    ) == [
        "INT32",
        "DOUBLE",
        rtde.NOT_FOUND,  # an output is not writable
    ]
    with pytest.raises(rtde.ProtocolError, match="frequency"):
        rtde.parse_output_setup(b"\x00")


def test_a_recipe_packs_what_it_unpacks() -> None:
    recipe = rtde.Recipe(3, ["timestamp", "actual_q", "safety_status_bits", "joint_mode", "input_bit_register_64"],
                         ["DOUBLE", "VECTOR6D", "UINT32", "VECTOR6INT32", "BOOL"])  # fmt: skip
    values = {
        "timestamp": 12.5,
        "actual_q": (0.1, -0.2, 0.3, -0.4, 0.5, -0.6),
        "safety_status_bits": 4,
        "joint_mode": (253,) * 6,
        "input_bit_register_64": True,
    }
    payload = recipe.pack(values)
    assert len(payload) == recipe.size == 1 + 8 + 48 + 4 + 24 + 1 and payload[0] == 3
    assert payload[1:9] == struct.pack(">d", 12.5)  # big-endian
    assert recipe.unpack(payload) == values
    with pytest.raises(rtde.ProtocolError, match="has 5 bytes"):
        recipe.unpack(payload[:5])


def test_programs_are_cut_at_their_closing_end() -> None:
    first, rest = _next_program("def rtde_control():\n  textmsg(1)\n  if x:\n  end\nend\nsec s():\n")
    assert first == "def rtde_control():\n  textmsg(1)\n  if x:\n  end\nend" and rest == "\nsec s():\n"
    assert _next_program(rest) == (None, rest)  # incomplete: waits for its end
    assert _next_program("stopj(2)\nmore") == ("stopj(2)", "more")
    # the offsets as ur_rtde 1.6.5 injects them (the value lands after the comment's line break)
    assert _offset("global reg_offset_int = # int register offset\n24    global x = 0", "int") == 24
    assert _offset("global reg_offset_float = 0\n", "float") == 0


class _Arm:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[float]]] = []

    def servo_pose(self, pose: np.ndarray) -> None:
        self.calls.append(("servoL", list(pose)))

    def servo_joints(self, q: np.ndarray) -> None:
        self.calls.append(("servoJ", list(q)))

    def hold(self) -> None:
        self.calls.append(("hold", []))

    def joint_torques(self) -> np.ndarray:
        return np.arange(6.0)

    def zero_ft(self) -> None:
        self.calls.append(("zero_ft", []))


def test_the_control_scripts_register_protocol() -> None:
    arm = _Arm()
    script = ControlScript(arm)  # type: ignore[arg-type]
    inputs: dict[str, Any] = {f"input_double_register_{i}": float(i) for i in range(48)}
    inputs |= {f"input_int_register_{i}": 0 for i in range(48)}
    outputs: dict[str, Any] = {}
    script.start("def rtde_control():\nend\n", outputs)
    assert script.running and outputs["output_int_register_0"] == SCRIPT_READY

    def cycle(cmd: int, times: int = 1) -> int:
        inputs["input_int_register_0"] = cmd
        for _ in range(times):
            script.cycle(inputs, outputs, now=0.0, kicked_at=0.0)
        return outputs["output_int_register_0"]

    assert cycle(24, times=3) == SCRIPT_READY  # realtime: every cycle, answered ready
    assert arm.calls == [("servoL", [0.0, 1.0, 2.0, 3.0, 4.0, 5.0])] * 3
    arm.calls.clear()
    assert cycle(16, times=3) == SCRIPT_DONE and arm.calls == [("hold", [])]  # once, answered done
    assert cycle(0) == SCRIPT_READY  # the client's clear
    cycle(38)
    assert [outputs[f"output_double_register_{i}"] for i in range(6)] == list(np.arange(6.0))
    cycle(9)  # speedJ: not emulated, so the script stops, as on a runtime error
    assert not script.running and script.refused == {"9": 1} and arm.calls[-1] == ("hold", [])
    script.start("def rtde_control():\n  global reg_offset_int = 24\nend\n", outputs)
    inputs["input_int_register_24"] = 255
    script.cycle(inputs, outputs, now=0.0, kicked_at=0.0)
    assert not script.running and script.stops[-1] == "stopScript"
    script.start("def rtde_control():\nend\n", outputs)
    script.watchdog_hz = 10.0
    script.cycle(inputs | {"input_int_register_0": 0}, outputs, now=1.0, kicked_at=0.85)  # 150 ms > 100 ms
    assert not script.running and "watchdog" in script.stops[-1]


def test_bad_addresses_and_a_taken_port_are_one_line() -> None:
    from simdist.cli import main

    assert parse_host(" 127.0.0.1 ") == "127.0.0.1"
    for bad in ("", "127.0.0.1:30004", "robot one"):
        with pytest.raises(ConfigError) as info:
            parse_host(bad)
        assert "\n" not in str(info.value)
    assert main(["emulate", "--task", "ur5e_peg", "--address", "127.0.0.1:30004"]) == 2
    assert main(["emulate", "--task", "ur5e_peg"]) == 2  # the host is given, not assumed
    host = _host()
    first = UR5eEmulator(load_task("ur5e_peg"), "sim", host=host).open()
    try:
        with pytest.raises(
            RobotConnectionError, match=rf"^cannot listen on {host}:30004 \(RTDE\): Address already in use$"
        ):
            UR5eEmulator(load_task("ur5e_peg"), "sim", host=host).open()
    finally:
        first.close()


def _exchange(sock: socket.socket, ptype: int, payload: bytes) -> tuple[int, bytes]:
    sock.sendall(rtde.encode(ptype, payload))
    buffer = b""
    while True:
        buffer += sock.recv(65536)
        packets, buffer = rtde.split_packets(buffer)
        if packets:
            return packets[0]


def test_raw_rtde_clients_get_types_not_found_in_use_and_a_stream(running: Any) -> None:
    host = _host()
    emulator = running(host)
    kind = rtde.PackageType
    with socket.create_connection((host, 30004)) as a, socket.create_connection((host, 30004)) as b:
        assert _exchange(a, kind.REQUEST_PROTOCOL_VERSION, struct.pack(">H", 1)) == (ord("V"), b"\x00")
        assert _exchange(a, kind.REQUEST_PROTOCOL_VERSION, struct.pack(">H", 2)) == (ord("V"), b"\x01")
        assert _exchange(a, kind.GET_URCONTROL_VERSION, b"")[1] == struct.pack(">IIII", 5, 15, 0, 0)
        _, reply = _exchange(
            a, kind.CONTROL_PACKAGE_SETUP_OUTPUTS, rtde.output_setup_request(50, ["actual_q", "bogus"])
        )
        assert rtde.parse_setup_reply(reply) == (0, ["VECTOR6D", rtde.NOT_FOUND])
        names = [
            "timestamp",
            "actual_q",
            "robot_mode",
            "safety_mode",
            "runtime_state",
            "output_int_register_0",
        ]
        _, reply = _exchange(a, kind.CONTROL_PACKAGE_SETUP_OUTPUTS, rtde.output_setup_request(50, names))
        recipe_id, types = rtde.parse_setup_reply(reply)
        assert recipe_id == 1 and types == ["DOUBLE", "VECTOR6D", "INT32", "INT32", "UINT32", "INT32"]
        _, reply = _exchange(
            a, kind.CONTROL_PACKAGE_SETUP_INPUTS, b"input_int_register_0,input_double_register_0"
        )
        assert rtde.parse_setup_reply(reply) == (1, ["INT32", "DOUBLE"])
        _, reply = _exchange(
            b, kind.CONTROL_PACKAGE_SETUP_INPUTS, b"input_int_register_0,input_int_register_5"
        )
        assert rtde.parse_setup_reply(reply) == (0, [rtde.IN_USE, "INT32"])  # client a writes register 0
        assert _exchange(a, kind.CONTROL_PACKAGE_START, b"") == (ord("S"), b"\x01")
        recipe = rtde.Recipe(recipe_id, names, types)
        buffer, samples = b"", []
        while len(samples) < 10:
            buffer += a.recv(65536)
            packets, buffer = rtde.split_packets(buffer)
            samples += [recipe.unpack(p) for t, p in packets if t == ord("U")]
    stamps = [s["timestamp"] for s in samples]
    assert all(
        later - earlier == pytest.approx(0.02, abs=0.0081)
        for earlier, later in zip(stamps[:-1], stamps[1:], strict=True)
    )
    for sample in samples:  # no script runs: RUNNING, NORMAL, STOPPED; joints as the simulator served them
        assert (sample["robot_mode"], sample["safety_mode"], sample["runtime_state"]) == (7, 1, 1)
        assert sample["actual_q"] == emulator.arm.served_at(sample["timestamp"])["actual_q"]


# -- (2) and (3) the real ur_rtde client --------------------------------------------------------------------------------
RECEIVE = """
import json, sys, time
import rtde_receive
r = rtde_receive.RTDEReceiveInterface(sys.argv[1], 100)
samples, t0 = [], time.monotonic()
for _ in range(20):
    before = r.getTimestamp()
    q = r.getActualQ()
    samples.append({"before": before, "q": q, "after": r.getTimestamp(), "wall": time.monotonic() - t0})
    time.sleep(0.05)
status = [r.getRobotMode(), r.getSafetyMode(), r.getRuntimeState(), r.isConnected()]
r.disconnect()
print(json.dumps({"samples": samples, "status": status}))
"""


def test_ur_rtde_receive_reads_the_simulators_joints_and_a_clock(running: Any) -> None:
    pytest.importorskip("rtde_receive", reason="ur-rtde not installed")
    if not _port_free("127.0.0.1", 30004):
        pytest.skip("something else listens on 127.0.0.1:30004 here")
    emulator = running("127.0.0.1")
    result = _client(RECEIVE, "127.0.0.1")
    assert result["status"] == [7, 1, 1, True]  # RUNNING, NORMAL, no program: STOPPED
    samples = result["samples"]
    matched = 0
    for s in samples:
        served = emulator.arm.served_at(s["before"])
        assert served is not None  # every timestamp read is one the emulator served
        assert np.allclose(s["q"], served["actual_q"], atol=1e-4)
        matched += s["before"] == s["after"] and s["q"] == list(served["actual_q"])
    assert matched >= len(samples) - 2  # bit-exact wherever no package landed between the two reads
    first, last = samples[0], samples[-1]
    robot, wall = last["before"] - first["before"], last["wall"] - first["wall"]
    assert wall > 0.8 and robot == pytest.approx(wall, rel=0.15, abs=0.03)  # controller seconds in real time


CONTROL = """
import json, sys, time
import rtde_control, rtde_receive
host = sys.argv[1]
r = rtde_receive.RTDEReceiveInterface(host, 125)
c = rtde_control.RTDEControlInterface(host, 500)
out = {"start": r.getActualTCPPose(), "running": r.getRuntimeState()}
target = list(out["start"]); target[0] += 0.02
out["servoL"] = True
for _ in range(15):
    out["servoL"] &= c.servoL(target, 0.0, 0.0, 0.1, 0.1, 300)
    time.sleep(0.1)
out["moved"] = r.getActualTCPPose()
c.getJointTorques(); time.sleep(0.05)
out["torques"] = c.getJointTorques()
out["servoStop"] = c.servoStop(2.0)
time.sleep(0.3); out["held_a"] = r.getActualTCPPose()
time.sleep(0.7); out["held_b"] = r.getActualTCPPose()
out["speedJ"] = c.speedJ([0.0] * 6, 0.5, 0.1)  # not emulated: the script stops
time.sleep(0.1)
out["after_refusal"] = [c.servoL(target, 0.0, 0.0, 0.1, 0.1, 300), r.getRuntimeState()]
c.disconnect(); r.disconnect()
print(json.dumps({"target": target, **out}))
"""


def test_ur_rtde_control_servol_moves_the_tcp_and_servostop_holds(running: Any) -> None:
    pytest.importorskip("rtde_control", reason="ur-rtde not installed")
    host = _host()  # not 127.0.0.1: ur_rtde then also asks the dashboard whether remote control is on
    emulator = running(host)
    out = _client(CONTROL, host)
    start, moved, target = (np.array(out[k]) for k in ("start", "moved", "target"))
    assert out["running"] == 2 and out["servoL"] is True  # the control script ran (PLAYING) and took servoL
    assert moved[0] - start[0] > 0.017 and abs(moved[0] - target[0]) < 0.003  # 2 cm along x, there
    assert np.abs(moved[1:3] - start[1:3]).max() < 0.003  # not elsewhere
    assert len(out["torques"]) == 6 and np.isfinite(out["torques"]).all()
    assert out["servoStop"] is True
    held_a, held_b = np.array(out["held_a"]), np.array(out["held_b"])
    assert np.abs(held_b[:3] - held_a[:3]).max() < 0.001  # servoStop holds
    assert out["speedJ"] is True and out["after_refusal"] == [False, 1]  # refused: script stopped, STOPPED
    summary = emulator.summary()
    assert summary["commands"]["servoL"] == 15 and summary["commands"]["servoStop"] == 1
    assert summary["refused_commands"] == {"9": 1} and summary["control_scripts"] == 1
    assert (
        summary["rtde_clients"] == 2
        and summary["dashboard_clients"] == 1
        and summary["dashboard_unknown"] == 0
    )
    assert summary["rtde_dropped"] == 0 and summary["protective_stops"] == 0


WATCHDOG = """
import json, sys, time
import rtde_control
c = rtde_control.RTDEControlInterface(sys.argv[1], 500)
out = {"set": c.setWatchdog(4.0), "kicked": []}
for _ in range(5):
    out["kicked"].append(c.kickWatchdog() and c.servoL([0.49, 0.13, 0.12, 3.14159, 0, 0], 0, 0, 0.1, 0.1, 300))
    time.sleep(0.05)
time.sleep(0.8)  # no writes for 800 ms, three times the watchdog's period
out["late"] = c.servoL([0.49, 0.13, 0.12, 3.14159, 0, 0], 0, 0, 0.1, 0.1, 300)
c.disconnect()
print(json.dumps(out))
"""


def test_ur_rtde_watchdog_stops_the_script_when_not_kicked(running: Any) -> None:
    pytest.importorskip("rtde_control", reason="ur-rtde not installed")
    host = _host()
    emulator = running(host)
    out = _client(WATCHDOG, host)
    assert out == {"set": True, "kicked": [True] * 5, "late": False}
    assert "watchdog" in emulator.summary()["script_stops"][-1]


# -- (4) simdist emulate, and simdist deploy against the emulator -----------------------------------------------------
def test_simdist_emulate_serves_for_its_seconds_and_prints_a_summary(capsys: Any) -> None:
    from simdist.cli import main

    assert main(["emulate", "--task", "ur5e_peg", "--address", _host(), "--seconds", "0.4"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "emulating a ur5e for ur5e_peg on sim:sim"
    summary = json.loads(lines[-1])
    assert 40 <= summary["steps"] <= 51 and summary["sim_seconds"] == pytest.approx(summary["steps"] / 125)
    assert summary["rtde_clients"] == 0 and not summary["script_running"] and summary["episodes"] == []


def test_deploy_drives_the_emulated_ur5e_over_rtde_and_logs_every_tick(running: Any, tmp_path: Path) -> None:
    pytest.importorskip("rtde_control", reason="ur-rtde not installed")
    from simdist.bags import read_episodes

    host = _host()
    # the task's own protective stop (200 N): the actuator's press guard keeps the insertion under it
    emulator = running(host, {})
    deploy = subprocess.run(
        [
            sys.executable,
            "-m",
            "simdist.cli",
            "deploy",
            "--task",
            "ur5e_peg",
            "--robot",
            f"ur5e:{host}",
            "--realtime",
            "--minutes",
            "0.2",
            "--bag-dir",
            str(tmp_path / "bags"),
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert deploy.returncode == 0, deploy.stdout[-2000:] + deploy.stderr[-3000:]
    summary = emulator.summary()
    # without the press guard the shipped model pressed past 200 N; with it the peak stays near its 150 N
    assert summary["protective_stops"] == 0 and summary["peak_force_n"] < 200.0, summary["peak_force_n"]
    ticks = int(re.search(r"ticks (\d+):", deploy.stdout).group(1))  # type: ignore[union-attr]
    missed = int(re.search(r"missed (\d+)", deploy.stdout).group(1))  # type: ignore[union-attr]
    assert ticks + missed == 120 and ticks >= 110  # 12 s at 10 Hz, less periods a loaded machine skipped
    assert summary["commands"]["servoL"] >= ticks - 2 and summary["refused_commands"] == {}
    assert summary["commands"]["stopScript"] == 1 and not summary["script_running"]
    assert summary["rtde_dropped"] == 0 and summary["late_steps"] <= summary["steps"] // 20
    # every servo target inside the arm's limits, the episode the loop starts at 8 s (after the insertion) included
    assert summary["unsafe_commands"] == 0, summary["unsafe_reasons"]
    (bag,) = sorted((tmp_path / "bags").glob("run_*"))
    proprio = np.concatenate([e["proprio"] for e in read_episodes(bag)])
    assert len(proprio) == ticks and np.isfinite(proprio).all()  # every tick in the bag
    assert np.ptp(proprio[:, 12:15], axis=0).max() > 0.005  # the tool moved: a measured arm
