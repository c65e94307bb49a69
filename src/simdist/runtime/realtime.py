"""Real-time scheduling of the control process on Linux: SCHED_FIFO threads, CPU pinning and locked memory.

What a control loop on a shared onboard computer needs so that the other processes on it (a logger, a finetune
worker, the robot driver's own threads) cannot delay a tick: the control thread and the planner thread run under
SCHED_FIFO (the control thread one level above the planner, so it always sends the next step of the last plan
on time while a late plan is still being computed), optionally pinned to chosen CPUs, with the process's memory
locked so a page fault never stalls a tick. It cannot help against the hypervisor of a virtual machine taking the
core away (steal time), which `simdist bench planner` reports separately.

Asking for it without the right (CAP_SYS_NICE, or an `rtprio` limit in /etc/security/limits.conf) is not fatal:
one warning line, and the loop runs at normal priority, still with its late-plan handling.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import platform
import resource
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from simdist.errors import ConfigError

log = logging.getLogger(__name__)

# mlockall(2) flags on x86-64 and aarch64 (the Go2's and the UR5e PC's); other architectures skip the lock
_MCL_CURRENT, _MCL_FUTURE = 1, 2
_MCL_ARCHES = ("x86_64", "amd64", "aarch64", "arm64")


@dataclass(frozen=True)
class Scheduling:
    """How the control process runs. The default asks for nothing (normal time-sharing)."""

    priority: int | None = None  # SCHED_FIFO priority of the control thread; the planner runs one below
    cpus: tuple[int, ...] | None = None  # pin the control and planner threads to these CPUs
    lock_memory: bool = False  # mlockall: no page faults in a tick (needs an unlimited RLIMIT_MEMLOCK)

    def __post_init__(self) -> None:
        if self.requested and not sys.platform.startswith("linux"):
            raise ConfigError(
                f"real-time scheduling (priority, cpus, memory lock) needs Linux, not {sys.platform}"
            )
        if self.priority is not None:
            low, high = _fifo_range()
            if not low + 1 <= self.priority <= high:  # the planner's level (priority - 1) must be valid too
                raise ConfigError(f"realtime priority {self.priority} is outside {low + 1}..{high}")
        if self.cpus is not None:
            if not self.cpus:
                raise ConfigError("realtime cpus: an empty list")
            allowed = os.sched_getaffinity(0)
            unknown = sorted(set(self.cpus) - allowed)
            if unknown:
                raise ConfigError(
                    f"realtime cpus {unknown} are not available here (allowed: {sorted(allowed)})"
                )

    @property
    def requested(self) -> bool:
        return self.priority is not None or self.cpus is not None or self.lock_memory

    def describe(self) -> str:
        """'SCHED_FIFO 50, cpus 2,3, memory locked', or 'normal' when nothing is asked for."""
        parts = [f"SCHED_FIFO {self.priority}" if self.priority is not None else "normal"]
        if self.cpus is not None:
            parts.append("cpus " + ",".join(map(str, self.cpus)))
        if self.lock_memory:
            parts.append("memory locked")
        return ", ".join(parts)

    def planner(self) -> Scheduling:
        """The planner thread's settings: one priority level below the control thread, the same CPUs."""
        return Scheduling(priority=None if self.priority is None else self.priority - 1, cpus=self.cpus)


def run_paced(
    step: Callable[[], None], period: float, stop: threading.Event, seconds: float | None = None
) -> int:
    """Call `step` once per `period` in real time until `stop` is set (or `seconds` passed), as a robot's own servo
    loop runs (the emulators). Returns how many times it fell a whole period behind; it then re-anchors on the
    present instead of catching up in a burst."""
    end = None if seconds is None else time.monotonic() + seconds
    next_time = time.monotonic()
    late = 0
    while not stop.is_set() and (end is None or time.monotonic() < end):
        step()
        next_time += period
        delay = next_time - time.monotonic()
        if delay > 0:
            stop.wait(delay)
        elif delay < -period:
            late += 1
            next_time = time.monotonic()
    return late


def freeze_heap() -> None:
    """Move every object alive now into the garbage collector's permanent generation.

    A control process holds a large heap that lives as long as it does (torch modules, ROS entities, ~190 k objects
    here); a full collection walks all of it and held the GIL for 0.3-0.4 s on this loaded CPU: missed periods.
    Frozen objects are never walked again, so the collections left stay short. Call it after start-up and after
    loading a model version (both create long-lived objects); it is cheap."""
    gc.freeze()


