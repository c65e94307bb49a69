"""Durable, all-or-nothing file writes: write to a temporary name in the same folder, fsync it, rename it over the
target, fsync the folder. A reader never sees half a file, and after a crash a file that a later write (a pointer,
a manifest) names is on the disk."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

# What a temporary file of `atomic_path` is named like (".NAME.tmp.SUFFIX", or ".NAME-RANDOM.tmp.SUFFIX"): a copy
# of a folder leaves these out, a writer's clean-up removes them.
TMP_PATTERN = ".*.tmp*"


def fsync_dir(folder: str | Path) -> None:
    """Make a rename or a new file in `folder` durable (where the platform allows opening a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | Path, *, unique: bool = False) -> Iterator[Path]:
    """Yields a temporary path next to `path`; when the block succeeds the file there is fsynced and moved onto
    `path` (then the folder fsynced), when it fails the temporary file is removed and `path` is untouched.

    `unique`: a fresh temporary name (an empty file already made there) rather than the fixed one, for a target that
    several processes may write at once (each then renames a whole file of its own; the last one wins).
    """
    target = Path(path)
    if unique:
        fd, name = tempfile.mkstemp(
            dir=target.parent, prefix=f".{target.stem}-", suffix=f".tmp{target.suffix}"
        )
        os.close(fd)
        tmp = Path(name)
    else:
        tmp = target.with_name(
            f".{target.stem}.tmp{target.suffix}"
        )  # the suffix stays: writers infer the format
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


def write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode())


def write_json(path: str | Path, data: object, *, indent: int = 1, sort_keys: bool = False) -> None:
    import json

    write_text(path, json.dumps(data, indent=indent, sort_keys=sort_keys))


def write_figure(fig: object, path: str | Path, *, dpi: int = 110) -> None:
    """Save a matplotlib figure (format from the suffix) and close it."""
    import matplotlib.pyplot as plt

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi)  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[arg-type]
