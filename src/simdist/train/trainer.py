"""The pretraining loop: seeded batches, Adam with warm-up + cosine, clipping, DDP, checkpoints and logs.

Batch i is drawn from a generator seeded by (seed, i), and each process takes its slice of the same global
batch, so a resumed run and a run on any number of processes see exactly the batches of one uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from simdist.data.windows import WindowSampler
from simdist.errors import CheckpointError, ConfigError
from simdist.model.checkpoint import CONFIG_NAME, load_checkpoint, read_description, save_checkpoint
from simdist.model.world_model import WorldModel
from simdist.train.config import Setup
from simdist.train.losses import compute_losses
from simdist.train.schedule import learning_rate
from simdist.train.state import STATE_NAME, load_optimizer, save_optimizer

TERMS = ("dynamics", "reward", "value", "action")


@dataclasses.dataclass
class Trainer:
    """One model, its optimiser and sampler; `rank`/`world` select this process's slice of each batch."""

    model: WorldModel
    setup: Setup
    sampler: WindowSampler
    device: torch.device
    rank: int = 0
    world: int = 1
    step: int = 0
    # what the corpus was generated under, written into every checkpoint (the simulation's randomisation)
    corpus: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        cfg = self.setup.train
        if cfg.batch_size % self.world:
            raise ConfigError(f"train.batch_size {cfg.batch_size} is not divisible by {self.world} processes")
        self.model.to(self.device)
        self.net: torch.nn.Module = self.model
        if self.world > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.net = DistributedDataParallel(self.model, device_ids=ids)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    def train_step(self) -> dict[str, float]:
        """One optimisation step on global batch number `self.step`; returns the loss terms and lr."""
        cfg = self.setup.train
        lr = learning_rate(
            self.step, peak=cfg.lr, final=cfg.final_lr, warmup=cfg.warmup_steps, total=cfg.steps
        )
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        rng = np.random.default_rng([cfg.seed, self.step])
        batch = self.sampler.sample(cfg.batch_size, rng, part=(self.rank, self.world)).to(self.device)
        self.net.train()
        out = self.net(batch)
        total, terms = compute_losses(out, batch, cfg.weights)
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        self.optimizer.step()
        self.step += 1
        result = {k: float(v) for k, v in terms.items()}
        result.update(
            lr=lr, grad_norm=float(grad_norm), total=sum(getattr(cfg.weights, k) * result[k] for k in TERMS)
        )
        return result

    @torch.no_grad()
    def validate(self, sampler: WindowSampler, limit: int) -> dict[str, float]:
        """Mean loss terms over up to `limit` held-out windows (evaluation mode, no noise)."""
        self.model.eval()
        sums = dict.fromkeys(TERMS, 0.0)
        batches = 0
        for batch in sampler.iterate(self.setup.train.batch_size, limit):
            batch = batch.to(self.device)
            _, terms = compute_losses(self.model(batch), batch, self.setup.train.weights, distributed=False)
            for k in TERMS:
                sums[k] += float(terms[k])
            batches += 1
        return {k: v / max(batches, 1) for k, v in sums.items()}

    def save(self, out_dir: Path, *, task: str, data_hash: str) -> None:
        """Checkpoint first, then the optimiser state that names the step (the resume point)."""
        extra = {
            "step": self.step,
            "setup_hash": self.setup.hash(),
            "train": dataclasses.asdict(self.setup.train),
            **self.corpus,
        }
        save_checkpoint(self.model, out_dir, task=task, data_hash=data_hash, extra=extra)
        save_optimizer(out_dir / STATE_NAME, self.optimizer, step=self.step, setup_hash=self.setup.hash())

    def resume(self, out_dir: Path) -> None:
        """Load weights and optimiser from `out_dir` and continue after their step."""
        description = read_description(out_dir)
        if description.get("extra", {}).get("setup_hash") != self.setup.hash():
            raise CheckpointError(
                f"{out_dir / CONFIG_NAME}: written by a run with other settings (preset or --set differ)"
            )
        saved = load_checkpoint(out_dir)
        try:
            self.model.load_state_dict(saved.state_dict())
        except RuntimeError as exc:
            raise CheckpointError(
                f"{out_dir}: does not fit this model ({str(exc).splitlines()[0]})"
            ) from None
        step = load_optimizer(out_dir / STATE_NAME, self.optimizer, setup_hash=self.setup.hash())
        if description.get("extra", {}).get("step") != step:
            raise CheckpointError(
                f"{out_dir / CONFIG_NAME}: weights and optimiser state are from different steps"
            )
        self.step = step


def run_training(
    trainer: Trainer,
    *,
    out_dir: Path,
    task: str,
    data_hash: str,
    val_sampler: WindowSampler | None = None,
    log: Callable[[int, dict[str, float]], None] | None = None,
    on_step: Callable[[int], None] | None = None,
) -> dict[str, float]:
    """Train until `setup.train.steps`, saving every `save_every` steps and at the end (rank 0 only)."""
    cfg = trainer.setup.train
    last: dict[str, float] = {}
    is_main = trainer.rank == 0
    while trainer.step < cfg.steps:
        last = trainer.train_step()
        if log is not None and (trainer.step % cfg.log_every == 0 or trainer.step == cfg.steps):
            log(trainer.step, {f"train/{k}": v for k, v in last.items()})
        if val_sampler is not None and len(val_sampler) and trainer.step % cfg.eval_every == 0 and is_main:
            val = trainer.validate(val_sampler, cfg.eval_windows)
            if log is not None:
                log(trainer.step, {f"val/{k}": v for k, v in val.items()})
        if is_main and (trainer.step % cfg.save_every == 0 or trainer.step == cfg.steps):
            trainer.save(out_dir, task=task, data_hash=data_hash)
        if on_step is not None:
            on_step(trainer.step)
        if trainer.world > 1 and trainer.step % cfg.save_every == 0:
            dist.barrier()  # nobody races ahead of a checkpoint it might resume from
    return last


def release_process_group() -> None:
    """Leave the process group while the interpreter is whole.

    The DDP wrapper sits in reference cycles that hold the gloo group; left to interpreter exit, the group's threads
    are torn down during finalisation and the process can abort (SIGABRT, "terminate called without an active
    exception"). Collect them first, then destroy the group.
    """
    gc.collect()
    dist.destroy_process_group()
    gc.collect()
