"""Evaluation tasks of Kim et al. (2024) read from the shared data, as prompts for a model.

Public surface:
    TASKS                                   task name -> TaskSpec, in the paper's table order
    TaskSpec                                name, category, data file(s), prompt template
    TaskExample                             one prompt: template prefix + text + suffix
    load_task(name, data_root, n, seed=0) -> list[TaskExample]
        ``n`` examples drawn by a seeded permutation of the task's records (deterministic)
    encode_prompt(example, tokenizer, max_tokens, bos_id=None) -> EncodedPrompt
        token ids that fit ``max_tokens``, the text cut at a word boundary when needed
    TaskError                               missing or malformed task data

Chat tasks for an instruction-tuned model (``benchmarks/bench_real.py``):
    CHAT_TASKS                              task name -> ChatTaskSpec
    REAL_TASKS                              the default tasks of the real-model benchmark
    ChatExample                             one user turn: instruction, document, question
    load_chat_task(name, data_root, n, seed=0) -> list[ChatExample]
    encode_chat(example, tokenizer, max_tokens) -> EncodedPrompt
        the model's chat template around one user turn, the document cut to fit
    EXPLAIN_PROMPTS                         the free writing/explanation set (written here)

Prompts follow Kim et al. App. C where they give a template (SQuAD ``question: [question]
context: [context]``; CNN/DM ``summarize: [text]``; SAMSum ``Here is a dialogue: [text]`` +
``Write a short summary!``; MultiNews ``Write a summary based on this article: [text]``; XSum
``Summarize: [text]``); language-modelling tasks use the text itself as the prompt (LAMBADA:
the passage without its last word, the cloze target). Whitespace, newlines included, is
collapsed to single spaces: the reference models are trained on one paragraph per line, so a
newline is a token they have never seen. The base models are only pretrained, so the
summarisation outputs are continuations, not summaries; block efficiency is still the quantity
the paper measures.

Long documents do not fit a small model's context: :func:`encode_prompt` cuts the *text* part
(never the template) at the last word that fits and says so (``truncated``), so callers can
report how many prompts were cut.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from blockdraft.core.checks import check_positive_int, is_int
from blockdraft.core.errors import BlockdraftError
from blockdraft.core.jsonl import iter_jsonl


class TaskError(BlockdraftError):
    """Task data is missing or malformed, or a task name is unknown."""


class _Encoder(Protocol):
    def encode(self, text: str) -> list[int]: ...


@dataclass(frozen=True)
class TaskExample:
    """One prompt of a task.

    Attributes:
        task: the task name.
        id: the record's identifier in its file (an id field, or ``file:line`` / index).
        prefix: template text before the document (may be empty).
        text: the document, the part that may be cut to fit a context.
        suffix: template text after the document (may be empty).
        reference: the task's reference output (summary, answer, held-out word), for
            reading the outputs; never used to score block efficiency.
    """

    task: str
    id: str
    prefix: str
    text: str
    suffix: str = ""
    reference: str = ""

    @property
    def prompt(self) -> str:
        """The whole prompt text."""
        return _join(self.prefix, self.text, self.suffix)


@dataclass(frozen=True)
class EncodedPrompt:
    """A prompt as token ids.

    Attributes:
        ids: the token ids (``bos_id`` first when given), at most ``max_tokens`` of them.
        truncated: the document was cut to fit.
        words_kept: words of the document kept (all of them unless ``truncated``).
        words_total: words of the document.
    """

    ids: tuple[int, ...]
    truncated: bool
    words_kept: int
    words_total: int


@dataclass(frozen=True)
class TaskSpec:
    """A task: its name, category (Kim Table 1), data files and record reader."""

    name: str
    category: str
    files: tuple[str, ...]
    template: str
    reader: Callable[[Path, str], Iterator[TaskExample]]


def _clean(text: str) -> str:
    return " ".join(str(text).split())


def _join(prefix: str, text: str, suffix: str) -> str:
    return " ".join(part for part in (prefix, text, suffix) if part)


def _field(rec: dict[str, Any], key: str, where: str) -> str:
    if key not in rec:
        raise TaskError(f"{where}: the record has no {key!r} field (fields: {sorted(rec)})")
    value = rec[key]
    if isinstance(value, list):  # LongBench keeps answers as a list
        value = value[0] if value else ""
    return _clean(value)


# ---- readers: (file, task name) -> examples, in file order --------------------------------------


def _read_lambada(path: Path, task: str) -> Iterator[TaskExample]:
    for line_no, rec in iter_jsonl(path, TaskError):
        words = _field(rec, "text", f"{path}:{line_no}").split()
        if len(words) >= 2:
            yield TaskExample(task, f"{path.name}:{line_no}", "", " ".join(words[:-1]),
                              reference=words[-1])


def _read_prefixes(path: Path, task: str) -> Iterator[TaskExample]:
    for line_no, rec in iter_jsonl(path, TaskError):
        where = f"{path}:{line_no}"
        text = _field(rec, "instructions", where)
        if text:
            yield TaskExample(task, f"{path.name}:{line_no}", "", text,
                              reference=_field(rec, "gold_ref", where))


def _read_wikitext(path: Path, task: str, words: int = 64) -> Iterator[TaskExample]:
    """Paragraphs of the tokenized WikiText-2 test set (headings skipped): the first
    ``words`` words are the prompt, the rest of the paragraph the reference."""
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            text = line.strip()
            if not text or text.startswith("="):
                continue
            toks = text.split()
            if len(toks) >= 2 * words:
                yield TaskExample(task, f"{path.name}:{line_no}", "", " ".join(toks[:words]),
                                  reference=" ".join(toks[words:]))


def _squad_records(path: Path) -> Iterator[tuple[str, str, str, str]]:
    """``(id, question, context, first answer)`` of an official SQuAD JSON file, whitespace
    collapsed."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        articles = data["data"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise TaskError(f"{path}: not an official SQuAD JSON file ({e})") from e
    for article in articles:
        for para in article.get("paragraphs", []):
            context = _clean(para.get("context", ""))
            for qa in para.get("qas", []):
                answers = qa.get("answers") or [{"text": ""}]
                yield (str(qa.get("id", "")), _clean(qa.get("question", "")), context,
                       _clean(answers[0].get("text", "")))


