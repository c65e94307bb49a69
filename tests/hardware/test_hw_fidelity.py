"""`simdist bench fidelity`: each robot over its own protocol and emulator against the in-process simulation."""

from __future__ import annotations

import os

import pytest

from simdist.hardware import fidelity


def test_progress_sums_every_episode_and_the_one_the_run_ended_in() -> None:
    summary = {
        "episodes": [
            {"metrics": {"progress_m": 1.5}, "terminated": True},
            {"metrics": {"progress_m": 2.0}, "terminated": False},
        ],
        "episode_so_far": {"progress_m": 0.25, "seconds": 1.0},
    }
    assert fidelity._progress(summary) == (3.75, 1)
    assert fidelity._progress({"episodes": []}) == (0.0, 0)
    # the emulator's robot folds under the deploy's closing damping: the run is what came before it
    let_go = {**summary, "at_first_damping": {"episodes_ended": 1, "progress_m": 0.5, "at_s": 3.0}}
    assert fidelity._progress(let_go) == (2.0, 1)


def test_an_episode_that_ended_after_the_last_tick_still_counts() -> None:
    """A run as long as an episode: the physics, a tenth of a period ahead of the ticks, ends the episode after the
    deploy's last tick; its 3.9 m must not become the 0 m of the episode that began after it."""

    class Robot:
        queue = [{"metrics": {"progress_m": 3.9}, "seconds": 8.0, "terminated": False, "return": 30.0}]

        def take_episode_end(self):
            return self.queue.pop(0) if self.queue else None

    seen = [{"metrics": {"progress_m": 1.0}, "seconds": 2.0, "terminated": True}]
    episodes = fidelity._ended_episodes(seen, Robot())
    assert [e["metrics"]["progress_m"] for e in episodes] == [1.0, 3.9]
    assert fidelity._progress({"episodes": episodes, "episode_so_far": {"progress_m": 0.0}}) == (4.9, 1)


def test_the_time_to_insertion_is_counted_from_the_first_command_both_ways() -> None:
    assert fidelity._inserted_after({"episodes": [], "inserted_after_s": 2.4}) == 2.4  # watched in process
    assert fidelity._inserted_after({"episodes": [], "inserted_after_s": None}) is None
    emulator = {"inserted_at_s": 7.0, "first_servo_at_s": 4.5}  # the emulator's own clock
    assert fidelity._inserted_after(emulator) == 2.5
    assert fidelity._inserted_after({"inserted_at_s": None, "first_servo_at_s": 4.5}) is None


@pytest.mark.skipif(
    not all(__import__("importlib").util.find_spec(m) for m in ("unitree_sdk2py", "cyclonedds")),
    reason="unitree-sdk2py / cyclonedds not installed",
)
def test_the_same_plans_walk_the_robot_forward_both_ways(tmp_path) -> None:
    """3 s each way with the shipped model: over DDS every tick's command reaches the robot intact and it walks
    forward as in process (the tolerance itself is the bench's, on a full episode; here only that both walk). On
    flat ground (go2_foam's `sim`), where 3 s of walking is well clear of the 0.3 m asked."""
    result = fidelity.measure(
        "go2_foam", "sim", "models/go2_foam", seconds=3.0, address=f"lo:{190 + os.getpid() % 40}"
    )
    local, dds = result["in_process"], result["over_link"]
    assert local["progress_m"] > 0.3 and dds["progress_m"] > 0.3, result
    assert dds["bad_crc"] == 0 and dds["commands"] >= 100, (
        result
    )  # 150 ticks at 50 Hz, a loaded machine allowed
    assert local["falls"] == 0 and dds["falls"] == 0
    assert 0 < result["share"] < 3
    # both controllers' tick counts are reported (fresh, late, held), the DDS one from the deploy's own line
    assert dds["deploy_ticks"].startswith("ticks ") and "fresh" in dds["deploy_ticks"]
    assert local["stats"]["ticks"] >= 100
    text = fidelity.summary({**result, "saved": "-"})
    assert "controller in process: ticks" in text and "controller over DDS: ticks" in text


def test_several_seeds_are_pooled_per_way_and_printed_pair_by_pair() -> None:
    def peg(seed: int, local: float | None, link: float | None, within: bool) -> dict:
        return {
            "task": "ur5e_peg",
            "robot": "ur5e",
            "profile": "sim",
            "seconds": 8.0,
            "seed": seed,
            "overrides": [],
            "in_process": {"inserted_after_s": local},
            "within_tolerance": within,
            "over_link": {
                "inserted_after_s": link,
                "commands": 79,
                "protective_stops": 0,
                "unsafe_commands": 0,
            },
        }

    runs = [peg(0, 2.0, 2.1, True), peg(1, None, 1.9, False), peg(2, 6.0, 2.0, False)]
    pooled = fidelity.pooled(runs)
    assert pooled["seeds"] == 3 and pooled["within"] == 1
    assert pooled["in_process"] == {"inserted": 2, "median_s": 4.0, "times_s": [2.0, None, 6.0]}
    assert pooled["over_link"]["inserted"] == 3 and pooled["over_link"]["median_s"] == 2.0
    text = fidelity.summary({"robot": "ur5e", "runs": runs, "pooled": pooled, "saved": "x.json"})
    assert text.count("seed ") == 3 and text.count("saved:") == 1
    assert (
        "3 seeds: 1 pairs within tolerance" in text and "in_process: inserted in 2 of 3, median 4.0 s" in text
    )

    go2 = [
        {
            "robot": "go2",
            "within_tolerance": True,
            "in_process": {"progress_m": 2.0, "falls": 0},
            "over_link": {"progress_m": 1.8, "falls": 1},
        },
        {
            "robot": "go2",
            "within_tolerance": True,
            "in_process": {"progress_m": 1.0, "falls": 1},
            "over_link": {"progress_m": 1.2, "falls": 0},
        },
    ]
    assert fidelity.pooled(go2)["over_link"] == {"progress_m": 1.5, "falls": 1}
