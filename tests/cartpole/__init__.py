"""A third robot that lives only in the tests: a MuJoCo cart-pole, all SimDist needs of it in this one package.

docs/adding_a_robot.md walks through it. Importing the package registers the robot; its task
(`tasks/cartpole_balance.yaml`) is then found by name like the shipped ones. In another process, name the module
in $SIMDIST_ROBOTS. Nothing outside this folder knows the cart-pole.

Proprio (4): cart position (m), pole angle (rad, 0 up), cart velocity, pole angular velocity, exactly the joints'
positions and velocities as a driver would report them. Command (1): the cart position to hold. Action (1): the
push on the cart, as a share of the motor's 10 N.
"""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np

from simdist import robots
from simdist.hardware.state import RobotState
from simdist.robots import Evaluation, RobotDescription
from simdist.sim.config import TaskConfig
from simdist.sim.vec_env import Noise, Obs, SimVecEnv

HERE = Path(__file__).resolve().parent
JOINT_NAMES = ("slider", "hinge")


class CartPoleEnv(SimVecEnv):
    proprio_dim = 4
    command_dim = 1
    action_dim = 1
    privileged_dim = 4 + 2 + 1  # clean proprio, the two dynamics parameters, the command

    def build_model(self) -> mujoco.MjModel:
        model = mujoco.MjModel.from_xml_path(str(HERE / "cartpole.xml"))
        model.opt.timestep = self.cfg.physics_dt
        self._cart = model.body("cart").id
        self._cart_mass = float(model.body_mass[self._cart])
        self.command = np.zeros((self.num_envs, 1))
        return model

    def apply_params(self, i: int) -> None:
        model = self.models[i]
        model.body_mass[self._cart] = self._cart_mass + self.params["base_mass_add"][i]
        model.dof_damping[0] = self.params["joint_damping"][i]

    def reset_member(self, i: int, rng: np.random.Generator) -> None:
        low, high = self.cfg.command.speed_range
        self.command[i, 0] = 0.0 if self.eval_commands else rng.uniform(low, high)
        data = self.datas[i]
        data.qpos[:] = [self.command[i, 0] + rng.uniform(-0.05, 0.05), rng.uniform(-0.05, 0.05)]
        data.qvel[:] = 0.0

    def set_targets(self, actions: np.ndarray) -> None:
        for i, data in enumerate(self.datas):
            data.ctrl[0] = self.cfg.action_scale * actions[i, 0]

    def _clean(self) -> np.ndarray:
        return np.concatenate([self.gather("qpos"), self.gather("qvel")], axis=1)

    def observe(self) -> Obs:
        clean = self._clean()
        noise = self.cfg.observation_noise
        noisy = clean + np.concatenate(
            [
                self.noise((self.num_envs, 2), noise.get("joint_pos", 0.0)),
                self.noise((self.num_envs, 2), noise.get("joint_vel", 0.0)),
            ],
            axis=1,
        )
        params = np.stack([self.params["base_mass_add"], self.params["joint_damping"]], axis=1)
        return {
            "proprio": noisy.astype(np.float32),
            "command": self.command.astype(np.float32),
            "privileged": np.concatenate([clean, params, self.command], axis=1).astype(np.float32),
        }

    def reward(self, actions: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        state, weights = self._clean(), self.cfg.reward
        terms = {
            "upright": np.cos(state[:, 1]),
            "centre": (state[:, 0] - self.command[:, 0]) ** 2,
            "effort": actions[:, 0].astype(np.float64) ** 2,
        }
        total = sum(weights[k] * v for k, v in terms.items())
        return np.asarray(total) * self.dt, terms

    def terminated(self) -> np.ndarray:
        return np.abs(self._clean()[:, 1]) > self.cfg.termination["max_angle_rad"]

    def metrics(self) -> dict[str, np.ndarray]:
        return {"balanced_s": self.steps * self.dt, "fell": self.terminated().astype(np.float64)}

    def measure(self, i: int, noise: Noise, *, timestamp: float, robot_time: float) -> RobotState:
        data = self.datas[i]
        return RobotState(
            timestamp=timestamp,
            joint_positions=data.qpos + noise("joint_pos", (2,)),
            joint_velocities=data.qvel + noise("joint_vel", (2,)),
            joint_torques=data.qfrc_actuator.copy(),  # per joint: the push on the rail, none on the hinge
            joint_names=JOINT_NAMES,
            robot_time=robot_time,
        )


class CartPole(RobotDescription):
    name = "cartpole"
    joint_names = JOINT_NAMES
    proprio_dim = 4
    action_dim = 1
    command_dim = 1
    control_hz = 20.0
    action_clip = 1.0
    state_parts = ()  # the joints only
    camera = "side"
    metric_key = summary_key = "balanced_s"
    metric = "time balanced (s)"
    default_episodes = 4
    tasks_dir = HERE / "tasks"

    def proprio(self, state: RobotState) -> np.ndarray:
        return np.concatenate([state.joint_positions, state.joint_velocities]).astype(np.float32)

    def env_class(self) -> type[SimVecEnv]:
        return CartPoleEnv

    def evaluation(self, cfg: TaskConfig, episodes: int | None = None) -> Evaluation:
        count = episodes or self.default_episodes
        return Evaluation(
            [[0.0]] * count, count, self.metric_key, self.metric, f"{count} episodes at the centre"
        )

    def default_command(self, cfg: TaskConfig) -> np.ndarray:
        return np.zeros(1, dtype=np.float32)


ROBOT = robots.register(CartPole())
