"""World-model checkpoints: a folder with the architecture, the frozen weights and versioned dynamics.

    world_model.yaml            schema version, sizes, normaliser statistics, task, data hash
    weights.safetensors         every weight except the dynamics (and the normaliser, which lives in the YAML)
    dynamics/vNNNN.safetensors  one file per dynamics version; `dynamics/current` names the one in use

Every file is written to a temporary name and moved into place with os.replace. One save writes several files,
so the YAML, the weights and v0000 carry the same `save_stamp` (a hash of the weights saved): a save cut short
between two files (a killed pretraining) leaves a folder that loading refuses instead of a model mixed from two
steps. Loading checks the schema version, keys, shapes, finiteness and stamps and raises CheckpointError naming
the file and key. No pickle anywhere.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from simdist import atomic
from simdist.config import build
from simdist.errors import CheckpointError, ConfigError
from simdist.model.config import ModelConfig
from simdist.model.world_model import WorldModel

SCHEMA_VERSION = 1
CONFIG_NAME = "world_model.yaml"
WEIGHTS_NAME = "weights.safetensors"
DYNAMICS_DIR = "dynamics"
CURRENT_NAME = "current"
_VERSION_RE = re.compile(r"^v(\d{4,})\.safetensors$")

# a version note's key: this version belongs to the model's pretraining (an ensemble's members, trained on simulation)
PRETRAINING = "pretraining"
# the key, in world_model.yaml and the metadata of weights.safetensors and v0000, of the save that wrote them
SAVE_STAMP = "save_stamp"


def _save_stamp(*states: Mapping[str, torch.Tensor]) -> str:
    """A hash of the tensors one save writes (deterministic: the same weights, the same stamp)."""
    digest = hashlib.sha256()
    for state in states:
        for key in sorted(state):
            digest.update(key.encode())
            digest.update(
                state[key].detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
            )
    return digest.hexdigest()[:16]


def _file_stamp(path: Path) -> str | None:
    try:
        with safe_open(str(path), framework="pt") as handle:
            return (handle.metadata() or {}).get(SAVE_STAMP)
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(
            f"{path}: corrupt or truncated safetensors ({str(exc).splitlines()[0]})"
        ) from None


def _check_one_save(root: Path, description: Mapping[str, Any]) -> None:
    """The YAML, the weights and v0000 come from one save (checkpoints from before the stamp are not checked)."""
    stamp = description.get(SAVE_STAMP)
    if stamp is None:
        return
    for path in (root / WEIGHTS_NAME, root / DYNAMICS_DIR / _version_name(0)):
        if path.is_file() and _file_stamp(path) != stamp:
            raise CheckpointError(
                f"{path}: written by another save than {root / CONFIG_NAME} (a save was cut short; train again "
                "from an earlier copy or from scratch)"
            )


def _replace_bytes(path: Path, data: bytes) -> None:
    atomic.write_bytes(path, data)


def _save_tensors(path: Path, tensors: Mapping[str, torch.Tensor], metadata: dict[str, str]) -> None:
    # durable before anything names it: `current` is moved only after this file and its folder reached the disk
    with atomic.atomic_path(path) as tmp:
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(tmp), metadata=metadata)


def _split_state(model: WorldModel) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(frozen weights, dynamics weights); dynamics keys are relative to `model.dynamics`."""
    weights, dynamics = {}, {}
    for key, value in model.state_dict().items():
        if key.startswith("dynamics."):
            dynamics[key.removeprefix("dynamics.")] = value
        elif not key.startswith("normalizer."):
            weights[key] = value
    return weights, dynamics


