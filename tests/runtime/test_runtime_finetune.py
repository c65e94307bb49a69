"""Dynamics-only finetuning: frozen weights bit-identical, only the dynamics change, the gate refuses versions that
are not better, bad bags write nothing, and bag windows equal the simulation windows of the same episodes."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from fast_planner import FAST_PLANNER

from simdist.bags import schema
from simdist.data.dataset import InMemoryEpisodes
from simdist.data.windows import WindowBatch, WindowSampler
from simdist.errors import BagError
from simdist.model.checkpoint import current_version, list_versions, load_checkpoint
from simdist.runtime.deploy import run_deploy
from simdist.runtime.finetune import finetune
from simdist.runtime.finetune_options import FinetuneOptions
from simdist.runtime.real_data import real_episodes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bags"))
from bag_helpers import good_topics, snapshot, write_raw  # noqa: E402

# max_epochs out of the way: how many windows a bag yields varies from run to run (a loaded CI machine once got one
# batch's worth), and a bag that fills one batch would cap training at 100 epochs x 1 step
QUICK = FinetuneOptions(
    lr=1e-3, max_steps=120, eval_every=40, warmup_steps=10, val_fraction=0.2, patience=10, max_epochs=10**6
)
SHORT_EPISODES = {"episode_seconds": 1.0}


def _bags(
    model: Path, root: Path, runs: int = 1, seconds: float = 4.0, episode_seconds: float = 0.5
) -> list[Path]:
    # Half-second episodes: a random robot that does not fall (since the Go2's fall rule of 2026-12-07, not even
    # on ptfe) still gives several episodes, so the gate's three episode splits are never starved by the hash of a
    # temporary path.
    out = []
    for i in range(runs):
        result = run_deploy(
            "go2_slope",
            "sim:ptfe",
            model,
            seconds=seconds,
            bag_dir=root,
            seed=i,
            overrides={**SHORT_EPISODES, "episode_seconds": episode_seconds},
            planner_overrides=FAST_PLANNER,
        )
        assert result.bag is not None
        out.append(result.bag)
    return out


def _hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_only_dynamics_change_and_a_fresh_run_is_predicted_better(go2_model: Path, tmp_path: Path) -> None:
    bags = _bags(go2_model, tmp_path / "bags", runs=3)
    fresh = bags.pop()  # a run the finetune never sees: neither for training nor for its gate
    frozen_files = {name: _hash(go2_model / name) for name in ("weights.safetensors", "world_model.yaml")}
    report = finetune(go2_model, bags, QUICK)
    assert report.published and report.version == 1 and current_version(go2_model) == 1
    assert report.steps == 120 and report.stopped_by == "steps"
    from simdist.runtime.finetune import heldout_latent_error

    episodes = InMemoryEpisodes(real_episodes([fresh]))
    errors = []
    for version in (0, 1):
        model = load_checkpoint(go2_model, version=version).eval()
        sampler = WindowSampler(episodes, model.history, model.horizon)
        with torch.no_grad():
            errors.append(float(heldout_latent_error(model, sampler, limit=4096).mean()))
    assert errors[1] < 0.9 * errors[0], errors  # the profile was learned, not the gate's own windows
    assert {name: _hash(go2_model / name) for name in frozen_files} == frozen_files
    old, new = load_checkpoint(go2_model, version=0), load_checkpoint(go2_model, version=1)
    old_state, new_state = old.state_dict(), new.state_dict()
    changed = {k for k in old_state if not torch.equal(old_state[k], new_state[k])}
    assert changed and all(
        k.startswith("dynamics.") for k in changed
    )  # encoder, heads, normaliser bit-identical
    assert any(k.startswith("dynamics.") for k in changed)
    saved = json.loads(Path(report.report_json).read_text())
    assert saved["version"] == 1 and len(saved["latent_before"]) == old.horizon
    assert Path(report.report_png).stat().st_size > 0
    assert 0.05 < report.minutes_of_data < 0.2  # 2 runs x 4 s


def test_the_gate_refuses_a_version_that_is_not_better(go2_model: Path, tmp_path: Path) -> None:
    bags = _bags(go2_model, tmp_path / "bags")
    weights = {p.name: _hash(p) for p in (go2_model / "dynamics").iterdir()}
    # A learning rate so large that every step makes the dynamics worse: the best candidate is the current one.
    harmful = FinetuneOptions(
        lr=50.0, max_steps=6, eval_every=1, warmup_steps=1, val_fraction=0.2, patience=6
    )
    report = finetune(go2_model, bags, harmful)
    assert not report.published and report.version is None and "refused" in report.reason
    assert list_versions(go2_model) == [0] and current_version(go2_model) == 0
    assert {p.name: _hash(p) for p in (go2_model / "dynamics").iterdir()} == weights
    # A genuinely better version that misses a required improvement is refused too.
    picky = finetune(go2_model, bags, FinetuneOptions(**{**QUICK.__dict__, "min_improvement": 0.999}))
    assert not picky.published and picky.after < picky.before and list_versions(go2_model) == [0]


def test_a_diverging_finetune_stops_and_the_gate_judges_the_best_step_before_it(
    go2_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A training loss that turns NaN (a learning rate too high) stops training at once; nothing NaN is ever
    stepped into the weights or judged, and the report says why it stopped."""
    from simdist.runtime import finetune as ft

    bags = _bags(go2_model, tmp_path / "bags")
    calls = [0]
    loss = ft.training_loss

    def diverging(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls[0] += 1
        value = loss(*args, **kwargs)
        return value * float("nan") if calls[0] > 50 else value

    monkeypatch.setattr(ft, "training_loss", diverging)
    report = ft.finetune(go2_model, bags, QUICK)
    assert report.stopped_by == "diverged" and report.steps == 50 and "diverged at step 51" in report.reason
    assert np.isfinite(report.gate_after)
    if report.published:  # the step-40 checkpoint, selected before the loss went bad
        model = load_checkpoint(go2_model)
        assert all(torch.isfinite(p).all() for p in model.parameters())


def test_the_rate_stays_constant_unless_a_final_share_is_asked_for(
    go2_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from simdist.runtime import finetune as ft

    bags = _bags(go2_model, tmp_path / "bags")
    rates: list[float] = []
    schedule = ft.learning_rate

    def recorded(*args: Any, **kwargs: Any) -> float:
        rates.append(schedule(*args, **kwargs))
        return rates[-1]

    monkeypatch.setattr(ft, "learning_rate", recorded)
    for fraction in (1.0, 0.1):
        rates.clear()
        ft.finetune(
            go2_model, bags, dataclasses.replace(QUICK, final_lr_fraction=fraction, min_improvement=0.999)
        )
        assert len(rates) == QUICK.max_steps
        assert rates[QUICK.warmup_steps] == pytest.approx(QUICK.lr)  # the peak right after the warm-up
        assert rates[-1] == pytest.approx(QUICK.lr * fraction, rel=0.01)
        assert np.all(np.diff(rates[QUICK.warmup_steps :]) <= 0)  # never rises after the warm-up
    assert list_versions(go2_model) == [0]  # the gate refused both (min_improvement): nothing published


def test_a_spent_budget_still_trains_to_the_first_evaluation(go2_model: Path, tmp_path: Path) -> None:
    """The budget counts the optimiser's time and is checked at evaluations: on a machine so loaded that reading
    the bags alone outlasts it (a `make run` once trained 1 step in a 4-minute round), a round still trains."""
    bags = _bags(go2_model, tmp_path / "bags")
    spent = FinetuneOptions(**{**QUICK.__dict__, "max_minutes": 1e-9})
    report = finetune(go2_model, bags, spent)
    assert report.steps == QUICK.eval_every and report.stopped_by == "budget"
    assert 0.0 < report.train_seconds <= report.seconds
    unlimited = finetune(go2_model, bags, FinetuneOptions(**{**QUICK.__dict__, "max_minutes": None}))
    assert unlimited.steps == 120 and unlimited.stopped_by == "steps"


def _truncated(bag: Path, dest: Path) -> Path:
    shutil.copytree(bag, dest)
    data = next(p for p in dest.iterdir() if p.suffix == ".mcap")
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    return dest


def test_bad_bags_write_nothing(go2_model: Path, tmp_path: Path) -> None:
    good = _bags(go2_model, tmp_path / "bags")[0]
    topics = good_topics()
    del topics[schema.ACTION]
    wrong = good_topics()
    wrong[schema.ACTION] = (schema.EVENT_TYPE, wrong[schema.EVENTS][1])
    empty = tmp_path / "empty"
    write_raw(empty, {})
    bad = {
        "missing topic": (write_raw(tmp_path / "missing", topics), "missing topic /simdist/action"),
        "wrong type": (write_raw(tmp_path / "wrong", wrong), "/simdist/action has type"),
        "truncated": (_truncated(good, tmp_path / "truncated"), str(tmp_path / "truncated")),
        "empty": (empty, "empty bag"),
        "no such bag": (tmp_path / "nope", "no such bag"),
    }
    before = snapshot(go2_model)
    for name, (bag, message) in bad.items():
        with pytest.raises(BagError, match=message.replace("/", "/")) as info:
            finetune(go2_model, [good, bag], QUICK)
        assert str(bag) in str(info.value), name
        assert "\n" not in str(info.value)
        assert snapshot(go2_model) == before, name  # no version, no report, nothing


def test_bag_windows_and_rewards_equal_the_simulation_windows_of_the_same_episodes(
    go2_model: Path, tmp_path: Path
) -> None:
    from simdist.sim import make_env

    overrides = {"nominal.sensor_noise_scale": 0, **SHORT_EPISODES}
    histories: list[tuple[int, tuple[np.ndarray, ...]]] = []
    result = run_deploy(
        "go2_slope",
        "sim:ptfe",
        go2_model,
        ticks=120,
        bag_dir=tmp_path / "bags",
        seed=7,
        overrides=overrides,
        planner_overrides=FAST_PLANNER,
        on_tick=lambda k, loop: histories.append((loop.history.step, loop.history.arrays())),
    )
    real = real_episodes([result.bag])
    # Replay the logged actions in a fresh simulator, recording what a data generator records.
    env = make_env("go2_slope", "ptfe", num_envs=1, seed=7, overrides=overrides)
    obs, _ = env.reset(seed=7)
    sim_episodes, current = [], {"proprio": [], "command": [], "action": []}
    actions = np.concatenate([e["action"] for e in real])
    earned = []
    for action in actions:
        current["proprio"].append(obs["proprio"][0])
        current["command"].append(obs["command"][0])
        current["action"].append(action)
        obs, reward, _, _, info = env.step(action[None])
        earned.append(reward[0])
        if info["done"][0]:
            sim_episodes.append({k: np.stack(v) for k, v in current.items()})
            current = {"proprio": [], "command": [], "action": []}
    if current["proprio"]:
        sim_episodes.append({k: np.stack(v) for k, v in current.items()})
    env.close()
    assert [len(e["proprio"]) for e in sim_episodes] == [len(e["proprio"]) for e in real]
    # Each step's reward is the one its action earned, across the episodes' ends too; the run's last is unknown.
    logged = np.concatenate([e["reward"] for e in real])
    assert np.isnan(logged[-1]) and np.isfinite(logged[:-1]).all()
    np.testing.assert_array_equal(logged[:-1], np.float32(earned[:-1]))
    for e in sim_episodes:
        n = len(e["proprio"])
        e.update(reward=np.zeros(n), value=np.zeros(n), expert_flag=np.zeros(n, bool))
    h, t = 4, 5
    bag_windows = WindowSampler(InMemoryEpisodes(real), h, t)
    sim_windows = WindowSampler(InMemoryEpisodes(sim_episodes), h, t)
    assert len(bag_windows) == len(sim_windows) > 50
    index = np.arange(len(bag_windows))
    a, b = bag_windows.windows(index), sim_windows.windows(index)
    for field in (
        "obs_hist",
        "act_hist",
        "hist_mask",
        "obs",
        "future_obs",
        "actions",
        "command",
        "future_mask",
    ):
        assert torch.equal(getattr(a, field), getattr(b, field)), field
    # What the planner saw at each tick is the window's history at that step.
    episode_of, step_of = bag_windows.locate(index)
    starts = np.concatenate([[0], np.cumsum([len(e["proprio"]) for e in real])])
    for w, (e, s) in enumerate(zip(episode_of, step_of, strict=True)):
        step, (obs_hist, act_hist, mask, ob) = histories[starts[e] + s]
        assert step == s
        np.testing.assert_array_equal(obs_hist, a.obs_hist[w].numpy())
        np.testing.assert_array_equal(act_hist, a.act_hist[w].numpy())
        np.testing.assert_array_equal(mask, a.hist_mask[w].numpy())
    ids = [int(e["episode"][0]) for e in real]
    assert len(set(ids)) == len(ids)
    other = run_deploy(
        "go2_slope",
        "sim:ptfe",
        go2_model,
        ticks=30,
        bag_dir=tmp_path / "bags2",
        seed=7,
        overrides=overrides,
        planner_overrides=FAST_PLANNER,
    ).bag
    assert not set(ids) & {int(e["episode"][0]) for e in real_episodes([other])}  # unique across runs


def test_the_gate_decides_on_episodes_that_did_not_select_the_checkpoint(
    go2_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import simdist.runtime.finetune as ft

    bags = _bags(go2_model, tmp_path / "bags", runs=2)
    seen: list[frozenset[int]] = []  # the episode positions behind each held-out evaluation, in call order
    measure = ft.heldout_latent_error

    def spy(model, sampler, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(frozenset(int(i) for i in sampler.episodes))
        return measure(model, sampler, **kwargs)

    monkeypatch.setattr(ft, "heldout_latent_error", spy)
    report = finetune(go2_model, bags, QUICK)
    gate, selection = seen[0], seen[1:-1]  # before (gate), every selection during training, after (gate)
    assert seen[-1] == gate and len(selection) >= 2
    assert all(s == selection[0] for s in selection)
    assert not gate & selection[0]  # the gate's episodes never chose the step
    assert report.heldout_episodes == len(gate) and report.selection_episodes == len(selection[0])


def test_split_real_gives_three_disjoint_sets_even_from_one_episode() -> None:
    from simdist.runtime.real_data import split_real

    def episode(i: int, n: int) -> dict[str, np.ndarray]:
        return {
            "proprio": np.zeros((n, 3), np.float32),
            "action": np.zeros((n, 2), np.float32),
            "command": np.zeros((n, 1), np.float32),
            "reward": np.zeros(n, np.float32),
            "value": np.zeros(n, np.float32),
            "expert_flag": np.zeros(n, bool),
            "episode": np.full(n, i, np.int64),
            "step": np.arange(n, dtype=np.int32),
            "timestamp_ns": np.arange(n, dtype=np.int64),
        }

    for episodes in ([episode(0, 90)], [episode(i, 40) for i in range(40)]):
        source, train, select, decide = split_real(episodes, 0.05)
        sets = [set(train.tolist()), set(select.tolist()), set(decide.tolist())]
        assert all(sets) and not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2])
        assert sum(map(len, sets)) == len(source.episode_ids())


def test_finetuning_an_ensemble_changes_every_member_and_nothing_else(
    go2_model: Path, tmp_path: Path
) -> None:
    from simdist.model.checkpoint import with_dynamics_members

    ensemble = with_dynamics_members(go2_model, tmp_path / "ensemble", 3, seed=1)
    source, start = load_checkpoint(go2_model).state_dict(), load_checkpoint(ensemble).state_dict()
    shared = {k for k in source if not k.startswith("dynamics.")}
    assert all(
        torch.equal(source[k], start[k]) for k in source
    )  # shared weights and member 0 are the source's
    # an ensemble's first version is its source's dynamics in every member; the bootstraps tell them apart
    assert torch.equal(start["dynamics.extra.0.action.weight"], start["dynamics.action.weight"])
    assert torch.equal(start["dynamics.extra.1.action.weight"], start["dynamics.action.weight"])
    report = finetune(ensemble, _bags(go2_model, tmp_path / "bags", runs=2), QUICK)
    assert report.published
    end = load_checkpoint(ensemble).state_dict()
    changed = {k for k in end if not torch.equal(start[k], end[k])}
    assert changed and all(k.startswith("dynamics.") for k in changed)
    assert not changed & shared
    members = {
        "member 0": "dynamics.decoder.",
        "member 1": "dynamics.extra.0.",
        "member 2": "dynamics.extra.1.",
    }
    assert all(any(k.startswith(prefix) for k in changed) for prefix in members.values())
    assert current_version(go2_model) == 0  # the source model is never touched


def _latent_spread(model_dir: Path, episodes: list[dict[str, np.ndarray]]) -> float:
    model = load_checkpoint(model_dir)
    obs = torch.as_tensor(np.concatenate([e["proprio"] for e in episodes]))
    with torch.no_grad():
        return float(model.encoder(model.normalizer.normalize("obs", obs), None).var(0).mean())


def test_start_from_pretrained_trains_afresh_and_the_gate_still_compares_with_the_version_in_force(
    go2_model: Path, tmp_path: Path
) -> None:
    import dataclasses

    bags = _bags(go2_model, tmp_path / "bags")
    first = finetune(go2_model, bags, QUICK)  # v0000 -> v0001, in force
    assert first.published and current_version(go2_model) == 1
    # lr 0: no step moves a weight, so what is evaluated after training is where training started
    frozen = dataclasses.replace(QUICK, lr=0.0, start_from="current")
    again = finetune(go2_model, bags, frozen)
    assert again.latent_after == pytest.approx(again.latent_before)  # from v0001, and v0001 stays v0001
    for start_from in ("pretrained", "task"):  # the slope's measured choice (its task's finetune_start_from)
        afresh = finetune(go2_model, bags, dataclasses.replace(frozen, start_from=start_from))
        assert afresh.latent_before == pytest.approx(
            first.latent_after
        )  # the gate's reference: v0001, in force
        assert afresh.latent_after == pytest.approx(first.latent_before)  # what trained: v0000's dynamics
        assert not afresh.published and current_version(go2_model) == 1  # v0000 is worse than v0001: refused
    # (bad start_from values are refused where the options are made: test_runtime_finetune_options.py)


def test_where_a_finetune_starts_by_default_is_its_tasks_measured_choice(
    go2_model: Path, ur5e_model: Path, tmp_path: Path
) -> None:
    from simdist.runtime.finetune import resolve_start_from

    default = FinetuneOptions()
    assert default.start_from == "task"
    assert resolve_start_from(default, go2_model) == "pretrained"  # go2_slope: afresh won by 5 SE
    assert resolve_start_from(default, ur5e_model) == "current"  # ur5e_peg: afresh lost
    assert resolve_start_from(FinetuneOptions(trainable="all"), go2_model) == "current"  # full finetuning
    assert resolve_start_from(FinetuneOptions(start_from="current"), go2_model) == "current"  # as told


def test_fair_full_finetuning_keeps_its_latent_spread_and_writes_a_model_of_its_own(
    go2_model: Path, tmp_path: Path
) -> None:
    import dataclasses

    from simdist.errors import ConfigError

    bags = _bags(go2_model, tmp_path / "bags", runs=2)
    episodes = real_episodes(bags)
    options = dataclasses.replace(QUICK, trainable="all", lr=3e-3, max_steps=200, eval_every=200)
    with pytest.raises(ConfigError, match="model of its own"):
        finetune(go2_model, bags, options)
    spread = {"start": _latent_spread(go2_model, episodes)}
    weights = _hash(go2_model / "weights.safetensors")
    report = finetune(go2_model, bags, options, out=tmp_path / "full")
    assert report.published and Path(report.model) == tmp_path / "full"
    from simdist.runtime.store import ModelStore

    assert ModelStore(tmp_path / "full").adapted  # its v0000 learnt from real data
    spread["full"] = _latent_spread(tmp_path / "full", episodes)
    assert _hash(go2_model / "weights.safetensors") == weights and current_version(go2_model) == 0
    assert spread["full"] > 0.5 * spread["start"], spread  # the latent keeps most of its spread
    assert spread["full"] != spread["start"]  # and the encoder did train
    with pytest.raises(ConfigError, match="exists"):
        finetune(go2_model, bags, options, out=tmp_path / "full")
    # refused by the gate: the source folder stays as it was, the report goes where the model would have
    source = {p: _hash(p) for p in go2_model.rglob("*") if p.is_file()}
    refused = finetune(
        go2_model, bags, dataclasses.replace(options, min_improvement=0.99), out=tmp_path / "no"
    )
    assert not refused.published and Path(refused.model) == go2_model
    assert {p: _hash(p) for p in go2_model.rglob("*") if p.is_file()} == source
    assert [p.name for p in (tmp_path / "no" / "reports").glob("*.json")] == ["finetune_refused_000.json"]


def test_full_finetuning_learns_the_rewards_the_robot_measured_and_anchors_the_rest(
    go2_model: Path, tmp_path: Path
) -> None:
    import dataclasses

    from simdist.runtime.finetune_losses import FullFinetuneLoss

    episodes = real_episodes(_bags(go2_model, tmp_path / "bags", seconds=2.0))
    start = load_checkpoint(go2_model)
    windows = WindowSampler(InMemoryEpisodes(episodes), start.history, start.horizon).windows(np.arange(64))
    with torch.no_grad():
        read = start.normalizer.denormalize("reward", start(windows)["reward"])
    bias = float(
        (read - windows.reward)[windows.future_mask.bool()].mean()
    )  # the head's own, on these windows
    for e in episodes:  # a robot whose reward the pretrained head does not know: 0.05 above what it reads
        e["reward"] = e["reward"] + np.float32(bias + 0.05)
    unmeasured = [{**e, "reward": np.full_like(e["reward"], np.nan)} for e in episodes]
    options = dataclasses.replace(QUICK, trainable="all")

    def reward_shift(data: list[dict[str, np.ndarray]]) -> float:
        """Mean (predicted - measured) reward after 300 steps of the full-finetuning loss on `data`'s windows."""
        torch.manual_seed(0)
        model = load_checkpoint(go2_model)
        loss_fn = FullFinetuneLoss(model, options)
        batch = WindowSampler(InMemoryEpisodes(data), model.history, model.horizon).windows(np.arange(64))
        optimiser = torch.optim.Adam(model.parameters(), lr=1e-3)
        for _ in range(300):
            optimiser.zero_grad()
            loss_fn(model, batch).backward()
            optimiser.step()
        measured = WindowSampler(InMemoryEpisodes(episodes), model.history, model.horizon).windows(
            np.arange(64)
        )
        with torch.no_grad():
            out = model(measured)
        reward = model.normalizer.denormalize("reward", out["reward"])
        mask = measured.future_mask.bool()
        return float((reward - measured.reward)[mask].mean())

    learnt, anchored = reward_shift(episodes), reward_shift(unmeasured)
    # the measured rewards are learnt to within 0.01; without them the head keeps its reading, the 0.05 off
    assert abs(learnt) < 0.01 and abs(anchored) > max(0.03, 3 * abs(learnt)), (learnt, anchored)


@pytest.mark.parametrize("head", ["reward", "value"])
def test_what_the_robot_measured_through_a_frozen_head_trains_the_dynamics_alone(
    go2_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, head: str
) -> None:
    """`dynamics_reward_weight` / `dynamics_value_weight`: the rewards the robot measured (the returns it earned)
    pull the predicted latents towards what the frozen reward (value) head reads as those; nothing but the dynamics
    changes, the gate compares the sum, and bags without rewards are refused."""
    from simdist.runtime import finetune as finetune_module
    from simdist.runtime.finetune_losses import training_loss
    from simdist.runtime.real_data import measured_returns

    # 0.2 s episodes, each ended as in a fall: returns of a few measured rewards, on the heads' scale (a random
    # robot standing on for longer sums rewards far beyond it)
    bags = _bags(go2_model, tmp_path / "bags", seconds=2.0, episode_seconds=0.2)
    episodes = real_episodes(bags)
    start = load_checkpoint(go2_model)
    # a robot whose outcome the head does not know: every target one standard deviation lower (a random head
    # answers its latents weakly, hence the large weight)
    shift = float(start.normalizer.stats()[head]["std"][0])
    for e in episodes:
        e["terminal"] = np.arange(len(e["terminal"])) == len(e["terminal"]) - 1
        e["value"] = measured_returns(e, 0.99) - np.float32(shift)
        e["reward"] = e["reward"] - np.float32(shift)
    target = "reward" if head == "reward" else "value"

    def shift_left(weight: float) -> tuple[float, set[str]]:
        """Mean (predicted - measured) at steps t+1.. after 200 steps of dynamics-only finetuning."""
        model = load_checkpoint(go2_model)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        batch = WindowSampler(InMemoryEpisodes(episodes), model.history, model.horizon).windows(np.arange(64))
        for p in model.parameters():
            p.requires_grad_(False)
        params = list(model.dynamics.parameters())
        for p in params:
            p.requires_grad_(True)
        optimiser = torch.optim.Adam(params, lr=1e-2)
        weights = {"reward_weight": weight} if head == "reward" else {"value_weight": weight}
        for _ in range(200):
            optimiser.zero_grad()
            training_loss(model, batch, torch.Generator().manual_seed(0), **weights).backward()
            optimiser.step()
        with torch.no_grad():
            predicted = model.normalizer.denormalize(target, model(batch)[target])
        mask = batch.future_mask.bool()[
            :, 1:
        ]  # step t's reward is read from the encoder's z_t, not predicted
        changed = {k for k, v in model.state_dict().items() if not torch.equal(before[k], v)}
        return float((predicted - getattr(batch, target))[:, 1:][mask].mean()), changed

    (latent_only, _), (with_head, changed) = shift_left(0.0), shift_left(10.0)
    assert abs(latent_only) > 0.8 * shift and abs(with_head) < 0.6 * abs(latent_only), (
        latent_only,
        with_head,
    )
    assert changed and all(k.startswith("dynamics.") for k in changed)

    option = f"dynamics_{head}_weight"
    report = finetune(go2_model, bags, dataclasses.replace(QUICK, **{option: 1.0}))
    assert report.gate_measure == f"held-out latent + 1 x {head} error", report.reason
    assert report.gate_after is not None and report.gate_after > report.after  # the head's error counted too
    # the gate decides on the sum (published or not: a tiny random model's 2 s of bags may go either way)
    assert report.gate_before is not None
    improved = report.gate_after < report.gate_before * (1.0 - QUICK.min_improvement)
    assert report.published == improved, report.reason
    # ... against what the robot measured: the gate's starting figure, recomputed from the bags' own targets
    from simdist.runtime.finetune import _heldout
    from simdist.runtime.real_data import split_real

    measured_episodes = real_episodes(bags)
    for e in measured_episodes:
        e["value"] = measured_returns(e, 0.99)
    source, _, _, decide = split_real(measured_episodes, QUICK.val_fraction)
    gate = WindowSampler(source, start.history, start.horizon, decide)
    expected = _heldout(start.eval(), gate, QUICK.eval_windows, {head: 1.0})[1]
    assert report.gate_before == pytest.approx(expected, rel=1e-4)
    unmeasured = [{**e, "reward": np.full_like(e["reward"], np.nan)} for e in episodes]
    monkeypatch.setattr(finetune_module, "real_episodes", lambda _: unmeasured)
    with pytest.raises(BagError, match="no reward measured"):
        finetune(go2_model, bags, dataclasses.replace(QUICK, **{option: 1.0}))
    assert list_versions(go2_model) == ([0, 1] if report.published else [0])


def _robot_with_lower_rewards(
    model_dir: Path, tmp_path: Path
) -> tuple[list[Path], list[dict], Any, WindowBatch]:
    """Two 4 s runs' bags, their episodes with every reward one standard deviation lower than the model's
    pretraining saw (a robot whose rewards the pretrained head does not know) and the returns those add up to,
    the starting model, and a batch of 64 of their windows. Two runs, so that the held-out episodes' returns
    resemble the training ones' (value learning generalises)."""
    from simdist.runtime.real_data import measured_returns

    bags = _bags(model_dir, tmp_path / "bags", runs=2, seconds=4.0)
    episodes = real_episodes(bags)
    start = load_checkpoint(model_dir).eval()
    shift = float(start.normalizer.stats()["reward"]["std"][0])
    for e in episodes:
        e["reward"] = e["reward"] - np.float32(shift)
        e["value"] = measured_returns(e, 0.99)
    batch = WindowSampler(InMemoryEpisodes(episodes), start.history, start.horizon).windows(np.arange(64))
    return bags, episodes, start, batch


@pytest.mark.parametrize("trainable", ["dynamics_reward", "dynamics_critic"])
def test_heads_beside_the_dynamics_learn_what_the_robot_measured_in_a_model_of_their_own(
    go2_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trainable: str
) -> None:
    """`trainable="dynamics_reward"` (`"dynamics_critic"`): the reward head learns the rewards the robot measured
    (the value head the returns it earned), the dynamics train on the latent loss alone (the heads' losses reach
    them not at all), every other weight stays bit-identical, and the result is a model of its own that the runtime
    counts as adapted."""
    from simdist.errors import ConfigError
    from simdist.runtime import finetune as finetune_module
    from simdist.runtime.finetune_losses import training_loss
    from simdist.runtime.store import ModelStore

    heads = ("reward",) if trainable == "dynamics_reward" else ("reward", "value")
    with pytest.raises(ConfigError, match="heads themselves"):
        FinetuneOptions(trainable=trainable, dynamics_reward_weight=0.1)
    bags, episodes, start, batch = _robot_with_lower_rewards(go2_model, tmp_path)

    def dynamics_grads(weight: float) -> list[torch.Tensor]:
        model = load_checkpoint(go2_model)
        loss = training_loss(
            model, batch, torch.Generator().manual_seed(0), head_weights=dict.fromkeys(heads, weight)
        )
        loss.backward()
        for head in heads:
            grads = [p.grad for p in getattr(model, head).parameters() if p.grad is not None]
            assert any(float(g.abs().sum()) > 0 for g in grads) == (weight > 0), head
        return [p.grad.clone() for p in model.dynamics.parameters()]

    # the heads' losses move the heads and nothing of the dynamics
    assert all(torch.equal(a, b) for a, b in zip(dynamics_grads(0.0), dynamics_grads(10.0), strict=True))

    def head_errors(model_dir: Path) -> dict[str, float]:
        """Mean squared error of each trained head against what the robot measured."""
        model = load_checkpoint(model_dir).eval()
        with torch.no_grad():
            out = model(batch)
        mask = batch.future_mask.bool()
        return {
            h: float((model.normalizer.denormalize(h, out[h]) - getattr(batch, h))[mask].pow(2).mean())
            for h in heads
        }

    monkeypatch.setattr(finetune_module, "real_episodes", lambda _: episodes)
    options = dataclasses.replace(QUICK, trainable=trainable, max_steps=200)
    with pytest.raises(ConfigError, match="model of its own"):
        finetune(go2_model, bags, options)
    source = {p: _hash(p) for p in go2_model.rglob("*") if p.is_file()}
    report = finetune(go2_model, bags, options, out=tmp_path / "heads")
    expected = "held-out latent" + "".join(f" + 1 x {h}" for h in heads) + " error"
    assert report.gate_measure == expected, report.reason
    assert report.published and Path(report.model) == tmp_path / "heads", report.reason
    assert {p: _hash(p) for p in go2_model.rglob("*") if p.is_file()} == source  # the source untouched
    before, after = start.state_dict(), load_checkpoint(tmp_path / "heads").state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    trained = tuple(f"{name}." for name in ("dynamics", *heads))
    assert all(any(k.startswith(prefix) for k in changed) for prefix in trained), sorted(changed)
    assert all(k.startswith(trained) for k in changed), sorted(changed)
    errors = {"start": head_errors(go2_model), "after": head_errors(tmp_path / "heads")}
    assert all(errors["after"][h] < 0.5 * errors["start"][h] for h in heads), errors
    store = ModelStore(tmp_path / "heads")
    # its v0000 learnt from real data: the planner's grant applies
    assert store.version == 0 and store.adapted
    unmeasured = [{**e, "reward": np.full_like(e["reward"], np.nan)} for e in episodes]
    monkeypatch.setattr(finetune_module, "real_episodes", lambda _: unmeasured)
    with pytest.raises(BagError, match="no reward measured.*heads"):
        finetune(go2_model, bags, options, out=tmp_path / "none")
    assert not (tmp_path / "none").exists()


def test_the_head_anchor_holds_trained_heads_to_the_starting_ones_off_the_robots_data(
    go2_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`head_anchor_std`: the anchor is zero for the starting heads, trains the heads and nothing else, and a reward
    head that learns a robot's lower rewards moves less on chunks the robot never ran than one trained without it,
    while it still learns the measured rewards."""
    from simdist.errors import ConfigError
    from simdist.runtime import finetune as finetune_module
    from simdist.runtime.finetune_losses import HeadAnchor, masked_mean, training_loss

    with pytest.raises(ConfigError, match="head_anchor_std"):
        FinetuneOptions(head_anchor_std=1.0)  # the paper's recipe trains no heads to hold
    with pytest.raises(ConfigError, match="head_anchor_std"):
        FinetuneOptions(trainable="dynamics_reward", head_anchor_std=-1.0)
    bags, episodes, start, batch = _robot_with_lower_rewards(go2_model, tmp_path)

    model = load_checkpoint(go2_model)
    anchor = HeadAnchor(model, ("reward",), 1.0, seed=0)
    assert float(anchor(model, batch).detach()) == 0.0  # the heads are where they started
    with torch.no_grad():
        model.reward.out.bias.add_(0.5)  # a head moved everywhere by half a normalised unit
    for p in model.parameters():
        p.requires_grad_(True)
    loss = anchor(model, batch)
    assert float(loss.detach()) == pytest.approx(0.25, rel=1e-4)
    loss.backward()
    assert float(model.reward.out.bias.grad.abs().sum()) > 0  # it pulls the head back ...
    # ... and reaches nothing else (the latents are the dynamics', detached)
    grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    assert {name.split(".")[0] for name, g in grads.items() if g.any()} == {"reward"}
    # inside `training_loss`, on the context it already encoded, it adds the same number at its weight
    with torch.no_grad():
        plain = training_loss(model, batch, torch.Generator().manual_seed(0))
        held = HeadAnchor(start, ("reward",), 1.0, seed=0, weight=2.0)
        anchored = training_loss(model, batch, torch.Generator().manual_seed(0), anchor=held)
    assert float(anchored - plain) == pytest.approx(2 * 0.25, rel=1e-4)

    def off_data_drift(model_dir: Path) -> float:
        """Mean squared change of the reward head from the starting one on the windows' chunks plus noise."""
        trained = load_checkpoint(model_dir).eval()
        probe = HeadAnchor(start, ("reward",), 1.0, seed=123)  # other noise than any training batch drew
        with torch.no_grad():
            return float(probe(trained, batch))

    def measured_error(model_dir: Path) -> float:
        trained = load_checkpoint(model_dir).eval()
        with torch.no_grad():
            out = trained(batch)
        error = (trained.normalizer.denormalize("reward", out["reward"]) - batch.reward).pow(2)
        return float(masked_mean(error, batch))

    monkeypatch.setattr(finetune_module, "real_episodes", lambda _: episodes)
    results = {}
    for std in (0.0, 1.0):
        options = dataclasses.replace(
            QUICK, trainable="dynamics_reward", max_steps=200, head_anchor_std=std, anchor_weight=3.0
        )
        out = tmp_path / f"anchor_{std}"
        report = finetune(go2_model, bags, options, out=out)
        assert report.published, report.reason
        results[std] = {"drift": off_data_drift(out), "error": measured_error(out)}
    start_error = measured_error(go2_model)
    # measured over 5 runs at this weight: drift 0.07-0.30 of the unanchored one's, measured error 0.38-0.62 of the
    # start's (at weight 10 the head hardly moves; at 1 it holds less: 0.27-0.84 of the drift)
    assert results[1.0]["drift"] < 0.5 * results[0.0]["drift"], results
    assert results[1.0]["error"] < 0.8 * start_error, (results, start_error)


def test_finetune_command_publishes_into_a_working_copy_unless_in_place(
    go2_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from simdist.cli import main

    bags = _bags(go2_model, tmp_path / "bags", runs=2)
    before = {p.name: _hash(p) for p in go2_model.rglob("*") if p.is_file()}
    monkeypatch.chdir(tmp_path)
    quick = [
        "--max-steps",
        "60",
        "--eval-every",
        "20",
        "--warmup-steps",
        "5",
        "--lr",
        "1e-3",
        "--val-fraction",
        "0.2",
    ]
    args = ["finetune", "--model", str(go2_model), *[a for b in bags for a in ("--bag", str(b))], *quick]
    assert main(args) == 0
    copy = tmp_path / "runs" / "models" / f"{go2_model.name}_finetuned_01"
    assert "working copy" in capsys.readouterr().out and copy.is_dir()
    assert {p.name: _hash(p) for p in go2_model.rglob("*") if p.is_file()} == before  # the source untouched
    assert list_versions(copy) == [0, 1] and current_version(copy) == 1
    assert main([*args, "--out", str(copy)]) == 2  # an existing working copy is never overwritten
    # full finetuning only ever writes a model of its own
    assert main([*args, "--trainable", "all", "--in-place"]) == 2
    assert main([*args, "--trainable", "all"]) == 2
    assert "--out NEW_FOLDER" in capsys.readouterr().err
    assert main([*args, "--trainable", "all", "--out", str(tmp_path / "full")]) == 0
    printed = capsys.readouterr().out
    assert "fully finetuned model" in printed and list_versions(tmp_path / "full") == [0]
    assert re.search(r"reward is in the bags for (9\d\.\d|100\.0)% of the steps", printed), printed
    assert {
        p.name: _hash(p) for p in go2_model.rglob("*") if p.is_file() and "reports" not in p.parts
    } == before
    assert main([*args, "--in-place"]) == 0 and current_version(go2_model) == 1


def test_a_bag_that_does_not_fit_the_model_leaves_no_working_copy(
    go2_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused inside the finetune (the bag's sizes are another robot's): one line, exit 2, and nothing of the
    working copy is left behind (nor any partial copy)."""
    from simdist.bags import BagWriter
    from simdist.cli import main

    bag = tmp_path / "bags" / "run_01"
    with BagWriter(bag, robot="go2") as writer:
        writer.start_episode(model_version="v0000")
        for i in range(40):
            writer.append(observation=np.full(3, i, float), action=np.zeros(2), command=np.zeros(1))
        writer.end_episode(success=True)
    monkeypatch.chdir(tmp_path)
    assert main(["finetune", "--model", str(go2_model), "--bag", str(bag), "--max-steps", "5"]) == 2
    assert "has 3 values, the model takes" in capsys.readouterr().err
    assert not (tmp_path / "runs" / "models").exists() or not any((tmp_path / "runs" / "models").iterdir())
