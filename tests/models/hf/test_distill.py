"""Self-distillation data and Medusa head training (models/hf: prompts, generation, shards,
distill, positions, head_trainer, training).

A tiny random Llama (d = 32, V = 100, tied embeddings) stands in for the base: the data step's
answers equal greedy decoding and its hidden states a teacher-forced forward's; shards resume
and an interrupted run leaves no partial shard; the held-out split is disjoint from training;
training lowers the held-out loss and resumes to the same heads. A ``slow`` test retrains
heads on SmolLM2 with a small budget.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from blockdraft.models import greedy_generate  # noqa: E402
from blockdraft.models.errors import ModelError  # noqa: E402
from blockdraft.models.hf import HFBlockwiseModel, MedusaHeads, read_heads  # noqa: E402
from blockdraft.models.hf.distill import DistillSettings, build_distill_set  # noqa: E402
from blockdraft.models.hf.generation import greedy_batch  # noqa: E402
from blockdraft.models.hf.head_trainer import (  # noqa: E402
    TrainSettings,
    evaluate,
    lm_head_weight,
    train_heads,
)
from blockdraft.models.hf.positions import load_positions  # noqa: E402
from blockdraft.models.hf.prompts import (  # noqa: E402
    format_prompts,
    hash_prompts,
    read_prompts,
    split_prompts,
)
from blockdraft.models.hf.training import write_trained_heads  # noqa: E402
from blockdraft.verify import decode  # noqa: E402

EOS = 1
SHARED_PROMPTS = Path(__file__).resolve().parents[4] / "shared" / "data" / "prompts"


def tiny_llama(seed: int = 0, init: float = 0.3) -> Any:
    """A tiny random Llama with tied embeddings (d = 32, V = 100) in eval mode; ``init`` is
    the weights' standard deviation (0.1: greedy output falls into loops, which heads learn)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        tie_word_embeddings=True, bos_token_id=0, eos_token_id=EOS, pad_token_id=0,
        initializer_range=init)).eval()


def tiny_prompts(n: int, seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 12, (n,), generator=g)
    return [torch.randint(2, 100, (int(k),), generator=g).tolist() for k in lengths]


def settings(**kw: Any) -> DistillSettings:
    base: dict[str, Any] = {
        "base": "tiny", "dtype": "float32", "max_new_tokens": 24, "batch_size": 4,
        "shard_size": 8, "seed": 0, "heldout_fraction": 0.2, "heldout_min": 4,
        "hidden_dtype": "float32"}
    base.update(kw)
    return DistillSettings(**base)


def build(folder: Path, prompts: list[list[int]], **kw: Any) -> Any:
    s = settings(prompts=hash_prompts(prompts))
    return build_distill_set(tiny_llama(), prompts, folder, s, eos_id=EOS, log=None,
                             progress=False, **kw)


# ------------------------------------------------------------------------------- data step


def test_answers_are_greedy_and_states_equal_a_teacher_forced_forward() -> None:
    model = tiny_llama()
    prompts = tiny_prompts(7)
    answers, hidden = greedy_batch(model, prompts, 24, EOS)
    reference: Any = HFBlockwiseModel(model, MedusaHeads(32, None, 1))
    ended = 0
    for p, y, h in zip(prompts, answers, hidden, strict=True):
        assert y == greedy_generate(reference, p, 24, eos_id=EOS)
        assert h.shape == (len(y), 32)
        with torch.no_grad():
            out = model(torch.tensor([p + y]), output_hidden_states=True)
        states = out.hidden_states[-1][0, len(p) - 1:len(p) - 1 + len(y)]  # h_0 .. h_{m-1}
        torch.testing.assert_close(h, states, rtol=1e-5, atol=1e-5)
        ended += y[-1] == EOS
        assert EOS not in y[:-1]
    assert 0 < ended < len(prompts)  # some rows leave the batch early, some run to the cap


