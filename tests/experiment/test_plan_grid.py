"""`simdist plan-grid`: every planner setting with every dynamics version, on the same episodes; resumable."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from simdist.cli import main
from simdist.errors import ConfigError
from simdist.experiment import grid
from simdist.model.checkpoint import current_version, load_checkpoint, publish_dynamics
from simdist.runtime.scratch import write_random_checkpoint


@pytest.fixture(scope="module")
def peg_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = write_random_checkpoint(tmp_path_factory.mktemp("grid") / "peg", "ur5e_peg")
    model = load_checkpoint(folder)
    with torch.no_grad():
        for p in model.dynamics.parameters():
            p.add_(0.05 * torch.randn_like(p))
    publish_dynamics(folder, model.dynamics)
    return folder


def test_every_setting_meets_every_version_and_a_rerun_resumes(
    peg_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = [
        grid.parse_setting("cpu"),
        grid.parse_setting("wide:num_samples=8,num_policy_samples=4,iterations=2,elites=4,policy_max_lead=2"),
    ]
    assert settings[1] == (
        "wide",
        {"num_samples": 8, "num_policy_samples": 4, "iterations": 2, "elites": 4, "policy_max_lead": 2},
    )
    out = tmp_path / "grid"
    result = grid.measure(
        "ur5e_peg", "real", peg_model, [0, 1], settings, episodes=1, out=out, say=lambda _: None
    )
    cells = result["cells"]
    assert sorted(cells) == ["v0000 cpu", "v0000 wide", "v0001 cpu", "v0001 wide"]
    assert all(c["episodes"] == 1 and c["value"] in (0.0, 1.0) for c in cells.values())
    assert cells["v0001 wide"]["planner"] == {
        "name": "cpu",
        "num_samples": 8,
        "num_policy_samples": 4,
        "iterations": 2,
        "elites": 4,
        "policy_max_lead": 2,
    }
    # with leads, every tick after the first says which lead's chunk the model scored best; without, none do
    shares = cells["v0001 wide"]["policy_lead"]
    assert set(shares) <= {"0", "1", "2"} and sum(shares.values()) == pytest.approx(1.0)
    assert "policy_lead" not in cells["v0001 cpu"]
    assert current_version(peg_model) == 1  # the model folder itself is never rolled back
    # a rerun on the same folder evaluates nothing: every cell is in grid.json already
    import simdist.runtime.adapt as adapt

    monkeypatch.setattr(adapt, "evaluate_on_robot", lambda *a, **k: pytest.fail("evaluated again"))
    again = grid.measure(
        "ur5e_peg", "real", peg_model, [0, 1], settings, episodes=1, out=out, say=lambda _: None
    )
    assert again["cells"] == cells


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--versions", "0,7", "--setting", "cpu"], "no dynamics version v0007"),
        (["--versions", "0,x", "--setting", "cpu"], "--versions must be version numbers"),
        (["--versions", "0", "--setting", "wide:num_samplez=8"], "num_samplez"),
        (["--versions", "0", "--setting", ":iterations=2"], "give a name"),
        (["--versions", "0", "--setting", "cpu", "--audit-every", "0"], "--audit-every must be >= 1, got 0"),
    ],
)
def test_bad_grid_input_is_one_line(
    peg_model: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["plan-grid", "--task", "ur5e_peg", "--profile", "real", "--model", str(peg_model), *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and message in err, err


@pytest.mark.parametrize(
    ("stored", "args", "message"),
    [
        ({"seed": 10000}, ["--seed", "10001"], "measured with seed 10000, this run has 10001"),
        ({"profile": "sim"}, [], "measured with profile 'sim', this run has 'real'"),
        ({"model": "models/another"}, [], "measured with model 'models/another'"),
        (
            {},
            ["--episodes", "3"],
            "measured with episodes_per_cell 2, this run has 3",
        ),  # from its cells alone
    ],
)
def test_a_grid_measured_otherwise_is_not_resumed(
    peg_model: Path,
    tmp_path: Path,
    stored: dict,
    args: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "grid"
    out.mkdir()
    cell = {"per_episode": [1.0, 0.0], "episodes": 2, "falls": 0, "value": 0.5}
    (out / "grid.json").write_text(json.dumps({"task": "ur5e_peg", **stored, "cells": {"v0000 cpu": cell}}))
    base = [
        "plan-grid",
        "--task",
        "ur5e_peg",
        "--profile",
        "real",
        "--model",
        str(peg_model),
        "--versions",
        "0",
    ]
    code = main([*base, "--setting", "wide:num_samples=8", "--episodes", "2", *args, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and message in err, err
    assert json.loads((out / "grid.json").read_text())["cells"] == {"v0000 cpu": cell}  # left as it was


def test_a_stored_cell_of_the_same_name_but_another_setting_is_not_taken(
    peg_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "grid"
    out.mkdir()
    cell = {"per_episode": [1.0, 0.0], "episodes": 2, "falls": 0, "value": 0.5}
    cell["planner"] = {"name": "cpu", "num_samples": 4}
    (out / "grid.json").write_text(json.dumps({"task": "ur5e_peg", "cells": {"v0000 wide": cell}}))
    args = ["--task", "ur5e_peg", "--profile", "real", "--model", str(peg_model), "--versions", "0"]
    code = main(["plan-grid", *args, "--setting", "wide:num_samples=8", "--episodes", "2", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "cell 'v0000 wide' measured planner" in err and err.count("\n") == 0, err


def test_a_setting_keeps_a_list_value_whole() -> None:
    name, changes = grid.parse_setting("slow:policy_command_scales=[0.75,0.5],num_policy_samples=12")
    assert name == "slow"
    assert changes == {"policy_command_scales": [0.75, 0.5], "num_policy_samples": 12}


def _grid(cells: dict[str, list[float]], falls: int = 0) -> dict:
    return {"cells": {k: {"per_episode": v, "falls": falls} for k, v in cells.items()}}


def test_the_read_pairs_episodes_over_seeds_against_the_reference(tmp_path: Path, capsys) -> None:
    from simdist.experiment.grid_read import read

    seed0 = _grid({"v0002 ref": [1.0, 2.0, 3.0], "v0002 wide": [2.0, 2.0, 5.0], "v0000 ref": [0.5, 0.5, 0.5]})
    seed1 = _grid(
        {"v0002 ref": [3.0, 2.0, 1.0], "v0002 wide": [3.0, 4.0, 1.0], "v0000 ref": [0.5, 0.5, 0.5]}, 2
    )
    cells = {(c.version, c.setting): c for c in read([seed0, seed1], "ref")}
    wide = cells[("v0002", "wide")]
    # seeds averaged per episode: wide (2.5, 3.0, 3.0), ref (2.0, 2.0, 2.0); differences (0.5, 1.0, 1.0)
    assert wide.mean == pytest.approx(17 / 6) and wide.falls == 2 and wide.episodes == 3
    assert wide.diff == pytest.approx(2.5 / 3)
    assert wide.diff_se == pytest.approx(np.std([0.5, 1.0, 1.0], ddof=1) / np.sqrt(3))
    assert cells[("v0002", "ref")].diff is None and cells[("v0000", "ref")].mean == pytest.approx(0.5)
    # unpaired, the seeds' spread would count: the paired SE is the one the rules read
    for i, g in enumerate((seed0, seed1)):
        (tmp_path / f"g{i}.json").write_text(json.dumps(g))
    assert (
        main(["plan-grid-read", str(tmp_path / "g0.json"), str(tmp_path / "g1.json"), "--reference", "ref"])
        == 0
    )
    assert "+0.833" in capsys.readouterr().out
    # a `ptfe` grid and a `ptfe_b` grid are not two seeds of one evaluation
    with pytest.raises(ConfigError, match="differ in profile"):
        read([{**seed0, "profile": "ptfe"}, {**seed1, "profile": "ptfe_b"}], "ref")


def test_a_bad_grid_to_read_is_one_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["plan-grid-read", str(bad), "--reference", "ref"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    bad.write_text("[1, 2]")  # JSON, but not a grid
    assert main(["plan-grid-read", str(bad), "--reference", "ref"]) == 2
    assert "not a plan-grid result (no cells)" in capsys.readouterr().err
    good = tmp_path / "g.json"
    good.write_text(json.dumps(_grid({"v0002 ref": [1.0]})))
    assert main(["plan-grid-read", str(good), "--reference", "other"]) == 2
    assert "no such setting" in capsys.readouterr().err
    same = tmp_path / "same.json"  # every pair differs alike: SE 0, read without dividing by it
    same.write_text(json.dumps(_grid({"v0002 ref": [1.0, 2.0], "v0002 up": [1.5, 2.5]})))
    assert main(["plan-grid-read", str(same), "--reference", "ref"]) == 0
    assert "+0.500" in capsys.readouterr().out


def test_another_models_cell_can_be_the_reference(tmp_path: Path, capsys) -> None:
    def write(name: str, cells: dict[str, list[float]], **fields: str) -> str:
        path = tmp_path / name
        fields = {"task": "go2_slope", "profile": "ptfe", "metric": "m", **fields}
        path.write_text(json.dumps({**_grid(cells), **fields}))
        return str(path)

    ens = [write(f"e{i}.json", {"v0002 w1": w}) for i, w in enumerate(([2.0, 1.0], [2.0, 3.0]))]
    single = [write(f"s{i}.json", {"v0002 s32it3": r}) for i, r in enumerate(([1.0, 1.0], [1.0, 2.0]))]
    args = [
        "plan-grid-read",
        *ens,
        "--beside",
        *single,
        "--prefix",
        "single_",
        "--reference",
        "single_s32it3",
    ]
    assert main(args) == 0
    # per episode: w1 (2.0, 2.0), single (1.0, 1.5); differences (1.0, 0.5)
    assert "+0.750" in capsys.readouterr().out
    assert main(args[:5] + args[6:]) == 2  # one beside grid for two seeds
    assert "one per seed" in capsys.readouterr().err
    # the other model's 30-minute version is v0002, the ensemble's v0003: renamed, the stages pair
    ens3 = [write(f"e3{i}.json", {"v0003 w1": w}) for i, w in enumerate(([2.0, 1.0], [2.0, 3.0]))]
    renamed = [*ens3, *args[3:], "--beside-version", "v0002=v0003"]
    assert main(["plan-grid-read", *renamed]) == 0
    assert "+0.750" in capsys.readouterr().out
    assert main(["plan-grid-read", *ens3, *args[3:]]) == 0  # unrenamed: no reference on v0003, nothing paired
    assert "+0.750" not in capsys.readouterr().out
    assert main(["plan-grid-read", *renamed[:-1], "v0002"]) == 2
    assert "expected OLD=NEW" in capsys.readouterr().err
    other = write("o.json", {"v0002 s32it3": [1.0, 1.0]}, profile="foam")
    assert main(["plan-grid-read", ens[0], "--beside", other, "--reference", "beside_s32it3"]) == 2
    assert "profile 'foam'" in capsys.readouterr().err
