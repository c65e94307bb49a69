"""`finetune_dynamics`: `--ros-args` stripped, `run_03` resolved under the bag folder, the model taken from the
run, and a real finetune round that publishes the version the planner's model store then swaps in."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fast_planner import FAST_PLANNER

from simdist.errors import BagError
from simdist.model.checkpoint import current_version
from simdist.runtime.deploy import run_deploy
from simdist.runtime.finetune_options import FinetuneOptions
from simdist.runtime.store import ModelStore
from simdist_finetune import finetune_dynamics as cli


def test_strip_ros_args_without_rclpy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        sys.modules, "rclpy", None
    )  # import rclpy.utilities fails as on a machine without ROS
    monkeypatch.setitem(sys.modules, "rclpy.utilities", None)
    argv = [
        "--bag",
        "run_03",
        "--ros-args",
        "-r",
        "__node:=ft",
        "-p",
        "x:=1",
        "--",
        "--wait",
        "0",
        "--ros-args",
        "--log-level",
        "debug",
    ]
    assert cli.strip_ros_args(argv) == ["--bag", "run_03", "--wait", "0"]
    assert cli.strip_ros_args(["--bag", "3"]) == ["--bag", "3"]


def test_options_default_as_simdist_finetune() -> None:
    args = cli.build_parser().parse_args(["--bag", "run_03"])
    assert cli.options_from_args(args, cli.OPTIONS) == FinetuneOptions()
    args = cli.build_parser().parse_args(
        ["--bag", "3", "--max-minutes", "0", "--threads", "1", "--seed", "2"]
    )
    assert cli.options_from_args(args, cli.OPTIONS) == FinetuneOptions(max_minutes=None, threads=1, seed=2)


def test_resolve_bag(tmp_path: Path) -> None:
    bags = tmp_path / "bags"
    for name in ("run_01", "run_03", "run_12"):
        (bags / name).mkdir(parents=True)
    assert cli.resolve_bag("run_03", bags) == bags / "run_03"
    assert cli.resolve_bag("3", bags) == bags / "run_03"
    assert cli.resolve_bag(str(bags / "run_12"), tmp_path / "elsewhere") == bags / "run_12"
    with pytest.raises(BagError, match=r"run_04.*run_01, run_03, run_12"):
        cli.resolve_bag("run_04", bags)


def test_a_missing_bag_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["--bag", "run_03", "--bag-dir", str(tmp_path), "--ros-args", "-r", "__node:=x"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("finetune_dynamics: error: no bag 'run_03'") and "\n" not in err


def test_finetune_run_03_publishes_a_version_the_store_swaps_in(
    model_for, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = model_for("go2_slope")
    bags = tmp_path / "bags"
    for _ in range(3):  # run_01..run_03; the CLI must pick run_03 and find the model in its run_start event
        run_deploy(
            "go2_slope",
            "sim:sim",
            folder,
            seconds=1.2,
            bag_dir=bags,
            planner_overrides=FAST_PLANNER,
            overrides={"episode_seconds": 0.4},
        )
    assert (bags / "run_03").is_dir()
    store = ModelStore(folder)
    monkeypatch.delenv("SIMDIST_MODEL_DIR", raising=False)
    monkeypatch.setitem(sys.modules, "rclpy", None)  # no announcement without ROS: the file pointer suffices
    code = cli.main(
        [
            "--bag",
            "run_03",
            "--bag-dir",
            str(bags),
            "--max-steps",
            "30",
            "--threads",
            "1",
            "--ros-args",
            "-p",
            "use_sim_time:=false",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"finetuning {folder}" in out and str(bags / "run_03") in out
    if "published v0001" in out:  # the gate may refuse a random model's update; both are valid outcomes
        assert current_version(folder) == 1 and "not announced" in out
        assert store.reload_now() == 1 and store.label == "v0001"
    else:
        assert "nothing published" in out and current_version(folder) == 0
