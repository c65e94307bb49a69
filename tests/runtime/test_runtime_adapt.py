"""A tiny end-to-end round: deploy, finetune in the worker process, hot swap, evaluate; and the CLI's errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fast_planner import FAST_PLANNER

from simdist.cli import main
from simdist.model.checkpoint import current_version
from simdist.runtime.adapt import adapt
from simdist.runtime.finetune_options import FinetuneOptions


def test_one_tiny_round_lowers_the_heldout_latent_error(go2_model: Path, tmp_path: Path) -> None:
    options = FinetuneOptions(lr=1e-3, max_steps=100, eval_every=50, warmup_steps=5, val_fraction=0.2)
    rows = adapt(
        "go2_slope",
        "ptfe",
        rounds=1,
        minutes=0.1,
        model=go2_model,
        out=tmp_path / "adapt",
        overrides={"episode_seconds": 0.5},
        planner_overrides=FAST_PLANNER,
        options=options,
        eval_episodes=1,
    )
    assert [r.round for r in rows] == [0, 1] and rows[0].version == "v0000"
    report = json.loads((tmp_path / "adapt" / "model" / "reports" / "finetune_v0001.json").read_text())
    assert report["mean_after"] < report["mean_before"]  # held-out latent error went down
    assert rows[1].version == "v0001" and rows[1].published and rows[1].latent_error == report["mean_after"]
    assert rows[1].minutes == pytest.approx(0.1, rel=0.05)
    assert (tmp_path / "adapt" / "adapt.png").stat().st_size > 0
    assert current_version(go2_model) == 0  # the starting checkpoint is never modified


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["adapt", "--task", "go2_slope", "--profile", "ptfe", "--model", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no world model for go2_slope" in err
    assert main(["adapt", "--task", "go2_slope", "--profile", "nope"]) == 2
    assert "unknown profile 'nope'" in capsys.readouterr().err
    assert main(["finetune", "--model", str(tmp_path), "--bag", str(tmp_path / "run_01")]) == 2
    assert "no such bag" in capsys.readouterr().err


def _deploy_args(model: Path, minutes: str) -> list[str]:
    args = [
        "deploy",
        "--task",
        "go2_slope",
        "--robot",
        "sim:ptfe",
        "--model",
        str(model),
        "--minutes",
        minutes,
    ]
    return args + [x for k, v in FAST_PLANNER.items() for x in ("--planner-set", f"{k}={v}")]


def test_deploy_cli_writes_a_bag(go2_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [*_deploy_args(go2_model, "0.02"), "--bag-dir", str(tmp_path / "bags")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "ticks 60: fresh 60" in out and "missed 0" in out and str(tmp_path / "bags" / "run_01") in out


def test_deploy_logs_a_bag_by_default_and_checks_the_task_first(
    go2_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["deploy", "--task", "go2_slop"]) == 2  # the task, not "no world model"
    assert "unknown task 'go2_slop'" in capsys.readouterr().err
    args = _deploy_args(go2_model, "0.01")
    assert main(args) == 0
    assert "bag: runs/bags/run_01" in capsys.readouterr().out
    assert (tmp_path / "runs" / "bags" / "run_01" / "metadata.yaml").is_file()
    assert main([*args, "--no-bag"]) == 0
    assert "bag:" not in capsys.readouterr().out and not (tmp_path / "runs" / "bags" / "run_02").exists()


def test_adapt_refuses_an_existing_out_folder(
    go2_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "taken").mkdir()
    args = [
        "adapt",
        "--task",
        "go2_slope",
        "--profile",
        "ptfe",
        "--model",
        str(go2_model),
        "--out",
        str(tmp_path / "taken"),
    ]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "already exists" in err