def test_split_is_disjoint_complete_and_fixed_by_seed() -> None:
    train, held = split_prompts(1000, seed=3, fraction=0.02, minimum=30)
    assert held.size == 30 and train.size == 970
    assert not set(train.tolist()) & set(held.tolist())
    assert sorted([*train.tolist(), *held.tolist()]) == list(range(1000))
    again = split_prompts(1000, seed=3, fraction=0.02, minimum=30)
    assert np.array_equal(again[1], held)
    assert not np.array_equal(split_prompts(1000, seed=4, fraction=0.02, minimum=30)[1], held)
    assert split_prompts(50_000, 0, 0.02, 200)[1].size == 1000


def test_shards_hold_the_answers_and_the_split(tmp_path: Path) -> None:
    prompts = tiny_prompts(30)
    dset = build(tmp_path / "d", prompts)
    assert dset.shards("heldout") == ["heldout-00000"]
    assert len(dset.shards("train")) == 3  # 24 train prompts / 8
    held = {int(i) for s in dset.load("heldout") for i in s.prompt_index}
    train = {int(i) for s in dset.load("train") for i in s.prompt_index}
    assert len(held) == 6 and len(train) == 24 and not held & train
    answers, hidden = greedy_batch(tiny_llama(), prompts, 24, EOS)
    for shard in dset.load("train") + dset.load("heldout"):
        assert shard.hidden.shape == (shard.num_tokens, 32)
        for p, i in enumerate(shard.prompt_index):
            assert shard.prompt(p) == prompts[i]
            assert shard.answer(p) == answers[i]
            rows = shard.hidden[shard.answer_offsets[p]:shard.answer_offsets[p + 1]]
            torch.testing.assert_close(rows, hidden[i], rtol=1e-5, atol=1e-5)


def test_a_second_run_does_no_work(tmp_path: Path) -> None:
    prompts = tiny_prompts(20)
    build(tmp_path / "d", prompts)
    calls = []

    def counting(*args: Any) -> Any:
        calls.append(1)
        return greedy_batch(*args)

    s = settings(prompts=hash_prompts(prompts))
    again = build_distill_set(tiny_llama(), prompts, tmp_path / "d", s, eos_id=EOS, log=None,
                              progress=False, generate=counting)
    assert calls == [] and len(again.done) == 3


def test_an_interrupted_run_leaves_no_partial_shard_and_resumes(tmp_path: Path) -> None:
    prompts = tiny_prompts(30)
    s = settings(prompts=hash_prompts(prompts))
    calls = []

    def failing(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 4:  # the second batch of the second shard
            raise KeyboardInterrupt
        return greedy_batch(*args)

    with pytest.raises(KeyboardInterrupt):
        build_distill_set(tiny_llama(), prompts, tmp_path / "d", s, eos_id=EOS, log=None,
                          progress=False, generate=failing)
    names = sorted(p.name for p in (tmp_path / "d").iterdir())
    assert names == ["heldout-00000.safetensors", "plan.json"]  # no temporary left either
    resumed = build(tmp_path / "d", prompts)
    whole = build(tmp_path / "e", prompts)
    assert resumed.done == whole.done
    for a, b in zip(resumed.load("train"), whole.load("train"), strict=True):
        assert np.array_equal(a.answer_ids, b.answer_ids)
        assert torch.equal(a.hidden, b.hidden)


def test_limits_stop_between_shards_and_a_later_run_goes_on(tmp_path: Path) -> None:
    prompts = tiny_prompts(30)
    first = build(tmp_path / "d", prompts, max_prompts=8)
    assert first.shards("train") == ["train-00000"] and first.shards("heldout")
    assert build(tmp_path / "d", prompts, minutes=0.0).done == first.done
    assert len(build(tmp_path / "d", prompts).shards("train")) == 3
    with pytest.raises(ModelError, match="other settings"):
        build_distill_set(tiny_llama(), prompts, tmp_path / "d", settings(seed=1),
                          eos_id=EOS, log=None, progress=False)


def test_prompts_are_read_and_formatted_with_the_chat_template(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "<|im_end|>", "<|im_start|>", "user", "assistant", "what", "is", "two"]
    raw = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<pad>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>",
                                  pad_token="<pad>")
    tok.chat_template = ("{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }}"
                         " <|im_end|> {% endfor %}{% if add_generation_prompt %}<|im_start|> "
                         "assistant {% endif %}")
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"source": "s", "prompt": "what is two"}) + "\n\n"
                    + json.dumps({"source": "s", "prompt": "two"}) + "\n")
    texts = read_prompts([path])
    assert texts == ["what is two", "two"]
    assert format_prompts(tok, texts) == [[2, 3, 5, 6, 7, 1, 2, 4], [2, 3, 7, 1, 2, 4]]
    path.write_text("[1]\n")
    with pytest.raises(ModelError, match="prompt"):
        read_prompts([path])


