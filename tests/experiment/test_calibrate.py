"""`simdist calibrate`: bad input is one line and exit 2, before any evaluation runs."""

from __future__ import annotations

import pytest

from simdist.cli import main


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--profile", "ptfe", "--param", "friction", "--values", "0.1,abc"], "--values must be numbers"),
        (["--profile", "sim", "--param", "friction", "--values", "0.1"], "unknown profile 'sim'"),
        (["--profile", "ptfe", "--param", "frcition", "--values", "0.1"], "frcition"),
    ],
)
def test_bad_calibration_input_is_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["calibrate", "--task", "go2_slope", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err
