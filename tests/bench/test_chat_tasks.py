"""The chat tasks of benchmarks/common/tasks.py (the real-model benchmark's prompts): readers on
small files in each format, one user turn per example, the document cut to fit a chat template
and nothing else cut, and (when ../shared/data is present) the real files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.common.tasks import (
    CHAT_TASKS,
    EXPLAIN_PROMPTS,
    REAL_TASKS,
    ChatExample,
    TaskError,
    encode_chat,
    load_chat_task,
)

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO.parent / "shared" / "data"


class ChatWordTokenizer:
    """A chat template of ids 900 (turn opener) .. 901 (assistant opener) around one id per
    whitespace word of the user turn."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}

    def apply_chat_template(self, messages: Any) -> list[int]:
        (turn,) = messages
        assert turn["role"] == "user"
        return [900] + [self.vocab.setdefault(w, len(self.vocab))
                        for w in turn["content"].split()] + [901]


def _jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


@pytest.fixture()
def data_root(tmp_path: Path) -> Path:
    r = tmp_path / "data"
    squad = {"data": [{"paragraphs": [{"context": "The  cat\nsat.", "qas": [
        {"id": "q1", "question": "Who sat?", "answers": [{"text": "The cat"}]}]}]}]}
    (r / "squad_v1.1_dev").mkdir(parents=True)
    for part in (0, 1):
        (r / f"squad_v1.1_dev/dev-v1.1.part{part}.json").write_text(json.dumps(squad))
    _jsonl(r / "cnndm/frank_cnndm_test_250.jsonl",
           [{"id": "c1", "article": "Line one.\n\nLine  two.", "highlights": "h"}])
    (r / "samsum").mkdir(parents=True)
    (r / "samsum/test.json").write_text(json.dumps(
        [{"dialogue": "A: hi\r\nB:  hello", "summary": "greetings"}]))
    _jsonl(r / "llm_decoding/xsum_test.jsonl", [{"id": "x1", "document": "doc", "summary": "s"}])
    (r / "wmt14_ende").mkdir(parents=True)
    (r / "wmt14_ende/newstest2014.de").write_text("".join(f"de {i}\n" for i in range(7)))
    (r / "wmt14_ende/newstest2014.en").write_text("".join(f"en {i}\n" for i in range(7)))
    _jsonl(r / "lambada/lambada_test.jsonl", [{"text": "once upon\n\na time"}])
    (r / "corpus/wikitext2_tokens").mkdir(parents=True)
    para = " ".join(f"w{j}" for j in range(130))
    (r / "corpus/wikitext2_tokens/test.txt").write_text(f" = H = \n {para} \n")
    return r


def test_every_chat_task_reads_one_user_turn(data_root: Path) -> None:
    got = {name: load_chat_task(name, data_root) for name in CHAT_TASKS}
    assert set(REAL_TASKS) <= set(CHAT_TASKS)
    q = got["qa-squad"][0]
    assert q.message() == ("Answer the question using the passage below. Reply in one or two "
                           "sentences.\n\nThe cat sat.\n\nQuestion: Who sat?")
    assert len(got["qa-squad"]) == 2 and q.reference == "The cat"
    assert got["sum-cnndm"][0].document == "Line one.\nLine two."  # blank lines dropped
    assert got["sum-samsum"][0].document == "A: hi\nB: hello"  # the turns keep their lines
    assert got["sum-xsum"][0].message().endswith("one sentence.\n\ndoc")
    wmt = got["mt-wmt14-deen"]
    assert len(wmt) == 2  # 7 lines: two groups of 3, the rest dropped
    assert {e.document for e in wmt} == {"de 0\nde 1\nde 2", "de 3\nde 4\nde 5"}
    assert {e.reference for e in wmt} == {"en 0 en 1 en 2", "en 3 en 4 en 5"}
    assert [e.message() for e in got["explain"]] != []
    assert sorted(e.instruction for e in got["explain"]) == sorted(EXPLAIN_PROMPTS)
    assert got["cont-lambada"][0].document == "once upon\na time"
    assert len(got["cont-wikitext2"][0].document.split()) == 64


def test_chat_sampling_is_seeded_and_checked(data_root: Path) -> None:
    a = load_chat_task("explain", data_root, n=5, seed=3)
    assert [e.id for e in load_chat_task("explain", data_root, n=2, seed=3)] == \
        [e.id for e in a[:2]]
    with pytest.raises(TaskError, match="unknown chat task"):
        load_chat_task("nope", data_root)
    with pytest.raises(TaskError, match="fewer than n = 5"):
        load_chat_task("sum-xsum", data_root, n=5)
    with pytest.raises(TaskError, match="does not exist"):
        load_chat_task("sum-xsum", data_root / "elsewhere")
    (data_root / "wmt14_ende/newstest2014.en").write_text("en\n")
    with pytest.raises(TaskError, match="line-aligned"):
        load_chat_task("mt-wmt14-deen", data_root)


def test_encode_chat_cuts_only_the_document() -> None:
    tok = ChatWordTokenizer()
    doc = "\n".join(f"d{i} e{i}" for i in range(10))  # 20 words on 10 lines
    ex = ChatExample("t", "0", "Summarize this.", doc, "Question: why?")
    whole = encode_chat(ex, tok, max_tokens=100)
    assert not whole.truncated and len(whole.ids) == 2 + 2 + 20 + 2
    assert whole.words_kept == whole.words_total == 20
    for budget in (6, 7, 15, 26):
        cut = encode_chat(ex, tok, max_tokens=budget)
        assert len(cut.ids) <= budget and cut.words_kept == min(20, budget - 6)
        assert cut.truncated == (budget < 26)
        assert cut.ids[:3] == whole.ids[:3] and cut.ids[-3:] == whole.ids[-3:]  # turn, question
    assert ex.message(3) == "Summarize this.\n\nd0 e0\nd1\n\nQuestion: why?"
    with pytest.raises(TaskError, match="template alone"):
        encode_chat(ex, tok, max_tokens=5)


@pytest.mark.needs_data
@pytest.mark.skipif(not (SHARED_DATA / "wmt14_ende").is_dir(),
                    reason="../shared/data is absent (real task files)")
def test_real_chat_task_files_load() -> None:
    tok = ChatWordTokenizer()
    for name in REAL_TASKS:
        examples = load_chat_task(name, SHARED_DATA, n=5)
        assert len({e.id for e in examples}) == 5
        for e in examples:
            assert len(encode_chat(e, tok, 400).ids) <= 400
