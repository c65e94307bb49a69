"""Where the project's config/ and models/ folders are found, for a source checkout and for installs."""

from __future__ import annotations

import os
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parents[2]


def _first_existing(env_var: str, name: str) -> Path:
    if env_var in os.environ:
        return Path(os.environ[env_var])
    candidates = [_REPO_ROOT / name, Path.cwd() / name]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    return candidates[0]


def config_dir() -> Path:
    """The YAML folder: $SIMDIST_CONFIG_DIR, else config/ of the source checkout or the working directory."""
    return _first_existing("SIMDIST_CONFIG_DIR", "config")


def models_dir() -> Path:
    """The shipped checkpoints: $SIMDIST_MODELS_DIR, else models/ of the source checkout or working directory."""
    return _first_existing("SIMDIST_MODELS_DIR", "models")


def assets_dir() -> Path:
    """The project's own MJCF models and scenes (inside the package)."""
    return Path(__file__).resolve().parent / "assets"
