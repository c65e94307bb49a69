"""Data generation by the recipe: mixture, noise schedule, expert_flag, interrupt-and-resume."""

import dataclasses
import json

import h5py
import numpy as np
import pytest

from simdist.data.generate import NoiseSchedule, generate, generate_shard, load_data_config
from simdist.errors import SimdistError
from simdist.sim import load_task


class ConstantPolicy:
    def __init__(self, value: float) -> None:
        self.value, self.rng = value, None

    def act(self, obs):
        return np.full((len(obs["proprio"]), 12), self.value, dtype=np.float32)


class FakeExpert:
    """Final expert acts 0; checkpoint k acts (k + 1) / 10: the recorded action tells who acted."""

    manifest = {"config_hash": "fake"}

    def __init__(self) -> None:
        self.final = ConstantPolicy(0.0)
        self.policies = [ConstantPolicy((k + 1) / 10) for k in range(3)]

    def reseed(self, seed):
        pass

    def weights_hash(self):
        return "fake-weights"

    def value(self, obs):
        return obs["proprio"][:, 0] * 0 + 1.5


def test_noise_schedule_statistics():
    dcfg = load_data_config("default")
    rng = np.random.default_rng(0)
    sched = NoiseSchedule(dcfg, 400, 12, rng)
    assert (sched.std >= 0.05).all() and (sched.std <= 2.5).all()
    noisy = np.stack([sched.step() for _ in range(3000)], axis=1)  # (envs, steps)
    bursts, cleans = [], []
    for row, never in zip(noisy, sched.never, strict=True):
        if never:
            assert not row.any()
            continue
        edges = np.flatnonzero(np.diff(row.astype(int))) + 1
        runs = np.split(row, edges)[1:-1]  # drop the truncated first and last runs
        bursts += [len(r) for r in runs if r[0]]
        cleans += [len(r) for r in runs if not r[0]]
    assert min(bursts) >= 1 and max(bursts) <= 49 and abs(np.mean(bursts) - 25) < 1.5
    assert min(cleans) >= 25 and max(cleans) <= 499 and abs(np.mean(cleans) - 262) < 15
    assert abs(sched.never.mean() - 0.025) < 0.02


def test_mixture_and_expert_flag():
    cfg = load_task("go2_foam", {"episode_seconds": 1.0})
    dcfg = dataclasses.replace(load_data_config("tiny"), num_envs=8, never_noised_share=0.0)
    episodes = generate_shard(cfg, dcfg, FakeExpert(), shard=0, target_steps=8000)
    policy = np.array([p["policy"] for _, p in episodes])
    assert abs((policy == 0).mean() - 0.5) < 0.12  # final expert with p = 0.5 per reset
    counts = np.bincount(policy[policy > 0].astype(int), minlength=4)[1:]
    assert counts.min() > 0.5 * counts.mean()  # checkpoints drawn uniformly
    for arrays, p in episodes:
        action, flag = arrays["action"], arrays["expert_flag"]
        clean = np.all(action == action[:, :1], axis=1) & np.isclose(
            action[:, 0], 0.0 if p["policy"] == 0 else p["policy"] / 10
        )
        if p["policy"] == 0:
            np.testing.assert_array_equal(flag, clean)  # flag exactly where the expert acted unnoised
        else:
            assert not flag.any()  # never set while a checkpoint acts
        np.testing.assert_allclose(arrays["value"], 1.5)
        # the final expert's answer, whoever acted
        np.testing.assert_array_equal(arrays["expert_action"], 0.0)


def test_expert_labels_are_clipped_like_the_executed_actions():
    cfg = load_task("go2_foam", {"episode_seconds": 1.0})
    dcfg = dataclasses.replace(load_data_config("tiny"), num_envs=4, never_noised_share=0.0)

    class Forceful(FakeExpert):  # the final expert asks for more than the simulator executes
        def __init__(self) -> None:
            super().__init__()
            self.final = ConstantPolicy(5.0)

    episodes = generate_shard(cfg, dcfg, Forceful(), shard=0, target_steps=600)
    for arrays, _ in episodes:
        np.testing.assert_array_equal(arrays["expert_action"], cfg.action_clip)
        flag = arrays["expert_flag"]
        np.testing.assert_array_equal(arrays["action"][flag], arrays["expert_action"][flag])


