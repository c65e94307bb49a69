"""The prediction view: held-out latent error by horizon, and (Go2) predicted against actual base velocity in a slip.

Held-out data are rollouts of the expert's final policy on the real profile, which no method trains on. There is
no decoder, so base velocity is read from latents by a linear probe (ridge regression) fitted on simulation
rollouts under the pretraining randomisation, from the pretrained encoder's latent E(o_t) to the true body-frame
velocity v_t. The slip plot compares the actual velocity with the probe applied to the latent predicted k steps
earlier, probe(z_hat(t | t-k)), before and after adaptation; the dynamics-only methods share the pretrained
encoder, so one probe serves them (full finetuning changes the encoder and is left out of the plot).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from simdist import robots
from simdist.data.dataset import InMemoryEpisodes
from simdist.data.windows import WindowSampler
from simdist.experiment.config import HELDOUT_SEED, PROBE_SEED
from simdist.experiment.report import save_png
from simdist.experts.policy import Expert
from simdist.model.world_model import WorldModel
from simdist.runtime.finetune_losses import latent_predictions
from simdist.sim import make_env
from simdist.sim.config import TaskConfig
from simdist.train.evaluate import latent_by_horizon_plot

if TYPE_CHECKING:
    from simdist.experiment.run import Run
from simdist.train.evaluate import heldout_latent_error


@dataclass
class Rollouts:
    """Whole episodes in the dataset's per-step format, plus the true base velocity per step (Go2)."""

    episodes: list[dict[str, np.ndarray]]
    velocity: list[np.ndarray] | None

    @property
    def steps(self) -> int:
        return sum(len(e["proprio"]) for e in self.episodes)

    def sampler(self, model: WorldModel) -> WindowSampler:
        return WindowSampler(InMemoryEpisodes(self.episodes), model.history, model.horizon)


def expert_rollouts(
    cfg: TaskConfig,
    profile: str,
    expert_dir: Path,
    *,
    num_envs: int,
    seconds: float,
    seed: int,
    randomize: bool = False,
) -> Rollouts:
    """`seconds` of every one of `num_envs` environments under the expert's final policy (episodes split at resets;
    the unfinished tails are kept as episodes too)."""
    expert = Expert(expert_dir)
    expert.reseed(seed)
    env = make_env(cfg, profile, num_envs=num_envs, seed=seed, randomize=randomize)
    obs, _ = env.reset(seed=seed)
    velocity_at = robots.get(
        cfg.robot
    ).velocity_index  # the base velocity in the privileged observation, if any
    has_velocity = velocity_at is not None
    keys = ("proprio", "command", "action", "velocity")
    buffers: list[dict[str, list[np.ndarray]]] = [{k: [] for k in keys} for _ in range(num_envs)]
    done_eps: list[dict[str, list[np.ndarray]]] = []
    for _ in range(max(2, round(seconds * cfg.control_hz))):
        step_obs = obs
        obs, _, terminated, truncated, info = env.step(expert.final.act(obs))
        for i in range(num_envs):
            b = buffers[i]
            b["proprio"].append(step_obs["proprio"][i])
            b["command"].append(step_obs["command"][i])
            b["action"].append(info["action"][i].copy())
            if has_velocity:
                b["velocity"].append(step_obs["privileged"][i, velocity_at])
        for i in np.flatnonzero(terminated | truncated):
            done_eps.append(buffers[i])
            buffers[i] = {k: [] for k in keys}
    env.close()
    episodes, velocity = [], []
    for n, b in enumerate(e for e in done_eps + buffers if len(e["proprio"]) >= 2):
        length = len(b["proprio"])
        episodes.append(
            {
                "proprio": np.asarray(b["proprio"], np.float32),
                "command": np.asarray(b["command"], np.float32),
                "action": np.asarray(b["action"], np.float32),
                "reward": np.zeros(length, np.float32),
                "value": np.zeros(length, np.float32),
                "expert_flag": np.zeros(length, bool),
                "episode": np.full(length, n, np.int64),
                "step": np.arange(length, dtype=np.int32),
            }
        )
        if has_velocity:
            velocity.append(np.asarray(b["velocity"], np.float32))
    return Rollouts(episodes, velocity if has_velocity else None)


def latent_error_by_horizon(model: WorldModel, rollouts: Rollouts, *, windows: int) -> list[float]:
    """Held-out latent MSE per prediction step k = 1..T on the rollouts (against the model's own encoder)."""
    model.eval()
    return [float(x) for x in heldout_latent_error(model, rollouts.sampler(model), limit=windows)]


# -- the velocity probe --------------------------------------------------------------------------------------------


@torch.no_grad()
def encode(model: WorldModel, proprio: np.ndarray) -> np.ndarray:
    """E(o_t) for a (N, O) array of raw observations."""
    model.eval()
    obs = torch.as_tensor(proprio, dtype=torch.float32)
    return model.encoder(model.normalizer.normalize("obs", obs), None).numpy()


