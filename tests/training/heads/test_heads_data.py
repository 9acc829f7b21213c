"""The data step of the Medusa-heads pipeline (training/heads: prompts, generation, shards,
distill).

A tiny random Llama (d = 32, V = 100, tied embeddings) stands in for the base: the data step's
answers equal greedy decoding and its hidden states a teacher-forced forward's; shards resume
and an interrupted run leaves no partial shard; the held-out split is disjoint from training;
a folder of other settings, or of other files, is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from heads_testlib import EOS, build, settings, tiny_llama, tiny_prompts  # noqa: E402

from blockdraft.models import greedy_generate  # noqa: E402
from blockdraft.models.hf import HFBlockwiseModel, MedusaHeads  # noqa: E402
from blockdraft.training import TrainingError  # noqa: E402
from blockdraft.training.heads import (  # noqa: E402
    build_distill_set,
    format_prompts,
    greedy_batch,
    hash_prompts,
    read_prompts,
    split_prompts,
)


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
    with pytest.raises(TrainingError, match="other settings"):
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
    with pytest.raises(TrainingError, match="prompt"):
        read_prompts([path])




def test_a_changed_setting_is_named_with_its_old_and_new_value(tmp_path: Path) -> None:
    """Issue 23: continuing a distillation folder with other settings names each setting."""
    prompts = tiny_prompts(20)
    build(tmp_path / "d", prompts, max_prompts=4)
    changed = settings(prompts=hash_prompts(prompts), seed=1, max_new_tokens=12)
    with pytest.raises(TrainingError, match=r"max_new_tokens=24 \(now 12\), seed=0 \(now 1\)"):
        build_distill_set(tiny_llama(), prompts, tmp_path / "d", changed, eos_id=EOS, log=None,
                          progress=False)
    with pytest.raises(TrainingError, match=r"num_prompts=20 \(now 19\)"):
        build(tmp_path / "d", prompts[:19])


def test_a_folder_of_other_files_is_not_made_a_set(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    with pytest.raises(TrainingError, match="not a distillation folder"):
        build(mine, tiny_prompts(10))
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    (tmp_path / "empty").mkdir()
    assert build(tmp_path / "empty", tiny_prompts(10)).done  # an empty folder is fine


def test_shards_are_readable_by_all_like_every_other_file(tmp_path: Path) -> None:
    """Issue 23: shards were written 0600 (safetensors' own mode), every other file 0644: now
    every file of a set has the mode of a plain ``open()`` (0666 less the umask)."""
    import os
    import stat

    umask = os.umask(0o022)
    os.umask(umask)
    try:
        os.umask(0o022)
        dset = build(tmp_path / "d", tiny_prompts(12))
    finally:
        os.umask(umask)
    files = sorted(dset.folder.iterdir())
    assert any(p.suffix == ".safetensors" for p in files)
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in files} == {
        p.name: oct(0o644) for p in files}


def test_one_prompt_is_refused_with_what_to_do() -> None:
    """Issue 23: one prompt used to fail with "n must be an integer >= 2, got 1"."""
    with pytest.raises(TrainingError, match="1 prompt: a distillation set needs at least 2, "
                                            "one held out .* add prompts"):
        split_prompts(1)
    with pytest.raises(TrainingError, match="0 prompts"):
        split_prompts(0)
    train, held = split_prompts(2)
    assert train.size == held.size == 1


def test_the_prompts_are_read_before_the_base_is_loaded(tmp_path: Path) -> None:
    """A bad prompt file is reported with its line number, not hidden behind the (slow, or
    here impossible) loading of the base model."""
    from blockdraft.training.heads import distill

    bad = tmp_path / "p.jsonl"
    bad.write_text('{"prompt": "a"}\n{"prompt": 1}\n', encoding="utf-8")
    with pytest.raises(TrainingError, match=f'{bad}:2: expected an object with a string "prompt"'):
        distill(str(tmp_path / "no-such-model"), [bad], progress=False, log=None)
    bad.write_text('{"prompt": "only one"}\n', encoding="utf-8")
    with pytest.raises(TrainingError, match="1 prompt"):
        distill(str(tmp_path / "no-such-model"), [bad], progress=False, log=None)
    bad.write_bytes(b'{"prompt": "caf\xe9"}\n')
    with pytest.raises(TrainingError, match="not UTF-8"):
        read_prompts([bad])