def _read_squad(path: Path, task: str) -> Iterator[TaskExample]:
    for qid, question, context, answer in _squad_records(path):
        yield TaskExample(task, qid, f"question: {question} context:", context,
                          reference=answer)


def _read_json_list(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise TaskError(f"{path}: not valid JSON ({e.msg})") from e
    if not isinstance(data, list):
        raise TaskError(f"{path}: expected a JSON list of records")
    return data


def _read_samsum(path: Path, task: str) -> Iterator[TaskExample]:
    for i, rec in enumerate(_read_json_list(path)):
        where = f"{path}[{i}]"
        yield TaskExample(task, f"{path.name}[{i}]", "Here is a dialogue:",
                          _field(rec, "dialogue", where), "Write a short summary!",
                          reference=_field(rec, "summary", where))


def _summary_reader(prefix: str, text_key: str, ref_key: str, newline_marker: str = ""
                    ) -> Callable[[Path, str], Iterator[TaskExample]]:
    def read(path: Path, task: str) -> Iterator[TaskExample]:
        for line_no, rec in iter_jsonl(path, TaskError):
            where = f"{path}:{line_no}"
            raw = rec.get(text_key, "")
            if newline_marker and isinstance(raw, str):
                rec = {**rec, text_key: raw.replace(newline_marker, " ")}
            text = _field(rec, text_key, where)
            if text:
                yield TaskExample(task, str(rec.get("id", rec.get("_id", f"{path.name}:"
                                                                   f"{line_no}"))),
                                  prefix, text, reference=_field(rec, ref_key, where))
    return read


TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec("lambada", "LM", ("lambada/lambada_test.jsonl",),
                 "[passage without its last word]", _read_lambada),
        TaskSpec("wikitext2", "LM", ("corpus/wikitext2_tokens/test.txt",),
                 "[first 64 words of a paragraph]", _read_wikitext),
        TaskSpec("llm-wikitext", "LM", ("llm_decoding/wikitext_test.jsonl",),
                 "[prefix]", _read_prefixes),
        TaskSpec("llm-book", "LM", ("llm_decoding/book_test.jsonl",), "[prefix]",
                 _read_prefixes),
        TaskSpec("squad", "QA", ("squad_v1.1_dev/dev-v1.1.part0.json",
                                 "squad_v1.1_dev/dev-v1.1.part1.json"),
                 "question: [question] context: [context]", _read_squad),
        TaskSpec("cnndm", "S-Sum", ("cnndm/frank_cnndm_test_250.jsonl",), "summarize: [text]",
                 _summary_reader("summarize:", "article", "highlights")),
        TaskSpec("samsum", "S-Sum", ("samsum/test.json",),
                 "Here is a dialogue: [text] Write a short summary!", _read_samsum),
        TaskSpec("xsum", "L-Sum", ("llm_decoding/xsum_test.jsonl",), "Summarize: [text]",
                 _summary_reader("Summarize:", "document", "summary")),
        TaskSpec("multinews", "L-Sum", ("multinews_longbench/multi_news.jsonl",),
                 "Write a summary based on this article: [text]",
                 _summary_reader("Write a summary based on this article:", "context",
                                 "answers", newline_marker="NEWLINE_CHAR")),
    )
}


