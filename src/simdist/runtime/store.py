"""The model store of a running planner: the world model in use, and hot swaps of published dynamics versions.

A watcher thread notices a new `dynamics/current`, loads that version and validates it off the control path
(shapes, finite weights, a finite prediction); the control loop calls `poll()` at a tick boundary, which only swaps
a reference. `rollback()` is one call. Only the dynamics differ between versions: a new model shares every frozen
submodule of the one in use (the same tensors) and has its own dynamics.
"""

from __future__ import annotations

import copy
import logging
import threading
from pathlib import Path

import torch

from simdist.errors import CheckpointError
from simdist.model.checkpoint import (
    current_version,
    load_checkpoint,
    pretrained_version,
    read_description,
    read_dynamics,
    rollback_target,
    version_label,
)
from simdist.model.checkpoint import rollback as rollback_current
from simdist.model.world_model import WorldModel
from simdist.runtime.realtime import freeze_heap

log = logging.getLogger(__name__)


class ModelStore:
    """The model a planner uses now, for the checkpoint folder `folder`.

    Args:
        folder: a checkpoint folder (`simdist.model.checkpoint`).
        poll_s: how often the watcher thread looks at `dynamics/current`.
    """

    def __init__(
        self, folder: str | Path, *, poll_s: float = 0.2, device: str | torch.device = "cpu"
    ) -> None:
        self.folder = Path(folder)
        self.poll_s = poll_s
        self.device = torch.device(device)
        self.version = current_version(self.folder)
        self.model = load_checkpoint(self.folder, version=self.version, device=self.device).eval()
        self._lock = threading.Lock()  # the staged slot, between the control thread and the loaders
        # one check at a time: the watcher and a version announcement (ROS) both call check(); two at once loaded
        # the same version twice, side by side, and the slower one staged it again after the swap
        self._checking = threading.Lock()
        self._staged: tuple[int, WorldModel] | None = None
        self._loaded: dict[int, WorldModel] = {self.version: self.model}  # swapped-out models, for rollback
        self._refused: set[int] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.swaps = 0
        # a finetune's model of its own (full, or heads trained beside the dynamics): its v0000 already learnt
        # from real data (`full_finetune_of`: what full finetunes wrote before 2026-12-06)
        extra = read_description(self.folder).get("extra") or {}
        self._own_finetune = "finetune_of" in extra or "full_finetune_of" in extra
        self.pretrained = pretrained_version(self.folder)  # v0000, or an ensemble's members-trained version

    @property
    def label(self) -> str:
        return version_label(self.version)

    @property
    def adapted(self) -> bool:
        """Whether the dynamics in force were trained on real data: a version the gate published after the
        pretrained one, or any version of a finetune's own model. What grants the planner its `adapted` search."""
        return self.version > self.pretrained or self._own_finetune

    # -- background: notice, load, validate ------------------------------------------------------------------
    def start(self) -> ModelStore:
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="model-store", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.check()
            except Exception:  # the watcher must outlive any bad file; the model in use is untouched
                log.exception("model store: checking %s failed", self.folder)

    def check(self) -> int | None:
        """Look at `dynamics/current` once; load and stage a new version. Returns the staged version, if any.

        Thread-safe: concurrent calls run one after the other, and a version loaded by one is not loaded or staged
        again by the next."""
        with self._checking:
            return self._check()

    def _check(self) -> int | None:
        try:
            version = current_version(self.folder)
        except CheckpointError as exc:  # mid-rollback or a broken pointer: keep what we have
            log.warning("model store: %s", exc)
            return None
        with self._lock:
            staged = self._staged[0] if self._staged else None
        if version in (self.version, staged) or version in self._refused:
            return None
        try:
            model = self._load(version)
        except CheckpointError as exc:
            self._refused.add(version)
            log.error("model store: refusing dynamics %s: %s", version_label(version), exc)
            return None
        with self._lock:
            self._staged = (version, model)
        log.info("model store: dynamics %s loaded and validated", version_label(version))
        return version

    def _load(self, version: int) -> WorldModel:
        if version in self._loaded:
            return self._loaded[version]
        state = read_dynamics(self.folder, version, model=self.model)  # shapes, dtypes, finiteness
        try:
            model = self._with_dynamics(state)
            self._validate(model, version)
            freeze_heap()  # the new model lives on (swapped in, or kept for rollback)
        except CheckpointError:
            raise
        except Exception as exc:  # any other failure is a refusal with its reason, never a retry every poll
            raise CheckpointError(
                f"{self.folder}: dynamics {version_label(version)} does not load into the model in use: {exc}"
            ) from None
        self._loaded[version] = model
        return model

    def _with_dynamics(self, state: dict[str, torch.Tensor]) -> WorldModel:
        """A model whose frozen submodules are the very ones in use (shared, not copied) and whose dynamics hold
        `state`. Copying only the dynamics keeps the watcher's pure-Python work short: a deep copy of the whole
        model took ~35 ms of the GIL on this CPU, enough to push a 50 Hz control tick past its period."""
        dynamics = copy.deepcopy(self.model.dynamics)
        dynamics.load_state_dict(state, strict=True)
        model = copy.copy(self.model)
        model._parameters = dict(self.model._parameters)
        model._buffers = dict(self.model._buffers)
        model._modules = {**self.model._modules, "dynamics": dynamics}
        return model.eval()

    @torch.no_grad()
    def _validate(self, model: WorldModel, version: int) -> None:
        """A prediction from a neutral context must be finite (weights can be finite and still overflow)."""
        h, o, a = model.history, model.obs_dim, model.act_dim
        n = model.normalizer
        obs = n.obs_mean.reshape(1, o).to(self.device)
        ctx = model.context(
            obs.expand(h, o)[None],
            torch.zeros(1, h, a, device=self.device),
            torch.zeros(1, h, dtype=torch.bool, device=self.device),
            obs,
        )
        latents = model.predict(ctx, n.action_mean.reshape(1, 1, a).expand(1, model.horizon, a))
        if not bool(torch.isfinite(latents).all()):
            raise CheckpointError(
                f"{self.folder}: dynamics {version_label(version)} predicts non-finite latents"
            )

    # -- control path ------------------------------------------------------------------------------------------
    def poll(self) -> int | None:
        """At a tick boundary: swap in a staged version (a reference swap). Returns the new version, if swapped."""
        with self._lock:
            staged, self._staged = self._staged, None
        if staged is None:
            return None
        self.version, self.model = staged
        self.swaps += 1
        return self.version

    def rollback(self, version: int | None = None) -> int:
        """Validate `version` (default: the newest one older than the current), then point `dynamics/current` at
        it and stage it; the planner uses it from the next tick boundary. Raises CheckpointError (and leaves
        `current` where it was) when there is nothing to roll to or the version fails validation."""
        with self._checking:  # not beside a check, which could stage the version rolled away from after this
            target = rollback_target(self.folder, version)
            model = self._load(target)  # refuses before the pointer moves
            rollback_current(self.folder, target)
            with self._lock:
                self._staged = (target, model)
        return target

    def reload_now(self) -> int | None:
        """Check and swap at once (between runs, not in the control loop)."""
        self.check()
        return self.poll()