def test_interrupt_and_resume_give_the_same_dataset(tmp_path, monkeypatch):
    import simdist.data.generate as gen

    cfg = load_task("go2_foam", {"episode_seconds": 1.0})
    dcfg = dataclasses.replace(load_data_config("tiny"), steps=900, steps_per_shard=300)
    monkeypatch.setattr(gen, "Expert", lambda _: FakeExpert())
    whole = generate(cfg, dcfg, tmp_path / "expert", tmp_path / "a", "tiny")
    real_shard = gen.generate_shard
    calls = {"n": 0}

    def interrupted(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real_shard(*args, **kwargs)

    monkeypatch.setattr(gen, "generate_shard", interrupted)
    with pytest.raises(KeyboardInterrupt):
        generate(cfg, dcfg, tmp_path / "expert", tmp_path / "b", "tiny")
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert [s["file"] for s in manifest["shards"]] == ["shard_00000.h5"] and not manifest["complete"]
    monkeypatch.setattr(gen, "generate_shard", real_shard)
    resumed = generate(cfg, dcfg, tmp_path / "expert", tmp_path / "b", "tiny")
    assert resumed["shards"] == whole["shards"] == 3 and resumed["steps"] == whole["steps"]
    for k in range(3):
        name = f"shard_{k:05d}.h5"
        with h5py.File(tmp_path / "a" / name) as fa, h5py.File(tmp_path / "b" / name) as fb:
            assert set(fa) == set(fb)
            for key in fa:
                np.testing.assert_array_equal(fa[key][()], fb[key][()], err_msg=f"{name}:{key}")

    # resuming with another training of the expert (same config, other weights) would mix two experts' corpora
    retrained = FakeExpert()
    retrained.weights_hash = lambda: "other-weights"
    monkeypatch.setattr(gen, "Expert", lambda _: retrained)
    monkeypatch.setattr(gen, "generate_shard", interrupted)  # calls["n"] is past 2: no interruption
    (tmp_path / "b" / "shard_00002.h5").unlink()
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    manifest.update(shards=manifest["shards"][:2], complete=False)
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SimdistError, match="config hash"):
        generate(cfg, dcfg, tmp_path / "expert", tmp_path / "b", "tiny")


class LengthByPolicyEnv:
    """The final expert (action 0) runs to the 300-step time-out, a checkpoint (action > 0) falls at step 50."""

    param_names = ["mass"]
    action_dim = 12

    def __init__(self, num_envs: int) -> None:
        self.num_envs, self.t = num_envs, np.zeros(num_envs, dtype=int)

    def reset(self, seed=None):
        return self._obs(), {}

    def _obs(self):
        return {"proprio": np.zeros((self.num_envs, 3), np.float32), "command": np.zeros((self.num_envs, 1))}

    def step(self, actions):
        self.t += 1
        fell = (np.abs(actions[:, 0]) > 0.05) & (self.t >= 50)
        timed_out = (self.t >= 300) & ~fell
        self.t[fell | timed_out] = 0
        info = {"action": actions, "final_params": {"mass": np.ones(self.num_envs)}}
        return self._obs(), np.zeros(self.num_envs, np.float32), fell, timed_out, info

    def close(self):
        pass


def test_a_shard_keeps_its_policy_mix_however_long_each_policys_episodes_are(monkeypatch):
    """Episodes still running at the target are recorded to their end: a shard that dropped them kept the short
    episodes (falls) and lost the long ones, 38 % final-expert episodes here instead of the configured 50 %."""
    import simdist.data.generate as generate_module

    monkeypatch.setattr(generate_module, "make_env", lambda *args, **kwargs: LengthByPolicyEnv(64))
    cfg = load_task("go2_foam")
    dcfg = dataclasses.replace(
        load_data_config("tiny"), num_envs=64, noise_std_range=[0.0, 0.0], never_noised_share=0.0
    )
    shares = []
    for shard in range(4):
        episodes = generate_shard(cfg, dcfg, FakeExpert(), shard=shard, target_steps=6000)
        policy = np.array([p["policy"] for _, p in episodes])
        lengths = np.array([len(a["action"]) for a, _ in episodes])
        assert set(lengths[policy == 0]) == {300} and set(lengths[policy > 0]) == {50}  # whole episodes only
        assert lengths.sum() >= 6000
        shares.append((policy == 0).mean())
    assert abs(np.mean(shares) - 0.5) < 0.08, (
        shares
    )  # 0.54 here (seeded); 0.38 when running episodes were dropped


def test_the_corpus_records_the_randomisation_it_was_drawn_from(tmp_path, monkeypatch):
    """An oracle is checked against this record (`simdist experiment --oracle-model`): a corpus drawn without
    randomisation must not claim the task's ranges."""
    import simdist.data.generate as gen
    from simdist.data.dataset import ShardDataset

    cfg = load_task("go2_foam", {"episode_seconds": 0.5})
    monkeypatch.setattr(gen, "Expert", lambda _: FakeExpert())
    for randomize, name in ((True, "drawn"), (False, "nominal")):
        dcfg = dataclasses.replace(
            load_data_config("tiny"), steps=100, steps_per_shard=100, randomize=randomize
        )
        generate(cfg, dcfg, tmp_path / "expert", tmp_path / name, "tiny")
    assert ShardDataset(tmp_path / "drawn").randomisation == {
        k: list(v) for k, v in cfg.randomisation.items()
    }
    assert ShardDataset(tmp_path / "nominal").randomisation == {}