def load_task(name: str, data_root: str | Path, n: int | None = None, seed: int = 0
              ) -> list[TaskExample]:
    """``n`` examples of task ``name`` (all when ``None``), in a seeded random order.

    The order is a permutation of the task's records drawn with ``seed``, so the first ``a``
    examples of ``n`` are the same for every ``n >= a`` (a tuning split taken first stays
    disjoint from what follows).

    Raises:
        TaskError: on an unknown task, a missing file (naming it), a malformed record, or
            fewer records than ``n``.
    """
    if name not in TASKS:
        raise TaskError(f"unknown task {name!r}; choose from {', '.join(TASKS)}")
    spec = TASKS[name]
    root = Path(data_root)
    records: list[TaskExample] = []
    for rel in spec.files:
        path = root / rel
        if not path.is_file():
            raise TaskError(
                f"task {name}: {path} does not exist; point data_root at the shared data "
                "directory (../shared/data)"
            )
        records.extend(spec.reader(path, name))
    return _sample(records, name, n, seed)


def _sample(records: list[Any], name: str, n: int | None, seed: int) -> list[Any]:
    """``n`` of a task's records (all when None) in a seeded random order."""
    if n is not None and (not is_int(n) or n < 0):
        raise TaskError(f"n must be None or an integer >= 0, got {n!r}")
    if n is not None and n > len(records):
        raise TaskError(f"task {name} has {len(records)} usable records, fewer than n = {n}")
    order = np.random.default_rng(seed).permutation(len(records))
    if n is not None:
        order = order[:n]
    return [records[int(i)] for i in order]


def encode_prompt(
    example: TaskExample, tokenizer: _Encoder, max_tokens: int, bos_id: int | None = None
) -> EncodedPrompt:
    """The example's prompt as token ids, at most ``max_tokens`` of them.

    When the whole prompt is too long, the document is cut to its longest prefix of whole
    words that fits with the template (binary search over the word count); the template is
    never cut. ``bos_id`` (e.g. the end-of-text id that separates training documents) goes
    first.

    Raises:
        TaskError: when even the template with no document does not fit ``max_tokens``.
    """
    max_tokens = check_positive_int(max_tokens, "max_tokens", TaskError)
    head = [] if bos_id is None else [int(bos_id)]
    words = example.text.split()

    def ids_with(n_words: int) -> list[int]:
        text = " ".join(words[:n_words])
        return head + list(tokenizer.encode(_join(example.prefix, text, example.suffix)))

    return _fit_words(ids_with, len(words), max_tokens, f"{example.task} {example.id}")


