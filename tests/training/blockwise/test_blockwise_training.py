"""train() of the blockwise trainer (training/blockwise): learning the shifted targets, modes,
seeded determinism, checkpoint/resume, errors."""

from __future__ import annotations

import dataclasses
import importlib
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from blockdraft.models import (
    BlockwiseConfig,
    BlockwiseLM,
    RescorerLM,
    greedy_generate,
    load_model,
)
from blockdraft.training import TrainConfig, TrainingError, distill_targets, train
from models_testlib import tiny_config, word_stream

# The training loop and its schedule, by module (the package exports the function `evaluate`,
# which shadows its module's attribute name; the modules are imported by name throughout).
loop_module = importlib.import_module("blockdraft.training.blockwise.loop")
schedule_module = importlib.import_module("blockdraft.training.blockwise.schedule")

QUICK = TrainConfig(steps=8, batch_size=4, seq_len=16, lr=3e-3, warmup_steps=2, eval_batches=1)


def fresh(config: BlockwiseConfig, seed: int = 0) -> BlockwiseLM:
    torch.manual_seed(seed)
    return BlockwiseLM(config)


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def learnt() -> tuple[BlockwiseLM, Any, np.ndarray]:
    """A tiny model trained jointly for 100 steps on the 4-word stream (a few seconds)."""
    stream = word_stream(3000)
    model = fresh(BlockwiseConfig.tiny(vocab_size=32, max_seq_len=64))
    cfg = TrainConfig(steps=100, batch_size=16, seq_len=32, lr=3e-3, warmup_steps=10,
                      eval_interval=50, eval_batches=2, head_position_fraction=0.5)
    result = train(model, stream[:15000], cfg, eval_ids=stream[15000:], progress=False)
    return model, result, stream[15000:]


def test_heads_learn_the_token_at_t_plus_i(learnt: tuple[BlockwiseLM, Any, np.ndarray]) -> None:
    model, result, held = learnt
    assert result.steps == 100 and len(result.history) == 100
    assert result.tokens_seen == 100 * 16 * 32 and result.tokens_per_s > 0
    assert [e.step for e in result.evals] == [50, 100]
    assert result.final_loss < result.history[0][1] / 2
    # Accuracy measured here, independently of train(): head i at t against token t + i.
    x = torch.from_numpy(held[:64 * 8].reshape(8, 64))
    with torch.no_grad():
        logits, _ = model.heads_logits(x[:, :56])  # (8, 56, h, V)
    pred = logits.argmax(-1)  # (8, 56, h)
    chance = 1 / 32
    for i in range(1, model.h + 1):
        acc = (pred[:, :, i - 1] == x[:, i : i + 56]).float().mean().item()
        wrong_shift = (pred[:, :, i - 1] == x[:, i - 1 : i + 55]).float().mean().item()
        assert acc > 0.4 > 10 * chance, f"head {i}: top-1 {acc:.2f}"
        assert acc > wrong_shift + 0.2, f"head {i}: {acc:.2f} vs shifted {wrong_shift:.2f}"
        assert abs(acc - result.evals[-1].accuracy[i - 1]) < 0.15
    assert result.evals[-1].loss[0] < 1.0  # nats; the stream's entropy is ~0.23 nats/token


def test_distill_targets(learnt: tuple[BlockwiseLM, Any, np.ndarray]) -> None:
    model, _, held = learnt
    prompts = [held[:5], held[10:13]]
    stream = distill_targets(model, prompts, max_new_tokens=4, eos_id=0)
    first = [*held[:5].tolist(), *greedy_generate(model, held[:5], 4, eos_id=0)]
    assert stream.dtype == np.int64
    assert stream[: len(first)].tolist() == first
    assert stream[len(first)] == 0  # EOS separates the examples
    assert stream.size == 2 * 1 + 5 + 3 + 2 * 4


def test_seeded_runs_are_identical() -> None:
    data = word_stream(200)
    cfg = dataclasses.replace(QUICK, head_position_fraction=0.25)
    runs = []
    for seed in (7, 7, 8):
        model = fresh(tiny_config())
        train(model, data, cfg, seed=seed, progress=False)
        runs.append(weights(model))
    assert same_weights(runs[0], runs[1])
    assert not same_weights(runs[0], runs[2])


