"""The model store on its own: checking, loading, validating, staging and rolling back versions exactly as
documented (tests that the mutation check showed were missing)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
import torch

from simdist.errors import CheckpointError
from simdist.model.checkpoint import current_version, load_checkpoint, publish_dynamics
from simdist.runtime.store import ModelStore


def _perturbed(model_dir: Path, scale: float = 0.05) -> torch.nn.Module:
    model = load_checkpoint(model_dir)
    with torch.no_grad():
        for p in model.dynamics.parameters():
            p.add_(scale * torch.randn_like(p))
    return model.dynamics


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.levelno == level and r.name == "simdist.runtime.store"
    ]


def test_a_new_store_holds_the_current_version_in_eval_mode(go2_model: Path) -> None:
    publish_dynamics(go2_model, _perturbed(go2_model))
    store = ModelStore(str(go2_model))
    assert store.folder == go2_model and isinstance(store.folder, Path)
    assert store.poll_s == 0.2 and store.device == torch.device("cpu")  # the documented defaults
    assert ModelStore(go2_model, poll_s=0.5).poll_s == 0.5
    assert store.version == 1 and store.label == "v0001" and store.swaps == 0
    assert not store.model.training and not any(m.training for m in store.model.modules())
    assert store.model.dynamics.state_dict().keys() == _perturbed(go2_model).state_dict().keys()
    for name, p in load_checkpoint(go2_model, version=1).dynamics.state_dict().items():
        assert torch.equal(store.model.dynamics.state_dict()[name], p)  # the current version's weights
    assert store.check() is None and store.poll() is None  # nothing new
    assert store.reload_now() is None and store.swaps == 0


def test_check_loads_validates_and_stages_once_and_poll_swaps_it_in(
    go2_model: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import simdist.runtime.store as store_module

    frozen: list[int] = []
    monkeypatch.setattr(store_module, "freeze_heap", lambda: frozen.append(1))
    store = ModelStore(go2_model)
    old = store.model
    version = publish_dynamics(go2_model, _perturbed(go2_model))
    loads: list[int] = []
    load = store._load
    monkeypatch.setattr(store, "_load", lambda v: loads.append(v) or load(v))
    with caplog.at_level(logging.INFO, logger="simdist.runtime.store"):
        assert store.check() == version == 1
    assert _messages(caplog, logging.INFO) == ["model store: dynamics v0001 loaded and validated"]
    assert frozen == [1]  # the new model's objects frozen out of the collector's way
    assert store.model is old and store.version == 0  # staged, not yet in use
    assert store.check() is None and loads == [1]  # staged: not loaded again
    assert store.poll() == 1 and store.version == 1 and store.label == "v0001" and store.swaps == 1
    assert store.model is not old and store.model is store._loaded[1] and store._loaded[0] is old
    assert store.poll() is None and store.model is store._loaded[1]  # the slot is empty after a swap
    assert store.check() is None and loads == [1]  # in use: not loaded again
    # a second version: swaps count up, and a version already loaded is not read from disk again
    publish_dynamics(go2_model, _perturbed(go2_model))
    assert store.reload_now() == 2 and store.swaps == 2 and store.version == 2
    assert store._load(1) is store._loaded[1] and frozen == [1, 1]


def test_a_broken_current_pointer_keeps_the_model_in_use(
    go2_model: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = ModelStore(go2_model)
    publish_dynamics(go2_model, _perturbed(go2_model))
    current = go2_model / "dynamics" / "current"
    current.write_text("garbage\n")  # mid-rollback by hand, or a broken pointer
    with caplog.at_level(logging.WARNING, logger="simdist.runtime.store"):
        assert store.check() is None and store.poll() is None
    warnings = _messages(caplog, logging.WARNING)
    assert len(warnings) == 1 and warnings[0].startswith("model store: ") and "garbage" in warnings[0]
    assert store.version == 0 and not store._refused  # not refused: the pointer may be fixed
    current.write_text("v0001.safetensors\n")
    assert store.check() == 1 and store.poll() == 1


def test_a_refused_version_is_logged_once_and_others_still_load(
    go2_model: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = ModelStore(go2_model)
    later = _perturbed(go2_model)
    publish_dynamics(go2_model, _perturbed(go2_model))
    bad = go2_model / "dynamics" / "v0001.safetensors"
    bad.write_bytes(bad.read_bytes()[:100])
    with caplog.at_level(logging.ERROR, logger="simdist.runtime.store"):
        assert store.check() is None and store.check() is None
    errors = _messages(caplog, logging.ERROR)
    assert len(errors) == 1 and errors[0].startswith("model store: refusing dynamics v0001: ")
    assert str(bad) in errors[0] and store._refused == {1} and 1 not in store._loaded
    publish_dynamics(go2_model, later)  # the next version is not held back by the refusal
    assert store.check() == 2 and store.poll() == 2


def test_a_version_whose_predictions_overflow_is_refused_with_the_validators_own_reason(
    go2_model: Path,
) -> None:
    store = ModelStore(go2_model)
    publish_dynamics(go2_model, _perturbed(go2_model, scale=0.0))
    overflowing = load_checkpoint(go2_model)
    with torch.no_grad():
        for p in overflowing.dynamics.parameters():
            p.mul_(1e30)
    publish_dynamics(go2_model, overflowing)
    with pytest.raises(CheckpointError, match=r"^\S+: dynamics v0002 predicts non-finite latents$"):
        store._load(2)  # not wrapped in the "does not load" refusal
    assert 2 not in store._loaded
    assert store._load(1) is store._loaded[1]  # a good one is validated and kept


def test_a_load_that_fails_otherwise_is_refused_with_its_reason(
    go2_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ModelStore(go2_model)
    publish_dynamics(go2_model, _perturbed(go2_model))

    def broken(state: dict) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(store, "_with_dynamics", broken)
    with pytest.raises(CheckpointError) as info:
        store._load(1)
    assert str(info.value) == f"{go2_model}: dynamics v0001 does not load into the model in use: boom"
    assert info.value.__cause__ is None and info.value.__suppress_context__  # one line, not a chained trace


def test_a_new_model_shares_the_frozen_weights_and_has_its_own_dynamics(go2_model: Path) -> None:
    store = ModelStore(go2_model)
    new_dynamics = _perturbed(go2_model)
    model = store._with_dynamics(new_dynamics.state_dict())
    old = store.model
    assert not model.training and model.dynamics is not old.dynamics
    assert old._modules["dynamics"] is old.dynamics  # the model in use is untouched
    for name, p in new_dynamics.state_dict().items():
        assert torch.equal(model.dynamics.state_dict()[name], p)
        assert not torch.equal(old.dynamics.state_dict()[name], p)
    old_state = old.state_dict()
    assert model.state_dict().keys() == old_state.keys()
    for name, p in model.state_dict().items():
        if not name.startswith("dynamics."):
            assert p.data_ptr() == old_state[name].data_ptr()  # the very tensors, not copies
    assert len(list(model.parameters())) == len(list(old.parameters()))
    assert model._parameters is not old._parameters and model._buffers is not old._buffers
    assert model._modules is not old._modules
    with pytest.raises(RuntimeError, match="Missing key"):  # strict: a partial state is not half-loaded
        store._with_dynamics({k: v for k, v in list(new_dynamics.state_dict().items())[1:]})


def test_rollback_validates_moves_current_and_stages_the_previous_model(go2_model: Path) -> None:
    store = ModelStore(go2_model)
    first = store.model
    publish_dynamics(go2_model, _perturbed(go2_model))
    assert store.reload_now() == 1
    assert store.rollback() == 0 and current_version(go2_model) == 0
    assert store.version == 1  # staged: in use from the next tick boundary
    assert store.check() is None  # the watcher sees `current` at the staged version: nothing to do
    assert store.poll() == 0 and store.model is first and store.swaps == 2
    assert store.rollback(1) == 1 and store.poll() == 1 and store.model is store._loaded[1]
    with pytest.raises(CheckpointError, match="no such dynamics version"):
        store.rollback(7)
    assert current_version(go2_model) == 1 and store.poll() is None


def test_the_watcher_outlives_a_failing_check_and_stops_and_restarts(
    go2_model: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = ModelStore(go2_model, poll_s=0.01)
    calls: list[int] = []
    second = threading.Event()

    def check() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("disk gone")
        second.set()

    monkeypatch.setattr(store, "check", check)
    with caplog.at_level(logging.ERROR, logger="simdist.runtime.store"):
        assert store.start() is store
        try:
            assert second.wait(30.0), "the watcher died with the first failure"
        finally:
            store.stop()
    failures = [r for r in caplog.records if r.name == "simdist.runtime.store" and r.levelno == logging.ERROR]
    assert failures[0].getMessage() == f"model store: checking {go2_model} failed"
    assert failures[0].exc_info is not None and "disk gone" in str(failures[0].exc_info[1])
    assert store._thread is None and not [t for t in threading.enumerate() if t.name == "model-store"]
    store.stop()  # idempotent
    # stop() ends the loop; a fresh start after clearing the stop flag gets a new watcher
    store._stop.clear()
    second.clear()
    store.start()
    try:
        assert second.wait(30.0) and store._thread is not None and store._thread.is_alive()
    finally:
        store.stop()


def test_the_model_loaded_is_the_version_the_store_names_even_if_current_moves_meanwhile(
    go2_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`current` may move between reading it and loading the weights (a publish, a rollback by hand): the store
    loads the version it read, so its label never names other weights than the ones it plans with."""
    import simdist.runtime.store as store_module

    publish_dynamics(go2_model, _perturbed(go2_model))  # current: v0001
    monkeypatch.setattr(store_module, "current_version", lambda folder: 0)  # read just before the publish
    store = ModelStore(go2_model)
    assert store.version == 0
    for name, p in load_checkpoint(go2_model, version=0).dynamics.state_dict().items():
        assert torch.equal(store.model.dynamics.state_dict()[name], p)


