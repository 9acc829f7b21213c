"""Tests of benchmarks/common/tasks.py: task readers on small files in each format, prompt encoding
with truncation, and (when ../shared/data is present) the real task files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.common.tasks import TASKS, TaskError, TaskExample, encode_prompt, load_task

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO.parent / "shared" / "data"


class WordTokenizer:
    """One id per whitespace word (enough to test budgets and cuts)."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}

    def encode(self, text: str) -> list[int]:
        return [self.vocab.setdefault(w, len(self.vocab)) for w in text.split()]


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


@pytest.fixture()
def data_root(tmp_path: Path) -> Path:
    """Every task's files, a few records each, in the shared data's formats."""
    r = tmp_path / "data"
    write_jsonl(r / "lambada/lambada_test.jsonl",
                [{"text": f"passage {i} ends with\nword{i}"} for i in range(5)] + [{"text": "x"}])
    (r / "corpus/wikitext2_tokens").mkdir(parents=True)
    para = " ".join(f"w{j}" for j in range(130))
    (r / "corpus/wikitext2_tokens/test.txt").write_text(
        f" = Heading = \n {para} \n short line \n {para} x \n", encoding="utf-8")
    for name in ("wikitext_test", "book_test"):
        write_jsonl(r / f"llm_decoding/{name}.jsonl",
                    [{"instructions": f"prefix {i}", "gold_ref": f"prefix {i} more"}
                     for i in range(4)])
    squad = {"version": "1.1", "data": [{"title": "T", "paragraphs": [
        {"context": "The  context\ntext.", "qas": [
            {"id": "q1", "question": "What?", "answers": [{"text": "context"}]},
            {"id": "q2", "question": "Which?", "answers": [{"text": "text"}]}]}]}]}
    (r / "squad_v1.1_dev").mkdir(parents=True)
    (r / "squad_v1.1_dev/dev-v1.1.part0.json").write_text(json.dumps(squad))
    squad["data"][0]["paragraphs"][0]["qas"] = [
        {"id": "q3", "question": "Who?", "answers": [{"text": "The"}]}]
    (r / "squad_v1.1_dev/dev-v1.1.part1.json").write_text(json.dumps(squad))
    write_jsonl(r / "cnndm/frank_cnndm_test_250.jsonl",
                [{"id": f"c{i}", "article": f"article {i}", "highlights": "h"} for i in range(3)])
    (r / "samsum").mkdir(parents=True)
    (r / "samsum/test.json").write_text(json.dumps(
        [{"instruction": "x", "dialogue": "A: hi\nB: hello", "summary": "greetings"}] * 2))
    write_jsonl(r / "llm_decoding/xsum_test.jsonl",
                [{"id": "x1", "document": "doc one", "summary": "s"}])
    write_jsonl(r / "multinews_longbench/multi_news.jsonl",
                [{"_id": "m1", "context": "Passage 1: a NEWLINE_CHAR b", "answers": ["ref"]}])
    return r


def test_every_task_reads_its_format_with_the_papers_template(data_root: Path) -> None:
    got = {name: load_task(name, data_root) for name in TASKS}
    assert {len(v) for v in got.values()} >= {1}
    lam = {e.id: e for e in got["lambada"]}
    assert len(lam) == 5  # the one-word passage has no cloze target
    ex = lam["lambada_test.jsonl:1"]
    assert (ex.prompt, ex.reference) == ("passage 0 ends with", "word0")
    wiki = got["wikitext2"]
    assert len(wiki) == 2 and all(len(e.text.split()) == 64 for e in wiki)
    assert wiki[0].reference.split()[0] == "w64"
    squad = {e.id: e for e in got["squad"]}
    assert set(squad) == {"q1", "q2", "q3"}
    assert squad["q1"].prompt == "question: What? context: The context text."
    assert squad["q1"].reference == "context"
    assert got["cnndm"][0].prompt.startswith("summarize: article ")
    sam = got["samsum"][0]
    assert sam.prompt == "Here is a dialogue: A: hi B: hello Write a short summary!"
    assert got["xsum"][0].prompt == "Summarize: doc one"
    mn = got["multinews"][0]
    assert mn.prompt == "Write a summary based on this article: Passage 1: a b"
    assert mn.reference == "ref" and mn.id == "m1"
    assert all("\n" not in e.prompt for v in got.values() for e in v)


def test_sampling_is_seeded_and_prefix_stable(data_root: Path) -> None:
    a = load_task("lambada", data_root, n=5, seed=1)
    assert [e.id for e in load_task("lambada", data_root, n=2, seed=1)] == [e.id for e in a[:2]]
    assert a == load_task("lambada", data_root, n=5, seed=1)
    orders = {tuple(e.id for e in load_task("lambada", data_root, n=5, seed=s))
              for s in range(6)}
    assert len(orders) > 1
    assert sorted(e.id for e in a) == sorted(e.id for e in load_task("lambada", data_root))


def test_bad_task_input_is_named(data_root: Path, tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="unknown task 'nope'"):
        load_task("nope", data_root)
    with pytest.raises(TaskError, match="does not exist"):
        load_task("xsum", tmp_path / "elsewhere")
    with pytest.raises(TaskError, match="fewer than n = 99"):
        load_task("xsum", data_root, n=99)
    bad_json = '{"id": 1, "document": "d", "summary": "s"}\n{oops\n'
    (data_root / "llm_decoding/xsum_test.jsonl").write_text(bad_json)
    with pytest.raises(TaskError, match="xsum_test.jsonl:2: not valid JSON"):
        load_task("xsum", data_root)
    write_jsonl(data_root / "llm_decoding/xsum_test.jsonl", [{"id": "1", "text": "d"}])
    with pytest.raises(TaskError, match="no 'document' field"):
        load_task("xsum", data_root)


def test_encode_prompt_cuts_only_the_document_at_a_word() -> None:
    tok = WordTokenizer()
    ex = TaskExample("t", "0", "summarize:", " ".join(f"d{i}" for i in range(20)), "end .")
    whole = encode_prompt(ex, tok, max_tokens=100, bos_id=7)
    assert not whole.truncated and len(whole.ids) == 1 + 1 + 20 + 2 and whole.ids[0] == 7
    for budget in (4, 5, 13, 24):
        cut = encode_prompt(ex, tok, max_tokens=budget, bos_id=7)
        assert len(cut.ids) <= budget
        assert cut.truncated == (budget < 24)
        # maximal: one more word would not fit
        assert cut.words_kept == min(20, budget - 4) and cut.words_total == 20
        assert cut.ids[:2] == whole.ids[:2] and cut.ids[-2:] == whole.ids[-2:]
    with pytest.raises(TaskError, match="template alone"):
        encode_prompt(ex, tok, max_tokens=3, bos_id=7)
    with pytest.raises(TaskError, match="max_tokens"):
        encode_prompt(ex, tok, max_tokens=0)


@pytest.mark.needs_data
@pytest.mark.skipif(not (SHARED_DATA / "lambada").is_dir(),
                    reason="../shared/data is absent (real task files)")
def test_real_task_files_load() -> None:
    for name in TASKS:
        examples = load_task(name, SHARED_DATA, n=20)
        assert len(examples) == 20 and len({e.id for e in examples}) == 20
        assert all(e.text for e in examples)
