"""HDF5 shards and manifest: round trip, normaliser statistics, corrupt shards, interrupted writers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simdist.data import InMemoryEpisodes, ShardDataset, ShardWriter, WindowSampler, resume
from simdist.data.synthetic import linear_system_episodes, write_linear_dataset
from simdist.errors import DatasetError

INFO = {"task": "linear", "preset": "synthetic", "config_hash": "h1"}


def test_round_trip_and_params(tmp_path):
    episodes = linear_system_episodes(9, length=(5, 30), seed=3)
    with ShardWriter(tmp_path, INFO, steps_per_shard=60) as writer:
        for episode, params in episodes:
            writer.add_episode(episode, params)
    ds = ShardDataset(tmp_path)
    assert len(ds.manifest["shards"]) > 1
    assert len(ds) == 9 and ds.manifest["episodes"] == 9 and ds.manifest["complete"]
    assert ds.manifest["steps"] == sum(len(e["proprio"]) for e, _ in episodes)
    for i, (episode, _) in enumerate(episodes):
        n = len(episode["proprio"])
        got = ds.read(i, 0, n, ["proprio", "action", "reward", "value", "expert_flag", "command"])
        for field, value in got.items():
            np.testing.assert_array_equal(value, episode[field])
    assert list(ds.episode_ids()) == list(range(9))
    columns, table = ds.params()
    assert columns == ["gain", "noise_std"]
    np.testing.assert_allclose(table[:, 0], [p["gain"] for _, p in episodes], rtol=1e-6)


def test_normaliser_statistics_match_data(tmp_path):
    episodes = linear_system_episodes(12, length=(10, 40), seed=5)
    with ShardWriter(tmp_path, INFO, steps_per_shard=100) as writer:
        for episode, params in episodes:
            writer.add_episode(episode, params)
    stats = ShardDataset(tmp_path).normalizer
    for field in ("proprio", "command", "action", "reward", "value"):
        data = np.concatenate([e[field] for e, _ in episodes]).astype(np.float64)
        data = data.reshape(len(data), -1)
        np.testing.assert_allclose(stats[field]["mean"], data.mean(0), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(stats[field]["std"], data.std(0), rtol=1e-6, atol=1e-7)
    memory = InMemoryEpisodes([e for e, _ in episodes]).normalizer_stats()
    np.testing.assert_allclose(memory["proprio"]["std"], stats["proprio"]["std"], rtol=1e-6)


def test_lazy_windows_equal_in_memory_windows(tmp_path):
    ds = ShardDataset(write_linear_dataset(tmp_path, 8, length=(3, 25), steps_per_shard=50))
    assert ds.load(max_bytes=0) is ds  # too big for the budget: stays on disk
    memory = ds.load()
    assert isinstance(memory, InMemoryEpisodes)
    lazy, fast = WindowSampler(ds, 4, 3), WindowSampler(memory, 4, 3)
    index = np.arange(len(lazy))
    a, b = lazy.windows(index), fast.windows(index)
    for name in (
        "obs_hist",
        "act_hist",
        "hist_mask",
        "obs",
        "future_obs",
        "actions",
        "command",
        "reward",
        "value",
    ):
        assert getattr(a, name).equal(getattr(b, name)), name


@pytest.mark.parametrize("damage", ["garbage", "truncate", "delete"])
def test_corrupt_shard_is_named(tmp_path, damage):
    write_linear_dataset(tmp_path, 6, length=20, steps_per_shard=40)
    shard = tmp_path / "shard_00001.h5"
    if damage == "garbage":
        shard.write_bytes(b"not an hdf5 file at all" * 100)
    elif damage == "truncate":
        shard.write_bytes(shard.read_bytes()[:800])
    else:
        shard.unlink()
    with pytest.raises(DatasetError, match="shard_00001.h5"):
        ShardDataset(tmp_path)


def test_missing_or_corrupt_manifest(tmp_path):
    with pytest.raises(DatasetError, match="manifest"):
        ShardDataset(tmp_path)
    (tmp_path / "manifest.json").write_text("{broken")
    with pytest.raises(DatasetError, match="manifest.json"):
        ShardDataset(tmp_path)


def test_interrupted_writer_keeps_completed_shards_and_resumes(tmp_path):
    episodes = linear_system_episodes(10, length=20, seed=1)
    with pytest.raises(RuntimeError), ShardWriter(tmp_path, INFO, steps_per_shard=40) as writer:
        for i, (episode, params) in enumerate(episodes):
            writer.add_episode(episode, params)
            if i == 6:  # shards 0..2 are complete, episode 6 is only buffered
                raise RuntimeError("killed")
    # what a crash mid-flush would leave: a temporary file, and a shard the manifest never listed
    (tmp_path / ".shard_00003.h5.tmp").write_bytes(b"half")
    (tmp_path / "shard_00004.h5").write_bytes(b"unlisted")
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert not manifest["complete"] and manifest["episodes"] == 6
    ds = ShardDataset(tmp_path)  # every completed shard is readable, the manifest consistent
    assert len(ds) == 6 and list(ds.episode_ids()) == list(range(6))
    info = resume(tmp_path)
    assert info.complete_shards == ["shard_00000.h5", "shard_00001.h5", "shard_00002.h5"]
    assert (info.episodes, info.next_shard, info.next_episode_id) == (6, 3, 6)
    ds.close()
    with pytest.raises(DatasetError, match="already exists"):
        ShardWriter(tmp_path, INFO)
    with pytest.raises(DatasetError, match="config hash"):
        ShardWriter(tmp_path, {**INFO, "config_hash": "other"}, resume=True)
    with ShardWriter(tmp_path, INFO, steps_per_shard=40, resume=True) as writer:
        assert not (tmp_path / ".shard_00003.h5.tmp").exists() and not (tmp_path / "shard_00004.h5").exists()
        for episode, params in episodes[6:]:
            writer.add_episode(episode, params)
    ds = ShardDataset(tmp_path)
    assert len(ds) == 10 and list(ds.episode_ids()) == list(range(10))
    np.testing.assert_array_equal(ds.read(9, 0, 20, ["proprio"])["proprio"], episodes[9][0]["proprio"])


def test_writer_refuses_bad_episodes(tmp_path):
    (episode, params), (other, _) = linear_system_episodes(2, length=10)
    writer = ShardWriter(tmp_path, INFO)
    with pytest.raises(DatasetError, match="lacks field 'value'"):
        writer.add_episode({k: v for k, v in episode.items() if k != "value"}, params)
    with pytest.raises(DatasetError, match="'reward' has 9 steps"):
        writer.add_episode({**episode, "reward": episode["reward"][:9]}, params)
    bad = episode["proprio"].copy()
    bad[3, 0] = np.nan
    with pytest.raises(DatasetError, match="non-finite"):
        writer.add_episode({**episode, "proprio": bad}, params)
    writer.add_episode(episode, params)
    with pytest.raises(DatasetError, match="dims"):
        writer.add_episode({**other, "proprio": other["proprio"][:, :3]}, params)


def test_expert_labels_travel_from_writer_to_windows(tmp_path):
    root = write_linear_dataset(
        tmp_path / "labelled", 6, length=(3, 20), steps_per_shard=40, expert_labels=True
    )
    ds = ShardDataset(root)
    assert ds.optional == ("expert_action",) and not ds.has_image
    memory = ds.load()
    assert memory.optional == ("expert_action",)
    lazy, fast = WindowSampler(ds, 4, 3, expert_labels=True), WindowSampler(memory, 4, 3, expert_labels=True)
    index = np.arange(len(lazy))
    a, b = lazy.windows(index), fast.windows(index)
    assert a.expert_action is not None and a.expert_action.equal(b.expert_action)
    # the label equals the executed action where the expert acted clean, and differs where noise was added
    flag, exists = a.expert_flag, a.step_mask
    same = (a.expert_action == a.actions).all(-1)
    assert same[flag].all() and not same[exists & ~flag].all()
    assert (a.expert_action[~exists] == 0).all()  # padded past the episode's end like the actions
    assert (a.expert_action[exists & ~a.future_mask] != 0).any()  # an episode's last step keeps its label
    assert WindowSampler(ds, 4, 3).windows(index).expert_action is None  # only when asked for


def test_expert_labels_are_refused_where_the_corpus_has_none(tmp_path):
    ds = ShardDataset(write_linear_dataset(tmp_path, 3, length=10))
    assert ds.optional == ()
    with pytest.raises(DatasetError, match="no expert_action"):
        WindowSampler(ds, 4, 3, expert_labels=True)
    (labelled, params), (plain, _) = linear_system_episodes(2, length=10, expert_labels=True)
    plain = {k: v for k, v in plain.items() if k != "expert_action"}
    writer = ShardWriter(tmp_path / "mixed", INFO)
    writer.add_episode(labelled, params)
    with pytest.raises(DatasetError, match="carries \\[\\], earlier episodes \\['expert_action'\\]"):
        writer.add_episode(plain, params)
    with pytest.raises(DatasetError, match="expert_action has shape"):
        writer.add_episode({**labelled, "expert_action": labelled["expert_action"][:, :1]}, params)
