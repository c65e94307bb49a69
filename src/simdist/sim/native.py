"""Small C kernels shipped as source, compiled at first use against the mujoco wheel's own libmujoco.

Why C: the UR5e's servo runs damped least-squares IK at every physics step (500 Hz). On 6x6 arrays, numpy's
per-call overhead costs more than the physics itself; one C call per control period does IK and mj_step for all
members (and drops the GIL while it runs).

The library is built with the system C compiler ($CC, else Python's configured one, else cc) into
$XDG_CACHE_HOME/simdist (default ~/.cache/simdist), named by a hash of the source, the mujoco version and the
platform; it is written to a temporary file and renamed into place, so a reader never sees half a library and two
processes may build at once. Without a compiler, or when the build fails, `load` logs one warning and returns None:
callers keep their numpy path. SIMDIST_NATIVE=0 forces that path.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shlex
import shutil
import subprocess
import sysconfig
from pathlib import Path

import mujoco

from simdist import atomic

log = logging.getLogger(__name__)
FLAGS = ("-O2", "-shared", "-fPIC", "-pthread")


def load(name: str) -> ctypes.CDLL | None:
    """The compiled `<name>.c` of this package, or None (use the numpy path): disabled, no compiler, or a failure."""
    if os.environ.get("SIMDIST_NATIVE", "1") == "0":
        return None
    return _load(name)


@functools.cache  # one build (or one warning) per process
def _load(name: str) -> ctypes.CDLL | None:
    try:
        return _build_and_open(name)
    except (OSError, subprocess.SubprocessError) as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        log.warning("native %s unavailable, using the numpy path: %s", name, reason)
        return None


def library_path(name: str) -> Path:
    """Where the build of `<name>.c` is cached, keyed by its source, the mujoco version and the platform."""
    parts = (_source(name).read_text(), mujoco.__version__, sysconfig.get_platform(), *FLAGS)
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "simdist"
    return cache / f"{name}-{key}.so"


def _source(name: str) -> Path:
    return Path(__file__).with_name(f"{name}.c")


def _compiler() -> list[str]:
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    if not cc or shutil.which(cc[0]) is None:
        raise OSError(f"no C compiler: {cc[0] if cc else '$CC is empty'} not found")
    return cc


def _build_and_open(name: str) -> ctypes.CDLL:
    mujoco_dir = Path(mujoco.__file__).parent
    libmujoco = min(mujoco_dir.glob("libmujoco.so.*"), default=None)
    if libmujoco is None:
        raise OSError(f"no libmujoco.so.* in {mujoco_dir}")
    target = library_path(name)
    if target.exists():
        try:
            return ctypes.CDLL(str(target))
        except OSError as e:  # corrupt or foreign: build it again
            log.info("rebuilding unreadable %s: %s", target, e)
    cc = _compiler()
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_path(target, unique=True) as tmp:  # a name of its own: two processes may build at once
        cmd = [
            *cc,
            *FLAGS,
            f"-I{mujoco_dir / 'include'}",
            str(_source(name)),
            "-o",
            str(tmp),
            f"-L{mujoco_dir}",
            f"-l:{libmujoco.name}",
            f"-Wl,-rpath,{mujoco_dir}",
        ]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            lines = result.stderr.splitlines() or [f"exit status {result.returncode}"]
            raise OSError(f"{cc[0]} failed: {next((s for s in lines if 'error' in s), lines[0])}")
    return ctypes.CDLL(str(target))