def _fit_words(ids_with: Callable[[int], list[int]], n_words: int, max_tokens: int,
               where: str) -> EncodedPrompt:
    """The prompt with the most document words (of ``n_words``) whose ids fit ``max_tokens``
    (binary search; ``ids_with(n)`` is the prompt with the first ``n`` words)."""
    full = ids_with(n_words)
    if len(full) <= max_tokens:
        return EncodedPrompt(tuple(full), False, n_words, n_words)
    lo, hi = 0, n_words  # ids_with(lo) fits (checked below), ids_with(hi) does not
    if len(ids_with(0)) > max_tokens:
        raise TaskError(
            f"{where}: the template alone needs more than {max_tokens} tokens; allow a longer "
            "prompt"
        )
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if len(ids_with(mid)) <= max_tokens:
            lo = mid
        else:
            hi = mid
    return EncodedPrompt(tuple(ids_with(lo)), True, lo, n_words)


# ---- chat tasks: one user turn for an instruction-tuned model (benchmarks/bench_real.py) --------

EXPLAIN_PROMPTS: tuple[str, ...] = (
    "Explain what the social contract is, as Hobbes and Locke described it.",
    "Write a short paragraph explaining the difference between deductive and inductive "
    "reasoning.",
    "Explain how the separation of powers works in the United States government.",
    "What is the difference between a parliamentary and a presidential system? Explain briefly.",
    "Explain what socialization is and give two examples of agents of socialization.",
    "Write a short explanation of classical conditioning, with an everyday example.",
    "Explain how short-term memory differs from long-term memory.",
    "Describe the main causes of the American Civil War in a few sentences.",
    "Explain what the New Deal was and why it was introduced.",
    "Write a short paragraph about what cultural anthropologists do in fieldwork.",
    "Explain the law of supply and demand in simple terms.",
    "What is inflation, and how can a central bank try to control it?",
    "Explain the difference between gross domestic product and gross national product.",
    "Explain what opportunity cost means, with an example from everyday life.",
    "Write a short explanation of how a list comprehension works in Python.",
    "Explain what a Python generator is and when you would use one.",
    "Explain why the Moon shows phases as it orbits the Earth.",
    "Explain what an ionic bond is and how it differs from a covalent bond.",
    "Explain Newton's three laws of motion in simple words.",
    "Describe how the immune system responds to a bacterial infection.",
    "Write a short paragraph about the themes of Shakespeare's Romeo and Juliet.",
    "Explain what a market segment is in marketing, with an example.",
    "Write a short guide to writing a clear thesis statement for an essay.",
    "Explain how a bill becomes a law in the United States Congress.",
)
"""The free writing/explanation task: prompts written for this benchmark on the topics of the
pretraining corpus (the OpenStax books, the Python documentation, Shakespeare); none is taken
from a data file, none from the distillation prompts."""

_WORD = re.compile(r"\S+\s*")


@dataclass(frozen=True)
class ChatExample:
    """One chat prompt: a single user turn ``instruction``, ``document``, ``question``
    (paragraphs apart; empty parts left out).

    Attributes:
        task: the task name.
        id: the record's identifier in its file.
        instruction: what to do, before the document.
        document: the text to work on (may be cut to fit; its newlines are kept, a chat model
            reads them).
        question: text after the document (SQuAD's question), never cut.
        reference: the task's reference output, for reading the outputs only.
    """

    task: str
    id: str
    instruction: str
    document: str = ""
    question: str = ""
    reference: str = ""

    @property
    def words(self) -> int:
        """Words of the document."""
        return len(_WORD.findall(self.document))

    def message(self, words: int | None = None) -> str:
        """The user turn, the document cut to its first ``words`` words (all when None)."""
        doc = self.document
        if words is not None:
            doc = "".join(_WORD.findall(doc)[:words])
        parts = (self.instruction, doc.strip(), self.question)
        return "\n\n".join(part for part in parts if part)


