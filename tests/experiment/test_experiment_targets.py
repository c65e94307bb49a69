"""The report on hand-made results: round-to-round improvement judged against the evaluation noise, partial reports."""

from __future__ import annotations

import math

import pytest

from simdist.experiment.report import ExperimentResult, PointResult, standard_error, targets


def _result(points: list[float], per_point: dict[str, list[list[float]]]) -> ExperimentResult:
    result = ExperimentResult(
        task="go2_slope",
        profile="ptfe",
        preset="test",
        points=points,
        budget=[int(p * 3000) for p in points],
        seeds=[0],
        methods=list(per_point),
        metric="forward progress (m)",
    )
    for method, episodes_by_point in per_point.items():
        for p, episodes in zip(points, episodes_by_point, strict=True):
            mean = sum(episodes) / len(episodes) if episodes else 1.0
            result.rows.append(PointResult(method, 0, p, 0, result.metric, mean, list(episodes)))
    return result


def test_standard_error_pools_the_episodes() -> None:
    result = _result([0, 5], {"simdist": [[1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 2.0, 2.0]]})
    assert standard_error(result, "simdist", 0) == pytest.approx(math.sqrt(5 / 3) / 2)
    assert standard_error(result, "simdist", 5) == 0.0
    assert standard_error(result, "simdist", 10) is None


def test_a_drop_within_the_noise_still_counts_as_improving() -> None:
    steady = [1.8, 1.8, 1.8, 1.8, 1.8]
    one_fall = [1.8, 1.8, 0.4, 1.8, 1.8]  # one fall in five: mean 1.52, s.e. 0.28
    t = targets(_result([0, 5, 10], {"simdist": [steady, one_fall, steady]}))
    assert t["simdist_largest_drop"] == pytest.approx(0.28)
    assert t["simdist_drop_allowance"] == pytest.approx(2 * 0.28)
    assert t["simdist_improves_each_round"] is True


def test_a_drop_beyond_the_noise_fails_and_the_allowance_is_reported() -> None:
    before = [1.80, 1.79, 1.81, 1.80, 1.80]
    after = [1.20, 1.21, 1.19, 1.20, 1.20]  # 0.6 m lower, s.e. ~0.004 each
    t = targets(_result([0, 5], {"simdist": [before, after]}))
    assert t["simdist_largest_drop"] == pytest.approx(0.6)
    assert 0 < t["simdist_drop_allowance"] < 0.05
    assert t["simdist_improves_each_round"] is False


def test_without_episode_values_any_drop_counts() -> None:
    result = _result([0, 5, 10], {"simdist": [[], [], []]})
    for row, value in zip(result.rows, [1.0, 0.99, 1.2], strict=True):
        row.performance = value
    t = targets(result)
    assert t["simdist_drop_allowance"] is None
    assert t["simdist_improves_each_round"] is False
    result.rows[1].performance = 1.1
    assert targets(result)["simdist_improves_each_round"] is True


def test_ending_below_the_start_is_not_improving_even_within_the_noise() -> None:
    wide = [0.2, 1.8, 0.2, 1.8, 1.0]
    t = targets(_result([0, 5], {"simdist": [[1.0] * 4 + [1.2], wide]}))
    assert t["simdist_largest_drop"] == pytest.approx(0.04)
    assert t["simdist_improves_each_round"] is False


def test_a_partial_report_is_written_whole_and_says_so(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from simdist.experiment.report import write_outputs

    result = _result([0, 5], {"zero_shot": [[1.0, 1.2], [1.0, 1.2]]})  # nothing else measured yet
    paths = write_outputs(result, tmp_path, partial=True)
    report = paths["report"].read_text()
    assert report.startswith("> PARTIAL") and "2 evaluations so far" in report
    saved = json.loads(paths["json"].read_text())
    assert saved["partial"] is True and saved["targets"]["simdist_improves_each_round"] is None
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in paths.values()
    )  # no temp files
    write_outputs(result, tmp_path)
    assert not paths["report"].read_text().startswith("> PARTIAL")
    assert json.loads(paths["json"].read_text())["partial"] is False


def test_the_allowance_reported_is_the_one_at_the_largest_drop() -> None:
    one_fall = [1.8, 1.8, 0.4, 1.8, 1.8]  # mean 1.52, s.e. 0.28
    t = targets(_result([0, 5, 10], {"simdist": [one_fall, [1.3] * 5, [1.0] * 5]}))
    assert t["simdist_largest_drop"] == pytest.approx(0.3)  # 1.3 -> 1.0, both without spread
    assert t["simdist_drop_allowance"] == pytest.approx(0.0)  # not the 0.56 of the first pair
    assert t["simdist_improves_each_round"] is False


def test_the_noise_of_a_drop_is_paired_by_episode() -> None:
    """Every point of a seed is evaluated on the same episodes: an episode-by-episode drop of 0.3 m is no noise,
    however much the episodes differ from each other (unpaired, the allowance was 0.38 m and it 'improved')."""
    before = [0.4, 1.8, 0.9, 1.5, 0.2, 1.7]
    after = [v - 0.3 for v in before]
    t = targets(_result([0, 5], {"simdist": [before, after]}))
    assert t["simdist_largest_drop"] == pytest.approx(0.3)
    assert t["simdist_drop_allowance"] == pytest.approx(0.0, abs=1e-9)
    assert t["simdist_improves_each_round"] is False
