"""(history H, future T) training windows that never cross an episode boundary.

At step t of an episode of length L a window holds observations t-H..t-1 with actions t-H..t-1 (history),
observation t (current), observations t+1..t+T (future) and actions, commands, rewards t..t+T-1, values and
expert flags for the same chunk (and, where the corpus carries them and the sampler is asked for them, the final
expert's own actions at t..t+T-1: DAgger's labels for behaviour cloning). History before the episode start repeats
the first observation with zero actions and `hist_mask` False; the future past the episode end repeats the last
observation with `future_mask` False. Only t <= L-2 are windows, so each has at least one real future step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import torch

from simdist.data.dataset import WINDOW_FIELDS, EpisodeSource, InMemoryEpisodes
from simdist.errors import DatasetError


@dataclasses.dataclass
class WindowBatch:
    """A batch of windows as torch tensors, raw units. `value[:, k]` is the critic at the state future_obs[:, k]."""

    obs_hist: torch.Tensor  # (B, H, O)
    act_hist: torch.Tensor  # (B, H, A)
    hist_mask: torch.Tensor  # (B, H) True where real
    obs: torch.Tensor  # (B, O) observation at t
    future_obs: torch.Tensor  # (B, T, O) observations t+1..t+T
    actions: torch.Tensor  # (B, T, A) actions t..t+T-1
    command: torch.Tensor  # (B, T, C) commands t..t+T-1
    reward: torch.Tensor  # (B, T) rewards t..t+T-1
    value: torch.Tensor  # (B, T) expert critic at t+1..t+T
    expert_flag: torch.Tensor  # (B, T) expert acting, not noised, at t..t+T-1 (False past the end)
    future_mask: torch.Tensor  # (B, T) True where step t+k+1 exists (what the latent and value terms need)
    # (B, T) True where step t+k exists: its action and reward are real even at an episode's last step, the one
    # that carries a fall's penalty (the reward term needs z_{t+k} and a_{t+k}, not what follows)
    step_mask: torch.Tensor
    image: torch.Tensor | None = None  # (B, 64, 64, 3) uint8 at t
    future_image: torch.Tensor | None = None  # (B, T, 64, 64, 3) uint8 at t+1..t+T
    # (B, T, A) the final expert's action at t..t+T-1, zero past the end (DAgger's labels, when asked for)
    expert_action: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> WindowBatch:
        return WindowBatch(
            **{
                f.name: (v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v)
                for f in dataclasses.fields(self)
                for v in [getattr(self, f.name)]
            }
        )

    def __getitem__(self, index: slice | torch.Tensor) -> WindowBatch:
        return WindowBatch(
            **{
                f.name: (v[index] if isinstance(v, torch.Tensor) else v)
                for f in dataclasses.fields(self)
                for v in [getattr(self, f.name)]
            }
        )

    def __len__(self) -> int:
        return self.obs.shape[0]


def held_out(episode_ids: np.ndarray, fraction: float) -> np.ndarray:
    """Deterministic held-out mask by episode id (a hash, so it ignores shard layout and episode order).

    With `fraction` > 0 and at least two episodes, at least one is held out and at least one is kept.
    """
    ids = np.asarray(episode_ids, dtype=np.uint64)
    with np.errstate(over="ignore"):  # splitmix64: wrap-around is the point
        z = ids + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    mask = u < fraction
    if fraction > 0 and len(ids) >= 2:
        if not mask.any():
            mask[np.argmin(u)] = True
        if mask.all():
            mask[np.argmax(u)] = False
    return mask


def split_episodes(source: EpisodeSource, val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Episode positions for training and for held-out evaluation."""
    mask = held_out(source.episode_ids(), val_fraction)
    return np.flatnonzero(~mask), np.flatnonzero(mask)


