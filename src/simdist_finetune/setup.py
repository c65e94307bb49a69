"""ament_python package simdist_finetune: the `finetune_dynamics` console script."""

from setuptools import setup

PACKAGE = "simdist_finetune"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=[PACKAGE],
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="SimDist maintainers",
    maintainer_email="simdist@example.com",
    description="Finetune the SimDist dynamics on logged runs and announce the version for hot swap",
    license="BSD-3-Clause",
    entry_points={
        "console_scripts": [
            "finetune_dynamics = simdist_finetune.finetune_dynamics:main",
            "rollback = simdist_finetune.rollback:main",
        ],
    },
)
