"""Checkpoints: exact round trip, refusal of corrupt/truncated/mismatched files, dynamics versions."""

from __future__ import annotations

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file

from simdist.errors import CheckpointError
from simdist.model import (
    WorldModel,
    current_version,
    list_versions,
    load_checkpoint,
    load_model_config,
    publish_dynamics,
    read_dynamics,
    rollback,
    save_checkpoint,
)


def _model(seed: int = 0) -> WorldModel:
    torch.manual_seed(seed)
    model = WorldModel(5, 2, 2, load_model_config("tiny"))
    model.normalizer.load_stats(
        {"proprio": {"mean": [0.1, 0.2, 0.3, 0.4, 0.5], "std": [1.5, 2.5, 0.7, 1.0, 3.0]}}
    )
    for p in model.parameters():  # non-trivial values everywhere (LayerNorms start at 1/0)
        p.data.add_(torch.randn_like(p) * 0.01)
    return model.eval()


@pytest.fixture
def saved(tmp_path):
    model = _model()
    save_checkpoint(model, tmp_path, task="linear", data_hash="abc123")
    return model, tmp_path


def test_round_trip_is_exact(saved):
    model, folder = saved
    loaded = load_checkpoint(folder)
    a, b = model.state_dict(), loaded.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    description = yaml.safe_load((folder / "world_model.yaml").read_text())
    assert description["task"] == "linear" and description["data_hash"] == "abc123"
    assert description["dims"] == {"obs_dim": 5, "act_dim": 2, "cmd_dim": 2}
    assert not any(k.startswith("dynamics.") for k in load_file(folder / "weights.safetensors"))
    assert (folder / "dynamics" / "current").read_text().strip() == "v0000.safetensors"


def _corrupt(folder, how):
    weights = folder / "weights.safetensors"
    if how == "garbage":
        weights.write_bytes(b"\x00" * 64)
    elif how == "truncated":
        weights.write_bytes(weights.read_bytes()[:-100])
    elif how == "missing_key":
        tensors = load_file(weights)
        tensors.pop("encoder.proprio.0.weight")
        save_file(tensors, weights)
    elif how == "nan":
        tensors = load_file(weights)
        tensors["policy.decoder.head.bias"][0] = float("nan")
        save_file(tensors, weights)
    elif how == "shape":  # the YAML says a bigger observation than the weights were trained for
        path = folder / "world_model.yaml"
        data = yaml.safe_load(path.read_text())
        data["dims"]["obs_dim"] = 7
        data["normalizer"]["proprio"] = {"mean": [0.0] * 7, "std": [1.0] * 7}
        path.write_text(yaml.safe_dump(data))
    elif how == "schema":
        path = folder / "world_model.yaml"
        path.write_text(path.read_text().replace("schema_version: 1", "schema_version: 99"))
    elif how == "dynamics_truncated":
        path = folder / "dynamics" / "v0000.safetensors"
        path.write_bytes(path.read_bytes()[:200])
    elif how == "current":
        (folder / "dynamics" / "current").write_text("../../etc/passwd")


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("garbage", r"weights\.safetensors: corrupt or truncated"),
        ("truncated", r"weights\.safetensors: corrupt or truncated"),
        ("missing_key", r"weights\.safetensors: missing key 'encoder\.proprio\.0\.weight'"),
        ("nan", r"key 'policy\.decoder\.head\.bias' has non-finite values"),
        (
            "shape",
            r"key 'encoder\.proprio\.0\.weight' has shape \(32, 5\), the architecture expects \(32, 7\)",
        ),
        ("schema", r"world_model\.yaml: schema version 99"),
        ("dynamics_truncated", r"v0000\.safetensors: corrupt or truncated"),
        ("current", r"current: expected a name like"),
    ],
)
def test_bad_checkpoints_are_refused_with_a_clear_message(saved, how, message):
    _, folder = saved
    _corrupt(folder, how)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(folder)


def test_publish_read_and_roll_back_dynamics(saved):
    model, folder = saved
    tuned = _model()
    with torch.no_grad():
        for p in tuned.dynamics.parameters():
            p.add_(0.5)
    assert publish_dynamics(folder, tuned, note="round 1") == 1
    assert current_version(folder) == 1 and list_versions(folder) == [0, 1]
    loaded = load_checkpoint(folder)
    for (name, p), q in zip(loaded.dynamics.named_parameters(), tuned.dynamics.parameters(), strict=True):
        assert torch.equal(p, q), name
    assert torch.equal(loaded.encoder.proprio[0].weight, model.encoder.proprio[0].weight)
    assert torch.equal(
        load_checkpoint(folder, version=0).dynamics.action.weight, model.dynamics.action.weight
    )
    assert torch.equal(read_dynamics(folder)["action.weight"], tuned.dynamics.action.weight)
    assert rollback(folder) == 0 and current_version(folder) == 0
    assert torch.equal(load_checkpoint(folder).dynamics.action.weight, model.dynamics.action.weight)
    with pytest.raises(CheckpointError, match="no version older"):
        rollback(folder)
    assert rollback(folder, 1) == 1
    with pytest.raises(CheckpointError, match="no such dynamics version"):
        rollback(folder, 7)
    with torch.no_grad():
        tuned.dynamics.action.weight[0, 0] = float("inf")
    with pytest.raises(CheckpointError, match="non-finite"):
        publish_dynamics(folder, tuned)
    assert current_version(folder) == 1 and list_versions(folder) == [0, 1]


def test_no_pickle_files(saved):
    _, folder = saved
    suffixes = {p.suffix for p in folder.rglob("*") if p.is_file()}
    assert suffixes <= {".yaml", ".safetensors", ""}


@pytest.mark.parametrize("name", ["weights.safetensors", "dynamics/v0000.safetensors"])
def test_a_save_cut_short_between_its_files_is_refused(tmp_path, name):
    """One save writes the weights, v0000 and the YAML one after the other; a pretraining killed between two of
    them leaves files of two steps, which must not load (or resume) as one model."""
    save_checkpoint(_model(0), tmp_path / "a", task="linear", data_hash="abc123")
    save_checkpoint(_model(1), tmp_path / "b", task="linear", data_hash="abc123")
    load_checkpoint(tmp_path / "a")  # each alone loads
    (tmp_path / "a" / name).write_bytes((tmp_path / "b" / name).read_bytes())  # the next save got this far
    with pytest.raises(CheckpointError, match="another save"):
        load_checkpoint(tmp_path / "a")


def test_the_same_weights_get_the_same_stamp_and_old_checkpoints_still_load(tmp_path):
    for folder in ("a", "b"):
        save_checkpoint(_model(0), tmp_path / folder, task="linear", data_hash="abc123")
    stamps = [yaml.safe_load((tmp_path / f / "world_model.yaml").read_text())["save_stamp"] for f in "ab"]
    assert stamps[0] == stamps[1] and len(stamps[0]) == 16
    path = tmp_path / "a" / "world_model.yaml"  # a checkpoint written before the stamp existed
    description = yaml.safe_load(path.read_text())
    del description["save_stamp"]
    path.write_text(yaml.safe_dump(description, sort_keys=False))
    load_checkpoint(tmp_path / "a")
