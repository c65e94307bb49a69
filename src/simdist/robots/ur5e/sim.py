"""UR5e peg insertion (ur5e_peg): a square peg on the flange into a square hole on the table.

Proprio (31, what the real UR5e and its F/T sensor measure): joint positions (6), joint velocities (6), peg tip
position (3, from the tool pose), flange quaternion (4, `flange_quat`'s sign), tool linear and angular velocity (6), flange
wrench (6, N and N m). Command (4): the hole's estimated top-centre position (3) and yaw (1), the true pose plus a
per-episode bias as a camera-based estimate would give. Action (4): relative tool deltas (x, y, z, yaw) per 10 Hz
step, scaled by peg.action_scale_m / action_scale_rad, turned into joint targets by damped least-squares IK at every
physics step (the real arm's 500 Hz servo rate). That servo runs in C (peg_servo.c, built at first use by
simdist.sim.native), or in numpy where no C compiler is available.
"""

from __future__ import annotations

import ctypes
import math

import mujoco
import numpy as np
from mujoco.batch import Batch

from simdist.errors import ConfigError
from simdist.hardware.state import RobotState
from simdist.paths import assets_dir
from simdist.robots.ur5e import JOINT_NAMES, PROPRIO_DIM, flange_quat, workspace
from simdist.robots.ur5e.search import search_action, tool_yaw
from simdist.sim import native
from simdist.sim.vec_env import Noise, Obs, SimVecEnv

HOME = np.array([-1.5708, -1.5708, 1.5708, -1.5708, -1.5708, 0.0])
PRIVILEGED_PARAMS = (
    "friction",
    "base_mass_add",
    "kp_scale",
    "kd_scale",
    "joint_friction",
    "joint_damping",
    "latency_steps",
    "servo_lag",
)
PROPRIO_PARTS = ("joint_pos", "joint_vel", "tool_pos", "tool_quat", "tool_vel", "wrench")
MAX_JOINT_STEP = 0.05  # rad: the furthest a servo target leads the measured joint (bounds speed and force)
# the start pose's IK (kinematics only): iterations, and the largest joint step per iteration (rad)
START_IK_ITERATIONS = 100
START_IK_MAX_STEP = 0.2


def _native_servo() -> ctypes.CDLL | None:
    """peg_servo.c (IK, servo lag and mj_step for all members; the start-pose IK), or None: use the numpy path."""
    lib = native.load("peg_servo")
    if lib is None:
        return None
    i32, f64, ptr, ptrs = ctypes.c_int, ctypes.c_double, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
    arr = np.ctypeslib.ndpointer(np.float64, flags="C_CONTIGUOUS")
    out = np.ctypeslib.ndpointer(np.float64, flags=("C_CONTIGUOUS", "WRITEABLE"))
    # n, models, datas, substeps, nthread, tip_site, flange_site, target_pos, target_yaw, alpha, damping, max_step,
    # ctrl_low, ctrl_high, joint_target
    lib.peg_servo_period.argtypes = (
        i32,
        ptrs,
        ptrs,
        i32,
        i32,
        i32,
        i32,
        arr,
        arr,
        arr,
        f64,
        f64,
        arr,
        arr,
        out,
    )
    # model, data, member, iterations, tip_site, flange_site, target_pos, target_yaw, damping, max_step
    lib.peg_servo_start_pose.argtypes = (ptr, ptr, i32, i32, i32, i32, arr, arr, f64, f64)
    lib.peg_servo_period.restype = lib.peg_servo_start_pose.restype = None
    return lib