def yield_to_control(niceness: int = 19) -> None:
    """Lower this process's CPU priority (finetuning beside a control loop: the control process comes first)."""
    try:
        os.nice(niceness)
    except OSError:  # not permitted here: run at the inherited priority
        log.debug("could not lower the priority by %d", niceness)


def parse_cpus(text: str | None) -> tuple[int, ...] | None:
    """'1', '0,1' or '2-3' -> CPU numbers; None or '' -> None."""
    if not text:
        return None
    cpus: list[int] = []
    try:
        for part in text.split(","):
            first, _, last = part.strip().partition("-")
            cpus.extend(range(int(first), int(last or first) + 1))
    except ValueError:
        raise ConfigError(f"realtime cpus '{text}': expected a list like 1 or 0,1 or 2-3") from None
    return tuple(sorted(set(cpus)))


def _fifo_range() -> tuple[int, int]:
    return os.sched_get_priority_min(os.SCHED_FIFO), os.sched_get_priority_max(os.SCHED_FIFO)


def apply_to_this_thread(scheduling: Scheduling, role: str) -> list[str]:
    """Apply the priority and CPUs to the calling thread (Linux schedules threads); returns what could not be done.

    Memory is locked by `lock_memory()`, once per process. Each failure is also logged as one warning line.
    """
    problems: list[str] = []
    tid = threading.get_native_id()
    if scheduling.cpus is not None:
        try:
            os.sched_setaffinity(tid, scheduling.cpus)
        except OSError as exc:
            problems.append(f"{role} thread: cannot pin to CPUs {list(scheduling.cpus)}: {exc.strerror}")
    if scheduling.priority is not None:
        try:
            os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(scheduling.priority))
        except OSError as exc:
            problems.append(
                f"{role} thread: cannot run at SCHED_FIFO priority {scheduling.priority} ({exc.strerror}; "
                "needs CAP_SYS_NICE or an rtprio limit): normal priority"
            )
    for problem in problems:
        log.warning(problem)
    return problems


ThreadState = tuple[int, Any, set[int]]  # policy, sched_param, CPUs


def thread_state(tid: int) -> ThreadState:
    """A thread's policy, priority and CPUs (by native thread id), to restore later."""
    return os.sched_getscheduler(tid), os.sched_getparam(tid), os.sched_getaffinity(tid)


def restore_thread(tid: int, state: ThreadState) -> None:
    """Give a thread back what `thread_state` saw; a thread that has ended meanwhile is left alone."""
    try:
        os.sched_setscheduler(tid, state[0], state[1])
        os.sched_setaffinity(tid, state[2])
    except ProcessLookupError:
        pass


@contextmanager
def scheduled(scheduling: Scheduling, role: str) -> Iterator[list[str]]:
    """Run the calling thread under `scheduling` for the block, then restore its policy and CPUs (for a bench)."""
    if not scheduling.requested:  # nothing to apply or restore (and no Linux-only call)
        yield []
        return
    tid = threading.get_native_id()
    before = thread_state(tid)
    try:
        yield apply_to_this_thread(scheduling, role)
    finally:
        restore_thread(tid, before)


def lock_memory() -> str | None:
    """mlockall(MCL_CURRENT | MCL_FUTURE) when the memlock limit allows it; otherwise the reason, logged.

    With a finite limit the lock is skipped rather than taken: locking future pages under a limit makes later
    allocations (torch's, MuJoCo's) fail once the limit is reached.
    """
    problem = None
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if platform.machine().lower() not in _MCL_ARCHES:
        problem = f"memory not locked: mlockall flags unknown on {platform.machine()}"
    elif soft != resource.RLIM_INFINITY:
        problem = f"memory not locked: the memlock limit is {soft} bytes (set memlock unlimited to lock it)"
    else:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mlockall(_MCL_CURRENT | _MCL_FUTURE) != 0:
            problem = f"memory not locked: mlockall: {os.strerror(ctypes.get_errno())}"
    if problem:
        log.warning(problem)
    return problem


def current_thread_policy() -> tuple[str, int]:
    """The calling thread's scheduling policy name and priority (for reports and tests)."""
    tid = threading.get_native_id()
    policy = os.sched_getscheduler(tid)
    names = {
        getattr(os, n): n for n in ("SCHED_OTHER", "SCHED_FIFO", "SCHED_RR", "SCHED_BATCH") if hasattr(os, n)
    }
    return names.get(policy, str(policy)), os.sched_getparam(tid).sched_priority
