"""Shared test setup: offscreen rendering, and no code under test may end the test process itself."""

from __future__ import annotations

import os
import traceback
from typing import Any, NoReturn

import pytest

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", "egl")

# `os._exit` in the test process would end pytest at once with the caller's status and no report: a suite that ran
# a third of its tests and "passed". The process entry points that may leave that way (`simdist.cli.run`, a ROS
# node's deadline) run in child processes in these tests; in this process the call fails the test, and the session.
_TEST_PROCESS = os.getpid()
_REAL_EXIT = os._exit
_EXITS: list[str] = []


def _exit_guard(code: int) -> NoReturn:
    if os.getpid() != _TEST_PROCESS:  # a forked child (multiprocessing, data loaders) leaves as it means to
        _REAL_EXIT(code)
    _EXITS.append(f"os._exit({code}) in the test process:\n{''.join(traceback.format_stack()[:-1])}")
    raise AssertionError(_EXITS[-1])


os._exit = _exit_guard


def pytest_sessionfinish(session: pytest.Session, exitstatus: Any) -> None:
    if _EXITS:  # also those raised in threads, which fail no test on their own
        print("\n" + "\n".join(_EXITS))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