class _ChatTemplate(Protocol):
    def apply_chat_template(self, messages: Any) -> list[int]: ...


@dataclass(frozen=True)
class ChatTaskSpec:
    """A chat task: its name, category, data files (relative to the data root) and reader
    (``(paths, task name) -> examples``)."""

    name: str
    category: str
    files: tuple[str, ...]
    reader: Callable[[list[Path], str], Iterator[ChatExample]]


def _lines(text: str) -> str:
    """Each line's whitespace collapsed, blank lines dropped, the line breaks kept."""
    return "\n".join(" ".join(line.split()) for line in str(text).splitlines() if line.strip())


def _chat_squad(paths: list[Path], task: str) -> Iterator[ChatExample]:
    for path in paths:
        for qid, question, context, answer in _squad_records(path):
            yield ChatExample(task, qid, "Answer the question using the passage below. Reply "
                              "in one or two sentences.", context, f"Question: {question}",
                              answer)


def _chat_jsonl(instruction: str, text_key: str, ref_key: str
                ) -> Callable[[list[Path], str], Iterator[ChatExample]]:
    def read(paths: list[Path], task: str) -> Iterator[ChatExample]:
        for path in paths:
            for line_no, rec in iter_jsonl(path, TaskError):
                where = f"{path}:{line_no}"
                _field(rec, text_key, where)  # present, or a named error
                text = _lines(rec[text_key])
                if text:
                    yield ChatExample(task, str(rec.get("id", f"{path.name}:{line_no}")),
                                      instruction, text,
                                      reference=_field(rec, ref_key, where))
    return read


def _chat_samsum(paths: list[Path], task: str) -> Iterator[ChatExample]:
    for path in paths:
        for i, rec in enumerate(_read_json_list(path)):
            where = f"{path}[{i}]"
            _field(rec, "dialogue", where)
            yield ChatExample(task, f"{path.name}[{i}]", "Summarize the following dialogue in "
                              "one or two sentences.", _lines(rec["dialogue"]),
                              reference=_field(rec, "summary", where))


def _chat_wmt(paths: list[Path], task: str, group: int = 3) -> Iterator[ChatExample]:
    """Line-aligned source and reference files; ``group`` consecutive lines (mostly of one
    news story) make one prompt, so answers are a few sentences long."""
    src_path, ref_path = paths
    src = src_path.read_text(encoding="utf-8").splitlines()
    ref = ref_path.read_text(encoding="utf-8").splitlines()
    if len(src) != len(ref):
        raise TaskError(f"{src_path} has {len(src)} lines but {ref_path} has {len(ref)}; "
                        "they must be line-aligned")
    for start in range(0, len(src) - group + 1, group):
        text = "\n".join(" ".join(s.split()) for s in src[start:start + group])
        yield ChatExample(task, f"{src_path.name}:{start + 1}-{start + group}",
                          "Translate the following German text into English.", text,
                          reference=" ".join(" ".join(r.split())
                                             for r in ref[start:start + group]))


def _chat_explain(paths: list[Path], task: str) -> Iterator[ChatExample]:
    for i, text in enumerate(EXPLAIN_PROMPTS):
        yield ChatExample(task, f"explain:{i}", text)


CHAT_EVAL = Path(__file__).resolve().parents[1] / "chat_eval.jsonl"
"""The held-out chat set written for the benchmarks (36 requests of six kinds, never trained
on): the ``chat`` task reads it from the repository, not from the shared data."""


def _chat_eval(paths: list[Path], task: str) -> Iterator[ChatExample]:
    for line_no, rec in iter_jsonl(CHAT_EVAL, TaskError):
        where = f"{CHAT_EVAL}:{line_no}"
        yield ChatExample(task, f"chat_eval:{line_no}:{_field(rec, 'category', where)}",
                          _field(rec, "prompt", where))


