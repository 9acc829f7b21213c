"""The prompt sources beside the mix: multi-turn follow-ups built on a distillation set's
answers, and questions the base writes itself (training/heads/followups.py, questions.py).

A word-level tokenizer over the tiny Llama's 100 ids stands in for the base's: a distillation
set is built from chat-formatted text prompts, so the follow-ups can be checked against what
the set stored (the first turn, the answer, the split).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from heads_testlib import EOS, settings, tiny_llama  # noqa: E402

from blockdraft.training import TrainingError  # noqa: E402
from blockdraft.training.heads import build_distill_set, hash_prompts  # noqa: E402
from blockdraft.training.heads.followups import FOLLOW_UPS, build_followups  # noqa: E402
from blockdraft.training.heads.mix import write_mix  # noqa: E402
from blockdraft.training.heads.prompts import format_prompts, read_prompts  # noqa: E402
from blockdraft.training.heads.questions import (  # noqa: E402
    REQUEST,
    build_questions,
    parse_question,
    question_requests,
)
from blockdraft.training.heads.shards import read_turns  # noqa: E402

SPECIALS = ["<pad>", "<|im_end|>", "<|im_start|>", "user", "assistant", "system", "?"]
WORDS = SPECIALS + [f"w{i}" for i in range(100 - len(SPECIALS))]


def word_tokenizer() -> Any:
    """A word-level tokenizer of the tiny Llama's 100 ids (EOS ``<|im_end|>`` = 1) with a
    ChatML-like template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<pad>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    raw.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>",
                                  pad_token="<pad>", additional_special_tokens=SPECIALS[:3])
    tok.chat_template = ("{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }}"
                         " <|im_end|> {% endfor %}{% if add_generation_prompt %}<|im_start|> "
                         "assistant {% endif %}")
    assert tok.eos_token_id == EOS
    return tok


KINDS = ("howto", "reasoning", "summarize", "t0")


@pytest.fixture(scope="module")
def chat_set(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Any]:
    """(distillation folder, the prompt file that made it, tokenizer): 60 text prompts of
    four kinds, 12 held out."""
    tok = word_tokenizer()
    g = np.random.default_rng(4)
    rows = [{"source": f"{KINDS[i % 4]}:x",
             "prompt": " ".join(f"w{int(k)}" for k in g.integers(0, 93, int(g.integers(1, 9))))}
            for i in range(60)]
    root = tmp_path_factory.mktemp("followups")
    prompt_file = root / "p.jsonl"
    prompt_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ids = format_prompts(tok, read_prompts([prompt_file]))
    s = settings(prompts=hash_prompts(ids), shard_size=16, heldout_fraction=0.2,
                 max_new_tokens=20)
    build_distill_set(tiny_llama(), ids, root / "d", s, eos_id=EOS, log=None, progress=False)
    return root / "d", prompt_file, tok


def test_follow_ups_are_a_training_prompt_its_answer_and_a_request(chat_set: Any) -> None:
    folder, prompt_file, tok = chat_set
    rows = [json.loads(x) for x in prompt_file.read_text().splitlines()]
    plan = json.loads((folder / "plan.json").read_text())
    held = set(plan["heldout"])
    answers = {}
    for shard in sorted(folder.glob("train-*.safetensors")):
        for index, _, y in read_turns(shard):
            answers[index] = y.tolist()
    complete = {i for i, y in answers.items() if y[-1] == EOS and len(y) >= 2}
    assert 3 <= len(complete) < len(answers)  # some answers ran to the cap: never used
    prompts, record = build_followups(folder, [prompt_file], tok, len(complete), seed=1,
                                      min_answer_tokens=2)
    assert record["eligible_answers"] == len(complete) == len(prompts)
    used = set()
    for p in prompts:
        first, middle, last = p["messages"]
        index = next(i for i, r in enumerate(rows) if r["prompt"] == first["content"])
        kind = rows[index]["source"].split(":")[0]
        assert index in complete and index not in held
        assert p["source"] == f"followup:{kind}"
        assert (first["role"], middle["role"], last["role"]) == ("user", "assistant", "user")
        assert middle["content"] == tok.decode(answers[index][:-1],
                                               skip_special_tokens=True).strip()
        assert last["content"] in FOLLOW_UPS["any"] + FOLLOW_UPS.get(kind, ())
        used.add(index)
    assert used == complete
    again, _ = build_followups(folder, [prompt_file], tok, 3, seed=1, min_answer_tokens=2)
    assert again == build_followups(folder, [prompt_file], tok, 3, seed=1,
                                    min_answer_tokens=2)[0]
    assert again != build_followups(folder, [prompt_file], tok, 3, seed=2,
                                    min_answer_tokens=2)[0]


