"""A tiny end-to-end round: deploy, finetune in the worker process, hot swap, evaluate; and the CLI's errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fast_planner import FAST_PLANNER

from simdist.cli import main
from simdist.model.checkpoint import current_version
from simdist.runtime.adapt import RoundResult, _table, adapt, count_falls, mean_return
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
    assert rows[1].latent_before == report["mean_before"] and rows[1].steps == report["steps"] == 100
    assert rows[1].minutes == pytest.approx(0.1, rel=0.05)
    assert all(isinstance(r.falls, int) and 0 <= r.falls <= 3 for r in rows)  # 3 speeds x 1 episode
    assert all(r.mean_return is not None and np.isfinite(r.mean_return) for r in rows)
    assert (tmp_path / "adapt" / "adapt.png").stat().st_size > 0
    assert current_version(go2_model) == 0  # the starting checkpoint is never modified


def test_the_rounds_table_counts_falls_where_the_robot_can_fall() -> None:
    from rich.console import Console

    go2 = [
        {"metrics": {"progress_m": 1.0, "fell": f}, "return": r}
        for f, r in ((True, 1), (0.0, 2), (1.0, 3), (0, 6))
    ]
    assert count_falls(go2) == 2 and mean_return(go2) == 3.0
    assert count_falls([{"metrics": {"success": 1.0}}]) is None  # the arm reports no falls
    assert mean_return([{"metrics": {"success": 1.0}}]) is None and mean_return([]) is None

    def render(rows: list[RoundResult], width: int = 200) -> str:
        console = Console(width=width, record=True)
        console.print(_table(rows, "go2_slope on sim:ptfe"))
        return console.export_text()

    rows = [
        RoundResult(0, 0.0, "forward progress (m)", 1.8, None, "v0000", None, 4, mean_return=15.94),
        RoundResult(1, 5.0, "forward progress (m)", 1.6, 0.0005, "v0001", True, 0, 0.0065, 4200, 17.02),
    ]
    walked = render(rows)
    assert "falls" in walked and "0.0065 -> 0.0005" in walked
    lines = [line for line in walked.splitlines() if line.strip().startswith("│") and "v000" in line]
    assert [line.split("│")[4].strip() for line in lines] == ["4", "0"]
    assert [line.split("│")[5].strip() for line in lines] == ["15.94", "17.02"]
    # what `make run` prints fits a terminal of 80 columns, every column whole
    narrow = render(rows, width=80)
    assert max(len(line) for line in narrow.splitlines()) <= 80 and "0.0065 -> 0.0005" in narrow
    assert "17.02" in narrow and "v0001" in narrow
    inserted = render([RoundResult(0, 0.0, "success", 0.5, None, "v0000", None, None)])
    assert "falls" not in inserted and "return" not in inserted
    assert "gate" not in walked  # the gate compared the latent error alone: nothing more to show
    # a round whose gate compared latent + head errors (--dynamics-reward-weight) shows what refused it, whole in 80
    gated = rows[:1] + [
        RoundResult(
            1,
            15.0,
            "forward progress (m)",
            1.9,
            0.0010,
            "v0001",
            False,
            5,
            0.0012,
            4000,
            11.0,
            "0.0034 -> 0.0036",
        )
    ]
    text = render(gated, width=80)
    assert max(len(line) for line in text.splitlines()) <= 80 and "…" not in text, text
    assert "round 1 0.0034 -> 0.0036" in " ".join(text.split()) and "0.0012 -> 0.0010" in text
    assert "(refused)" in text


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["adapt", "--task", "go2_slope", "--profile", "ptfe", "--model", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no world model for go2_slope" in err
    assert main(["adapt", "--task", "go2_slope", "--profile", "nope"]) == 2
    assert "unknown profile 'nope'" in capsys.readouterr().err
    assert main(["finetune", "--model", str(tmp_path), "--bag", str(tmp_path / "run_01")]) == 2
    assert "no such bag" in capsys.readouterr().err
    for verb in ("adapt", "deploy"):  # a duration that is no duration: refused before anything runs
        for minutes in ("0", "-1", "nan", "inf"):
            assert main([verb, "--task", "go2_slope", "--minutes", minutes]) == 2
            assert f"--minutes: must be a finite number above 0, got {minutes}" in capsys.readouterr().err


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


def test_an_evaluation_cut_short_by_ctrl_c_is_not_a_figure(
    go2_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run_deploy` catches Ctrl-C to hold the robot and close the bag; the evaluation must not then average the
    episodes that happened to finish (2 of 3 here) as if they were the protocol's value."""
    from simdist.runtime import loop as loop_module
    from simdist.runtime.adapt import evaluate_on_robot
    from simdist.runtime.store import ModelStore

    tick = loop_module.DeployLoop.tick

    def interrupted(self, k, *args, **kwargs):  # type: ignore[no-untyped-def]
        if len(self.stats.episodes) >= 2:
            raise KeyboardInterrupt
        return tick(self, k, *args, **kwargs)

    monkeypatch.setattr(loop_module.DeployLoop, "tick", interrupted)
    overrides = {"episode_seconds": 0.2}
    with pytest.raises(KeyboardInterrupt):
        evaluate_on_robot(
            "go2_slope",
            "ptfe",
            ModelStore(go2_model),
            overrides=overrides,
            planner_overrides=FAST_PLANNER,
            episodes=1,
        )
