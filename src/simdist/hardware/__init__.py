"""Robots behind one protocol: state and command types, the safety filter, and the UR5e and Go2 adapters.

The adapters import their vendor SDKs (ur_rtde, unitree_sdk2py) only when constructed, so this package imports
on any machine.
"""

from simdist.hardware.robot import Robot
from simdist.hardware.safety import SafetyFilter, SafetyLimits, SafetyOutput
from simdist.hardware.state import JointCommand, RobotState

__all__ = ["JointCommand", "Robot", "RobotState", "SafetyFilter", "SafetyLimits", "SafetyOutput"]
