"""A force-guided peg insertion controller on the UR5e's own measurements (no privileged state).

It reads what the real arm gives: the peg tip position and flange orientation from the tool pose, the F/T
wrench, and the camera's estimate of the hole (the task's command, a few mm off). Phases, chosen per step from
those measurements alone (so the controller is a function of the observation, which a policy can learn):
- free space: move over the estimate, descend when within `near` of it (slower in the last centimetre);
- on the top surface (contact, tip not below the hole's top): follow an Archimedean spiral around the estimate
  while pressing lightly; the spiral's pitch is below the chamfer's capture width, so it crosses the hole;
- below the top (on the chamfer or in the hole): comply laterally to the contact force and in yaw to the torque
  about the tool axis (the estimate's yaw is off by ~0.02 rad, enough to jam a 1 mm clearance), and descend while
  the force allows.
The tool frame's wrench is turned into the world frame with the flange orientation; the sensor reads the force
the peg exerts, so the force on the peg is its negative.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# proprio layout (simdist.robots.ur5e.sim.PegEnv): joint_pos 0:6, joint_vel 6:12, tool_pos 12:15, tool_quat 15:19,
# tool_vel 19:25, wrench 25:31
TIP, QUAT, FORCE, TORQUE_Z = slice(12, 15), slice(15, 19), slice(25, 28), 30


@dataclass(frozen=True)
class SearchGains:
    position: float = 0.7  # fraction of the position and yaw error corrected per step, times `gain`
    near: float = 0.003  # m: descend when the tip is this close to the estimate
    spiral_pitch: float = 0.006  # m per turn (the chamfer captures within 4.5 mm on each axis)
    spiral_speed: float = 0.0025  # m per step along the spiral, times 2 * gain
    touch_n: float = 5.0  # contact force that ends free-space motion (N)
    press_n: float = 15.0  # normal force held while searching (N)
    press_gain: float = 0.01  # action per N of normal force error
    comply: float = 0.004  # action per N of lateral force below the top
    comply_yaw: float = 0.2  # yaw action per N m of torque about the tool axis below the top
    below_m: float = 0.0008  # tip this far below the estimated top: on the chamfer or in the hole
    push_limit_n: float = 35.0  # stop pushing down above this normal force


def flange_rotation(quat: np.ndarray) -> np.ndarray:
    """Rotation matrices (n, 3, 3) from unit quaternions (w, x, y, z)."""
    w, x, y, z = quat[:, 0], quat[:, 1], quat[:, 2], quat[:, 3]
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
            np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
            np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1),
        ],
        axis=1,
    )


def tool_yaw(quat: np.ndarray) -> np.ndarray:
    return np.arctan2(
        2 * (quat[:, 0] * quat[:, 3] + quat[:, 1] * quat[:, 2]), 1 - 2 * (quat[:, 2] ** 2 + quat[:, 3] ** 2)
    )


def search_action(
    proprio: np.ndarray,
    command: np.ndarray,
    gain: float,
    action_scale_m: float,
    action_scale_rad: float,
    gains: SearchGains = SearchGains(),
) -> np.ndarray:
    """Actions (n, 4) in [-1, 1] (x, y, z, yaw deltas) from the measured proprio (n, 31) and the hole estimate (n, 4)."""
    g = gains
    pr, cmd = proprio.astype(np.float64), command.astype(np.float64)
    tip, quat = pr[:, TIP], pr[:, QUAT]
    force = -np.einsum("nij,nj->ni", flange_rotation(quat), pr[:, FORCE])  # on the peg, world frame
    e = tip[:, :2] - cmd[:, :2]
    height = tip[:, 2] - cmd[:, 2]
    r = np.linalg.norm(e, axis=1)
    k = g.position * gain
    # a square peg fits every quarter turn: wrap the yaw error to [-pi/4, pi/4)
    yaw_err = (tool_yaw(quat) - cmd[:, 3] + math.pi / 4) % (math.pi / 2) - math.pi / 4
    contact = np.linalg.norm(force, axis=1) > g.touch_n
    below = height < -g.below_m
    # free space
    free_xy = np.clip(-k * e / action_scale_m, -1, 1)
    free_z = np.where(r < g.near, -np.clip(height / 0.01, 0.3, 1.0) * 2 * gain, 0.0)
    # on the top surface: the next point of the spiral r = pitch * phi / (2 pi) from the current one
    theta = np.arctan2(e[:, 1], e[:, 0]) % (2 * math.pi)
    phi = theta + 2 * math.pi * np.maximum(np.round(r / g.spiral_pitch - theta / (2 * math.pi)), 0.0)
    phi += g.spiral_speed * 2 * gain / np.maximum(r, g.spiral_pitch / 2)
    goal = np.stack([np.cos(phi), np.sin(phi)], 1) * (g.spiral_pitch * phi / (2 * math.pi))[:, None]
    spiral_xy = np.clip((goal - e) / action_scale_m, -0.4, 0.4)
    # the force's z > 0 when the surface pushes up: press until it is press_n
    press_z = np.clip(g.press_gain * (force[:, 2] - g.press_n), -0.2, 0.2)
    # below the top
    comply_xy = np.clip(g.comply * force[:, :2], -0.3, 0.3)
    descend_z = np.where(force[:, 2] > g.push_limit_n, 0.05, -0.6 * gain)
    action = np.zeros((len(pr), 4))
    action[:, :2] = np.where(
        contact[:, None],
        np.where(below[:, None], comply_xy, spiral_xy),
        np.where(below[:, None], 0.0, free_xy),
    )
    action[:, 2] = np.where(
        contact, np.where(below, descend_z, press_z), np.where(below, -0.6 * gain, free_z)
    )
    action[:, 3] = np.where(
        below,
        np.clip(g.comply_yaw * pr[:, TORQUE_Z], -0.3, 0.3),
        np.clip(-k * yaw_err / action_scale_rad, -1, 1),
    )
    return action.astype(np.float32)
