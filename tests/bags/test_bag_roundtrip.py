"""BagWriter -> read_episodes round trips in both storages and both distros, interruption, and the mcap reader."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ruamel.yaml import YAML

from simdist.bags import BagWriter, next_run_dir, read_episodes, read_topics, schema
from simdist.bags.conversions import joint_state_from_msg, pose_from_msg, wrench_from_msg
from simdist.errors import BagError
from simdist.hardware.state import RobotState

STORAGES = ["mcap", "sqlite3"]
DISTROS = ["jazzy", "humble"]
T0 = 1_700_000_000_000_000_000


def _ur5e_state(rng: np.random.Generator) -> RobotState:
    return RobotState(
        timestamp=0.0,
        joint_positions=rng.normal(size=6),
        joint_velocities=rng.normal(size=6),
        tool_pose=np.concatenate([rng.normal(size=3), [1.0, 0.0, 0.0, 0.0]]),
        tool_wrench=rng.normal(size=6),
    )


def _record(path: Path, storage: str, distro: str) -> dict:
    """Two episodes (4 and 3 ticks) with a hot swap inside the second; returns what was written."""
    rng = np.random.default_rng(1)
    written: dict = {"obs": [], "act": [], "cmd": [], "states": []}
    with BagWriter(path, robot="ur5e", storage=storage, distro=distro, info={"task": "ur5e_peg"}) as bag:
        t = T0
        for episode, (ticks, success) in enumerate([(4, True), (3, False)]):
            t += 1000
            assert bag.start_episode(model_version=f"v000{episode + 1}", stamp_ns=t) == episode
            for i in range(ticks):
                if episode == 1 and i == 2:
                    t += 10
                    bag.set_model_version("v0003", stamp_ns=t)
                t += 100
                obs, act, cmd = rng.normal(size=7), rng.normal(size=6), rng.normal(size=2)
                state = _ur5e_state(rng)
                bag.append(observation=obs, action=act, command=cmd, state=state, stamp_ns=t)
                for key, value in (("obs", obs), ("act", act), ("cmd", cmd), ("states", state)):
                    written[key].append(value)
            t += 10
            bag.end_episode(success=success, stamp_ns=t)
    return written


@pytest.mark.parametrize("distro", DISTROS)
@pytest.mark.parametrize("storage", STORAGES)
def test_round_trip_keeps_values_episodes_and_versions(tmp_path: Path, storage: str, distro: str) -> None:
    path = tmp_path / "run_01"
    written = _record(path, storage, distro)
    episodes = read_episodes(path)

    assert [len(e["step"]) for e in episodes] == [4, 3]
    proprio = np.concatenate([e["proprio"] for e in episodes])
    assert proprio.dtype == np.float32
    assert np.array_equal(proprio, np.array(written["obs"], dtype=np.float32))
    assert np.array_equal(np.concatenate([e["action"] for e in episodes]), np.float32(written["act"]))
    assert np.array_equal(np.concatenate([e["command"] for e in episodes]), np.float32(written["cmd"]))
    assert episodes[0]["step"].tolist() == [0, 1, 2, 3] and episodes[1]["step"].tolist() == [0, 1, 2]
    assert episodes[0]["model_version"].tolist() == ["v0001"] * 4
    assert episodes[1]["model_version"].tolist() == ["v0002", "v0002", "v0003"]
    assert episodes[0]["success"].all() and not episodes[1]["success"].any()
    assert episodes[1]["episode_index"].tolist() == [1, 1, 1]
    assert np.all(np.diff(np.concatenate([e["timestamp_ns"] for e in episodes])) > 0)

    topics = read_topics(path, [schema.JOINT_STATES, schema.WRENCH, schema.EE_POSE])
    joints = [joint_state_from_msg(m) for _, m in topics[schema.JOINT_STATES]]
    assert np.array_equal([j["position"] for j in joints], [s.joint_positions for s in written["states"]])
    assert np.array_equal([j["velocity"] for j in joints], [s.joint_velocities for s in written["states"]])
    wrench = [wrench_from_msg(m) for _, m in topics[schema.WRENCH]]
    assert np.array_equal(wrench, [s.tool_wrench for s in written["states"]])
    poses = [pose_from_msg(m) for _, m in topics[schema.EE_POSE]]
    assert np.array_equal(poses, [s.tool_pose for s in written["states"]])


@pytest.mark.parametrize("storage", STORAGES)
def test_metadata_matches_the_distro(tmp_path: Path, storage: str) -> None:
    yaml = YAML(typ="safe")
    for distro, version in (("jazzy", 9), ("humble", 5)):
        path = tmp_path / distro
        with BagWriter(path, robot="go2", storage=storage, distro=distro) as bag:
            bag.start_episode(model_version="v1")
        info = yaml.load((path / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
        assert info["version"] == version
        assert info["storage_identifier"] == storage
        topic = info["topics_with_message_count"][0]["topic_metadata"]
        if distro == "humble":
            # Humble's rosbag2 parses QoS profiles from a YAML string and knows no type hashes.
            assert (
                isinstance(topic["offered_qos_profiles"], str)
                and "reliability: 1" in topic["offered_qos_profiles"]
            )
            assert "type_description_hash" not in topic
            assert not {"custom_data", "ros_distro"} & set(info)
        else:
            assert isinstance(topic["offered_qos_profiles"], list)
            assert topic["offered_qos_profiles"][0]["reliability"] == "reliable"
            assert topic["type_description_hash"].startswith("RIHS01_")


@pytest.mark.parametrize("distro", DISTROS)
def test_independent_mcap_reader_agrees(tmp_path: Path, distro: str) -> None:
    mcap_reader = pytest.importorskip("mcap.reader")
    decoder = pytest.importorskip("mcap_ros2.decoder")
    path = tmp_path / "run_01"
    _record(path, "mcap", distro)
    ours = np.concatenate([e["proprio"] for e in read_episodes(path)])

    seen: dict[str, list] = {}
    with (path / "run_01.mcap").open("rb") as stream:
        reader = mcap_reader.make_reader(stream, decoder_factories=[decoder.DecoderFactory()])
        summary = reader.get_summary()
        assert summary is not None and summary.statistics is not None
        for schema_, channel, message, decoded in reader.iter_decoded_messages():
            assert schema_.name == schema.TOPIC_TYPES[channel.topic]
            assert schema_.encoding == "ros2msg" and channel.message_encoding == "cdr"
            seen.setdefault(channel.topic, []).append((message.log_time, decoded))

    assert set(seen) == set(schema.topics_for("ur5e"))
    theirs = np.array([list(m.data) for _, m in seen[schema.OBSERVATION]], dtype=np.float32)
    assert np.array_equal(theirs, ours)
    events = [json.loads(m.data) for _, m in seen[schema.EVENTS]]
    kinds = [e["event"] for e in events]
    assert kinds[0] == schema.RUN_START and kinds[-1] == schema.RUN_END
    assert kinds.count(schema.EPISODE_START) == 2 and kinds.count(schema.MODEL_VERSION) == 1
    assert events[0]["robot"] == "ur5e" and events[0]["schema_version"] == schema.SCHEMA_VERSION
    wrench = seen[schema.WRENCH][0][1].wrench.force
    assert isinstance(wrench.x, float)


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
@pytest.mark.parametrize("storage", STORAGES)
def test_interruption_inside_the_writer_leaves_a_readable_bag(
    tmp_path: Path, storage: str, error: type[BaseException]
) -> None:
    path = tmp_path / "run_01"
    with pytest.raises(error):
        with BagWriter(path, robot="go2", storage=storage) as bag:
            bag.start_episode(model_version="v0007")
            for i in range(5):
                bag.append(observation=np.full(3, i), action=np.full(12, i), command=[0.5, 0.0, 0.0])
            raise error()
    assert (path / "metadata.yaml").is_file()
    (episode,) = read_episodes(path)
    assert episode["proprio"][:, 0].tolist() == [0, 1, 2, 3, 4]
    assert not episode["success"].any()
    events = [json.loads(m.data) for _, m in read_topics(path, [schema.EVENTS])[schema.EVENTS]]
    end = next(e for e in events if e["event"] == schema.EPISODE_END)
    assert end["interrupted"] is True and end["reason"] == error.__name__
    assert events[-1]["event"] == schema.RUN_END


def test_unfinished_episode_is_ended_by_the_next_start(tmp_path: Path) -> None:
    path = tmp_path / "run"
    with BagWriter(path, robot="go2") as bag:
        bag.start_episode(model_version="a")
        bag.append(observation=[1.0], action=[1.0], command=[1.0])
        bag.start_episode(model_version="b")
        bag.append(observation=[2.0], action=[2.0], command=[2.0])
        bag.end_episode(success=True)
    first, second = read_episodes(path)
    assert first["proprio"].tolist() == [[1.0]] and not first["success"][0]
    assert second["proprio"].tolist() == [[2.0]] and second["success"][0]
    assert second["model_version"].tolist() == ["b"]


def test_a_step_with_a_non_finite_value_is_dropped_and_splits_its_episode(tmp_path: Path) -> None:
    """A sensor's NaN logged as it came (an observation), an infinite action: those steps never reach a finetune;
    the stretches around them keep their true steps and get distinct ids."""
    from simdist.runtime.real_data import real_episodes

    path = tmp_path / "run"
    with BagWriter(path, robot="go2") as bag:
        bag.start_episode(model_version="v0000", stamp_ns=T0)
        for i in range(7):
            obs = [float(i), np.nan if i == 2 else 0.0]
            act = [np.inf if i == 4 else float(i)]
            bag.append(observation=obs, action=act, command=[1.0], stamp_ns=T0 + 100 * (i + 1))
        bag.end_episode(success=True, stamp_ns=T0 + 1000)
    stretches = read_episodes(path)
    assert [e["step"].tolist() for e in stretches] == [[0, 1], [3], [5, 6]]
    assert [e["proprio"][:, 0].tolist() for e in stretches] == [[0, 1], [3], [5, 6]]
    assert len({int(e["segment"][0]) for e in stretches}) == 3
    episodes = real_episodes([path])
    assert all(np.isfinite(e[k]).all() for e in episodes for k in ("proprio", "action", "command"))
    assert len({int(e["episode"][0]) for e in episodes}) == 3


def test_writer_refuses_existing_folder_and_changing_sizes(tmp_path: Path) -> None:
    (tmp_path / "run_01").mkdir()
    with pytest.raises(BagError, match="run_01"):
        BagWriter(tmp_path / "run_01", robot="go2").open()
    with BagWriter(tmp_path / "run_02", robot="go2") as bag:
        bag.append(observation=np.zeros(3), action=np.zeros(2), command=np.zeros(1))
        with pytest.raises(ValueError, match="observation has 4 values"):
            bag.append(observation=np.zeros(4), action=np.zeros(2), command=np.zeros(1))


def test_next_run_dir_picks_the_next_free_number(tmp_path: Path) -> None:
    assert next_run_dir(tmp_path).name == "run_01"
    for name in ("run_01", "run_03", "run_x", "other_07"):
        (tmp_path / name).mkdir()
    assert next_run_dir(tmp_path) == tmp_path / "run_04"
    (tmp_path / "run_99").mkdir()
    assert next_run_dir(tmp_path).name == "run_100"
    assert not (tmp_path / "run_100").exists()


def test_real_sigint_to_a_recording_process_leaves_a_readable_bag(tmp_path: Path) -> None:
    path = tmp_path / "run_01"
    code = (
        "import signal, sys, time\n"
        # a process started in the background by a non-interactive shell (as CI may) inherits SIGINT ignored;
        # a program run from a terminal has Python's handler, which is what this test is about
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from simdist.bags import BagWriter\n"
        f"with BagWriter({str(path)!r}, robot='go2') as bag:\n"
        "    bag.start_episode(model_version='v1')\n"
        "    i = 0\n"
        "    while True:\n"
        "        bag.append(observation=[float(i)], action=[0.0], command=[0.0])\n"
        "        if i == 3:\n"
        "            print('recording', flush=True)\n"
        "        i += 1\n"
        "        time.sleep(0.002)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "recording"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()  # never leave a recorder running when the test fails
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    (episode,) = read_episodes(path)
    ticks = episode["proprio"][:, 0]
    assert len(ticks) >= 4 and ticks.tolist() == list(range(len(ticks)))
    assert not episode["success"].any()


def test_each_step_gets_the_reward_reported_at_the_next_tick_and_nan_where_there_is_none(
    tmp_path: Path,
) -> None:
    # The reward reported with tick k was earned by tick k-1's action; None: the previous tick is not in the bag.
    reported = [None, 0.5, 0.25, None, 1.0, 2.0]
    with BagWriter(tmp_path / "run", robot="ur5e", reward=True) as bag:
        t = T0
        bag.start_episode(model_version="v0000", stamp_ns=t)
        for k, reward in enumerate(reported):
            if k == 4:  # episode 0 ends after tick 3: tick 4's reward is episode 0's last step's
                bag.end_episode(success=True, stamp_ns=t + 10)
                bag.start_episode(model_version="v0000", stamp_ns=t + 20)
            t += 100
            bag.append(
                observation=np.zeros(7), action=np.zeros(6), command=np.zeros(2), reward=reward, stamp_ns=t
            )
    first, second = read_episodes(tmp_path / "run")
    np.testing.assert_array_equal(first["reward"], np.float32([0.5, 0.25, np.nan, 1.0]))
    np.testing.assert_array_equal(second["reward"], np.float32([2.0, np.nan]))
    with BagWriter(tmp_path / "plain", robot="ur5e") as bag:  # a robot that reports no reward: no topic
        bag.start_episode(model_version="v0000", stamp_ns=T0)
        with pytest.raises(BagError, match="reward=True"):
            bag.append(observation=np.zeros(7), action=np.zeros(6), command=np.zeros(2), reward=1.0)
        bag.append(observation=np.zeros(7), action=np.zeros(6), command=np.zeros(2), stamp_ns=T0 + 100)
    assert schema.REWARD not in read_topics(tmp_path / "plain", [schema.EVENTS], optional=[schema.REWARD])
    assert np.isnan(read_episodes(tmp_path / "plain")[0]["reward"]).all()