# -------------------------------------------------------------------------------- training


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Any:
    prompts = tiny_prompts(120, seed=5)
    folder = tmp_path_factory.mktemp("distill") / "d"
    s = settings(prompts=hash_prompts(prompts), shard_size=32, batch_size=16,
                 heldout_fraction=0.2, max_new_tokens=32)
    return build_distill_set(tiny_llama(init=0.1), prompts, folder, s, eos_id=EOS, log=None,
                             progress=False)


TRAIN = TrainSettings(heads=3, steps=40, batch=64, lr=3e-2, warmup=5, eval_every=10,
                      eval_positions=500)


def test_positions_line_up_with_the_answers(dataset: Any) -> None:
    data = load_positions(dataset, "train")
    shards = dataset.load("train")
    assert data.tokens == sum(s.num_tokens for s in shards)
    first = shards[0]
    m = first.answer_offsets[1]
    assert data.remaining[:m].tolist() == list(range(m - 1, -1, -1))
    assert data.targets[:m].tolist() == first.answer(0)


def test_training_lowers_the_heldout_loss(dataset: Any, tmp_path: Path) -> None:
    lm_head = lm_head_weight(tiny_llama(init=0.1))
    held = load_positions(dataset, "heldout")
    rows = held.usable()
    torch.manual_seed(0)
    fresh = MedusaHeads(32, None, 3)
    before = evaluate(fresh, lm_head, held, rows, TRAIN)
    result = train_heads(dataset, lm_head, tmp_path / "w", TRAIN, log=None, progress=False)
    after = evaluate(result.heads, lm_head, held, rows, TRAIN)
    assert result.finished and result.step == 40
    assert after["loss"] < 0.8 * before["loss"]
    assert [c["step"] for c in result.curve] == [10, 20, 30, 40]
    assert result.curve[-1]["positions"] == 40 * 64
    assert "heads:3" in result.signature and "lr:0.03" in result.signature
    curve = json.loads((tmp_path / "w" / "curve.json").read_text())
    assert curve["curve"][-1]["top1"] == result.curve[-1]["top1"]


def test_training_returns_the_heads_of_the_best_evaluation(dataset: Any, tmp_path: Path) -> None:
    lm_head = lm_head_weight(tiny_llama(init=0.1))
    held = load_positions(dataset, "heldout")
    run = TrainSettings(**{**TRAIN.__dict__, "eval_every": 5, "lr": 3.0, "warmup": 1,
                           "eval_positions": 10_000})
    result = train_heads(dataset, lm_head, tmp_path / "w", run, log=None, progress=False)
    means = [float(np.mean(c["top1"])) for c in result.curve]
    best = result.curve[int(np.argmax(means))]
    assert result.best_step == best["step"]
    scores = evaluate(result.heads, lm_head, held, held.usable(), run)
    assert scores["top1"] == best["top1"]
    assert means[-1] < max(means)  # at this learning rate the last evaluation is not the best
    assert scores["top1"] != result.curve[-1]["top1"]


