"""ament_python package simdist_bringup: installs the repository's launch/ and config/ folders into
share/simdist_bringup, so `ros2 launch simdist_bringup ur5e_peg.launch.py` finds them.

The folders live at the repository's top level (../../launch, ../../config from here); a build from a tree
without them fails here rather than installing a package with no launch files.
"""

import os
from glob import glob

from setuptools import setup

PACKAGE = "simdist_bringup"
HERE = os.path.dirname(os.path.abspath(__file__))
# colcon runs setup.py from this folder; relative paths keep the install record relative too.
REPO = os.path.relpath(os.path.join(HERE, "..", ".."), os.getcwd())


def tree(folder: str, pattern: str) -> list[tuple[str, list[str]]]:
    """(share/simdist_bringup/<folder>/<sub>, files) for every sub-folder of REPO/<folder>."""
    root = os.path.join(REPO, folder)
    entries = []
    for current, _dirs, _files in sorted(os.walk(root)):
        files = sorted(glob(os.path.join(current, pattern)))
        if files:
            target = os.path.join("share", PACKAGE, folder, os.path.relpath(current, root))
            entries.append((os.path.normpath(target), files))
    if not entries:
        raise SystemExit(
            f"{PACKAGE}: no {pattern} under {os.path.abspath(root)} (launch/ and config/ must be there)"
        )
    return entries


setup(
    name=PACKAGE,
    version="0.1.0",
    packages=[PACKAGE],
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        *tree("launch", "*.launch.py"),
        *tree("config", "*.yaml"),
        *tree("config", "*.xml"),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="SimDist maintainers",
    maintainer_email="simdist@example.com",
    description="Launch files and configuration for the SimDist ROS 2 stack",
    license="BSD-3-Clause",
)
