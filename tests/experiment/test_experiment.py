"""The sim-to-real experiment harness on tiny presets: report structure, equal budgets, what each baseline trains."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from experiment_setup import OVERRIDES, PROFILE, TASK
from safetensors.torch import load_file

from simdist.cli import main
from simdist.errors import ConfigError
from simdist.experiment import METHODS, load_experiment_config
from simdist.experiment.config import budget_steps, increments, parse_points, rl_geometry
from simdist.experiment.oracle import oracle_randomisation
from simdist.model.checkpoint import read_description
from simdist.sim.config import load_task

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _valid_png(path: Path) -> tuple[int, ...]:
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_MAGIC, path
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert float(image[..., :3].std()) > 0.0  # not a blank canvas
    return image.shape


def _table(report: str, header_start: str) -> list[list[str]]:
    """The body rows (cells) of the first markdown table whose header starts with `header_start`."""
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_report_has_a_row_per_method_and_point_and_valid_plots(tiny_run) -> None:  # type: ignore[no-untyped-def]
    result, out = tiny_run
    points = [0.0, 0.1]
    assert result.points == points and result.methods == list(METHODS) and not result.skipped
    report = (out / "report.md").read_text()
    rows = _table(report, "| method | minutes |")
    assert sorted((r[0], float(r[1])) for r in rows) == sorted((m, p) for m in METHODS for p in points)
    for r in rows:
        assert math.isfinite(float(r[3])), r  # seed 0's value
    headline = _table(report, "| method | 0 min | 0.1 min |")
    assert [r[0] for r in headline] == list(METHODS)
    assert "## Wall-clock cost" in report and "## Settings" in report
    costs = _table(report, "| method | collect (s)")
    assert {r[0] for r in costs} >= {"simdist", "full_finetune", "rl_finetune", "oracle", "zero_shot"}
    for name in ("performance", "latent_error_by_minutes", "latent_error_by_horizon", "slip_velocity"):
        _valid_png(out / f"{name}.png")
        assert f"({name}.png)" in report
    saved = json.loads((out / "results.json").read_text())
    assert len(saved["rows"]) == len(METHODS) * len(points)
    assert set(saved["targets"]) >= {"simdist_over_oracle", "simdist_beats_rl_finetune"}
    view = saved["prediction"]
    assert set(view["latent_by_horizon"]) == {
        "pretrained (0 min)",
        "simdist (0.1 min)",
        "full_finetune (0.1 min)",
        "oracle pretrained (0 min)",
        "oracle (0.1 min)",
    }
    assert all(len(v) == 5 for v in view["latent_by_horizon"].values())  # the tiny model's horizon
    slip = view["slip"]
    # the probe reads the pretrained encoder's latents: the oracle has an encoder of its own
    assert set(slip["rmse_mps"]) == {"pretrained (0 min)", "simdist (0.1 min)"}
    assert set(slip["rmse_vs_probe_of_encoder_mps"]) == set(slip["rmse_mps"])
    # RMS over the same steps is a norm: against the truth and against probe(E(o_t)) obey the triangle inequality
    for name, vs_truth in slip["rmse_mps"].items():
        vs_read = slip["rmse_vs_probe_of_encoder_mps"][name]
        assert (
            abs(vs_truth - slip["probe_rmse_mps"])
            <= vs_read + 1e-9
            <= vs_truth + slip["probe_rmse_mps"] + 2e-9
        )


def test_every_method_gets_exactly_the_same_real_budget(tiny_run) -> None:  # type: ignore[no-untyped-def]
    from simdist.runtime.real_data import real_episodes

    result, out = tiny_run
    assert result.budget == [0, 300]  # 0.1 min x 60 s x 50 Hz
    for row in result.rows:  # every evaluation keeps its episodes, for the noise in the targets
        assert len(row.episodes) == 3, row  # the tiny preset: 3 speeds x 1 episode
        assert row.performance == pytest.approx(sum(row.episodes) / 3)
    for row in result.rows:
        expected = 0 if row.method == "zero_shot" else result.budget[result.points.index(row.minutes)]
        assert row.steps == expected, row
        if row.method in ("simdist", "full_finetune", "oracle"):
            assert row.data_steps == expected, row  # what the finetuning actually read from the bags
    for method in ("simdist", "oracle"):  # the bags hold exactly what was collected
        bags = sorted((out / "seed_0" / method / "bags").iterdir())
        assert len(bags) == 1 and sum(len(e["proprio"]) for e in real_episodes(bags)) == 300
    assert not (out / "seed_0" / "full_finetune" / "bags").exists()  # it trains on simdist's bags
    rl = [r for r in result.rows if r.method == "rl_finetune"]
    assert [r.note for r in rl] == ["0 PPO iterations", "1 PPO iterations"]  # 15 envs x 20 steps = 300


def test_rl_finetune_changes_the_actor(tiny_run, expert_dir: Path) -> None:  # type: ignore[no-untyped-def]
    _, out = tiny_run
    expert = load_file(str(expert_dir / "policy_final.safetensors"))
    before = load_file(str(out / "seed_0" / "rl_finetune" / "actor_00.safetensors"))
    after = load_file(str(out / "seed_0" / "rl_finetune" / "actor_01.safetensors"))
    assert set(before) == set(expert)
    assert all(np.array_equal(before[k].numpy(), expert[k].numpy()) for k in expert)  # resumed exactly
    mlp = [k for k in expert if k.startswith("mlp.") and k.endswith("weight")]
    assert mlp and all(not np.array_equal(after[k].numpy(), expert[k].numpy()) for k in mlp)


def test_full_finetune_changes_non_dynamics_weights_in_a_model_of_its_own_and_simdist_does_not(
    tiny_run, base_model: Path
) -> None:  # type: ignore[no-untyped-def]
    from simdist.model.checkpoint import current_version, read_dynamics

    _, out = tiny_run
    base = load_file(str(base_model / "weights.safetensors"))
    simdist_dir = out / "seed_0" / "simdist" / "model"
    start_dir = out / "seed_0" / "full_finetune" / "model"  # its copy of the pretrained model
    rounds = sorted((out / "seed_0" / "full_finetune").glob("model_*"))  # one new model per published round
    assert rounds
    full_dir = rounds[-1]
    simdist = load_file(str(simdist_dir / "weights.safetensors"))
    full = load_file(str(full_dir / "weights.safetensors"))
    assert set(simdist) == set(base) == set(full)
    assert all(np.array_equal(simdist[k].numpy(), base[k].numpy()) for k in base)
    changed = {k.split(".")[0] for k in base if not np.array_equal(full[k].numpy(), base[k].numpy())}
    assert {"encoder", "history_tokens"} <= changed  # the latent and the context both trained
    # the copy it started from keeps the weights its dynamics versions were trained with
    start = load_file(str(start_dir / "weights.safetensors"))
    assert all(np.array_equal(start[k].numpy(), base[k].numpy()) for k in base)
    assert current_version(start_dir) == 0 and current_version(full_dir) == 0
    assert current_version(simdist_dir) == 1
    new, old = read_dynamics(simdist_dir, 1), read_dynamics(simdist_dir, 0)
    assert any(not np.array_equal(new[k].numpy(), old[k].numpy()) for k in old)
    assert current_version(base_model) == 0  # the pretrained checkpoint is never modified


def test_rl_geometry_divides_every_increment() -> None:
    for points, hz in (
        ([0, 5, 10, 15, 30], 50.0),
        ([0, 5, 10, 15, 30], 10.0),
        ([0, 0.1], 50.0),
        ([0, 1, 2.5], 50.0),
    ):
        steps = increments(budget_steps(points, hz))
        n, s = rl_geometry(steps, 64, 24)
        assert 1 <= n <= 64 and all(inc % (n * s) == 0 for inc in steps)
    assert rl_geometry(increments(budget_steps([0, 5, 10, 15, 30], 50.0)), 64, 24) == (60, 25)


def test_oracle_randomisation_contains_the_profile() -> None:
    slope = oracle_randomisation(load_task("go2_slope"), "ptfe")
    assert slope == {"randomisation.friction": [0.15, 1.2], "randomisation.latency_steps": [0, 2]}
    flat = oracle_randomisation(load_task("go2_slope"), "ptfe_flat_2026_12")
    assert flat == {"randomisation.friction": [0.10, 1.2], "randomisation.latency_steps": [0, 3]}
    peg = oracle_randomisation(load_task("ur5e_peg"), "real_2026_11")
    assert peg["randomisation.latency_steps"] == [0, 2] and peg["randomisation.kp_scale"] == [0.4, 1.2]
    real = oracle_randomisation(load_task("ur5e_peg"), "real")
    assert "randomisation.latency_steps" not in real  # 1 is inside
    assert real["randomisation.hole_undersize_m"] == [0.0, 0.0006]  # never drawn in pretraining: from nominal
    held_out = load_task("go2_slope", {"profiles.icy": {"friction": 0.05, "slope_deg": 9.0}})
    widened = oracle_randomisation(held_out, "icy")
    assert widened == {"randomisation.friction": [0.05, 1.2], "randomisation.slope_deg": [0.0, 9.0]}
    cfg = load_task("go2_slope", widened)  # the overrides are valid task overrides
    assert cfg.randomisation["friction"] == [0.05, 1.2]


def test_a_reused_oracle_is_checked_against_the_widened_randomisation(
    base_model: Path, tmp_path: Path
) -> None:
    """Pretraining records the corpus's randomisation in the checkpoint; `--oracle-model` is refused when that does
    not cover the task's randomisation widened to the profile (every parameter, also those the profile leaves
    inside), and an older checkpoint without the record is used with a line saying it is unchecked."""
    import shutil

    import yaml

    from simdist.experiment.oracle import check_oracle

    cfg = load_task(TASK, OVERRIDES)
    recorded = read_description(base_model)["extra"]["randomisation"]
    assert recorded == {k: list(v) for k, v in cfg.randomisation.items()}
    with pytest.raises(ConfigError, match=r"friction \[0.3, 1.2\] does not cover \[0.15, 1.2\]"):
        check_oracle(base_model, cfg, PROFILE)
    check_oracle(base_model, cfg, "sim_steep")  # inside the randomisation: accepted
    from simdist.experiment import run_experiment

    with pytest.raises(ConfigError, match="--oracle-model"):  # refused before the run folder exists
        run_experiment(
            TASK, PROFILE, model=base_model, expert=tmp_path / "expert", out=tmp_path / "run", preset="tiny",
            overrides=OVERRIDES, oracle_model=base_model,
        )  # fmt: skip
    assert not (tmp_path / "run").exists()

    def variant(name: str, randomisation: dict | None) -> Path:
        folder = tmp_path / name
        shutil.copytree(base_model, folder)
        description = yaml.safe_load((folder / "world_model.yaml").read_text())
        if randomisation is None:
            del description["extra"]["randomisation"]
        else:
            description["extra"]["randomisation"] = randomisation
        (folder / "world_model.yaml").write_text(yaml.safe_dump(description, sort_keys=False))
        return folder

    # widened for friction alone: the latency the profile leaves inside must be covered too
    friction_only = variant("friction_only", {**recorded, "friction": [0.15, 1.2], "latency_steps": [0, 0]})
    with pytest.raises(ConfigError, match=r"latency_steps \[0, 0\] does not cover \[0, 2\]"):
        check_oracle(friction_only, cfg, PROFILE)
    no_slope = {k: v for k, v in recorded.items() if k != "slope_deg"}
    with pytest.raises(ConfigError, match="slope_deg fixed does not cover"):
        check_oracle(variant("no_slope", no_slope), cfg, "sim_steep")
    with pytest.raises(ConfigError, match="friction fixed"):  # a corpus drawn without randomisation
        check_oracle(variant("fixed", {}), cfg, PROFILE)
    lines: list[str] = []
    check_oracle(variant("older", None), cfg, PROFILE, lines.append)
    assert len(lines) == 1 and "not checked" in lines[0]


def test_config_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="unknown method 'ppo'"):
        load_experiment_config("tiny", {"methods": ["simdist", "ppo"]})
    with pytest.raises(ConfigError, match="ascending"):
        parse_points("0,10,5")
    with pytest.raises(ConfigError, match="first_seed must be >= 0"):
        load_experiment_config("tiny", {"first_seed": -1})
    base = ["experiment", "--task", TASK, "--out", str(tmp_path / "x")]
    assert main([*base, "--profile", "nope"]) == 2
    assert "unknown profile 'nope'" in capsys.readouterr().err
    assert main([*base, "--profile", PROFILE, "--points", "0,a"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    assert main([*base, "--profile", PROFILE, "--model", str(tmp_path / "none")]) == 2
    assert "no world model for go2_slope" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_cli_zero_shot_run(
    tmp_path: Path, base_model: Path, expert_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    args = ["experiment", "--task", TASK, "--profile", PROFILE, "--preset", "tiny", "--methods", "zero_shot"]
    args += ["--model", str(base_model), "--expert", str(expert_dir), "--out", str(out), "--points", "0,0.05"]
    args += ["--seeds", "1", "--first-seed", "3"]  # one seed of several, run on its own
    args += [x for k, v in OVERRIDES.items() for x in ("--set", f"{k}={v}")]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "| zero_shot |" in printed and str(out / "report.md") in printed
    saved = json.loads((out / "results.json").read_text())
    assert [r["minutes"] for r in saved["rows"]] == [0.0, 0.05] and saved["budget"] == [0, 150]
    assert saved["rows"][0]["performance"] == saved["rows"][1]["performance"]  # drawn flat
    assert {r["seed"] for r in saved["rows"]} == {3} and saved["seeds"] == [3]
    assert "simdist experiment" in (out / "report.md").read_text()  # the command that made it
    assert "--first-seed 3" in (out / "report.md").read_text()
