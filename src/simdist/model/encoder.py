"""Observation encoder: proprio MLP to a deterministic latent, optionally fused with a small image CNN."""

from __future__ import annotations

import torch
from torch import nn

from simdist.model.config import ImageConfig
from simdist.model.layers import mlp


class ImageEncoder(nn.Module):
    """Stride-2 convolutions over a uint8 (B, H, W, 3) image, flattened to `out_dim` features."""

    def __init__(self, cfg: ImageConfig, out_dim: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = [3, *cfg.channels]
        for a, b in zip(channels[:-1], channels[1:], strict=True):
            layers += [nn.Conv2d(a, b, kernel_size=3, stride=2, padding=1), nn.ELU()]
        self.conv = nn.Sequential(*layers)
        side = cfg.size // 2 ** len(cfg.channels)
        self.proj = nn.Linear(channels[-1] * side * side, out_dim)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = image.float().div(255.0).sub(0.5).permute(0, 3, 1, 2)
        return self.proj(self.conv(x).flatten(1))


class Encoder(nn.Module):
    """z_t = E(o_t): `proprio` alone, or `fuse([proprio(o), image(img)])` when the model has a camera branch."""

    def __init__(
        self, obs_dim: int, hidden: tuple[int, ...], latent_dim: int, image: ImageConfig | None
    ) -> None:
        super().__init__()
        self.proprio = mlp([obs_dim, *hidden, latent_dim])
        self.image = ImageEncoder(image, latent_dim) if image is not None else None
        self.fuse = mlp([2 * latent_dim, hidden[-1], latent_dim]) if image is not None else None

    def forward(self, obs: torch.Tensor, image: torch.Tensor | None = None) -> torch.Tensor:
        """Normalised observations (..., O) and optional images (..., 64, 64, 3) -> latents (..., D)."""
        z = self.proprio(obs)
        if self.image is None or self.fuse is None:
            return z
        if image is None:
            raise ValueError("this world model has an image branch: pass the camera image")
        lead = image.shape[:-3]
        features = self.image(image.reshape(-1, *image.shape[-3:])).reshape(*lead, -1)
        return self.fuse(torch.cat([z, features], dim=-1))
