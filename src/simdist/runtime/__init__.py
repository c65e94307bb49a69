"""Deployment runtime (never imports rclpy): ingest, observation history, planner loop, bag logging, model store
with hot swap, and dynamics finetuning in a worker process. The ROS 2 nodes wrap these same pieces.
"""

from simdist.runtime.actuation import Actuation, CartesianActuator, JointActuator, SimActuator, ToolTarget
from simdist.runtime.history import ObservationHistory
from simdist.runtime.ingest import CameraIngest, Frame, Observation, ProprioIngest
from simdist.runtime.proprio import PROPRIO_DIMS, proprio_from_state
from simdist.runtime.store import ModelStore, version_label

__all__ = [
    "PROPRIO_DIMS",
    "Actuation",
    "CameraIngest",
    "CartesianActuator",
    "Frame",
    "JointActuator",
    "ModelStore",
    "Observation",
    "ObservationHistory",
    "ProprioIngest",
    "SimActuator",
    "ToolTarget",
    "proprio_from_state",
    "version_label",
]
