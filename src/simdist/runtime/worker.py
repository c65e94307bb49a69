"""The finetune worker: dynamics-only finetuning in its own process (multiprocessing spawn), so that training never
stalls the control loop. It publishes through the checkpoint's atomic writes; the running planner's ModelStore
notices the new version and swaps it in at a tick boundary. Killing the worker at any point leaves either no new
version or a complete one.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import queue
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simdist.errors import SimdistError
from simdist.runtime.finetune_options import FinetuneOptions


class FinetuneError(SimdistError):
    """The finetune worker failed (its one-line reason) or died."""


def _main(model_dir: str, bags: list[str], options: dict[str, Any], results: Any) -> None:
    import torch

    from simdist.runtime.finetune import finetune
    from simdist.runtime.realtime import yield_to_control

    yield_to_control()
    torch.set_num_threads(max(1, int(options.get("threads") or 1)))
    try:
        report = finetune(model_dir, bags, FinetuneOptions(**options))
        results.put(("ok", report.to_dict()))
    except SimdistError as exc:
        results.put(("error", str(exc)))
    except (
        Exception
    ) as exc:  # reported to the parent as one line; the traceback stays in this process's stderr
        results.put(("error", f"{type(exc).__name__}: {exc}"))
        raise


class FinetuneWorker:
    """`FinetuneWorker(model_dir, bags, options).start()`, then `wait()` (or `poll()`), or `kill()`."""

    def __init__(
        self, model_dir: str | Path, bags: Sequence[str | Path], options: FinetuneOptions | None = None
    ):
        self.model_dir = str(model_dir)
        self.bags = [str(b) for b in bags]
        self.options = options or FinetuneOptions()
        self._ctx = mp.get_context("spawn")
        self._results: Any = self._ctx.Queue()
        self.process: Any = None
        self._outcome: tuple[str, Any] | None = None

    def start(self, target: Any = _main) -> FinetuneWorker:
        self.process = self._ctx.Process(
            target=target,
            args=(self.model_dir, self.bags, dataclasses.asdict(self.options), self._results),
            name="simdist-finetune",
            daemon=True,
        )
        self.process.start()
        return self

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    def poll(self) -> dict[str, Any] | None:
        """The report once the worker finished, None while it runs. Raises FinetuneError if it failed or died."""
        if self._outcome is None:
            try:
                self._outcome = self._results.get_nowait()
            except queue.Empty:
                if (
                    self.process is not None
                    and not self.process.is_alive()
                    and self.process.exitcode is not None
                ):
                    try:  # the result may land just after the process ended
                        self._outcome = self._results.get(timeout=1.0)
                    except queue.Empty:
                        raise FinetuneError(
                            f"finetune worker died (exit code {self.process.exitcode})"
                        ) from None
                else:
                    return None
        status, payload = self._outcome
        if status != "ok":
            raise FinetuneError(f"finetune worker: {payload}")
        return payload

    def wait(self, timeout: float | None = None) -> dict[str, Any]:
        """Block until the worker finishes; returns its report (a dict). A worker that dies without reporting
        (killed for memory, a crash in native code) raises FinetuneError within a second, not never."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._outcome is None:
            left = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
            try:
                self._outcome = self._results.get(timeout=max(left, 0.0))
            except queue.Empty:
                if not self.alive:
                    break  # poll() below takes a result that landed late, or says the worker died
                if deadline is not None and time.monotonic() >= deadline:
                    raise FinetuneError(f"finetune worker still running after {timeout} s") from None
        if self.process is not None:
            self.process.join(timeout=10.0)
        report = self.poll()
        assert report is not None
        return report

    def kill(self) -> None:
        """SIGKILL the worker (whatever it was writing stays a temporary file no reader looks at)."""
        if self.process is not None and self.process.is_alive():
            self.process.kill()
            self.process.join()
