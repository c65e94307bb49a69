"""Optimiser state and step saved as safetensors beside the checkpoint, so a run can resume exactly."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from simdist import atomic
from simdist.errors import CheckpointError

STATE_NAME = "optimizer.safetensors"


def save_optimizer(path: Path, optimizer: torch.optim.Optimizer, *, step: int, setup_hash: str) -> None:
    state = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    for index, slots in state["state"].items():
        for name, value in slots.items():
            tensors[f"{index}.{name}"] = torch.as_tensor(value).detach().cpu().contiguous()
    meta = {"step": str(step), "setup_hash": setup_hash, "param_groups": json.dumps(state["param_groups"])}
    with atomic.atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=meta)


def load_optimizer(path: Path, optimizer: torch.optim.Optimizer, *, setup_hash: str) -> int:
    """Restore the optimiser in place; returns the number of steps already taken."""
    if not path.is_file():
        raise CheckpointError(f"{path}: no optimiser state to resume from")
    try:
        tensors = load_file(str(path))
        from safetensors import safe_open

        with safe_open(str(path), "pt") as fh:
            meta = fh.metadata() or {}
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"{path}: corrupt optimiser state ({str(exc).splitlines()[0]})") from None
    if meta.get("setup_hash") != setup_hash:
        raise CheckpointError(f"{path}: written by a run with other settings (preset or --set differ)")
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        index, _, name = key.partition(".")
        state.setdefault(int(index), {})[name] = value
    current = optimizer.state_dict()
    try:
        optimizer.load_state_dict({"state": state, "param_groups": current["param_groups"]})
    except (ValueError, KeyError) as exc:
        raise CheckpointError(f"{path}: does not fit this model ({exc})") from None
    return int(meta["step"])
