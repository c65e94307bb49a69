"""Training loop: DDP over two CPU processes equals one process, exact resume, and the `simdist train` CLI."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors.torch import load_file, save_file

from simdist.cli import main
from simdist.data import InMemoryEpisodes, WindowSampler
from simdist.data.synthetic import linear_system_episodes, write_linear_dataset
from simdist.model import WorldModel
from simdist.train.config import load_setup
from simdist.train.trainer import Trainer, release_process_group

STEPS = 3


def _trainer(rank: int = 0, world: int = 1, seed: int = 0) -> Trainer:
    setup = load_setup("tiny", {"train.batch_size": 8, "train.steps": 6, "train.warmup_steps": 1})
    source = InMemoryEpisodes([e for e, _ in linear_system_episodes(6, length=(8, 30), seed=4)])
    sampler = WindowSampler(source, setup.model.history, setup.model.horizon)
    torch.manual_seed(seed)
    model = WorldModel(6, 2, 2, setup.model)
    model.normalizer.load_stats(source.normalizer_stats())
    return Trainer(model, setup, sampler, torch.device("cpu"), rank=rank, world=world)


def _ddp_worker(rank: int, world: int, init_file: str, out_file: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        _ddp_train(rank, world, out_file)
    finally:
        release_process_group()


def _ddp_train(rank: int, world: int, out_file: str) -> None:
    """A function of its own so that its trainer (and the DDP wrapper) is gone before the group is released."""
    trainer = _trainer(rank, world)
    logs = [trainer.train_step() for _ in range(STEPS)]
    if rank == 0:
        state = {k: v.contiguous() for k, v in trainer.model.state_dict().items()}
        save_file(state, out_file, metadata={"logs": json.dumps(logs)})


def test_two_process_ddp_equals_one_process_on_the_same_global_batch(tmp_path):
    out = tmp_path / "ddp.safetensors"
    mp.spawn(_ddp_worker, args=(2, str(tmp_path / "init"), str(out)), nprocs=2, join=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the workers: MKL's thread count (load-dependent) changes the rounding
    try:
        single = _trainer()
        logs = [single.train_step() for _ in range(STEPS)]
    finally:
        torch.set_num_threads(threads)
    ddp_state = load_file(out)
    moved = 0.0
    initial = _trainer().model.state_dict()
    for key, value in single.model.state_dict().items():
        # Adam scales each weight's step by its own gradient's size, so one batch against two averaged halves
        # (float rounding) moves a weight whose gradient is near zero by a few 1e-6 (3.3e-6 measured); 1e-5 is
        # 0.3 % of what training moved the weights (3e-3), and a rank that trained on its half alone misses it
        torch.testing.assert_close(ddp_state[key], value, rtol=1e-4, atol=1e-5, msg=key)
        moved = max(moved, float((value - initial[key]).abs().max()))
    assert moved > 1e-4  # the comparison is about trained weights, not the shared initialisation
    from safetensors import safe_open

    with safe_open(str(out), "pt") as fh:
        ddp_logs = json.loads(fh.metadata()["logs"])
    for a, b in zip(ddp_logs, logs, strict=True):
        for k in ("dynamics", "reward", "value", "action"):
            assert a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-6), k


def test_resume_continues_exactly(tmp_path):
    straight = _trainer()
    for _ in range(6):
        straight.train_step()
    first = _trainer()
    for _ in range(3):
        first.train_step()
    first.save(tmp_path, task="linear", data_hash="x")
    resumed = _trainer(seed=123)  # different initial weights: everything must come from the files
    resumed.resume(tmp_path)
    assert resumed.step == 3
    for _ in range(3):
        resumed.train_step()
    for key, value in straight.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[key], value), key


def test_cli_pretrain_eval_and_errors(tmp_path, capsys):
    data = write_linear_dataset(tmp_path / "data", 12, length=(10, 30), steps_per_shard=100)
    out = tmp_path / "model"
    args = [
        "train",
        "pretrain",
        "--task",
        "linear",
        "--data",
        str(data),
        "--preset",
        "tiny",
        "--out",
        str(out),
    ]
    assert main([*args, "--set", "train.steps=4", "--no-progress"]) == 0
    assert (out / "world_model.yaml").is_file() and (out / "dynamics" / "v0000.safetensors").is_file()
    assert any((out / "tb").iterdir())
    assert main([*args, "--set", "train.steps=6", "--no-progress", "--resume"]) == 0
    assert "pretrained 6 steps" in capsys.readouterr().out
    assert (
        main(["train", "eval", "--model", str(out), "--data", str(data), "--out", str(tmp_path / "eval")])
        == 0
    )
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert len(metrics["latent_mse"]) == 5 and metrics["windows"] > 0
    assert (tmp_path / "eval" / "latent_error.png").read_bytes()[:4] == b"\x89PNG"
    capsys.readouterr()

    assert main([*args, "--no-progress"]) == 2  # would overwrite a checkpoint
    assert main([*args[:3], "go2_slope", *args[4:], "--resume"]) == 2
    assert "generated for task 'linear', not 'go2_slope'" in capsys.readouterr().err
    assert main([*args, "--resume", "--set", "model.latent_dim=8"]) == 2  # other settings: refuse to resume
    assert "other settings" in capsys.readouterr().err
    other = write_linear_dataset(tmp_path / "other", 12, length=(10, 30), steps_per_shard=100, seed=5)
    assert main([*args[:5], str(other), *args[6:], "--resume", "--no-progress"]) == 2  # another corpus
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not the corpus the run" in err[0]
    manifest = json.loads((other / "manifest.json").read_text())
    (other / "manifest.json").write_text(json.dumps({**manifest, "complete": False}))  # generation cut short
    assert main([*args[:5], str(other), *args[6:-1], str(tmp_path / "m7"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has not finished" in err[0] and not (tmp_path / "m7").exists()
    partial = [*args[:5], str(other), *args[6:-1], str(tmp_path / "m7"), "--partial", "--no-progress"]
    assert main([*partial, "--set", "train.steps=2"]) == 0
    assert main([*args[:-1], str(tmp_path / "m2"), "--set", "train.nope=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown key 'train.nope'" in err[0]
    if not torch.cuda.is_available():
        assert main([*args[:-1], str(tmp_path / "m3"), "--device", "cuda"]) == 2
        assert "CUDA is not available" in capsys.readouterr().err
    # behaviour cloning on the expert's labels: refused in one line on a corpus without them, trains on one with them
    expert = ["--set", "train.behaviour_cloning=expert", "--set", "train.steps=2", "--no-progress"]
    assert main([*args[:-1], str(tmp_path / "m4"), *expert]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no expert_action" in err[0]
    assert not (tmp_path / "m4" / "weights.safetensors").exists()
    assert main([*args[:-1], str(tmp_path / "m5"), "--set", "train.behaviour_cloning=dagger"]) == 2
    assert "must be 'executed' or 'expert'" in capsys.readouterr().err
    labelled = write_linear_dataset(
        tmp_path / "labelled", 12, length=(10, 30), steps_per_shard=100, expert_labels=True
    )
    assert main([*args[:5], str(labelled), *args[6:-1], str(tmp_path / "m6"), *expert]) == 0
    assert "pretrained 2 steps" in capsys.readouterr().out
    (data / "shard_00000.h5").write_bytes(b"junk")
    assert main(["train", "eval", "--model", str(out), "--data", str(data)]) == 2
    assert "shard_00000.h5" in capsys.readouterr().err