class PegEnv(SimVecEnv):
    proprio_dim = PROPRIO_DIM
    command_dim = 4
    action_dim = 4
    privileged_dim = 31 + 4 + 3 + 1 + len(PRIVILEGED_PARAMS) + 4

    def build_model(self) -> mujoco.MjModel:
        pc = self.cfg.peg
        tightest = max(
            self.profile_params.get("hole_undersize_m", 0.0),
            *self.cfg.randomisation.get("hole_undersize_m", [0]),
        )
        if tightest >= pc.clearance:
            raise ConfigError(
                f"hole_undersize_m {tightest} closes the opening: it must stay below peg.clearance {pc.clearance}"
            )
        spec = mujoco.MjSpec.from_file(str(assets_dir() / "ur5e.xml"))
        spec.option.timestep = self.cfg.physics_dt
        for body in spec.bodies:
            if body.name not in ("world", "base"):
                body.gravcomp = 1.0  # the UR controller compensates gravity; servos only track
        world = spec.worldbody
        world.add_geom(
            name="table", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[1.0, 1.0, 0.05], rgba=[0.55, 0.5, 0.45, 1]
        )
        world.add_light(
            name="sun",
            pos=[0.5, 0, 2],
            dir=[0, 0, -1],
            type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL,
            castshadow=0,
        )
        world.add_camera(name="front", pos=[1.3, 0.13, 0.45], xyaxes=[0, 1, 0, -0.45, 0, 1])
        # The peg: a rigid square bar on the flange; the F/T sensor measures what the peg exerts on the flange.
        flange = spec.site("flange")
        wrist = spec.body("wrist_3_link")
        peg = wrist.add_body(name="peg", pos=flange.pos, quat=flange.quat)
        peg.add_geom(
            name="peg",
            type=mujoco.mjtGeom.mjGEOM_BOX,
            size=[pc.peg_half_side, pc.peg_half_side, pc.peg_half_length],
            pos=[0, 0, pc.peg_half_length],
            mass=0.1,
            rgba=[0.85, 0.55, 0.1, 1],
            priority=2,
            condim=3,
            contype=1,
            conaffinity=1,
            friction=[0.3, 0.005, 0.0001],
        )
        peg.add_site(name="ft", size=[0.004])
        peg.add_site(name="peg_tip", pos=[0, 0, 2 * pc.peg_half_length], size=[0.004])
        # The hole block: four walls around a square opening, on a mocap body so its pose can change per episode.
        # Each wall is a convex prism whose inner top edge is cut at 45 degrees (the chamfer, peg.chamfer wide):
        # a peg within the chamfer of the opening is pushed towards the centre as it descends.
        hole = world.add_body(name="hole", mocap=True, pos=pc.hole_center)
        a = pc.peg_half_side + pc.clearance / 2  # half width of the opening
        wall, depth, c = 0.03, pc.hole_depth, pc.chamfer
        # the +x wall's cross-section in (x, z), extruded along y over the outer square's half width
        section = [(a, -depth), (a + wall, -depth), (a + wall, 0.0), (a + c, 0.0), (a, -c)]
        half = a + wall
        prism = [(x, y, z) for y in (-half, half) for x, z in section]
        wall_yaws = (0.0, math.pi / 2, math.pi, -math.pi / 2)
        for k, yaw in enumerate(wall_yaws):
            co, si = math.cos(yaw), math.sin(yaw)
            spec.add_mesh(
                name=f"wall{k}",
                uservert=[v for x, y, z in prism for v in (co * x - si * y, si * x + co * y, z)],
            )
            hole.add_geom(
                name=f"wall{k}",
                type=mujoco.mjtGeom.mjGEOM_MESH,
                meshname=f"wall{k}",
                rgba=[0.2, 0.35, 0.6, 1],
                contype=1,
                conaffinity=1,
            )
        # sensordata layout read by _state: wrench (force, torque) at 0:6, tool twist (linear, angular) at 6:12
        sensor = mujoco.mjtSensor
        for name, kind, site in (
            ("ft_force", sensor.mjSENS_FORCE, "ft"),
            ("ft_torque", sensor.mjSENS_TORQUE, "ft"),
            ("tool_linvel", sensor.mjSENS_FRAMELINVEL, "flange"),
            ("tool_angvel", sensor.mjSENS_FRAMEANGVEL, "flange"),
        ):
            spec.add_sensor(name=name, type=kind, objtype=mujoco.mjtObj.mjOBJ_SITE, objname=site)
        model = spec.compile()
        self._peg_geom = model.geom("peg").id
        # each wall moves along its outward normal to narrow the opening (profile parameter hole_undersize_m)
        self._walls = np.array([model.geom(f"wall{k}").id for k in range(4)])
        self._wall_pos = model.geom_pos[self._walls].copy()
        self._wall_out = np.array([[math.cos(y), math.sin(y), 0.0] for y in wall_yaws])
        self._peg_body = model.body("peg").id
        self._peg_mass = float(model.body_mass[self._peg_body])
        self._tip = model.site("peg_tip").id
        self._fk: mujoco.MjData | None = None  # scratch data for joint targets -> tool target
        self._flange = model.site("flange").id
        self._gain = model.actuator_gainprm[:, 0].copy()
        self._kv = -model.actuator_biasprm[:, 2].copy()
        self._ctrl_low = model.actuator_ctrlrange[:, 0].copy()
        self._ctrl_high = model.actuator_ctrlrange[:, 1].copy()
        n = self.num_envs
        self.hole_pose = np.zeros((n, 4))  # true x, y, z_top, yaw
        self.command = np.zeros((n, 4))
        self.target_pos = np.zeros((n, 3))  # peg tip target (world)
        self.target_yaw = np.zeros(n)
        self.joint_target = np.zeros((n, 6))
        self.success = np.zeros(n, dtype=bool)
        self._servo = _native_servo()
        self._pointers: tuple[ctypes.Array, ctypes.Array] | None = None  # C arrays of the members' model/data
        # Without it, all members step through one mujoco.batch.Batch (persistent: each keeps its MjData, read
        # back per period) and the IK runs in numpy, batched over members.
        self._batch = None if self._servo else Batch(model, n, nthread=self._threads, persistent=True)
        self._ik_damping_eye = self.cfg.peg.ik_damping**2 * np.eye(6)
        return model

    def __getstate__(self) -> dict:
        """A copy (the planner audit's `copy.deepcopy`) leaves the C library and the addresses of this env's
        members behind: the copy has members of its own, so it takes the library again and its own addresses."""
        state = self.__dict__.copy()
        state.update(_servo=None, _pointers=None, _batch=None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._servo = _native_servo()
        if self._servo is None:
            self._batch = Batch(self.base_model, self.num_envs, nthread=self._threads, persistent=True)

    def apply_params(self, i: int) -> None:
        m, p = self.models[i], {k: v[i] for k, v in self.params.items()}
        m.geom_friction[self._peg_geom, 0] = p["friction"]
        m.body_mass[self._peg_body] = self._peg_mass + p["base_mass_add"]
        m.actuator_gainprm[:, 0] = self._gain * p["kp_scale"]
        m.actuator_biasprm[:, 1] = -self._gain * p["kp_scale"]
        m.actuator_biasprm[:, 2] = -self._kv * p["kd_scale"]
        m.dof_frictionloss[:] = p["joint_friction"]
        m.dof_damping[:] = p["joint_damping"]
        m.geom_pos[self._walls] = self._wall_pos - self._wall_out * (p.get("hole_undersize_m", 0.0) / 2)

    def _ik_steps(
        self,
        members: np.ndarray,
        anchor: np.ndarray,
        axis: np.ndarray,
        tip: np.ndarray,
        flange_rot: np.ndarray,
        max_step: float = MAX_JOINT_STEP,
    ) -> np.ndarray:
        """Damped least-squares joint steps towards the tool targets, batched over members.

        The arm's six joints are hinges, so the Jacobian columns are axis x (tip - anchor) and axis, computed from
        MuJoCo's joint anchors and axes (world frame) without a per-member call. Written out element by element:
        at the physics rate, numpy's per-call overhead on these small arrays would cost more than the physics.
        peg_servo.c does the same per member; this is its numpy fallback.
        """
        r = tip[:, None, :] - anchor
        jac = np.empty((len(members), 6, 6))
        jac[:, 0, :] = axis[..., 1] * r[..., 2] - axis[..., 2] * r[..., 1]
        jac[:, 1, :] = axis[..., 2] * r[..., 0] - axis[..., 0] * r[..., 2]
        jac[:, 2, :] = axis[..., 0] * r[..., 1] - axis[..., 1] * r[..., 0]
        jac[:, 3:, :] = axis.transpose(0, 2, 1)
        # Orientation error: the skew part of T F^T, with T = yaw rotation times the tool pointing down, i.e. rows
        # (c, s, 0), (s, -c, 0), (0, 0, -1), and F the flange rotation (sin(angle) magnitude, fine for servoing).
        c, s_ = np.cos(self.target_yaw[members]), np.sin(self.target_yaw[members])
        f = flange_rot
        err = np.empty((len(members), 6))
        err[:, :3] = self.target_pos[members] - tip
        err[:, 3] = 0.5 * (-f[:, 1, 2] - s_ * f[:, 2, 0] + c * f[:, 2, 1])
        err[:, 4] = 0.5 * (c * f[:, 2, 0] + s_ * f[:, 2, 1] + f[:, 0, 2])
        err[:, 5] = 0.5 * (s_ * f[:, 0, 0] - c * f[:, 0, 1] - c * f[:, 1, 0] - s_ * f[:, 1, 1])
        jac_t = jac.transpose(0, 2, 1)
        jjt = jac @ jac_t
        jjt += self._ik_damping_eye
        dq = (jac_t @ np.linalg.solve(jjt, err[..., None]))[..., 0]
        return np.clip(dq, -max_step, max_step, out=dq)

    def reset_member(self, i: int, rng: np.random.Generator) -> None:
        pc, d = self.cfg.peg, self.datas[i]
        r = pc.ranges[pc.range_name]
        x, y, z = pc.hole_center
        yaw = rng.uniform(-pc.hole_yaw_range, pc.hole_yaw_range)
        self.hole_pose[i] = [x + rng.uniform(-r, r), y + rng.uniform(-r, r), z, yaw]
        d.mocap_pos[0] = self.hole_pose[i, :3]
        d.mocap_quat[0] = [math.cos(yaw / 2), 0, 0, math.sin(yaw / 2)]
        c = self.cfg.command
        bias = np.concatenate([rng.normal(0, c.pose_noise_m, 2), [0.0], rng.normal(0, c.yaw_noise_rad, 1)])
        self.command[i] = self.hole_pose[i] + bias
        start = self.hole_pose[i, :3] + np.array(
            [*rng.uniform(-pc.start_xy_noise, pc.start_xy_noise, 2), pc.start_height]
        )
        self.target_pos[i], self.target_yaw[i] = start, yaw + rng.uniform(-0.05, 0.05)
        d.qpos[:6] = HOME
        self._solve_start_pose(i)
        d.qvel[:] = 0.0
        d.ctrl[:] = d.qpos[:6]
        self.joint_target[i] = d.qpos[:6]
        self.success[i] = False

    def _solve_start_pose(self, i: int) -> None:
        """Move member i's arm onto its tool target by IK on kinematics alone (no dynamics)."""
        m, d = self.models[i], self.datas[i]
        if self._servo is not None:
            self._servo.peg_servo_start_pose(
                m._address,
                d._address,
                i,
                START_IK_ITERATIONS,
                self._tip,
                self._flange,
                self.target_pos,
                self.target_yaw,
                self.cfg.peg.ik_damping,
                START_IK_MAX_STEP,
            )
            return
        for _ in range(START_IK_ITERATIONS):
            mujoco.mj_kinematics(m, d)
            d.qpos[:6] += self._ik_steps(
                np.array([i]),
                d.xanchor[None, :6],
                d.xaxis[None, :6],
                d.site_xpos[None, self._tip],
                d.site_xmat[None, self._flange].reshape(1, 3, 3),
                max_step=START_IK_MAX_STEP,
            )[0]

    def set_targets(self, actions: np.ndarray) -> None:
        pc = self.cfg.peg
        self.target_pos += actions[:, :3] * pc.action_scale_m
        self.target_yaw += actions[:, 3] * pc.action_scale_rad
        low, high = workspace(self.command[:, :3], pc.hole_depth)  # around the hole estimate, above the table
        np.clip(self.target_pos, low, high, out=self.target_pos)

    def simulate(self) -> None:
        """One control period: IK and servo-lag update at every physics step (the arm's 500 Hz servo rate)."""
        dt = self.cfg.physics_dt
        alpha = dt / (self.params["servo_lag"] + dt)  # first-order servo lag
        if self._servo is None:
            self._simulate_numpy(alpha[:, None])
            return
        if self._pointers is None:  # the members' MjModel/MjData live as long as the env: addresses once
            array = ctypes.c_void_p * self.num_envs
            self._pointers = (
                array(*(m._address for m in self.models)),
                array(*(d._address for d in self.datas)),
            )
        self._servo.peg_servo_period(
            self.num_envs,
            *self._pointers,
            self.cfg.substeps,
            self._threads,
            self._tip,
            self._flange,
            self.target_pos,
            self.target_yaw,
            alpha,
            self.cfg.peg.ik_damping,
            MAX_JOINT_STEP,
            self._ctrl_low,
            self._ctrl_high,
            self.joint_target,
        )

    def _simulate_numpy(self, alpha: np.ndarray) -> None:
        """simulate() without the C servo: the same steps, all members stepped as one batch."""
        batch, state = self._batch, self._batch.state
        for i, (m, d) in enumerate(zip(self.models, self.datas, strict=True)):
            mujoco.mj_getState(m, d, state[i], mujoco.mjtState.mjSTATE_INTEGRATION)
        batch.set_models(self.models)  # parameters may have changed at resets
        batch.forward(stage=mujoco.mjtStage.mjSTAGE_POS)
        qpos, ctrl = batch.bind("qpos"), batch.bind("ctrl")
        anchor, axis = batch.bind("xanchor"), batch.bind("xaxis")
        site_pos, site_rot = batch.bind("site_xpos"), batch.bind("site_xmat")
        members = np.arange(self.num_envs)
        # live views into the batch: refreshed by every step, sliced once
        arm_q, arm_anchor, arm_axis = qpos[:, :6], anchor[:, :6], axis[:, :6]
        tip, flange_rot = site_pos[:, self._tip], site_rot[:, self._flange].reshape(-1, 3, 3)
        for _ in range(self.cfg.substeps):
            dq = self._ik_steps(members, arm_anchor, arm_axis, tip, flange_rot)
            np.clip(arm_q + dq, self._ctrl_low, self._ctrl_high, out=self.joint_target)
            ctrl += alpha * (self.joint_target - ctrl)
            batch.step()
        for i, d in enumerate(self.datas):
            batch.get_data(i, d)

    def _state(self) -> dict[str, np.ndarray]:
        sd = self.gather("sensordata")
        quat = np.zeros((self.num_envs, 4))
        tip = np.zeros((self.num_envs, 3))
        for i, d in enumerate(self.datas):
            mujoco.mju_mat2Quat(quat[i], d.site_xmat[self._flange])
            tip[i] = d.site_xpos[self._tip]
        quat = flange_quat(quat)
        return {
            "joint_pos": self.gather("qpos")[:, :6],
            "joint_vel": self.gather("qvel")[:, :6],
            "tool_pos": tip,
            "tool_quat": quat,
            "tool_vel": sd[:, 6:12],
            "wrench": sd[:, 0:6],
        }

    def observe(self) -> Obs:
        s = self._state()
        self._last_state = s
        clean = np.concatenate([s[k] for k in PROPRIO_PARTS], axis=1)
        noisy = np.concatenate(
            [s[k] + self.noise(s[k].shape, self.cfg.observation_noise.get(k, 0.0)) for k in PROPRIO_PARTS],
            axis=1,
        )
        rel = s["tool_pos"] - self.hole_pose[:, :3]
        depth = np.clip(-rel[:, 2], 0.0, None)[:, None]
        params = np.stack([self.params[k] for k in PRIVILEGED_PARAMS], axis=1)
        privileged = np.concatenate([clean, self.hole_pose, rel, depth, params, self.command], axis=1)
        return {
            "proprio": noisy.astype(np.float32),
            "command": self.command.astype(np.float32),
            "privileged": privileged.astype(np.float32),
        }

    def _geometry(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rel = self._last_state["tool_pos"] - self.hole_pose[:, :3]
        dist_xy = np.linalg.norm(rel[:, :2], axis=1)
        depth = -rel[:, 2]
        return rel, dist_xy, depth

    def reward(self, actions: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        pc, w = self.cfg.peg, self.cfg.reward
        rel, dist_xy, depth = self._geometry()
        inside = dist_xy < pc.clearance + 0.002
        self.success |= inside & (depth >= pc.success_depth)
        yaw_now = self.tool_yaw()
        # a square peg fits every quarter turn: wrap the error to [-pi/4, pi/4)
        yaw_err = np.abs((yaw_now - self.hole_pose[:, 3] + math.pi / 4) % (math.pi / 2) - math.pi / 4)
        force = np.linalg.norm(self._last_state["wrench"][:, :3], axis=1)
        terms = {
            "align_xy": dist_xy,
            "height": np.clip(rel[:, 2] + pc.success_depth, 0.0, None),
            "depth": np.where(inside, np.clip(depth, 0.0, pc.hole_depth), 0.0),
            "yaw": yaw_err,
            "force": np.clip(force - 20.0, 0.0, None),
            "action": np.square(actions).sum(axis=1),
            "success": self.success.astype(float),
        }
        total = sum(w.get(k, 0.0) * v for k, v in terms.items())
        return np.asarray(total), terms

    def terminated(self) -> np.ndarray:
        force = np.linalg.norm(self._last_state["wrench"][:, :3], axis=1)
        return force > self.cfg.termination.get("max_force_n", 200.0)

    def finished(self) -> np.ndarray:
        """With `peg.end_on_success`, an episode ends once the peg is in (as a real cell's script stops, retracts
        and resets there) rather than holding it in the hole until the time limit."""
        if self.cfg.peg.end_on_success:
            return self.success.copy()
        return super().finished()

    def metrics(self) -> dict[str, np.ndarray]:
        _, dist_xy, depth = self._geometry()
        return {"success": self.success.copy(), "depth_m": depth, "dist_xy_m": dist_xy}

    def scripted_action(self, gain: float = 0.5) -> np.ndarray:
        """The force-guided search controller (simdist.robots.ur5e.search) on the current, noise-free measurements."""
        s = self._last_state
        proprio = np.concatenate([s[k] for k in PROPRIO_PARTS], axis=1)
        pc = self.cfg.peg
        return search_action(proprio, self.command, gain, pc.action_scale_m, pc.action_scale_rad)

    def tool_yaw(self) -> np.ndarray:
        return tool_yaw(self._last_state["tool_quat"])

    # ----- the robot's own measurement and joint targets (SimRobot) -------------------------------------------
    def measure(self, i: int, noise: Noise, *, timestamp: float, robot_time: float) -> RobotState:
        """What RTDE reports: joints, the TCP (peg tip) pose with the flange's orientation, its twist, the wrench."""
        data = self.datas[i]
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, data.site_xmat[self._flange])
        quat = quat + noise("tool_quat", (4,))
        twist = np.concatenate([data.sensor("tool_linvel").data, data.sensor("tool_angvel").data])
        wrench = np.concatenate([data.sensor("ft_force").data, data.sensor("ft_torque").data])
        tip = data.site_xpos[self._tip] + noise("tool_pos", (3,))
        return RobotState(
            timestamp=timestamp,
            joint_positions=data.qpos[:6] + noise("joint_pos", (6,)),
            joint_velocities=data.qvel[:6] + noise("joint_vel", (6,)),
            joint_torques=data.actuator_force.copy(),
            tool_pose=np.concatenate([tip, quat]),
            tool_twist=twist + noise("tool_vel", (6,)),
            tool_wrench=wrench + noise("wrench", (6,)),
            joint_names=JOINT_NAMES,
            robot_time=robot_time,
        )

    def tool_pose_action(self, i: int, pose: np.ndarray) -> np.ndarray:
        """A servoL pose (x, y, z, rx, ry, rz of the peg tip) becomes the tool target, inside the workspace, as the
        emulated arm applies it; the action is then a zero delta. The hardware path (`CartesianActuator`, with its
        press guard) drives the simulator through this."""
        from simdist.robots.ur5e.hardware import rotvec_to_matrix

        pose = np.asarray(pose, dtype=np.float64)
        rot = rotvec_to_matrix(pose[3:6])
        low, high = workspace(self.command[i, :3], self.cfg.peg.hole_depth)
        self.target_pos[i] = np.clip(pose[:3], low, high)
        self.target_yaw[i] = math.atan2(rot[1, 0], rot[0, 0])
        return np.zeros(self.action_dim, dtype=np.float32)

    def joint_targets_action(self, i: int, targets: np.ndarray) -> np.ndarray:
        """Joint targets become the tool target (peg tip position and flange yaw, by forward kinematics) that the
        servo's IK tracks; the action is then a zero delta."""
        if self._fk is None:
            self._fk = mujoco.MjData(self.base_model)
        fk = self._fk
        fk.qpos[:6] = np.asarray(targets, dtype=np.float64)
        mujoco.mj_kinematics(self.base_model, fk)
        rot = fk.site_xmat[self._flange].reshape(3, 3)
        self.target_pos[i] = fk.site_xpos[self._tip]
        self.target_yaw[i] = np.arctan2(rot[1, 0], rot[0, 0])
        return np.zeros(self.action_dim, dtype=np.float32)