def test_resumed_training_equals_an_uninterrupted_run(dataset: Any, tmp_path: Path) -> None:
    lm_head = lm_head_weight(tiny_llama(init=0.1))
    whole = train_heads(dataset, lm_head, tmp_path / "a", TRAIN, log=None, progress=False)
    part = train_heads(dataset, lm_head, tmp_path / "b", TRAIN, stop_after=15, log=None,
                       progress=False)
    assert part.step == 15 and not part.finished
    resumed = train_heads(dataset, lm_head, tmp_path / "b", TRAIN, log=None, progress=False)
    assert resumed.step == 40
    for (name, a), (_, b) in zip(whole.heads.state_dict().items(),
                                 resumed.heads.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert resumed.curve[-1]["top1"] == whole.curve[-1]["top1"]
    with pytest.raises(ModelError, match="other settings"):
        train_heads(dataset, lm_head, tmp_path / "b", TrainSettings(heads=2), log=None,
                    progress=False)


def test_the_seen_vocabulary_loss_trains_and_evaluation_ranks_the_full_one(
        dataset: Any, tmp_path: Path) -> None:
    lm_head = lm_head_weight(tiny_llama(init=0.1))
    train = load_positions(dataset, "train")
    assert torch.unique(train.targets).numel() < 100  # some tokens are never targets
    seen = TrainSettings(**{**TRAIN.__dict__, "vocab": "seen", "eval_positions": 10_000})
    result = train_heads(dataset, lm_head, tmp_path / "w", seen, log=None, progress=False)
    held = load_positions(dataset, "heldout")
    scores = evaluate(result.heads, lm_head, held, held.usable(), seen)
    assert scores["top1"] == result.curve[-1]["top1"]
    assert result.curve[-1]["heldout_loss"] < result.curve[0]["heldout_loss"]
    assert "vocab:seen" in result.signature


def test_kl_loss_trains_too(dataset: Any, tmp_path: Path) -> None:
    lm_head = lm_head_weight(tiny_llama(init=0.1))
    kl = TrainSettings(heads=2, steps=20, batch=64, lr=3e-3, warmup=5, eval_every=20,
                       loss="kl")
    result = train_heads(dataset, lm_head, tmp_path / "w", kl, log=None, progress=False)
    assert result.step == 20 and np.isfinite(result.curve[-1]["heldout_loss"])


def test_trained_heads_are_written_in_medusa_v2_layout(dataset: Any, tmp_path: Path) -> None:
    lm_head = lm_head_weight(tiny_llama(init=0.1))
    result = train_heads(dataset, lm_head, tmp_path / "w", TRAIN, log=None, progress=False)
    folder = write_trained_heads(result, tmp_path / "heads", "tiny", "# heads\n")
    assert json.loads((folder / "config.json").read_text())["version"] == "2"
    assert (folder / "README.md").is_file() and (folder / "curve.png").stat().st_size > 0
    back = read_heads(folder)
    assert back.num_heads == 3
    for (name, a), (_, b) in zip(result.heads.state_dict().items(),
                                 back.state_dict().items(), strict=True):
        assert b.dtype == torch.bfloat16, name
        torch.testing.assert_close(b.float(), a.to(torch.bfloat16).float())


# ------------------------------------------------------------------------------ data curve


def test_the_data_curve_scores_every_heldout_position_of_each_run(
        dataset: Any, tmp_path: Path) -> None:
    from blockdraft.models.hf.data_curve import read_run, score_runs, write_data_curve

    lm_head = lm_head_weight(tiny_llama(init=0.1))
    result = train_heads(dataset, lm_head, tmp_path / "w", TRAIN, log=None, progress=False)
    folder = write_trained_heads(result, tmp_path / "heads", "tiny")
    trained, written = read_run(tmp_path / "w"), read_run(folder)
    held = load_positions(dataset, "heldout")
    train = load_positions(dataset, "train")
    for run, weights in ((trained, result.heads), (written, read_heads(folder).float())):
        assert run.prompts == train.prompts and run.step == result.best_step
        assert abs(run.tokens - train.tokens) <= 500  # the signature rounds to thousands
        direct = evaluate(weights, lm_head, held, held.usable(), TRAIN)
        (row,) = score_runs([run], dataset, lm_head, log=None)
        assert row["top1"] == pytest.approx(direct["top1"], abs=1e-6)
        assert row["top5"] == pytest.approx(direct["top5"], abs=1e-6)
        assert row["positions"][0] == held.usable().numel()  # every usable position, not a sample
    rows = score_runs([written, trained], dataset, lm_head, log=None)
    out = write_data_curve(rows, tmp_path / "curve", command="make-it")
    written_rows = json.loads((out / "data_curve.json").read_text())["runs"]
    assert [r["path"] for r in written_rows] == [r["path"] for r in rows]
    assert "Command: `make-it`" in (out / "data_curve.md").read_text()
    assert (out / "data_curve.png").stat().st_size > 0
    assert f"{rows[0]['mean_top1']:.3f}" in (out / "data_curve.md").read_text()


def test_the_chain_block_efficiency_equals_decoding_the_heldout_prompts(
        dataset: Any, tmp_path: Path) -> None:
    from blockdraft.models.hf.data_curve import chain_block_efficiency, head_topk
    from blockdraft.oracle import Oracle, simulate
    from blockdraft.oracle.record import record_trace

    base = tiny_llama(init=0.1)
    result = train_heads(dataset, lm_head_weight(base), tmp_path / "w", TRAIN, log=None,
                         progress=False)
    held = load_positions(dataset, "heldout")
    topk = head_topk(result.heads, lm_head_weight(base), held, 5)
    model: Any = HFBlockwiseModel(base, result.heads)
    prompts = tiny_prompts(120, seed=5)
    heldout = [prompts[i] for i in dataset.plan["heldout"]]
    decoded = [decode(model, p, max_new_tokens=32, eos_id=EOS) for p in heldout]
    tokens = sum(len(r.tokens) for r in decoded)
    assert tokens == held.tokens  # the same greedy answers
    vanilla = tokens / sum(r.calls for r in decoded)
    assert chain_block_efficiency(topk, held, 1) == pytest.approx(vanilla, abs=1e-12)
    assert vanilla > 1.2  # the heads do accept tokens: the comparison is not 1 == 1
    trace = record_trace(model, heldout, tmp_path / "trace", max_new_tokens=32, eos_id=EOS, K=5)
    for k in (2, 5):
        oracle = simulate(trace, Oracle(k)).block_efficiency
        assert chain_block_efficiency(topk, held, k) == pytest.approx(oracle, abs=1e-12)
    with pytest.raises(ModelError, match="k = 6"):
        chain_block_efficiency(topk, held, 6)


def test_the_data_curve_reads_rounded_counts_and_refuses_other_folders(tmp_path: Path) -> None:
    from blockdraft.core.signature import human_count
    from blockdraft.models.hf.data_curve import (
        _count,
        read_run,
        signature_fields,
        write_data_curve,
    )

    for n in (950, 53_412, 186_020, 1_234_567):
        assert abs(_count(human_count(n), tmp_path) - n) <= max(0.5, 0.051 * n)
    assert signature_fields("a:1|heldout:200p/21k|b:x:y") == {
        "a": "1", "heldout": "200p/21k", "b": "x:y"}
    with pytest.raises(ModelError, match="neither trained heads"):
        read_run(tmp_path)
    with pytest.raises(ModelError, match="no runs"):
        write_data_curve([], tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------ real model


@pytest.mark.slow
@pytest.mark.needs_data
def test_smollm2_heads_learn_well_above_chance(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    files = sorted(SHARED_PROMPTS.glob("distill_prompts.part0*.jsonl"))
    if not files:
        pytest.skip("no distillation prompts under ../shared/data/prompts")
    from blockdraft.models.hf.training import train_medusa_heads

    torch.set_num_threads(1)
    result = train_medusa_heads(
        "smollm2", files[:1], tmp_path / "heads", heads=2, max_prompts=48, max_new_tokens=64,
        heldout_min=24, heldout_fraction=0.0, batch_size=24, shard_size=24,
        data=tmp_path / "data",
        work=tmp_path / "work", settings=TrainSettings(steps=120, batch=64, eval_every=120,
                                                       eval_positions=512, vocab="seen"),
        threads=1, progress=False, log=None)
    top1 = result.curve[-1]["top1"]
    assert top1[0] > 0.15 and top1[1] > 0.05  # chance is 1 / 49,152
    assert read_heads(tmp_path / "heads").num_heads == 2
