"""Planning off the control thread (real time): one plan job at a time, results back through a queue.

The deploy loop submits a `PlanJob` (the tick's inputs, prepared on the control thread) and adopts the result when
it arrives; the thread runs under the planner's real-time scheduling, one level below the control thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from simdist.plan.mppi import Plan
from simdist.runtime.realtime import Scheduling, apply_to_this_thread

log = logging.getLogger(__name__)


@dataclass
class PlanJob:
    tick: int
    episode: int
    model: Any
    inputs: tuple[torch.Tensor, ...]
    image: torch.Tensor | None
    command: torch.Tensor
    prev_action: torch.Tensor | None
    reset: bool
    # planning ahead: the action tick `tick` executes, step 0 of every candidate; the plan serves tick + 1 on
    first_action: torch.Tensor | None = None
    adapted: bool = False  # plan with the search granted to adapted dynamics (the loop's adapted planner)

    @property
    def lead(self) -> int:
        """Ticks between the job's state and the first tick its plan is for (0, or 1 when planning ahead)."""
        return 0 if self.first_action is None else 1


class PlanThread:
    """Runs plan jobs one at a time off the control thread (real time); results come back through a queue."""

    def __init__(
        self,
        run: Callable[[PlanJob], Plan],
        scheduling: Scheduling | None = None,
        problems: list[str] | None = None,
    ) -> None:
        self._run = run
        self._scheduling = scheduling
        self._problems = problems if problems is not None else []
        self._jobs: queue.Queue[PlanJob | None] = queue.Queue(maxsize=1)
        self.results: queue.Queue[tuple[PlanJob, Plan | BaseException, float]] = queue.Queue()
        self._idle = threading.Event()
        self._idle.set()
        self._submitted = 0  # jobs submitted, and their results taken (`take`): outstanding = the difference
        self._taken = 0
        self._thread = threading.Thread(target=self._work, name="planner", daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        return not self._idle.is_set()

    @property
    def outstanding(self) -> bool:
        """A submitted job whose result has not been taken yet (running, or finished a moment ago: the thread goes
        idle just before its result is put)."""
        return self._submitted > self._taken

    def submit(self, job: PlanJob) -> None:
        self._idle.clear()
        self._submitted += 1
        self._jobs.put(job)

    def take(self, timeout: float = 0.0) -> tuple[PlanJob, Plan | BaseException, float]:
        """The next result (`timeout` 0: only one already there); raises queue.Empty when none comes in time."""
        result = self.results.get(timeout=timeout) if timeout > 0 else self.results.get_nowait()
        self._taken += 1
        return result

    def _work(self) -> None:
        if self._scheduling is not None and self._scheduling.requested:
            try:
                self._problems += apply_to_this_thread(self._scheduling, "planner")
            except Exception as exc:  # the planner thread must live on, at normal priority
                self._problems.append(f"planner thread: scheduling failed: {exc!r}")
                log.warning(self._problems[-1])
        while (job := self._jobs.get()) is not None:
            start = time.perf_counter()
            try:
                result: Plan | BaseException = self._run(job)
            except Exception as exc:  # handed to the control thread, which holds and logs
                result = exc
            seconds = time.perf_counter() - start
            self._idle.set()  # before the result, so whoever takes it can submit the next job at once
            self.results.put((job, result, seconds))

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=5.0)
