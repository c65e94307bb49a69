"""The robot side of the Go2 loopback test, in its own process (unitree_sdk2py's DDS factory is per process)."""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from simdist.errors import RobotConnectionError
from simdist.hardware.state import JointCommand
from simdist.robots.go2.hardware import Go2Robot


def main() -> None:
    domain = int(sys.argv[1])
    try:
        robot = Go2Robot.connect("lo", domain, timeout_s=8.0, control_hz=50.0)
    except RobotConnectionError as exc:
        print(json.dumps({"skip": str(exc)}), flush=True)
        return
    first = robot.read()
    target = first.joint_positions + np.array([0.1, -0.1, 0.05] * 4)
    for _ in range(60):
        robot.send(JointCommand(target))
        time.sleep(1.0 / robot.control_hz)
    last = robot.read()
    robot.hold()
    robot.stop()
    robot.stop()  # idempotent
    result = {
        "first_q": first.joint_positions.tolist(),
        "last_q": last.joint_positions.tolist(),
        "target": target.tolist(),
        "names": list(last.joint_names),
        "quaternion": last.imu_quaternion.tolist(),
        "accel": last.imu_accel.tolist(),
        "foot_forces": last.foot_forces.tolist(),
        "age_s": time.monotonic() - last.timestamp,
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
