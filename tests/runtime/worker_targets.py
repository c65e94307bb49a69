"""Targets for spawned finetune workers in tests (a module, so the spawned process can import them)."""

from __future__ import annotations

import os
import signal
from typing import Any


def die_while_writing(model_dir: str, bags: list[str], options: dict[str, Any], results: Any) -> None:
    """Finetune for real, but get SIGKILLed halfway through writing the new dynamics file."""
    import safetensors.torch

    from simdist.runtime import worker

    def half_then_die(tensors: dict, filename: str, metadata: dict | None = None) -> None:
        data = safetensors.torch.save(tensors, metadata=metadata)
        with open(filename, "wb") as fh:
            fh.write(data[: len(data) // 2])
            fh.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    import simdist.model.checkpoint as checkpoint

    checkpoint.save_file = half_then_die
    worker._main(model_dir, bags, options, results)


def die_without_reporting(model_dir: str, bags: list[str], options: dict[str, Any], results: Any) -> None:
    """A worker killed before it reports anything (the kernel's OOM killer, a crash in native code)."""
    os.kill(os.getpid(), signal.SIGKILL)