def test_follow_ups_read_back_as_conversations_in_the_chat_template(chat_set: Any,
                                                                    tmp_path: Path) -> None:
    folder, prompt_file, tok = chat_set
    prompts, record = build_followups(folder, [prompt_file], tok, 3, min_answer_tokens=2)
    out = tmp_path / "f.jsonl"
    write_mix(out, prompts, record)
    back = read_prompts([out])
    assert [list(map(list, b)) for b in back] == [
        [[m["role"], m["content"]] for m in p["messages"]] for p in prompts]
    ids = format_prompts(tok, back)
    for p, x in zip(prompts, ids, strict=True):
        text = tok.decode(x)
        assert text.count("<|im_start|>") == 4 and text.endswith("<|im_start|> assistant")
        first, middle, _ = p["messages"]  # (the follow-up's words are not in this vocabulary)
        assert f"user {first['content']} <|im_end|> <|im_start|> assistant " \
            f"{middle['content']} <|im_end|> <|im_start|> user" in text


def test_follow_ups_refuse_files_that_did_not_make_the_set(chat_set: Any,
                                                           tmp_path: Path) -> None:
    folder, prompt_file, tok = chat_set
    lines = prompt_file.read_text().splitlines()
    with pytest.raises(TrainingError, match="60 prompts.*59"):
        short = tmp_path / "short.jsonl"
        short.write_text("\n".join(lines[:-1]) + "\n")
        build_followups(folder, [short], tok, 2, min_answer_tokens=2)
    changed = tmp_path / "changed.jsonl"
    changed.write_text("".join(json.dumps({"source": "t0:x", "prompt": "w1 w2 w3"}) + "\n"
                               for _ in lines))
    with pytest.raises(TrainingError, match="not the one"):
        build_followups(folder, [changed], tok, 2, min_answer_tokens=2)
    with pytest.raises(TrainingError, match="ask for at most"):
        build_followups(folder, [prompt_file], tok, 1000, min_answer_tokens=2)
    with pytest.raises(TrainingError, match="n must be"):
        build_followups(folder, [prompt_file], tok, 0)


@pytest.mark.parametrize(("text", "expected"), [
    ("What is a cell membrane made of?", "What is a cell membrane made of?"),
    ("\n  Question: How do list comprehensions work?\nThey are ...",
     "How do list comprehensions work?"),
    ("**Q1:** Why do plants need light?**", "Why do plants need light?"),
    ('1. "How does import resolve a name?"', "How does import resolve a name?"),
    ("The passage explains cells.", None),
    ("What does the author mean by energy?", None),
    ("Why?", None),
    ("What is discussed in the passage above?", None),
    ("What is the resolution of this function?", None),
    ("What would you like to know about these rules?", None),
])
def test_a_question_is_parsed_or_refused(text: str, expected: str | None) -> None:
    assert parse_question(text) == expected


