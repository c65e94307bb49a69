"""`simdist experiment-merge`: run folders made apart (a seed each, the oracle alone) become one report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simdist.cli import main
from simdist.experiment.report import ExperimentResult, PointResult, write_outputs


def _run(
    folder: Path, seed: int, values: dict[str, list[float]], points=(0.0, 5.0), settings: dict | None = None
) -> Path:
    result = ExperimentResult(
        task="ur5e_peg",
        profile="real",
        preset="test",
        points=list(points),
        budget=[int(p * 600) for p in points],
        seeds=[seed],
        methods=list(values),
        metric="success rate",
        costs={m: {"evaluate": 2.0} for m in values},
        settings={
            "command": f"simdist experiment --first-seed {seed}",
            "profile_params": {"friction": 0.8, "servo_lag": 0.04},
            "experiment": {"seeds": 1, "first_seed": seed, "methods": list(values), "eval_episodes": 20},
            **(settings or {}),
        },
    )
    for method, per_point in values.items():
        for p, v in zip(points, per_point, strict=True):
            result.rows.append(PointResult(method, seed, p, int(p * 600), result.metric, v, [v] * 4))
    folder.mkdir()
    write_outputs(result, folder)
    return folder


def test_seeds_and_the_oracle_merge_into_one_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _run(tmp_path / "s0", 0, {"zero_shot": [0.5, 0.5], "simdist": [0.5, 0.7]})
    b = _run(tmp_path / "s1", 1, {"zero_shot": [0.4, 0.4], "simdist": [0.4, 0.5]})
    c = _run(tmp_path / "oracle", 0, {"oracle": [0.3, 0.8]})
    out = tmp_path / "merged"
    assert main(["experiment-merge", str(a), str(b), str(c), "--out", str(out)]) == 0
    assert "seeds [0, 1]" in capsys.readouterr().out
    saved = json.loads((out / "results.json").read_text())
    assert saved["seeds"] == [0, 1] and saved["methods"] == ["zero_shot", "simdist", "oracle"]
    assert len(saved["rows"]) == 10 and saved["costs"]["zero_shot"]["evaluate"] == 4.0
    # the targets now see the oracle and both seeds: SimDist (0.7 + 0.5) / 2 = 0.6 against the oracle's 0.8
    assert saved["targets"]["simdist_over_oracle"] == pytest.approx(0.75)
    report = (out / "report.md").read_text()
    assert "| simdist | 0.450 | 0.600 |" in report and "simdist experiment-merge" in report


def test_runs_that_do_not_match_or_overlap_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _run(tmp_path / "s0", 0, {"simdist": [0.5, 0.7]})
    same_seed = _run(tmp_path / "again", 0, {"simdist": [0.5, 0.6]})
    other_points = _run(tmp_path / "p", 1, {"simdist": [0.5, 0.6, 0.6]}, points=(0.0, 5.0, 10.0))
    out = tmp_path / "merged"
    assert main(["experiment-merge", str(a), str(same_seed), "--out", str(out)]) == 2
    assert "simdist, seed 0, 0 min is also in" in capsys.readouterr().err
    assert main(["experiment-merge", str(a), str(other_points), "--out", str(out)]) == 2
    assert "points [0.0, 5.0, 10.0] differs" in capsys.readouterr().err
    # the same points and metric, but another profile or protocol: runs of different experiments
    other_profile = _run(
        tmp_path / "f",
        1,
        {"simdist": [0.5, 0.6]},
        settings={"profile_params": {"friction": 0.7, "servo_lag": 0.04}},
    )
    assert main(["experiment-merge", str(a), str(other_profile), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "profile_params" in err[0] and "0.7" in err[0]
    fewer = {"experiment": {"seeds": 1, "first_seed": 1, "methods": ["simdist"], "eval_episodes": 10}}
    other_episodes = _run(tmp_path / "e", 1, {"simdist": [0.5, 0.6]}, settings=fewer)
    assert main(["experiment-merge", str(a), str(other_episodes), "--out", str(out)]) == 2
    assert "experiment setting eval_episodes 10 differs from 20" in capsys.readouterr().err
    assert main(["experiment-merge", str(a), str(tmp_path / "none"), "--out", str(out)]) == 2
    assert "no results.json" in capsys.readouterr().err
    (a / "results.json").write_text(
        json.dumps({**json.loads((a / "results.json").read_text()), "partial": True})
    )
    assert main(["experiment-merge", str(a), "--out", str(out)]) == 2
    assert "partial" in capsys.readouterr().err
    assert not out.exists()
