"""ament_python package simdist_nodes (the core, `simdist`, is installed with pip into the same environment)."""

from setuptools import setup

PACKAGE = "simdist_nodes"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=[PACKAGE],
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
    ],
    install_requires=["setuptools"],
    # colcon runs pytest (not unittest) only for a package that declares it; colcon.meta points it at tests/ros
    extras_require={"test": ["pytest"]},
    zip_safe=True,
    maintainer="SimDist maintainers",
    maintainer_email="simdist@example.com",
    description="SimDist ROS 2 nodes: thin adapters over the simdist core runtime",
    license="BSD-3-Clause",
    entry_points={
        "console_scripts": [
            "camera_node = simdist_nodes.camera_node:main",
            "proprio_node = simdist_nodes.proprio_node:main",
            "sim_robot_node = simdist_nodes.sim_robot_node:main",
            "planner_node = simdist_nodes.planner_node:main",
            "logger_node = simdist_nodes.logger_node:main",
        ],
    },
)