def test_questions_are_kept_once_and_counted(tmp_path: Path) -> None:
    tok = word_tokenizer()
    replies = ["w3 w4 w5 w6 ?", "w7 w8", "w3 w4 w5 w6 ?", "w9 w10 w11 w12 ?", "w13 w14 w15 w16 ?"]
    calls: list[int] = []

    def generate(model: Any, ids: list[list[int]], cap: int, eos: int, pad: int) -> Any:
        assert model is None and eos == EOS and cap == 12
        start = sum(calls)
        calls.append(len(ids))
        out = [tok.encode(replies[(start + i) % len(replies)]) + [EOS] for i in range(len(ids))]
        return out, [torch.zeros(len(y), 2) for y in out]

    requests = [(f"o{i % 2}", f"w{20 + i} ?") for i in range(10)]
    prompts, counts = build_questions(None, tok, requests, 3, batch_size=2, max_new_tokens=12,
                                      generate=generate, progress=False, log=None)
    assert [p["prompt"] for p in prompts] == ["w3 w4 w5 w6 ?", "w9 w10 w11 w12 ?",
                                             "w13 w14 w15 w16 ?"]
    assert [p["source"] for p in prompts] == ["questions:o0", "questions:o1", "questions:o0"]
    assert counts == {"asked": 6, "kept": 3, "not_a_question": 1, "duplicate": 2, "surplus": 0}
    assert calls == [2, 2, 2]  # stops once n are kept
    calls.clear()
    _, counts = build_questions(None, tok, requests, 1, batch_size=4, max_new_tokens=12,
                                generate=generate, progress=False, log=None)
    assert counts == {"asked": 4, "kept": 1, "not_a_question": 1, "duplicate": 1, "surplus": 1}


def test_question_requests_draw_distinct_passages_of_every_origin(tmp_path: Path) -> None:
    para = ("A paragraph about {w} number {i} that is long enough to count as a passage of "
            "the corpus, with more words about {w} so that it passes two hundred characters "
            "easily, and then a few more words still, and more again to be safe.")
    for rel, word in (("openstax/a.txt", "cells"), ("more/python-docs/d.txt", "lists"),
                      ("more/python-peps/p.txt", "imports")):
        f = tmp_path / "corpus" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("\n".join(para.format(w=word, i=i) for i in range(5)) + "\n")
    requests = question_requests(tmp_path, 15, seed=0)
    assert len({r for _, r in requests}) == 15
    assert [o for o, _ in requests[:3]] == ["openstax", "python-docs", "python-peps"]
    assert all(r.startswith(REQUEST.split("{p}")[0]) for _, r in requests)
    assert requests == question_requests(tmp_path, 15, seed=0)
    with pytest.raises(TrainingError, match="15 passages"):
        question_requests(tmp_path, 16)


def test_the_commands_write_prompt_files_or_nothing(chat_set: Any, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    from blockdraft.cli import main

    folder, prompt_file, tok = chat_set
    base = tmp_path / "base"
    tiny_llama().save_pretrained(base)
    tok.save_pretrained(base)
    out = tmp_path / "f.jsonl"
    args = ["heads", "follow-ups", "--distill", str(folder), "--prompts", str(prompt_file),
            "--base", str(base), "-n", "2", "--min-answer-tokens", "2", "-o", str(out)]
    assert main([*args, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["counts"] == {"followup": 2} and "heads follow-ups" in shown["command"]
    assert len(read_prompts([out])) == 2 and Path(f"{out}.mix.json").is_file()
    before = out.read_text()
    assert main(args) == 1
    assert "already" in capsys.readouterr().err and out.read_text() == before
    # The tiny random base writes no question: the command says so and writes nothing.
    corpus = tmp_path / "data/corpus/openstax/a.txt"
    corpus.parent.mkdir(parents=True)
    corpus.write_text("w5 w6 w7 " * 80 + "\n")
    q = tmp_path / "q.jsonl"
    assert main(["heads", "questions", "--data", str(tmp_path / "data"), "--base", str(base),
                 "-n", "1", "--max-new-tokens", "4", "-o", str(q)]) == 1
    assert "no usable question" in capsys.readouterr().err and not q.exists()