@dataclass
class Probe:
    """A linear map from latent to base velocity: v = [z, 1] @ weights."""

    weights: np.ndarray  # (D + 1, 3)
    r2: list[float]  # per velocity component, on held-out simulation episodes

    def __call__(self, latents: np.ndarray) -> np.ndarray:
        return np.concatenate([latents, np.ones((len(latents), 1))], axis=1) @ self.weights


def fit_probe(model: WorldModel, rollouts: Rollouts, *, ridge: float) -> Probe:
    """Ridge regression from E(o_t) to v_t; R^2 on every fifth episode, held out of the fit."""
    assert rollouts.velocity is not None
    test = [i % 5 == 4 for i in range(len(rollouts.episodes))]
    if not any(test) or all(test):
        test = [False] * len(test)

    def stack(held: bool) -> tuple[np.ndarray, np.ndarray]:
        chosen = [i for i, t in enumerate(test) if t == held] or list(range(len(test)))
        z = encode(model, np.concatenate([rollouts.episodes[i]["proprio"] for i in chosen]))
        v = np.concatenate([rollouts.velocity[i] for i in chosen])  # type: ignore[index]
        return np.concatenate([z, np.ones((len(z), 1))], axis=1), v

    x, y = stack(False)
    reg = ridge * len(x) * np.eye(x.shape[1])
    reg[-1, -1] = 0.0  # no penalty on the intercept
    weights = np.linalg.solve(x.T @ x + reg, x.T @ y)
    xt, yt = stack(True)
    residual = ((xt @ weights - yt) ** 2).sum(0)
    total = ((yt - yt.mean(0)) ** 2).sum(0)
    r2 = [float(1.0 - r / t) if t > 0 else float("nan") for r, t in zip(residual, total, strict=True)]
    return Probe(weights, r2)


@torch.no_grad()
def predicted_velocity(
    model: WorldModel, rollouts: Rollouts, episode: int, probe: Probe, k: int
) -> np.ndarray:
    """probe(z_hat(t | t-k)) for every step t of one episode (NaN where t < k)."""
    model.eval()
    source = InMemoryEpisodes([rollouts.episodes[episode]])
    sampler = WindowSampler(source, model.history, model.horizon)
    length = len(rollouts.episodes[episode]["proprio"])
    out = np.full((length, 3), np.nan)
    starts = np.arange(0, max(0, length - k))
    for i in range(0, len(starts), 256):
        chunk = starts[i : i + 256]
        predicted, _ = latent_predictions(model, sampler.windows(chunk))
        out[chunk + k] = probe(predicted[:, k - 1].numpy())
    return out


def find_slip(rollouts: Rollouts, *, history: int) -> tuple[int, int]:
    """(episode, step) where the forward velocity falls furthest below the commanded speed (after the history)."""
    assert rollouts.velocity is not None
    best = (-np.inf, 0, 0)
    for e, (episode, velocity) in enumerate(zip(rollouts.episodes, rollouts.velocity, strict=True)):
        deficit = episode["command"][:, 0] - velocity[:, 0]
        deficit[: min(history, len(deficit))] = -np.inf
        t = int(np.argmax(deficit))
        if deficit[t] > best[0]:
            best = (float(deficit[t]), e, t)
    return best[1], best[2]


def _rmse(values: list[np.ndarray], reference: list[np.ndarray], steps: list[np.ndarray]) -> float:
    """Root mean square of values - reference over the chosen steps of every episode."""
    errors = [(v[m] - r[m]) ** 2 for v, r, m in zip(values, reference, steps, strict=True)]
    return float(np.sqrt(np.mean(np.concatenate(errors))))


