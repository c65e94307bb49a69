"""Window sampler: windows stay inside one episode, start padding and masks, held-out split, DDP slices."""

from __future__ import annotations

import numpy as np
import torch

from simdist.data import InMemoryEpisodes, WindowSampler, held_out, split_episodes
from simdist.train.losses import loss_masks

H, T = 4, 3


def _episodes(lengths):
    """proprio = (episode id, step, ...), action = 1000 * id + step + 1 (never zero), so every value is traceable."""
    out = []
    for e, n in enumerate(lengths):
        steps = np.arange(n)
        out.append(
            {
                "proprio": np.stack([np.full(n, e), steps, np.ones(n)], 1).astype(np.float32),
                "action": np.stack([1000.0 * e + steps + 1] * 2, 1).astype(np.float32),
                "command": np.full((n, 1), e, np.float32),
                "reward": (100.0 * e + steps).astype(np.float32),
                "value": (-100.0 * e - steps).astype(np.float32),
                "expert_flag": steps % 5 != 4,
                "episode": np.full(n, 10 + e),
            }
        )
    return out


def test_windows_never_cross_episodes_and_pad_correctly():
    lengths = [2, 3, 9, 6]
    sampler = WindowSampler(InMemoryEpisodes(_episodes(lengths)), H, T)
    assert len(sampler) == sum(n - 1 for n in lengths)
    b = sampler.windows(np.arange(len(sampler)))
    episodes, t = sampler.locate(np.arange(len(sampler)))
    for i, (e, ti) in enumerate(zip(episodes, t, strict=True)):
        n = lengths[e]
        for name in ("obs_hist", "future_obs"):
            assert (getattr(b, name)[i, :, 0] == e).all(), f"{name} crosses an episode boundary"
        assert b.obs[i, 1] == ti and b.obs[i, 0] == e
        for h in range(H):
            step = ti - H + h
            assert bool(b.hist_mask[i, h]) == (step >= 0)
            if step >= 0:
                assert b.obs_hist[i, h, 1] == step and b.act_hist[i, h, 0] == 1000 * e + step + 1
            else:  # padded: repeat the first observation, zero action
                assert b.obs_hist[i, h, 1] == 0 and (b.act_hist[i, h] == 0).all()
        for k in range(T):
            real = ti + k + 1 <= n - 1
            exists = ti + k <= n - 1  # step t+k itself: its action and reward, even the episode's last
            assert bool(b.future_mask[i, k]) == real and bool(b.step_mask[i, k]) == exists
            assert b.future_obs[i, k, 1] == min(ti + k + 1, n - 1)  # past the end: the last observation
            if exists:
                assert b.actions[i, k, 0] == 1000 * e + ti + k + 1
                assert b.reward[i, k] == 100 * e + ti + k
                assert bool(b.expert_flag[i, k]) == ((ti + k) % 5 != 4)  # the last step's action too
            else:
                assert (b.actions[i, k] == 0).all() and b.reward[i, k] == 0 and not b.expert_flag[i, k]
            if real:
                assert b.value[i, k] == -100 * e - (ti + k + 1)
            else:
                assert b.value[i, k] == 0
        last = n - 1 - ti  # the chunk position of the episode's last step, when the window reaches it
        if last < T:
            assert loss_masks(b[i : i + 1])["reward"][0, last] == 1  # the last step's reward is trained on
            # and the action taken there, where the expert took it
            assert loss_masks(b[i : i + 1])["action"][0, last] == float(b.expert_flag[i, : last + 1].all())
            assert loss_masks(b[i : i + 1])["dynamics"][0, last] == 0  # nothing follows it to predict
    assert b.obs_hist.dtype == torch.float32 and b.hist_mask.dtype == torch.bool
    assert b.obs_hist.shape == (len(sampler), H, 3) and b.actions.shape == (len(sampler), T, 2)


def test_held_out_split_is_deterministic_and_by_episode_id():
    ids = np.arange(1000) * 7 + 3
    mask = held_out(ids, 0.1)
    assert 50 < mask.sum() < 150
    perm = np.random.default_rng(0).permutation(len(ids))
    np.testing.assert_array_equal(held_out(ids[perm], 0.1), mask[perm])  # order does not matter
    assert held_out(np.array([5, 6]), 0.01).sum() == 1  # tiny datasets still hold one out
    assert not held_out(ids, 0.0).any()
    source = InMemoryEpisodes(_episodes([5] * 20))
    train, val = split_episodes(source, 0.25)
    assert set(train).isdisjoint(val) and len(train) + len(val) == 20 and len(val) >= 1
    sampler = WindowSampler(source, H, T, val)
    episodes, _ = sampler.locate(np.arange(len(sampler)))
    assert set(episodes) == set(val)


def test_rank_slices_make_up_the_global_batch():
    sampler = WindowSampler(InMemoryEpisodes(_episodes([12, 7, 30])), H, T)
    full = sampler.sample(8, np.random.default_rng([0, 5]))
    parts = [sampler.sample(8, np.random.default_rng([0, 5]), part=(r, 2)) for r in range(2)]
    assert torch.equal(torch.cat([p.obs for p in parts]), full.obs)
    assert torch.equal(torch.cat([p.future_obs for p in parts]), full.future_obs)
