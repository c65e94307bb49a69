"""On-disk datasets (HDF5 shards + manifest), in-memory episodes and the (history, future) window sampler."""

from simdist.data.dataset import EpisodeSource, InMemoryEpisodes, ShardDataset
from simdist.data.windows import WindowBatch, WindowSampler, held_out, split_episodes
from simdist.data.writer import ResumeInfo, ShardWriter, resume

__all__ = [
    "EpisodeSource",
    "InMemoryEpisodes",
    "ResumeInfo",
    "ShardDataset",
    "ShardWriter",
    "WindowBatch",
    "WindowSampler",
    "held_out",
    "resume",
    "split_episodes",
]
