"""The real robot's data for finetuning: bags -> episodes in the dataset's format, and the gate's disjoint splits.

Bags are read (and refused, naming the bag and topic) before anything is written; episode ids are unique across
runs; three disjoint sets of whole episodes train, select the best step and decide the gate.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from simdist.bags import read_episodes, schema
from simdist.data.dataset import InMemoryEpisodes
from simdist.data.windows import held_out
from simdist.errors import BagError
from simdist.model.world_model import WorldModel


def episode_id_base(bag: Path) -> int:
    """A run's episode-id base, unique across runs: a hash of the bag's absolute path (ids: base + stretch_id)."""
    return (zlib.crc32(str(Path(bag).resolve()).encode()) & 0x7FFFFFFF) << 20


def stretch_id(episode: dict[str, np.ndarray]) -> int:
    """A run-local id for one gap-free stretch of an episode (the episode's index while it has no gap)."""
    return int(episode["episode_index"][0]) + (int(episode["segment"][0]) << 12)


def real_episodes(bags: Sequence[str | Path]) -> list[dict[str, np.ndarray]]:
    """Every episode of every bag in the dataset's per-step format, ready for `InMemoryEpisodes`.

    Real data has no critic value or expert flag: they are zeros and False (weight 0 in the dynamics-only loss).
    `reward` is what the robot reported (NaN where it reported none; only full finetuning reads it). `episode` is
    unique across runs. Raises BagError (naming the bag and topic) before returning anything.
    """
    out: list[dict[str, np.ndarray]] = []
    widths: dict[str, tuple[int, Path]] = {}
    for bag in bags:
        path = Path(bag)
        base = episode_id_base(path)
        for episode in read_episodes(path):
            n = len(episode["proprio"])
            for key, topic in (
                ("proprio", schema.OBSERVATION),
                ("action", schema.ACTION),
                ("command", schema.COMMAND),
            ):
                width = episode[key].shape[1]
                first = widths.setdefault(key, (width, path))
                if first[0] != width:
                    raise BagError(f"{path}: topic {topic} has {width} values, {first[1]} has {first[0]}")
            out.append(
                {
                    "proprio": episode["proprio"],
                    "action": episode["action"],
                    "command": episode["command"],
                    "reward": episode["reward"],
                    "value": np.zeros(n, np.float32),
                    "expert_flag": np.zeros(n, bool),
                    "episode": np.full(n, base + stretch_id(episode), np.int64),
                    "step": episode["step"].astype(np.int32),
                    "terminal": episode["terminal"],
                    "timestamp_ns": episode["timestamp_ns"],
                }
            )
    return out


def measured_returns(episode: dict[str, np.ndarray], discount: float, tail: int = 50) -> np.ndarray:
    """The discounted return of the measured rewards from each step on, (N,) float32: what the robot earned, the
    real counterpart of the critic's value that the value head learnt in simulation.

    The sum stops at the first step without a measured reward, or at the stretch's end. Past a fall (`terminal`)
    nothing follows; past a time-out, a gap or an unmeasured step the robot would have gone on, so the sum ends with
    the steady value of its last `tail` rewards, mean / (1 - discount). NaN throughout where no reward was measured.
    """
    reward = np.asarray(episode["reward"], dtype=np.float64)
    n = len(reward)
    unmeasured = np.flatnonzero(~np.isfinite(reward))
    end = int(unmeasured[0]) if len(unmeasured) else n  # steps [0, end) have rewards
    out = np.full(n, np.nan, dtype=np.float32)
    if end == 0:
        return out
    fell = end == n and bool(np.asarray(episode.get("terminal", np.zeros(n, bool)))[-1])
    after = 0.0 if fell else float(reward[max(0, end - tail) : end].mean()) / (1.0 - discount)
    for i in range(end - 1, -1, -1):
        after = reward[i] + discount * after
        out[i] = after
    return out


def check_dims(episodes: list[dict[str, np.ndarray]], model: WorldModel, bags: Sequence[str | Path]) -> None:
    wanted = {
        "proprio": (model.obs_dim, schema.OBSERVATION),
        "action": (model.act_dim, schema.ACTION),
        "command": (model.cmd_dim, schema.COMMAND),
    }
    for key, (dim, topic) in wanted.items():
        width = episodes[0][key].shape[1]
        if width != dim:
            raise BagError(f"{Path(bags[0])}: topic {topic} has {width} values, the model takes {dim}")


def minutes_of_data(episodes: list[dict[str, np.ndarray]]) -> float:
    """Robot minutes in the episodes (steps times the median control period of the logged timestamps)."""
    steps = sum(len(e["proprio"]) for e in episodes)
    gaps = np.concatenate(
        [np.diff(e["timestamp_ns"]) for e in episodes if len(e["timestamp_ns"]) > 1] or [[0]]
    )
    return steps * float(np.median(gaps)) / 1e9 / 60.0


DECIDE_SALT = 0x5DEECE66D  # a second, independent hash of the episode ids for the gate's own split


def split_real(
    episodes: list[dict[str, np.ndarray]], fraction: float
) -> tuple[InMemoryEpisodes, np.ndarray, np.ndarray, np.ndarray]:
    """(source, train, select, decide positions): three disjoint sets of whole episodes.

    `select` picks the best step (early stopping); `decide` is only used by the gate, so "held-out error went
    down" is never measured on the windows that chose the checkpoint. Each gets about `fraction` of the episodes
    and at least one; with fewer than three episodes the longest is cut in two until there are three.
    """
    episodes = [
        e for e in episodes if len(e["proprio"]) >= 2
    ]  # a single step (a stretch between gaps) has no window
    if not episodes:
        raise BagError("too little data to hold out: no episode of two steps or more")
    while len(episodes) < 3:
        longest = max(range(len(episodes)), key=lambda i: len(episodes[i]["proprio"]))
        e = episodes.pop(longest)
        cut = len(e["proprio"]) // 2
        if cut < 2 or len(e["proprio"]) - cut < 2:
            raise BagError("too little data to hold out: fewer than three episodes of a few steps")
        head = {k: v[:cut] for k, v in e.items()}
        tail = {k: v[cut:] for k, v in e.items()}
        tail["episode"] = tail["episode"] + (1 << 19)  # below the next run's id base
        episodes += [head, tail]
    source = InMemoryEpisodes(episodes)
    ids = source.episode_ids()
    select = held_out(ids, fraction)
    rest = np.flatnonzero(~select)
    decide = np.zeros_like(select)
    decide[rest] = held_out(ids[rest] ^ DECIDE_SALT, fraction * len(ids) / len(rest))
    if decide[rest].all():
        decide[rest[-1]] = False
    return source, np.flatnonzero(~select & ~decide), np.flatnonzero(select), np.flatnonzero(decide)