class WindowSampler:
    """Windows of `source` restricted to episode positions `episodes` (all by default); `expert_labels` adds the
    corpus's `expert_action` to every batch (a source without it is refused)."""

    def __init__(
        self,
        source: EpisodeSource,
        history: int,
        horizon: int,
        episodes: np.ndarray | None = None,
        *,
        expert_labels: bool = False,
    ) -> None:
        self.source = source
        self.history = history
        self.horizon = horizon
        self.episodes = np.arange(len(source)) if episodes is None else np.asarray(episodes, dtype=np.int64)
        lengths = source.lengths()[self.episodes]
        counts = np.maximum(lengths - 1, 0)  # t = 0..L-2
        self._cum = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        if expert_labels and "expert_action" not in source.optional:
            raise DatasetError(
                "the corpus has no expert_action (the expert's label at every step): generate it again with "
                "`simdist data generate`, or clone the executed actions (train.behaviour_cloning=executed)"
            )
        self.fields = list(WINDOW_FIELDS) + (["image"] if source.has_image else [])
        self.fields += ["expert_action"] if expert_labels else []

    def __len__(self) -> int:
        return int(self._cum[-1])

    def locate(self, windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Window indices -> (episode positions in the source, time step t)."""
        windows = np.asarray(windows, dtype=np.int64)
        k = np.searchsorted(self._cum, windows, side="right") - 1
        return self.episodes[k], windows - self._cum[k]

    def sample(
        self, batch_size: int, rng: np.random.Generator, *, part: tuple[int, int] = (0, 1)
    ) -> WindowBatch:
        """A uniformly random global batch; `part=(rank, world)` returns only that rank's contiguous slice.

        Every rank draws the same global indices from the same generator, so the union over ranks is exactly
        the batch one process would see.
        """
        if len(self) == 0:
            raise ValueError("no windows: every episode is shorter than 2 steps")
        windows = rng.integers(0, len(self), size=batch_size)
        rank, world = part
        per = batch_size // world
        return self.windows(windows[rank * per : (rank + 1) * per])

    def iterate(self, batch_size: int, limit: int | None = None) -> Iterator[WindowBatch]:
        """All windows in order (or an evenly spaced subset of `limit`), for evaluation."""
        total = len(self)
        index = (
            np.arange(total)
            if limit is None or limit >= total
            else np.linspace(0, total - 1, limit).astype(int)
        )
        for i in range(0, len(index), batch_size):
            yield self.windows(index[i : i + batch_size])

    def windows(self, windows: np.ndarray) -> WindowBatch:
        episodes, t = self.locate(windows)
        lengths = self.source.lengths()[episodes]
        rel = np.arange(-self.history, self.horizon + 1)  # history, current (0), future
        pos = t[:, None] + rel[None, :]
        real = (pos >= 0) & (pos < lengths[:, None])
        if isinstance(self.source, InMemoryEpisodes):
            base = self.source.offsets[episodes][:, None]
            flat = self.source.flat
            gathered = {f: flat[f][base + np.clip(pos, 0, lengths[:, None] - 1)] for f in self.fields}
        else:
            gathered = self._read_lazily(episodes, t, lengths, pos)
        return self._assemble(gathered, real)

    def _read_lazily(self, episodes: np.ndarray, t: np.ndarray, lengths: np.ndarray, pos: np.ndarray) -> dict:
        out: dict[str, list[np.ndarray]] = {f: [] for f in self.fields}
        for i, (e, length) in enumerate(zip(episodes, lengths, strict=True)):
            lo = max(0, int(t[i]) - self.history)
            hi = min(int(length), int(t[i]) + self.horizon + 1)
            chunk = self.source.read(int(e), lo, hi, self.fields)
            local = np.clip(pos[i], lo, hi - 1) - lo
            for f in self.fields:
                out[f].append(chunk[f][local])
        return {f: np.stack(v) for f, v in out.items()}

    def _assemble(self, g: dict[str, np.ndarray], real: np.ndarray) -> WindowBatch:
        h, horizon = self.history, self.horizon
        hist_mask = real[:, :h]
        future_mask = real[:, h + 1 :]
        step_mask = real[:, h : h + horizon]
        chunk = slice(h, h + horizon)  # steps t..t+T-1
        act = np.where(real[..., None], g["action"], 0.0).astype(np.float32)  # padded actions are zero
        image = future_image = None
        if "image" in g:
            image = torch.from_numpy(np.ascontiguousarray(g["image"][:, h]))
            future_image = torch.from_numpy(np.ascontiguousarray(g["image"][:, h + 1 :]))
        return WindowBatch(
            obs_hist=_t(g["proprio"][:, :h]),
            act_hist=_t(act[:, :h]),
            hist_mask=_t(hist_mask),
            obs=_t(g["proprio"][:, h]),
            future_obs=_t(g["proprio"][:, h + 1 :]),
            actions=_t(act[:, chunk]),  # zero past the end
            command=_t(g["command"][:, chunk]),
            reward=_t(np.where(step_mask, g["reward"][:, chunk], 0.0).astype(np.float32)),
            value=_t(np.where(future_mask, g["value"][:, h + 1 :], 0.0).astype(np.float32)),
            expert_flag=_t(g["expert_flag"][:, chunk] & step_mask),  # an action at t+k needs step t+k only
            future_mask=_t(future_mask),
            step_mask=_t(step_mask),
            image=image,
            future_image=future_image,
            expert_action=(
                _t(np.where(step_mask[..., None], g["expert_action"][:, chunk], 0.0).astype(np.float32))
                if "expert_action" in g
                else None
            ),
        )


def _t(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array))