def _chat_wikitext(paths: list[Path], task: str) -> Iterator[ChatExample]:
    for path in paths:
        for ex in _read_wikitext(path, task):
            yield ChatExample(task, ex.id, "Continue the following encyclopedia article.",
                              ex.text, reference=ex.reference)


CHAT_TASKS: dict[str, ChatTaskSpec] = {
    spec.name: spec
    for spec in (
        ChatTaskSpec("qa-squad", "QA", ("squad_v1.1_dev/dev-v1.1.part0.json",
                                        "squad_v1.1_dev/dev-v1.1.part1.json"), _chat_squad),
        ChatTaskSpec("sum-cnndm", "summarization", ("cnndm/frank_cnndm_test_250.jsonl",),
                     _chat_jsonl("Summarize the following news article in three sentences.",
                                 "article", "highlights")),
        ChatTaskSpec("sum-samsum", "summarization", ("samsum/test.json",), _chat_samsum),
        ChatTaskSpec("sum-xsum", "summarization", ("llm_decoding/xsum_test.jsonl",),
                     _chat_jsonl("Summarize the following article in one sentence.",
                                 "document", "summary")),
        ChatTaskSpec("mt-wmt14-deen", "translation", ("wmt14_ende/newstest2014.de",
                                                      "wmt14_ende/newstest2014.en"), _chat_wmt),
        ChatTaskSpec("explain", "writing", (), _chat_explain),
        ChatTaskSpec("cont-lambada", "continuation", ("lambada/lambada_test.jsonl",),
                     _chat_jsonl("Continue the following story.", "text", "text")),
        ChatTaskSpec("cont-wikitext2", "continuation", ("corpus/wikitext2_tokens/test.txt",),
                     _chat_wikitext),
        ChatTaskSpec("chat", "held-out chat requests", (), _chat_eval),
    )
}

REAL_TASKS: tuple[str, ...] = ("qa-squad", "sum-cnndm", "sum-samsum", "mt-wmt14-deen",
                               "explain", "cont-lambada")
"""The default tasks of the real-model benchmark (issue 11): QA, two summarization sets,
translation, free writing/explanation and continuation."""


def load_chat_task(name: str, data_root: str | Path, n: int | None = None, seed: int = 0
                   ) -> list[ChatExample]:
    """``n`` examples of chat task ``name`` (all when ``None``), in a seeded random order
    (a permutation of the task's records, so the first ``a`` of ``n`` are the same for every
    ``n >= a``).

    Raises:
        TaskError: on an unknown task, a missing file (naming it), a malformed record, or
            fewer records than ``n``.
    """
    if name not in CHAT_TASKS:
        raise TaskError(f"unknown chat task {name!r}; choose from {', '.join(CHAT_TASKS)}")
    spec = CHAT_TASKS[name]
    paths = [Path(data_root) / rel for rel in spec.files]
    for path in paths:
        if not path.is_file():
            raise TaskError(
                f"task {name}: {path} does not exist; point data_root at the shared data "
                "directory (../shared/data)"
            )
    records = list(spec.reader(paths, name))
    return _sample(records, name, n, seed)


def encode_chat(example: ChatExample, tokenizer: _ChatTemplate, max_tokens: int
                ) -> EncodedPrompt:
    """The example as one user turn in the tokenizer's chat template (the assistant's turn
    opened), at most ``max_tokens`` ids: the document is cut to its longest prefix of whole
    words that fits (binary search), never the instruction or the question.

    Raises:
        TaskError: when even the turn without its document does not fit ``max_tokens``.
    """
    max_tokens = check_positive_int(max_tokens, "max_tokens", TaskError)

    def ids_with(n_words: int) -> list[int]:
        return list(tokenizer.apply_chat_template(
            [{"role": "user", "content": example.message(n_words)}]))

    return _fit_words(ids_with, example.words, max_tokens, f"{example.task} {example.id}")
