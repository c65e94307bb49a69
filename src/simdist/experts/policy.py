"""Expert checkpoints on disk and their inference: `manifest.json` plus safetensors files, no pickle.

An expert folder holds the policy at several training iterations (near-random to final), the final critic, and a
manifest naming them. PPO experts are rsl-rl MLP models; the scripted peg expert (simdist.robots.ur5e.search, on
the robot's own measurements) stores its degradation levels.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rsl_rl.models import MLPModel
from safetensors.torch import load_file, save_file
from tensordict import TensorDict

from simdist import atomic
from simdist.errors import CheckpointError
from simdist.robots.ur5e.search import search_action

SCHEMA_VERSION = 1
Obs = dict[str, np.ndarray]


def atomic_json(path: Path, data: dict[str, Any]) -> None:
    atomic.write_json(path, data, indent=2, sort_keys=True)


def atomic_safetensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    with atomic.atomic_path(path) as tmp:
        save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(tmp))


def read_manifest(folder: Path) -> dict[str, Any]:
    path = Path(folder) / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(
            f"no expert at {folder}: {path.name} is missing (train one with `simdist expert train`)"
        ) from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: corrupt manifest ({exc.msg})") from None
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise CheckpointError(f"{path}: schema version {manifest.get('schema_version')} != {SCHEMA_VERSION}")
    return manifest


def actor_file(manifest: dict[str, Any]) -> str | None:
    """The expert's actor network file: a PPO expert's final policy, a scripted expert's distilled network (if any)."""
    if manifest["kind"] == "ppo":
        return manifest["final"]["file"]
    return manifest.get("actor", {}).get("file")


def dummy_obs(dims: dict[str, int]) -> TensorDict:
    return TensorDict({k: torch.zeros(1, d) for k, d in dims.items()}, batch_size=[1])


def build_mlp(manifest: dict[str, Any], role: str) -> MLPModel:
    """The rsl-rl model of the actor ('actor') or critic ('critic') described by a manifest."""
    groups = manifest["obs_groups"]
    if role == "actor":
        return MLPModel(
            dummy_obs(manifest["obs_dims"]),
            groups,
            "actor",
            manifest["action_dim"],
            hidden_dims=manifest["actor_hidden"],
            activation=manifest["activation"],
            obs_normalization=True,
            distribution_cfg={"class_name": "GaussianDistribution", "init_std": 1.0},
        )
    return MLPModel(
        dummy_obs(manifest["obs_dims"]),
        groups,
        "critic",
        1,
        hidden_dims=manifest["critic_hidden"],
        activation=manifest["activation"],
        obs_normalization=True,
    )


def _load_weights(model: torch.nn.Module, path: Path) -> None:
    try:
        state = load_file(str(path))
    except FileNotFoundError:
        raise CheckpointError(f"missing expert file {path}") from None
    except Exception as exc:  # safetensors raises its own error types for truncated or corrupt files
        raise CheckpointError(f"{path}: unreadable safetensors ({exc})") from None
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise CheckpointError(
            f"{path}: weights do not match the manifest ({str(exc).splitlines()[0]})"
        ) from None


@dataclass
class ExpertPolicy:
    """One policy of an expert folder (a checkpoint or the final one); `act` maps observations to actions."""

    manifest: dict[str, Any]
    name: str
    model: MLPModel | None = None
    level: dict[str, float] | None = None
    rng: np.random.Generator | None = None

    def act(self, obs: Obs) -> np.ndarray:
        if self.model is not None:
            td = TensorDict(
                {k: torch.as_tensor(obs[k], dtype=torch.float32) for k in self.manifest["obs_dims"]},
                batch_size=[len(obs["proprio"])],
            )
            with torch.inference_mode():
                return self.model(td).numpy()
        assert self.level is not None
        scales = self.manifest["action_scales"]
        action = search_action(obs["proprio"], obs["command"], self.level["gain"], scales[0], scales[1])
        if self.level["noise"] > 0:
            if self.rng is None:
                self.rng = np.random.default_rng(0)
            action += self.rng.normal(0.0, self.level["noise"], action.shape).astype(np.float32)
        return action


class Expert:
    """An expert folder: the final policy, the intermediate checkpoints, and the critic on privileged observations."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.manifest = read_manifest(self.folder)
        self.task = self.manifest["task"]
        self.critic = build_mlp(self.manifest, "critic")
        _load_weights(self.critic, self.folder / self.manifest["critic"])
        self.critic.eval()
        self.policies = [self._policy(entry) for entry in self.manifest["checkpoints"]]
        self.final = self._policy(self.manifest["final"])

    def _policy(self, entry: dict[str, Any]) -> ExpertPolicy:
        if self.manifest["kind"] == "scripted":
            return ExpertPolicy(self.manifest, entry["name"], level=entry["level"])
        model = build_mlp(self.manifest, "actor")
        _load_weights(model, self.folder / entry["file"])
        model.eval()
        return ExpertPolicy(self.manifest, entry["name"], model=model)

    def network(self) -> ExpertPolicy | None:
        """The actor network (`actor_file`): what PPO resumes; None for a scripted expert without one."""
        file = actor_file(self.manifest)
        if file is None:
            return None
        model = build_mlp(self.manifest, "actor")
        _load_weights(model, self.folder / file)
        model.eval()
        return ExpertPolicy(self.manifest, "network", model=model)

    def weights_hash(self) -> str:
        """A hash of every weight file the manifest names (two trainings with one config differ here: PPO's time
        budget, not its iteration count, ends a run)."""
        digest = hashlib.sha256()
        entries = [{"file": self.manifest["critic"]}, *self.manifest["checkpoints"], self.manifest["final"]]
        for name in sorted({e["file"] for e in entries if e.get("file")}):
            digest.update(name.encode())
            digest.update((self.folder / name).read_bytes())
        return digest.hexdigest()[:16]

    def reseed(self, seed: int) -> None:
        """Restart the random streams of stochastic (degraded scripted) policies."""
        for k, policy in enumerate([self.final, *self.policies]):
            policy.rng = np.random.default_rng([seed, k])

    def value(self, obs: Obs) -> np.ndarray:
        td = TensorDict(
            {k: torch.as_tensor(obs[k], dtype=torch.float32) for k in self.manifest["obs_dims"]},
            batch_size=[len(obs["proprio"])],
        )
        with torch.inference_mode():
            return self.critic(td)[:, 0].numpy()
