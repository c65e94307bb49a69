"""Unitree Go2 tasks: climbing a ramp (go2_slope) and walking on flat or soft ground (go2_foam).

Proprio (35, what the real Go2's lowstate measures): IMU gyro (3), projected gravity from the IMU quaternion (3),
joint positions relative to the standing pose (12), joint velocities (12), foot contact forces (4, N), and the IMU's
vertical specific force (1, m/s^2 minus g). Command (3): forward speed, lateral speed (m/s), yaw rate (rad/s).
Action (12): joint-position offsets; target = standing pose + action_scale * action, in Unitree order.
Clock (2): sin and cos of a 2 Hz trot phase counted from the episode start; the controller's own clock, given to
the expert's actor (not a sensor, so not part of proprio).
"""

from __future__ import annotations

import math

import mujoco
import numpy as np

from simdist.hardware.state import RobotState
from simdist.paths import assets_dir
from simdist.robots.go2 import JOINT_NAMES, LEGS, PROPRIO_DIM, STAND_POSE
from simdist.sim.vec_env import Noise, Obs, SimVecEnv

STAND_HEIGHT = 0.30
GAIT_HZ = 2.0
PRIVILEGED_PARAMS = (
    "friction",
    "base_mass_add",
    "kp_scale",
    "kd_scale",
    "joint_friction",
    "joint_damping",
    "latency_steps",
    "ground_timeconst",
    "ground_dampratio",
    "slope_deg",
)