def slip_view(
    models: dict[str, WorldModel],
    probe: Probe,
    rollouts: Rollouts,
    *,
    k: int,
    window_s: float,
    control_hz: float,
    out: Path,
) -> dict[str, Any]:
    """Plot actual and predicted forward velocity around the worst slip; returns RMSEs over all held-out steps."""
    reference = next(iter(models.values()))
    k = max(1, min(k, reference.horizon))
    episode, t_slip = find_slip(rollouts, history=reference.history)
    assert rollouts.velocity is not None
    actual = rollouts.velocity[episode][:, 0]
    encoded = probe(encode(reference, rollouts.episodes[episode]["proprio"]))[:, 0]
    every = {
        name: [predicted_velocity(m, rollouts, e, probe, k)[:, 0] for e in range(len(rollouts.episodes))]
        for name, m in models.items()
    }
    predicted = {name: values[episode] for name, values in every.items()}
    # Two references over the same steps (t >= k): the truth, and the probe applied to the encoder's own latent of
    # the observation, probe(E(o_t)). Against the truth the probe's error on this profile counts too; against
    # probe(E(o_t)) only the dynamics' prediction error, seen through the probe, does.
    truth = [v[:, 0] for v in rollouts.velocity]
    read = [probe(encode(reference, e["proprio"]))[:, 0] for e in rollouts.episodes]
    steps = [~np.isnan(p) for p in next(iter(every.values()))]
    rmse = {name: _rmse(values, truth, steps) for name, values in every.items()}
    rmse_read = {name: _rmse(values, read, steps) for name, values in every.items()}
    half = max(1, round(window_s * control_hz / 2))
    lo, hi = max(0, t_slip - half), min(len(actual), t_slip + half)
    time_s = np.arange(lo, hi) / control_hz

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(time_s, actual[lo:hi], color="black", lw=2, label="actual (simulator truth)")
    ax.plot(time_s, encoded[lo:hi], color="gray", ls=":", label="probe(E(o_t)) (probe ceiling)")
    for name, values in predicted.items():
        ax.plot(time_s, values[lo:hi], label=f"probe(z_hat(t | t-{k})): {name}")
    command = rollouts.episodes[episode]["command"][lo:hi, 0]
    ax.plot(time_s, command, color="tab:red", ls="--", lw=1, label="commanded")
    ax.axvline(t_slip / control_hz, color="tab:red", alpha=0.3)
    ax.set_xlabel("time in the held-out episode (s)")
    ax.set_ylabel("forward base velocity (m/s)")
    ax.set_title("predicted vs actual base velocity around the largest slip")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_png(fig, out)
    return {
        "episode": episode,
        "slip_step": t_slip,
        "slip_deficit_mps": float(rollouts.episodes[episode]["command"][t_slip, 0] - actual[t_slip]),
        "k": k,
        "rmse_mps": rmse,
        "probe_rmse_mps": _rmse(read, truth, steps),
        "rmse_vs_probe_of_encoder_mps": rmse_read,
        "probe_r2": probe.r2,
        "png": out.name,
    }


# -- the experiment's prediction view ---------------------------------------------------------------------------
def write_view(run: Run, base: Path) -> None:
    """Latent error by horizon before and after adaptation (seed 0), and the Go2 slip plot."""
    from simdist.experiment import prediction as pv
    from simdist.model.checkpoint import load_checkpoint

    p = run.ecfg.prediction
    seed0 = run.out / f"seed_{run.result.seeds[0]}"
    last = f"{run.result.points[-1]:g} min"
    models = {"pretrained (0 min)": load_checkpoint(base)}
    for method in ("simdist", "full_finetune"):
        # full finetuning writes a new model per published round (model_NN); the last one is where it ended
        folders = sorted((seed0 / method).glob("model_*")) or [seed0 / method / "model"]
        if folders[-1].is_dir():
            models[f"{method} ({last})"] = load_checkpoint(folders[-1])
    if (seed0 / "oracle" / "model").is_dir():
        models["oracle pretrained (0 min)"] = load_checkpoint(Path(run.result.settings["oracle_model"]))
        models[f"oracle ({last})"] = load_checkpoint(seed0 / "oracle" / "model")
    with run.timed("prediction view", "latent error"):
        curves = {
            name: pv.latent_error_by_horizon(m, run.heldout, windows=p.windows) for name, m in models.items()
        }
    latent_by_horizon_plot(
        curves,
        run.out / "latent_error_by_horizon.png",
        title=f"held-out latent error by horizon, seed {run.result.seeds[0]}",
        log_scale=True,
        figsize=(7, 4.5),
        legend_fontsize=7,
    )
    view: dict[str, Any] = {
        "heldout": (
            f"{run.heldout.steps} steps ({len(run.heldout.episodes)} episodes) of the expert's final policy on "
            f"sim:{run.profile}, {p.heldout_envs} environments x {p.heldout_seconds:g} s, seed {HELDOUT_SEED}; "
            "no method trains on them"
        ),
        "latent_by_horizon": curves,
    }
    if run.heldout.velocity is not None:  # robots whose env exposes the base velocity (the Go2)
        with run.timed("prediction view", "velocity probe"):
            sim = pv.expert_rollouts(
                run.cfg,
                "sim",
                run.expert,
                num_envs=p.probe_envs,
                seconds=p.probe_seconds,
                seed=PROBE_SEED,
                randomize=True,
            )
            probe = pv.fit_probe(models["pretrained (0 min)"], sim, ridge=p.ridge)
            # the probe reads the pretrained encoder's latents: models with encoders of their own (full
            # finetuning, the oracle, pretrained separately) are not read through it
            slip_models = {k: m for k, m in models.items() if not k.startswith(("full_finetune", "oracle"))}
            view["slip"] = pv.slip_view(
                slip_models,
                probe,
                run.heldout,
                k=p.probe_step,
                window_s=p.slip_window_s,
                control_hz=run.cfg.control_hz,
                out=run.out / "slip_velocity.png",
            )
        view["probe"] = (
            f"A linear probe (ridge {p.ridge:g}) from the pretrained encoder's latent E(o_t) to the true body-frame "
            f"base velocity, fitted on {sim.steps} steps of expert rollouts in simulation under the pretraining "
            "randomisation; the plot applies it to latents the dynamics predicted k steps earlier. The dynamics-only "
            "methods keep the pretrained encoder, so the one probe reads all of them; full finetuning is left out."
        )
    run.result.prediction = view
