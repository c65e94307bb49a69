"""The planner's observation history: the last H observations and actions, padded at an episode start exactly as
the training windows are (`simdist.data.windows`): before the first step the first observation repeats with zero
actions and the mask False.
"""

from __future__ import annotations

import numpy as np
import torch


class ObservationHistory:
    """Holds one episode's recent steps; `inputs()` gives the model's (obs_hist, act_hist, hist_mask, obs)."""

    def __init__(self, history: int, obs_dim: int, act_dim: int) -> None:
        self.history = history
        self.obs_dim = obs_dim
        self.act_dim = act_dim
        self._obs: list[np.ndarray] = []  # observations 0..t of this episode (the last H + 1 kept)
        self._act: list[np.ndarray] = []  # actions 0..t-1
        self.step = -1

    def reset(self) -> None:
        """Start a new episode: the next `push` is step 0."""
        self._obs.clear()
        self._act.clear()
        self.step = -1

    def push(self, obs: np.ndarray) -> None:
        """The observation of the next step (after the action of the previous step was recorded).

        Non-finite entries (a corrupt reading; the deploy loop holds at that tick) are carried from the step before
        (0 at an episode's first step), so one bad reading does not poison the next `history` plans."""
        obs = np.asarray(obs, dtype=np.float32).reshape(self.obs_dim).copy()
        if len(self._act) != len(self._obs):
            raise RuntimeError("record the action of the previous step before pushing the next observation")
        bad = ~np.isfinite(obs)
        if bad.any():
            obs[bad] = self._obs[-1][bad] if self._obs else 0.0
        self._obs.append(obs)
        self.step += 1
        if len(self._obs) > self.history + 1:
            del self._obs[0], self._act[0]

    def record(self, action: np.ndarray) -> None:
        """The action executed at the current step."""
        if len(self._act) != len(self._obs) - 1:
            raise RuntimeError("push an observation before recording its action")
        self._act.append(np.asarray(action, dtype=np.float32).reshape(self.act_dim).copy())

    @property
    def pending_action(self) -> bool:
        """True between `push` and `record` (the current step's action is not known yet)."""
        return len(self._act) == len(self._obs) - 1

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(H, O) past observations, (H, A) past actions, (H,) mask, (O,) current observation, as float32 numpy."""
        if not self._obs:
            raise RuntimeError("no observation pushed in this episode")
        h = self.history
        past_obs = self._obs[:-1][-h:]
        past_act = self._act[: len(self._obs) - 1][-h:]
        real = len(past_obs)
        first = self._obs[0]  # padding only happens while step < H, when step 0 is still kept
        obs_hist = np.empty((h, self.obs_dim), np.float32)
        act_hist = np.zeros((h, self.act_dim), np.float32)
        mask = np.zeros(h, bool)
        obs_hist[: h - real] = first  # before the episode start: the first observation, zero action, masked
        if real:
            obs_hist[h - real :] = np.stack(past_obs)
            act_hist[h - real :] = np.stack(past_act)
            mask[h - real :] = True
        return obs_hist, act_hist, mask, self._obs[-1].copy()

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """`arrays()` as batch-1 torch tensors for `WorldModel.context`."""
        obs_hist, act_hist, mask, obs = self.arrays()
        return (
            torch.from_numpy(obs_hist)[None],
            torch.from_numpy(act_hist)[None],
            torch.from_numpy(mask)[None],
            torch.from_numpy(obs)[None],
        )