def test_resume_continues_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = word_stream(200)
    config = dataclasses.replace(tiny_config(), dropout=0.1)  # the torch RNG matters too
    cfg = dataclasses.replace(QUICK, steps=10, checkpoint_interval=5)
    save = loop_module.save_checkpoint

    def save_and_snapshot(directory: Path, *args: Any) -> None:
        save(directory, *args)
        if args[4] == 5:  # the step argument: keep the mid-run checkpoint
            shutil.copytree(directory, tmp_path / "at5")

    monkeypatch.setattr(loop_module, "save_checkpoint", save_and_snapshot)
    straight = fresh(config)
    train(straight, data, cfg, seed=3, progress=False, checkpoint_dir=tmp_path / "run")
    monkeypatch.undo()
    resumed = fresh(config, seed=99)  # other initial weights: the checkpoint replaces them
    result = train(resumed, data, cfg, seed=3, progress=False, checkpoint_dir=tmp_path / "at5",
                   resume=True)
    assert result.steps == 10 and len(result.history) == 5
    assert same_weights(weights(straight), weights(resumed))
    again = load_model(tmp_path / "run")  # a checkpoint is a model directory
    assert same_weights(weights(again), weights(straight))
    with pytest.raises(TrainingError, match="other training settings: lr"):
        train(fresh(config), data, dataclasses.replace(cfg, lr=1e-4), seed=3, progress=False,
              checkpoint_dir=tmp_path / "at5", resume=True)
    with pytest.raises(TrainingError, match="mode='joint'"):
        train(fresh(config), data, cfg, mode="base", progress=False,
              checkpoint_dir=tmp_path / "at5", resume=True)
    # train_state.json is sealed with the digest of optimizer.pt (issue 13 item 5)
    shutil.copytree(tmp_path / "at5", tmp_path / "bad")
    opt = tmp_path / "bad" / "optimizer.pt"
    opt.write_bytes(opt.read_bytes()[:-1] + bytes([opt.read_bytes()[-1] ^ 1]))
    with pytest.raises(TrainingError, match=r"optimizer.pt: its SHA-256 .* changed or corrupted"):
        train(fresh(config), data, cfg, seed=3, progress=False, checkpoint_dir=tmp_path / "bad",
              resume=True)


def test_heads_mode_freezes_the_base() -> None:
    data = word_stream(200)
    model = fresh(tiny_config())
    before = weights(model)
    train(model, data, QUICK, mode="heads", progress=False)
    after = weights(model)
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.startswith("extra_heads.") for k in changed)
    assert all(p.requires_grad for p in model.parameters())  # left trainable


def test_base_then_heads(monkeypatch: pytest.MonkeyPatch) -> None:
    data = word_stream(200)
    model = fresh(tiny_config())
    before = weights(model)
    seen: list[str] = []
    original = loop_module.set_trainable

    def spy(m: BlockwiseLM, phase: str) -> None:
        seen.append(phase)
        original(m, phase)

    monkeypatch.setattr(loop_module, "set_trainable", spy)
    result = train(model, data, dataclasses.replace(QUICK, eval_interval=4),
                   eval_ids=data[:200], mode="base-then-heads", progress=False)
    assert seen[0] == "base" and "heads" in seen
    assert [e.step for e in result.evals] == [4, 8]
    after = weights(model)
    assert not torch.equal(before["transformer.wte.weight"], after["transformer.wte.weight"])
    assert not torch.equal(before["extra_heads.0.out.weight"], after["extra_heads.0.out.weight"])


def test_rescorer_trains_in_base_mode() -> None:
    lm = RescorerLM(dataclasses.replace(tiny_config(), h=1))
    result = train(lm, word_stream(200), QUICK, mode="base", progress=False)
    assert result.final_loss < result.history[0][1]
    with pytest.raises(TrainingError, match="h = 1"):
        train(lm, word_stream(200), QUICK, mode="heads", progress=False)


def test_lr_schedule() -> None:
    cfg = TrainConfig(steps=10, warmup_steps=4, lr=1.0, min_lr_ratio=0.1)
    f = [schedule_module.lr_factor(cfg, s, 10) for s in range(10)]
    assert f[:4] == pytest.approx([0.2, 0.4, 0.6, 0.8])
    assert f[4] == pytest.approx(1.0) and f[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(f[4:], f[5:], strict=False))
    lin = dataclasses.replace(cfg, schedule="linear")
    assert schedule_module.lr_factor(lin, 7, 10) == pytest.approx(0.1 + 0.9 * 2 / 5)
    assert schedule_module.phases("base-then-heads", cfg) == [("base", 5), ("heads", 5)]


def test_errors() -> None:
    data = word_stream(100)
    model = fresh(tiny_config())
    with pytest.raises(TrainingError, match="unknown training mode"):
        train(model, data, QUICK, mode="medusa", progress=False)  # type: ignore[arg-type]
    with pytest.raises(TrainingError, match="one training window needs"):
        train(model, data[:10], QUICK, progress=False)
    with pytest.raises(TrainingError, match="token id 32, outside"):
        train(model, np.append(data, 32), QUICK, progress=False)
    with pytest.raises(TrainingError, match="1-D"):
        train(model, data.reshape(2, -1), QUICK, progress=False)
    with pytest.raises(TrainingError, match="integer"):
        train(model, data.astype(np.float32), QUICK, progress=False)
    with pytest.raises(TrainingError, match="head_weights has 2 entries"):
        train(model, data, dataclasses.replace(QUICK, head_weights=(1.0, 0.5)), progress=False)
    with pytest.raises(TrainingError, match="max_seq_len"):
        train(model, data, dataclasses.replace(QUICK, seq_len=65), progress=False)
    with pytest.raises(TrainingError, match="checkpoint_dir"):
        train(model, data, QUICK, resume=True, progress=False)
    with pytest.raises(TrainingError, match="head_position_fraction"):
        TrainConfig(head_position_fraction=0.0)
    with pytest.raises(TrainingError, match="schedule"):
        TrainConfig(schedule="step")
    with pytest.raises(TrainingError, match="steps"):
        TrainConfig(steps=0)
