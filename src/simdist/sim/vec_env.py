"""Batched MuJoCo environment with gymnasium vector conventions, shared by every task.

Each member has its own MjModel copy so that its dynamics parameters (randomised or a named profile) can differ.
Each robot's subclass (`simdist.robots.<robot>.sim`) builds the scene and define actions, observations and rewards.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium.vector import AutoresetMode

from simdist.errors import ConfigError
from simdist.hardware.state import RobotState
from simdist.sim.config import TaskConfig

Obs = dict[str, np.ndarray]
Noise = Callable[[str, tuple[int, ...]], np.ndarray]


def sanitize_actions(actions: np.ndarray, limit: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n, A) actions as the simulator executes them: a row with a non-finite value becomes zero (the safe action),
    values beyond +-limit are clipped. Returns (float32 copy, rows that were non-finite, rows that were clipped)."""
    actions = np.array(actions, dtype=np.float32, copy=True)
    bad = ~np.isfinite(actions).all(axis=1)
    actions[bad] = 0.0
    clipped = (np.abs(actions) > limit).any(axis=1)
    np.clip(actions, -limit, limit, out=actions)
    return actions, bad, clipped


class SimVecEnv(gym.vector.VectorEnv):
    """N copies of one task. Observations are dicts: proprio, command, privileged (and image with a camera).

    Finished members reset in the same step (gymnasium SAME_STEP autoreset): the returned observation is the first
    of the new episode and `info["final_obs"]` holds the last one. Bad actions are sanitised and counted.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    proprio_dim: int
    command_dim: int
    privileged_dim: int
    action_dim: int
    extra_obs: dict[str, int] = {}  # further observation keys a robot adds (the Go2's gait clock)

    def __init__(
        self,
        cfg: TaskConfig,
        profile: str = "sim",
        num_envs: int = 1,
        seed: int = 0,
        randomize: bool = False,
        eval_commands: bool = False,
        threads: int = 1,
    ) -> None:
        self.cfg = cfg
        self.profile_name = profile
        self.profile_params = cfg.profile(profile)
        self.num_envs = num_envs
        self.randomize = randomize
        self.eval_commands = eval_commands
        self._threads = threads
        self.base_model = self.build_model()
        self.models = [copy.copy(self.base_model) for _ in range(num_envs)]
        self.datas = [mujoco.MjData(m) for m in self.models]
        self.dt = cfg.substeps * self.base_model.opt.timestep
        self.param_names = list(self.profile_params)
        self.params = {name: np.zeros(num_envs) for name in self.param_names}
        self.steps = np.zeros(num_envs, dtype=np.int64)
        self.episode_ids = np.zeros(num_envs, dtype=np.int64)
        self._next_episode = 0
        self.last_action = np.zeros((num_envs, self.action_dim), dtype=np.float32)
        self.prev_action = np.zeros_like(self.last_action)
        self._delay_queue = np.zeros((num_envs, 3, self.action_dim), dtype=np.float32)
        self.counters = {"nonfinite_actions": 0, "clipped_actions": 0, "unstable_resets": 0}
        self._pool = ThreadPoolExecutor(threads) if threads > 1 else None
        self._chunks = np.array_split(np.arange(num_envs), max(1, threads))
        self.single_action_space = gym.spaces.Box(
            -cfg.action_clip, cfg.action_clip, (self.action_dim,), np.float32
        )
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        spaces = {
            "proprio": gym.spaces.Box(-np.inf, np.inf, (self.proprio_dim,), np.float32),
            "command": gym.spaces.Box(-np.inf, np.inf, (self.command_dim,), np.float32),
            "privileged": gym.spaces.Box(-np.inf, np.inf, (self.privileged_dim,), np.float32),
            **{k: gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32) for k, dim in self.extra_obs.items()},
        }
        self._renderer: mujoco.Renderer | None = None
        if cfg.camera.enabled:
            cam = cfg.camera
            if mujoco.mj_name2id(self.base_model, mujoco.mjtObj.mjOBJ_CAMERA, cam.name) < 0:
                raise ConfigError(f"camera.name '{cam.name}' is not a camera of task {cfg.task}")
            self._renderer = mujoco.Renderer(self.base_model, cam.height, cam.width)
            spaces["image"] = gym.spaces.Box(0, 255, (cam.height, cam.width, 3), np.uint8)
        self.single_observation_space = gym.spaces.Dict(spaces)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self._seed(seed)

    # ----- hooks for the robot subclasses -------------------------------------------------------------------
    def build_model(self) -> mujoco.MjModel:
        raise NotImplementedError

    def apply_params(self, i: int) -> None:
        """Write member i's dynamics parameters into its MjModel."""
        raise NotImplementedError

    def reset_member(self, i: int, rng: np.random.Generator) -> None:
        """Place member i at the start of an episode (state and command)."""
        raise NotImplementedError

    def set_targets(self, actions: np.ndarray) -> None:
        """Turn the (delayed, sanitised) actions into servo targets."""
        raise NotImplementedError

    def observe(self) -> Obs:
        raise NotImplementedError

    def reward(self, actions: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        raise NotImplementedError

    def terminated(self) -> np.ndarray:
        raise NotImplementedError

    def finished(self) -> np.ndarray:
        """Members whose task is done this step and whose episode ends there as a time-out does (not terminal: the
        state has a future); none unless the task says so (the peg's `peg.end_on_success`)."""
        return np.zeros(self.num_envs, dtype=bool)

    def metrics(self) -> dict[str, np.ndarray]:
        """Per-member task metrics of the current episode (progress, success, fell)."""
        return {}

    def measure(self, i: int, noise: Noise, *, timestamp: float, robot_time: float) -> RobotState:
        """What member i's robot measures, as its driver reports it (`SimRobot.read`); `noise(key, shape)` draws
        the task's sensor noise of `observation_noise[key]`."""
        raise NotImplementedError

    def joint_targets_action(self, i: int, targets: np.ndarray) -> np.ndarray:
        """The task action that makes member i track joint `targets` (the hardware path run in simulation)."""
        raise NotImplementedError

    # ----- seeding and parameters --------------------------------------------------------------------------
    def _seed(self, seed: int | None) -> None:
        seq = np.random.SeedSequence(seed)
        children = seq.spawn(self.num_envs + 1)
        self.member_rngs = [np.random.default_rng(s) for s in children[:-1]]
        self.np_random = np.random.default_rng(children[-1])

    def sample_params(self, i: int, rng: np.random.Generator) -> None:
        for name in self.param_names:
            value = self.profile_params[name]
            if self.randomize and name in self.cfg.randomisation:
                low, high = self.cfg.randomisation[name]
                value = (
                    float(rng.integers(low, high + 1))
                    if name == "latency_steps"
                    else float(rng.uniform(low, high))
                )
            self.params[name][i] = value

    def episode_params(self, i: int) -> dict[str, float]:
        return {name: float(self.params[name][i]) for name in self.param_names}

    # ----- gymnasium API -------------------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Obs, dict[str, Any]]:
        if seed is not None:
            self._seed(seed)
        self._next_episode = 0
        for i in range(self.num_envs):
            self._reset_one(i)
        return self._observe_all(), {"episode_id": self.episode_ids.copy()}

    def _observe_all(self) -> Obs:
        obs = self.observe()
        if self._renderer is not None:
            obs["image"] = self.images()
        return obs

    def _reset_one(self, i: int) -> None:
        rng = self.member_rngs[i]
        self.sample_params(i, rng)
        mujoco.mj_resetData(self.models[i], self.datas[i])
        self.apply_params(i)
        self.reset_member(i, rng)
        mujoco.mj_forward(self.models[i], self.datas[i])
        self.steps[i] = 0
        self.episode_ids[i] = self._next_episode
        self._next_episode += 1
        self.last_action[i] = 0.0
        self.prev_action[i] = 0.0
        self._delay_queue[i] = 0.0

    def sanitize(self, actions: np.ndarray) -> np.ndarray:
        """Non-finite rows become zero (the task's safe action); out-of-range values are clipped. Both counted."""
        actions = np.array(actions, dtype=np.float32, copy=True).reshape(self.num_envs, self.action_dim)
        actions, bad, clipped = sanitize_actions(actions, self.cfg.action_clip)
        self.counters["nonfinite_actions"] += int(bad.sum())
        self.counters["clipped_actions"] += int(clipped.sum())
        return actions

    def _delayed(self, actions: np.ndarray) -> np.ndarray:
        """Apply each member's latency_steps (whole control steps, any number) through a queue of past actions. The
        queue grows to the longest latency asked for (it held 3 until 2026-12-03 and silently cut 3 or 4 steps to 2);
        a new slot starts as the oldest action it holds."""
        lag = np.maximum(self.params["latency_steps"].astype(np.int64), 0)
        if lag.max() >= self._delay_queue.shape[1]:
            grow = int(lag.max()) + 1 - self._delay_queue.shape[1]
            self._delay_queue = np.pad(self._delay_queue, ((0, 0), (0, grow), (0, 0)), mode="edge")
        self._delay_queue = np.roll(self._delay_queue, 1, axis=1)
        self._delay_queue[:, 0] = actions
        return self._delay_queue[np.arange(self.num_envs), lag]

    def simulate(self) -> None:
        """Advance every member by one control period (substeps physics steps)."""
        n = self.cfg.substeps

        def run(idx: np.ndarray) -> None:
            for i in idx:
                mujoco.mj_step(self.models[i], self.datas[i], nstep=n)

        if self._pool is None:
            run(np.arange(self.num_envs))
        else:
            list(self._pool.map(run, self._chunks))

    _BAD_STATE = (
        mujoco.mjtWarning.mjWARN_BADQPOS,
        mujoco.mjtWarning.mjWARN_BADQVEL,
        mujoco.mjtWarning.mjWARN_BADQACC,
    )

    def _clear_warnings(self) -> None:
        for d in self.datas:
            for w in self._BAD_STATE:
                d.warning[w].number = 0

    def _unstable(self) -> np.ndarray:
        """Members whose physics diverged this step (MuJoCo warned, and may have auto-reset them)."""
        out = np.zeros(self.num_envs, dtype=bool)
        for i, d in enumerate(self.datas):
            out[i] = (
                any(d.warning[w].number > 0 for w in self._BAD_STATE)
                or not np.isfinite(d.qpos).all()
                or not np.isfinite(d.qvel).all()
            )
        return out

    def step(self, actions: np.ndarray) -> tuple[Obs, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = self.sanitize(actions)
        self.prev_action[:] = self.last_action
        self.last_action[:] = actions
        self.set_targets(self._delayed(actions))
        self._clear_warnings()
        self.simulate()
        self.steps += 1
        unstable = self._unstable()
        diverged: dict[str, np.ndarray] | None = None
        if unstable.any():
            self.counters["unstable_resets"] += int(unstable.sum())
            # the episode's result as of its last finite state (observed last step), not of the restored one
            diverged = {k: v.copy() for k, v in self.metrics().items()}
            # a finite state to observe; the episode's end below places the member (no draw here: the episodes
            # after it keep their starts)
            for i in np.flatnonzero(unstable):
                mujoco.mj_resetData(self.models[i], self.datas[i])
                mujoco.mj_forward(self.models[i], self.datas[i])
        obs = self._observe_all()
        reward, terms = self.reward(actions)
        terminated = self.terminated() & ~unstable
        truncated = (self.steps >= self.cfg.episode_steps) | unstable | self.finished()
        info: dict[str, Any] = {
            "reward_terms": terms,
            "episode_id": self.episode_ids.copy(),
            "step": self.steps.copy(),
            "unstable": unstable,
            "action": actions.copy(),  # as executed (sanitised and clipped), before any reset zeroes last_action
            **{k: v for k, v in self.counters.items()},
        }
        done = terminated | truncated
        if done.any():
            info["final_obs"] = {k: v.copy() for k, v in obs.items()}
            info["final_metrics"] = {k: v.copy() for k, v in self.metrics().items()}
            if diverged is not None:
                for k, v in info["final_metrics"].items():
                    v[unstable] = diverged[k][unstable]
            info["final_params"] = {name: self.params[name].copy() for name in self.param_names}
            for i in np.flatnonzero(done):
                self._reset_one(i)
            obs = self._observe_all()
        info["done"] = done
        return obs, reward.astype(np.float32), terminated, truncated, info

    def images(self) -> np.ndarray:
        """RGB frames (N, H, W, 3) of the configured camera, rendered offscreen."""
        assert self._renderer is not None
        frames = []
        for m, d in zip(self.models, self.datas, strict=True):
            self._renderer._model = m  # same structure; per-member geometry parameters (e.g. slope) are drawn
            self._renderer.update_scene(d, camera=self.cfg.camera.name)
            frames.append(self._renderer.render())
        return np.stack(frames)

    def close(self, **kwargs: Any) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    # ----- helpers shared by subclasses ----------------------------------------------------------------------
    def gather(self, attr: str) -> np.ndarray:
        """Stack one MjData field across members (a copy)."""
        return np.stack([getattr(d, attr) for d in self.datas])

    def noise(self, shape: tuple[int, ...], std: float) -> np.ndarray:
        """Gaussian sensor noise of `std`, scaled per member by its sensor_noise_scale."""
        scale = self.params["sensor_noise_scale"].reshape(-1, *([1] * (len(shape) - 1)))
        return self.np_random.normal(0.0, 1.0, shape) * std * scale