def save_checkpoint(
    model: WorldModel,
    folder: str | Path,
    *,
    task: str,
    data_hash: str,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write the whole model as a checkpoint whose current dynamics is version 0 (the pretrained one)."""
    root = Path(folder)
    (root / DYNAMICS_DIR).mkdir(parents=True, exist_ok=True)
    weights, dynamics = _split_state(model)
    stamp = _save_stamp(weights, dynamics)
    meta = {"schema_version": str(SCHEMA_VERSION), "task": task, SAVE_STAMP: stamp}
    _save_tensors(root / WEIGHTS_NAME, weights, meta)
    _save_tensors(root / DYNAMICS_DIR / _version_name(0), dynamics, meta)
    description = {
        "schema_version": SCHEMA_VERSION,
        "task": task,
        "data_hash": data_hash,
        "dims": dict(model.dims),
        "model": model.config.to_dict(),
        "normalizer": model.normalizer.stats(),
        "extra": dict(extra or {}),
        SAVE_STAMP: stamp,
    }
    _replace_bytes(root / CONFIG_NAME, yaml.safe_dump(description, sort_keys=False).encode())
    _set_current(root, 0)
    return root


def with_dynamics_members(source: str | Path, out: str | Path, members: int, *, seed: int = 0) -> Path:
    """A new checkpoint in `out`: `source`'s current model with `members` dynamics decoders (an ensemble).

    Member 0 is `source`'s current dynamics, and so is every other member in this first version (v0000): it
    predicts exactly what `source` predicts, disagrees nowhere, and is as safe to deploy or roll back to. The
    new members start from a fresh initialisation when they are trained (`FinetuneOptions(trainable=
    "new_members")`, each on its own bootstrap). Encoder, history, heads and normaliser are `source`'s, bit for
    bit. `out` must not exist; `source` is never modified. `seed` is recorded (the new members' start is drawn
    from the training's seed).
    """
    root, dest = Path(source), Path(out)
    if dest.exists():
        raise CheckpointError(f"{dest}: already exists (choose a new folder for the ensemble)")
    if members < 1:
        raise ConfigError(f"members must be >= 1, got {members}")
    description = read_description(root)
    current, pretrained = current_version(root), pretrained_version(root)
    own = {"finetune_of", "full_finetune_of"} & set(description.get("extra") or {})
    if current > pretrained or own:
        raise CheckpointError(
            f"{root}: its dynamics in force ({version_label(current)}) learnt from real data; an ensemble's v0000 is "
            "pretrained dynamics (roll the model back to its pretrained version first, or use the pretrained model)"
        )
    model = load_checkpoint(root)
    config = build(ModelConfig, {**description["model"], "dynamics_members": members}, "model")
    ensemble = WorldModel.build(description["dims"], config, description["normalizer"])
    state = ensemble.state_dict()
    state.update(model.state_dict())  # every shared weight and member 0
    ensemble.load_state_dict(state, strict=True)
    ensemble.dynamics.copy_member_zero()
    extra = {**description.get("extra", {}), "ensemble_of": str(root), "ensemble_seed": seed}
    return save_checkpoint(
        ensemble, dest, task=description["task"], data_hash=description["data_hash"], extra=extra
    )


def read_description(folder: str | Path) -> dict[str, Any]:
    """world_model.yaml, checked for its schema version and required keys."""
    path = Path(folder) / CONFIG_NAME
    if not path.is_file():
        raise CheckpointError(f"{path}: not found (not a world-model checkpoint)")
    try:
        data = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: corrupt YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a mapping")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise CheckpointError(f"{path}: schema version {version!r}, this code reads {SCHEMA_VERSION}")
    for key in ("task", "data_hash", "dims", "model", "normalizer"):
        if key not in data:
            raise CheckpointError(f"{path}: missing key '{key}'")
    return data


def load_checkpoint(
    folder: str | Path, *, version: int | None = None, device: torch.device | str = "cpu"
) -> WorldModel:
    """Rebuild the model from a checkpoint folder with dynamics `version` (default: the current one)."""
    root = Path(folder)
    description = read_description(root)
    model = _skeleton(root, description)
    weights, dynamics = _split_state(model)
    state = {k: v for k, v in _read_tensors(root / WEIGHTS_NAME, weights).items()}
    version = current_version(root) if version is None else version
    state.update({f"dynamics.{k}": v for k, v in read_dynamics(root, version, model=model).items()})
    state.update({k: v for k, v in model.state_dict().items() if k.startswith("normalizer.")})
    _check_one_save(root, description)  # after each file's own checks, which name what is wrong more exactly
    model.load_state_dict(state, strict=True)
    return model.to(device)


def _skeleton(root: Path, description: dict[str, Any] | None = None) -> WorldModel:
    """An untrained model with the checkpoint's architecture and normaliser."""
    description = description or read_description(root)
    try:
        config = build(ModelConfig, description["model"], "model")
        return WorldModel.build(description["dims"], config, description["normalizer"])
    except (ConfigError, CheckpointError) as exc:
        raise CheckpointError(f"{root / CONFIG_NAME}: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{root / CONFIG_NAME}: bad dims or normaliser ({exc})") from None


def _read_tensors(path: Path, expected: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise CheckpointError(f"{path}: not found")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(
            f"{path}: corrupt or truncated safetensors ({str(exc).splitlines()[0]})"
        ) from None
    missing = sorted(set(expected) - set(tensors))
    if missing:
        raise CheckpointError(f"{path}: missing key '{missing[0]}' ({len(missing)} missing)")
    unexpected = sorted(set(tensors) - set(expected))
    if unexpected:
        raise CheckpointError(f"{path}: unexpected key '{unexpected[0]}' ({len(unexpected)} unexpected)")
    for key, want in expected.items():
        got = tensors[key]
        if tuple(got.shape) != tuple(want.shape):
            raise CheckpointError(
                f"{path}: key '{key}' has shape {tuple(got.shape)}, the architecture expects {tuple(want.shape)}"
            )
        if got.dtype != want.dtype:
            raise CheckpointError(f"{path}: key '{key}' has dtype {got.dtype}, expected {want.dtype}")
        if got.is_floating_point() and not torch.isfinite(got).all():
            raise CheckpointError(f"{path}: key '{key}' has non-finite values")
    return tensors


# -- dynamics versions ----------------------------------------------------------------------------------------


def version_label(version: int) -> str:
    """The one name a dynamics version has: in file names, bags, reports and logs (v0003)."""
    return f"v{version:04d}"


def parse_version(text: str) -> int:
    """The version a label names: `v0003` (as `version_label` writes it) or a bare `3`; ValueError otherwise."""
    match = re.fullmatch(r"v?(\d+)", text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a dynamics version (expected one like v0003)")
    return int(match[1])


def _version_name(version: int) -> str:
    return f"{version_label(version)}.safetensors"


def list_versions(folder: str | Path) -> list[int]:
    """Dynamics versions present in the checkpoint, ascending."""
    names = (Path(folder) / DYNAMICS_DIR).glob("v*.safetensors")
    return sorted(int(m.group(1)) for p in names if (m := _VERSION_RE.match(p.name)))


def current_version(folder: str | Path) -> int:
    """The dynamics version named by `dynamics/current`."""
    path = Path(folder) / DYNAMICS_DIR / CURRENT_NAME
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: not found") from None
    match = _VERSION_RE.match(text)
    if not match:
        raise CheckpointError(f"{path}: expected a name like v0003.safetensors, got {text[:40]!r}")
    return int(match.group(1))


def _set_current(root: Path, version: int) -> None:
    _replace_bytes(root / DYNAMICS_DIR / CURRENT_NAME, (_version_name(version) + "\n").encode())


def read_dynamics(
    folder: str | Path, version: int | None = None, *, model: WorldModel | None = None
) -> dict[str, torch.Tensor]:
    """Dynamics weights (keys relative to `model.dynamics`) of `version` (default current), validated."""
    root = Path(folder)
    version = current_version(root) if version is None else version
    if model is None:  # only the shapes are needed
        model = _skeleton(root)
    expected = {k: v for k, v in model.dynamics.state_dict().items()}
    return _read_tensors(root / DYNAMICS_DIR / _version_name(version), expected)


def publish_dynamics(folder: str | Path, dynamics: torch.nn.Module | WorldModel, *, note: str = "") -> int:
    """Write the given dynamics as the next version and make it current; returns the new version number."""
    root = Path(folder)
    read_description(root)
    module = dynamics.dynamics if isinstance(dynamics, WorldModel) else dynamics
    state = module.state_dict()
    for key, value in state.items():
        if value.is_floating_point() and not torch.isfinite(value).all():
            raise CheckpointError(f"refusing to publish dynamics: key '{key}' has non-finite values")
    versions = list_versions(root)
    version = (versions[-1] + 1) if versions else 0
    _save_tensors(
        root / DYNAMICS_DIR / _version_name(version),
        state,
        {"schema_version": str(SCHEMA_VERSION), "note": note},
    )
    _set_current(root, version)
    return version


def version_note(folder: str | Path, version: int) -> dict[str, Any]:
    """The JSON note a version was published with (what trained it), {} where it has none."""
    path = Path(folder) / DYNAMICS_DIR / _version_name(version)
    try:
        with safe_open(str(path), framework="pt") as handle:
            note = (handle.metadata() or {}).get("note", "")
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(
            f"{path}: corrupt or truncated safetensors ({str(exc).splitlines()[0]})"
        ) from None
    try:
        parsed = json.loads(note) if note else {}
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def pretrained_version(folder: str | Path) -> int:
    """The version that ends the model's pretraining, where adaptation on real data starts: v0000, or the newest
    version whose note marks it as part of pretraining (an ensemble's members trained on simulation). A version
    whose file cannot be read counts as unmarked (it cannot be loaded either; deploying must not stop at it)."""
    marked = []
    for version in list_versions(folder):
        try:
            if version_note(folder, version).get(PRETRAINING):
                marked.append(version)
        except CheckpointError:
            continue
    return marked[-1] if marked else 0


def rollback_target(folder: str | Path, version: int | None = None) -> int:
    """The version a rollback goes to: `version` (it must exist), default the newest one older than the current."""
    root = Path(folder)
    versions = list_versions(root)
    if version is None:
        older = [v for v in versions if v < current_version(root)]
        if not older:
            raise CheckpointError(f"{root / DYNAMICS_DIR}: no version older than the current one")
        version = older[-1]
    if version not in versions:
        raise CheckpointError(f"{root / DYNAMICS_DIR / _version_name(version)}: no such dynamics version")
    return version


def rollback(folder: str | Path, version: int | None = None) -> int:
    """Point `current` at `version` (default: the newest version older than the current one)."""
    root = Path(folder)
    version = rollback_target(root, version)
    read_dynamics(root, version)  # never point `current` at a file that would not load
    _set_current(root, version)
    return version
