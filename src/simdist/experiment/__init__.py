"""The sim-to-real experiment: SimDist against zero-shot, full finetuning, RL finetuning and an oracle, with the same
real-data budget in environment steps (`simdist experiment`)."""

from simdist.experiment.config import METHODS, ExperimentConfig, load_experiment_config
from simdist.experiment.report import ExperimentResult, PointResult
from simdist.experiment.run import run_experiment

__all__ = [
    "METHODS",
    "ExperimentConfig",
    "ExperimentResult",
    "PointResult",
    "load_experiment_config",
    "run_experiment",
]
