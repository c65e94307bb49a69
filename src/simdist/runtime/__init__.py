"""Deployment runtime (never imports rclpy): ingest, observation history, planner loop, bag logging, model store
with hot swap, and dynamics finetuning in a worker process. The ROS 2 nodes wrap these same pieces.
"""

from simdist.runtime.actuation import Actuation, JointActuator, SimActuator
from simdist.runtime.history import ObservationHistory
from simdist.runtime.ingest import CameraIngest, Frame, Observation, ProprioIngest
from simdist.runtime.store import ModelStore, version_label

__all__ = [
    "Actuation",
    "CameraIngest",
    "Frame",
    "JointActuator",
    "ModelStore",
    "Observation",
    "ObservationHistory",
    "ProprioIngest",
    "SimActuator",
    "version_label",
]
