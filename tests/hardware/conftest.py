"""The hardware tests' shared fixture: a UR5e emulator serving in a thread."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from simdist.hardware.emulated_faults import Fault
from simdist.robots.ur5e.emulator import UR5eEmulator
from simdist.sim.config import load_task

NO_NOISE = {
    f"observation_noise.{k}": 0.0
    for k in ("joint_pos", "joint_vel", "tool_pos", "tool_quat", "tool_vel", "wrench")
}


@pytest.fixture
def running() -> Iterator[Any]:
    """Start a UR5e emulator in a thread: running(host[, task overrides: noise-free sensors][, faults]) -> it."""
    started: list[tuple[UR5eEmulator, threading.Event, threading.Thread]] = []

    def start(host: str, overrides: dict[str, Any] = NO_NOISE, faults: tuple[str, ...] = ()) -> UR5eEmulator:
        cfg = load_task("ur5e_peg", overrides)
        emulator = UR5eEmulator(cfg, "sim", host=host, faults=[Fault.parse(f) for f in faults]).open()
        stop = threading.Event()
        thread = threading.Thread(target=emulator.serve, args=(stop,), daemon=True)
        thread.start()
        started.append((emulator, stop, thread))
        return emulator

    yield start
    for emulator, stop, thread in started:
        stop.set()
        thread.join(timeout=5)
        emulator.close()
