"""The SimDist world model and its checkpoints.

Planner API (every input and output in RAW units; the model normalises internally):

    ctx = model.context(obs_hist (B,H,O), act_hist (B,H,A), hist_mask (B,H) bool True=real, obs (B,O)) -> Context
          Context holds latent z_t (B,D), the context tokens and cached per-layer cross-attention K/V
          for the dynamics and the policy.
    ctx.expand(n) -> Context   the same context (B must be 1) broadcast to n samples, nothing recomputed
    latents = model.predict(ctx, actions (N,T,A)) -> (N,T,D)         z_hat(t+1..t+T), one pass, causal in actions
    rewards, values = model.score(ctx, latents (N,T,D), actions (N,T,A), command (N or 1,T,C)) -> (N,T), (N,T)
          rewards[:, k] = r_hat(t+k); values[:, k] = V_hat(t+k+1), so the terminal value is values[:, -1]
    actions = model.propose(ctx, command (1 or N,T,C)) -> (N,T,A)     the base policy's action chunk
    model.obs_dim, model.act_dim, model.cmd_dim, model.horizon, model.history, model.latent_dim

A context of batch 1 serves N samples without copying K/V (queries are folded into one sequence).
Checkpoints: `load_checkpoint(folder)`, `save_checkpoint`, `publish_dynamics`, `read_dynamics`, `rollback`.
"""

from simdist.model.checkpoint import (
    current_version,
    list_versions,
    load_checkpoint,
    publish_dynamics,
    read_description,
    read_dynamics,
    rollback,
    save_checkpoint,
)
from simdist.model.config import ImageConfig, ModelConfig, load_model_config
from simdist.model.normalizer import Normalizer
from simdist.model.world_model import Context, WorldModel

__all__ = [
    "Context",
    "ImageConfig",
    "ModelConfig",
    "Normalizer",
    "WorldModel",
    "current_version",
    "list_versions",
    "load_checkpoint",
    "load_model_config",
    "publish_dynamics",
    "read_description",
    "read_dynamics",
    "rollback",
    "save_checkpoint",
]