def test_the_model_is_loaded_onto_the_stores_device(go2_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import simdist.runtime.store as store_module

    devices: list[object] = []
    real = store_module.load_checkpoint

    def spy(folder: Path, **kwargs: object) -> object:
        devices.append(kwargs.get("device", "left to the default"))
        return real(folder, **kwargs)

    monkeypatch.setattr(store_module, "load_checkpoint", spy)
    store = ModelStore(go2_model, device="cpu")
    assert devices == [torch.device("cpu")] and store.device == torch.device("cpu")


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (run it where a GPU is present)"
)
def test_on_cuda_a_good_version_is_staged_and_an_overflowing_one_refused_not_retried(go2_model: Path) -> None:
    """The validation builds its inputs on the store's device: on CUDA a mask made on the CPU raised a
    RuntimeError that check() did not catch, so a bad version was retried every poll instead of refused."""
    store = ModelStore(go2_model, device="cuda")
    assert {p.device.type for p in store.model.parameters()} == {"cuda"}
    publish_dynamics(go2_model, _perturbed(go2_model))
    assert store.check() == 1 and store.poll() == 1
    assert {p.device.type for p in store.model.dynamics.parameters()} == {"cuda"}
    overflowing = load_checkpoint(go2_model)
    with torch.no_grad():
        for p in overflowing.dynamics.parameters():
            p.mul_(1e30)
    publish_dynamics(go2_model, overflowing)
    assert store.check() is None and 2 in store._refused
    assert store.check() is None and store.label == "v0001"  # refused once, not loaded again