class Go2Env(SimVecEnv):
    proprio_dim = PROPRIO_DIM
    command_dim = 3
    action_dim = 12
    privileged_dim = 35 + 3 + 1 + len(PRIVILEGED_PARAMS) + 3
    extra_obs = {"clock": 2}

    def build_model(self) -> mujoco.MjModel:
        spec = mujoco.MjSpec.from_file(str(assets_dir() / "go2.xml"))
        world = spec.worldbody
        spec.option.timestep = self.cfg.physics_dt
        tex = spec.add_texture(
            name="grid",
            type=mujoco.mjtTexture.mjTEXTURE_2D,
            builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER,
            rgb1=[0.25, 0.3, 0.35],
            rgb2=[0.32, 0.37, 0.42],
            width=64,
            height=64,
        )
        mat = spec.add_material(name="ground", texrepeat=[8, 8])
        mat.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = tex.name
        size = self.cfg.terrain.size_m
        world.add_geom(
            name="ground",
            type=mujoco.mjtGeom.mjGEOM_PLANE,
            size=[size, size, 0.05],
            material="ground",
            priority=2,
            condim=3,
            friction=[0.8, 0.02, 0.01],
        )
        if self.cfg.terrain.finish_m > 0:
            world.add_site(
                name="finish",
                type=mujoco.mjtGeom.mjGEOM_BOX,
                size=[0.01, 1.0, 0.005],
                pos=[self.cfg.terrain.finish_m, 0, 0.005],
                rgba=[1.0, 0.2, 0.1, 1.0],
            )
        world.add_light(
            name="sun",
            pos=[0, 0, 4],
            dir=[0, 0, -1],
            type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL,
            castshadow=0,
        )
        world.add_camera(name="side", pos=[0.9, -2.6, 0.9], xyaxes=[1, 0, 0, 0, 0.35, 1])
        spec.body("base").add_camera(
            name="track",
            pos=[0, -1.6, 0.5],
            xyaxes=[1, 0, 0, 0, 0.3, 1],
            mode=mujoco.mjtCamLight.mjCAMLIGHT_TRACKCOM,
        )
        model = spec.compile()
        self._ground = model.geom("ground").id
        self._finish = model.site("finish").id if self.cfg.terrain.finish_m > 0 else -1
        self._base = model.body("base").id
        self._base_mass = float(model.body_mass[self._base])
        self._gain = model.actuator_gainprm[:, 0].copy()
        self._kv = -model.actuator_biasprm[:, 2].copy()
        self._dofs = np.arange(6, model.nv)
        sens = {
            model.sensor(i).name: (model.sensor_adr[i], model.sensor_dim[i]) for i in range(model.nsensor)
        }
        self._s_gyro = slice(sens["imu_gyro"][0], sens["imu_gyro"][0] + 3)
        self._s_acc = slice(sens["imu_acc"][0], sens["imu_acc"][0] + 3)
        self._s_quat = slice(sens["imu_quat"][0], sens["imu_quat"][0] + 4)
        self._s_vel = slice(sens["base_linvel"][0], sens["base_linvel"][0] + 3)
        self._s_feet = [sens[f"{leg}_foot_force"][0] for leg in LEGS]
        # trunk and head first (what a fall is), then the thighs (measured, not a fall: see `_fell`)
        self._s_fall = [sens["trunk_touch"][0], sens["head_touch"][0]] + [
            sens[f"{leg}_thigh_touch"][0] for leg in LEGS
        ]
        self._qlow = model.jnt_range[1:, 0].copy()
        self._qhigh = model.jnt_range[1:, 1].copy()
        self.command = np.zeros((self.num_envs, 3))
        self.start_pos = np.zeros((self.num_envs, 3))
        return model

    # ----- dynamics ----------------------------------------------------------------------------------------
    def _slope(self, i: int) -> float:
        return math.radians(self.params["slope_deg"][i])

    def _slopes(self) -> np.ndarray:
        return np.radians(self.params["slope_deg"])

    def apply_params(self, i: int) -> None:
        m, p = self.models[i], {k: v[i] for k, v in self.params.items()}
        m.geom_friction[self._ground, 0] = p["friction"]
        m.geom_solref[self._ground] = [p["ground_timeconst"], p["ground_dampratio"]]
        theta = self._slope(i)
        m.geom_quat[self._ground] = [math.cos(-theta / 2), 0.0, math.sin(-theta / 2), 0.0]
        if self._finish >= 0:
            f = self.cfg.terrain.finish_m
            m.site_pos[self._finish] = [f * math.cos(theta), 0.0, f * math.sin(theta) + 0.005]
            m.site_quat[self._finish] = m.geom_quat[self._ground]
        m.body_mass[self._base] = self._base_mass + p["base_mass_add"]
        m.actuator_gainprm[:, 0] = self._gain * p["kp_scale"]
        m.actuator_biasprm[:, 1] = -self._gain * p["kp_scale"]
        m.actuator_biasprm[:, 2] = -self._kv * p["kd_scale"]
        m.dof_frictionloss[self._dofs] = p["joint_friction"]
        m.dof_damping[self._dofs] = p["joint_damping"]
        # The ground is a static geom of the world body: its pose in the data is computed from the model's only here
        # (mj_forward leaves it), and the masses' derived constants with it. Without this the ramp stayed flat in the
        # physics while the reward, the progress and the observations took it as tilted (until 2026-12-07).
        mujoco.mj_setConst(m, self.datas[i])

    def reset_member(self, i: int, rng: np.random.Generator) -> None:
        d, theta = self.datas[i], self._slope(i)
        normal = np.array([-math.sin(theta), 0.0, math.cos(theta)])
        d.qpos[:3] = normal * STAND_HEIGHT + np.array([rng.uniform(-0.05, 0.05), rng.uniform(-0.1, 0.1), 0.0])
        yaw = rng.uniform(-0.1, 0.1)
        q_pitch = np.array([math.cos(-theta / 2), 0.0, math.sin(-theta / 2), 0.0])
        q_yaw = np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)])
        mujoco.mju_mulQuat(d.qpos[3:7], q_pitch, q_yaw)
        d.qpos[7:] = STAND_POSE + rng.normal(0.0, 0.05, 12)
        d.ctrl[:] = STAND_POSE
        self.start_pos[i] = d.qpos[:3]
        c = self.cfg.command
        if self.eval_commands and c.eval_speeds:
            self.command[i] = [c.eval_speeds[i % len(c.eval_speeds)], 0.0, 0.0]  # member i: speed i mod 3
        elif rng.uniform() < c.stand_probability:
            self.command[i] = 0.0
        else:
            self.command[i] = [
                rng.uniform(*c.speed_range),
                rng.uniform(*c.lateral_range),
                rng.uniform(*c.yaw_rate_range),
            ]

    def set_targets(self, actions: np.ndarray) -> None:
        targets = STAND_POSE + self.cfg.action_scale * actions
        targets = np.clip(targets, self._qlow, self._qhigh)
        for i, d in enumerate(self.datas):
            d.ctrl[:] = targets[i]

    # ----- observation -------------------------------------------------------------------------------------
    def _state(self) -> dict[str, np.ndarray]:
        sd = self.gather("sensordata")
        qpos, qvel = self.gather("qpos"), self.gather("qvel")
        quat = sd[:, self._s_quat]
        rot = np.zeros((self.num_envs, 9))
        for i in range(self.num_envs):
            mujoco.mju_quat2Mat(rot[i], quat[i])
        rot = rot.reshape(-1, 3, 3)
        gravity = -rot[:, 2, :]  # world -z expressed in the body frame: R^T (0, 0, -1)
        vel_body = np.einsum("nji,nj->ni", rot, sd[:, self._s_vel])
        return {
            "gyro": sd[:, self._s_gyro],
            "gravity": gravity,
            "joint_pos": qpos[:, 7:] - STAND_POSE,
            "joint_vel": qvel[:, 6:],
            "foot_force": sd[:, self._s_feet],
            "accel_z": sd[:, self._s_acc][:, 2:3] - 9.81,
            "vel_body": vel_body,
            "pos": qpos[:, :3],
            "fall_force": sd[:, self._s_fall],
            "joints": qpos[:, 7:],
        }

    def observe(self) -> Obs:
        s = self._state()
        self._last_state = s
        parts = ("gyro", "gravity", "joint_pos", "joint_vel", "foot_force", "accel_z")
        clean = np.concatenate([s[k] for k in parts], axis=1)
        noisy = np.concatenate(
            [s[k] + self.noise(s[k].shape, self.cfg.observation_noise.get(k, 0.0)) for k in parts], axis=1
        )
        height = self._base_height(s["pos"])[:, None]
        params = np.stack([self.params[k] for k in PRIVILEGED_PARAMS], axis=1)
        privileged = np.concatenate([clean, s["vel_body"], height, params, self.command], axis=1)
        phase = self._phase()
        return {
            "proprio": noisy.astype(np.float32),
            "command": self.command.astype(np.float32),
            "privileged": privileged.astype(np.float32),
            "clock": np.stack([np.sin(phase), np.cos(phase)], axis=1).astype(np.float32),
        }

    def _phase(self) -> np.ndarray:
        return 2 * math.pi * GAIT_HZ * self.steps * self.dt

    def _progress(self) -> np.ndarray:
        theta = self._slopes()
        along = np.stack([np.cos(theta), np.zeros_like(theta), np.sin(theta)], axis=1)
        progress = np.einsum("ni,ni->n", self._last_state["pos"] - self.start_pos, along)
        if self.cfg.terrain.finish_m > 0:
            progress = np.minimum(progress, self.cfg.terrain.finish_m)
        return progress

    def _fell(self) -> np.ndarray:
        """A fall: tilted beyond `max_tilt_deg`, the trunk or head touching anything, or the base closer than
        `min_base_height` to the ground plane (along its normal). A thigh on the ground is not one: on soft ground an
        upright robot's thighs touch it."""
        s, t = self._last_state, self.cfg.termination
        tilted = s["gravity"][:, 2] > -math.cos(math.radians(t.get("max_tilt_deg", 60.0)))
        touched = (s["fall_force"][:, :2] > t.get("contact_force_n", 1.0)).any(axis=1)  # trunk, head
        low = self._base_height(s["pos"]) < t.get("min_base_height", 0.0)
        return tilted | touched | low

    def _base_height(self, pos: np.ndarray) -> np.ndarray:
        """(N,) the base's height over the ground plane, along its normal (the ramp's, tilted by the slope)."""
        theta = self._slopes()
        normal = np.stack([-np.sin(theta), np.zeros_like(theta), np.cos(theta)], axis=1)
        return np.einsum("ni,ni->n", pos, normal)

    def reward(self, actions: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        s, w = self._last_state, self.cfg.reward
        v_fwd, w_z = s["vel_body"][:, 0], s["gyro"][:, 2]
        torques = np.stack([d.actuator_force for d in self.datas])
        span = self._qhigh - self._qlow
        near_limit = (
            (s["joints"] < self._qlow + 0.05 * span) | (s["joints"] > self._qhigh - 0.05 * span)
        ).sum(axis=1)
        terms = {
            "track_speed": np.exp(-np.square(v_fwd - self.command[:, 0]) / 0.0625),
            "track_yaw": np.exp(-np.square(w_z - self.command[:, 2]) / 0.0625),
            "progress": np.minimum(v_fwd, self.command[:, 0]),
            "lin_vel_z": np.square(s["vel_body"][:, 2]),
            "ang_vel_xy": np.square(s["gyro"][:, :2]).sum(axis=1),
            # tilt away from the ramp's normal: aligned with the ramp, body-frame gravity is (-sin theta, 0, -cos theta)
            "orientation": np.square(s["gravity"][:, 0] + np.sin(self._slopes()))
            + np.square(s["gravity"][:, 1]),
            "torques": np.square(torques).sum(axis=1),
            "action_rate": np.square(actions - self.prev_action).sum(axis=1),
            "joint_limit": near_limit.astype(float),
            "gait": self._gait_match(s["foot_force"]),
            "alive": np.ones(self.num_envs),
            "fall": self._fell().astype(float),
        }
        total = sum(w.get(k, 0.0) * v for k, v in terms.items())
        return np.asarray(total) * self.dt, terms

    def _gait_match(self, foot_force: np.ndarray) -> np.ndarray:
        """Share of feet whose contact matches a trot (FR+RL, then FL+RR); all four down when told to stand."""
        stance_a = np.sin(self._phase()) >= 0
        desired = np.stack([stance_a, ~stance_a, ~stance_a, stance_a], axis=1)
        moving = np.abs(self.command).sum(axis=1) > 0.05
        desired = np.where(moving[:, None], desired, True)
        return ((foot_force > 5.0) == desired).mean(axis=1)

    def terminated(self) -> np.ndarray:
        return self._fell()

    def scripted_action(self) -> np.ndarray:
        """An open-loop trot (diagonal pairs in phase), for rendering and smoke tests; not a controller."""
        phase = self._phase()
        swing = np.stack([np.sin(phase), np.sin(phase + math.pi)], axis=1)  # FR+RL, FL+RR
        pair = swing[:, [0, 1, 1, 0]]
        actions = np.zeros((self.num_envs, 4, 3))
        actions[:, :, 1] = -0.8 * np.clip(pair, 0, None)  # lift: thigh forward
        actions[:, :, 2] = 1.2 * np.clip(pair, 0, None)  # and calf folded
        return actions.reshape(self.num_envs, 12)

    def _commanded(self) -> np.ndarray:
        """Forward distance the command asks for over the whole episode (capped at the finish marker, if any)."""
        commanded = self.command[:, 0] * self.cfg.episode_steps * self.dt
        if self.cfg.terrain.finish_m > 0:
            commanded = np.minimum(commanded, self.cfg.terrain.finish_m)
        return commanded

    def metrics(self) -> dict[str, np.ndarray]:
        return {
            "progress_m": self._progress(),
            "commanded_m": self._commanded(),
            "fell": self._fell(),
        }

    # ----- the robot's own measurement and joint targets (SimRobot) -------------------------------------------
    def measure(self, i: int, noise: Noise, *, timestamp: float, robot_time: float) -> RobotState:
        """The lowstate of the real Go2: joints, IMU (quaternion tilted by the gravity noise) and foot forces."""
        data = self.datas[i]
        quat = data.sensor("imu_quat").data.copy()
        tilt = noise("gravity", (3,))
        if tilt.any():  # a small random rotation: the projected gravity moves by about the noise std
            delta = np.zeros(4)
            mujoco.mju_axisAngle2Quat(delta, tilt / np.linalg.norm(tilt), float(np.linalg.norm(tilt)))
            mujoco.mju_mulQuat(quat, quat.copy(), delta)
        accel = data.sensor("imu_acc").data.copy()
        accel[2] += noise("accel_z", (1,))[0]
        feet = np.array([data.sensor(f"{leg}_foot_force").data[0] for leg in LEGS])
        return RobotState(
            timestamp=timestamp,
            joint_positions=data.qpos[7:] + noise("joint_pos", (12,)),
            joint_velocities=data.qvel[6:] + noise("joint_vel", (12,)),
            joint_torques=data.actuator_force.copy(),
            imu_quaternion=quat,
            imu_gyro=data.sensor("imu_gyro").data + noise("gyro", (3,)),
            imu_accel=accel,
            foot_forces=feet + noise("foot_force", (4,)),
            joint_names=JOINT_NAMES,
            robot_time=robot_time,
        )

    def joint_targets_action(self, i: int, targets: np.ndarray) -> np.ndarray:
        """Joint targets are the stand pose plus the scaled action: the action is their offset."""
        return ((np.asarray(targets, dtype=np.float64) - STAND_POSE) / self.cfg.action_scale).astype(
            np.float32
        )
