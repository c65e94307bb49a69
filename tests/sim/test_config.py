"""Config errors are one clear line naming the valid choices; the CLI exits with code 2."""

import pytest

from simdist.cli import main
from simdist.errors import ConfigError
from simdist.sim import load_task, make_env


def test_unknown_task_lists_valid():
    with pytest.raises(ConfigError, match=r"unknown task 'go3'.*go2_foam, go2_slope, ur5e_peg"):
        load_task("go3")


def test_unknown_profile_lists_valid():
    with pytest.raises(
        ConfigError,
        match=r"unknown profile 'ice'.*ptfe, ptfe_2026_11, ptfe_2026_12, ptfe_b, ptfe_b_2026_12, ptfe_b_flat_2026_12, ptfe_b_ramp_2026_12_07, ptfe_flat_2026_12, ptfe_ramp_2026_12_07, sim, sim_steep",
    ):
        make_env("go2_slope", "ice")


def test_unknown_key_and_wrong_type():
    with pytest.raises(ConfigError, match=r"unknown key 'terrain.slope'.*finish_m"):
        load_task("go2_slope", {"terrain.slope": 3})
    with pytest.raises(ConfigError, match=r"wrong type for 'control_hz': expected number"):
        load_task("go2_slope", {"control_hz": "fast"})
    with pytest.raises(ConfigError, match=r"unknown dynamics parameter 'profiles.ptfe.frcition'"):
        load_task("go2_slope", {"profiles.ptfe.frcition": 0.1})


def test_overrides_reach_profiles_and_new_profiles():
    cfg = load_task(
        "go2_slope", {"profiles.ptfe.friction": 0.07, "profiles.wet.friction": 0.3, "nominal.slope_deg": 7}
    )
    assert cfg.profile("ptfe")["friction"] == 0.07
    assert cfg.profile("wet")["friction"] == 0.3 and cfg.profile("wet")["slope_deg"] == 7


def test_cli_bad_arguments_are_one_line_exit_2(capsys):
    assert main(["render", "--task"]) == 2  # argparse's error, returned: main never ends the calling process
    assert main(["render", "--help"]) == 0
    capsys.readouterr()
    assert main(["render", "--task"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error" in err[0]
    assert main(["render", "--task", "go2_slope", "--profile", "ice", "--out", "/tmp/x.png"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "simdist: error: unknown profile 'ice' for task go2_slope (valid: ptfe, ptfe_2026_11, ptfe_2026_12, ptfe_b, ptfe_b_2026_12, ptfe_b_flat_2026_12, ptfe_b_ramp_2026_12_07, ptfe_flat_2026_12, ptfe_ramp_2026_12_07, sim, sim_steep)"
    ]


def test_real_profile_is_one_of_the_tasks_profiles():
    assert [load_task(t).real_profile for t in ("go2_slope", "go2_foam", "ur5e_peg")] == [
        "ptfe",
        "foam",
        "real",
    ]
    with pytest.raises(ConfigError, match=r"real_profile 'ice' of task go2_slope is not one of its profiles"):
        load_task("go2_slope", {"real_profile": "ice"})


def test_where_each_tasks_finetunes_start_is_checked():
    starts = [load_task(t).finetune_start_from for t in ("go2_slope", "go2_foam", "ur5e_peg")]
    assert starts == ["pretrained", "current", "current"]
    with pytest.raises(
        ConfigError, match=r"finetune_start_from of task go2_slope must be one of current, pretrained"
    ):
        load_task("go2_slope", {"finetune_start_from": "scratch"})
