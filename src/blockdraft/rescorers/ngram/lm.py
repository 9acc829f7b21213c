"""`NgramLM`: a KenLM n-gram model over token ids.

Word convention: the LM's words are token ids written as decimal strings (``"17"``, ``"4096"``),
which is what ``blockdraft ngram train`` writes. An LM over other word strings (an LM trained
elsewhere on subword strings, say) needs a vocabulary mapping: a JSON object ``{"word": id}``
(the HF ``vocab.json`` layout) or a TSV file of ``id<TAB>word`` lines.

Sentence boundaries: ``<s>`` starts the LM state only when the context is empty (the start of
a text); otherwise the state is KenLM's null context fed with the last ``order - 1`` context
tokens. Drafts are never scored with ``</s>`` (a draft is not the end of a text).

Unknown tokens (ids the LM has never seen, scored by KenLM as ``<unk>``), the ``unknown`` policy:
    ``"unk"``    the LM's own ``<unk>`` log-prob (default);
    ``"error"``  raise :class:`RescorerError` naming the token;
    a float      that fixed LM log-prob in nats (e.g. ``-1000.0``, after Kim et al. App. D),
                 with the LM state reset as KenLM does after ``<unk>``.

The tokenizer: ``blockdraft ngram train`` (``train_ngram(..., tokenizer=tok.info(name))``,
:mod:`blockdraft.training.ngram`) records the tokenizer the ids came from in
``<prefix>.vocab.json`` beside the LM (name, ``V`` and a fingerprint of its vocabulary);
:meth:`NgramLM.check_vocab` then refuses the LM for a model of another vocabulary size or
another tokenizer. An LM without that record is checked by its largest token id alone (with a
:class:`~blockdraft.core.errors.BlockdraftWarning` when a tokenizer was given to compare it
with).

Units: every score returned is a natural-log probability (KenLM's log10 times ln 10, converted
once at this boundary).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import blockdraft.rescorers.ngram.native as native
from blockdraft.core.checks import is_int
from blockdraft.models.tokenizer import TokenizerInfo
from blockdraft.models.vocab_record import check_tokenizer_record
from blockdraft.rescorers.base import RescorerError, as_context
from blockdraft.rescorers.ngram.records import (
    check_arpa_pair,
    check_binary,
    read_vocab_record,
)

LN10 = math.log(10.0)
_SPECIAL = ("<unk>", "<s>", "</s>")


def read_vocab_mapping(path: str | Path) -> dict[int, str]:
    """Token id -> LM word from a JSON ``{"word": id}`` or TSV ``id<TAB>word`` file."""
    path = Path(path)
    if not path.is_file():
        raise RescorerError(f"vocabulary mapping file {path} does not exist")
    text = path.read_text(encoding="utf-8")
    out: dict[int, str] = {}
    if path.suffix == ".json":
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise RescorerError(f"{path}: not valid JSON ({e})") from e
        if not isinstance(obj, dict):
            raise RescorerError(f"{path}: expected a JSON object {{word: id}}")
        for word, tid in obj.items():
            if not is_int(tid) or tid < 0:
                raise RescorerError(f"{path}: id of {word!r} must be an int >= 0, got {tid!r}")
            out[tid] = word
        return out
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0].strip().isdigit():
            raise RescorerError(f"{path}:{lineno}: expected 'id<TAB>word', got {line!r}")
        out[int(parts[0])] = parts[1]
    return out


def _arpa_unigrams(path: Path) -> list[str]:
    """The words of an ARPA file's 1-gram section (used when the native library is absent)."""
    words: list[str] = []
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        in_uni = False
        for line in f:
            s = line.strip()
            if s == "\\1-grams:":
                in_uni = True
                continue
            if in_uni:
                if not s:
                    continue
                if s.startswith("\\"):
                    break
                parts = s.split()
                if len(parts) < 2:
                    raise RescorerError(f"{path}: malformed 1-gram line {s!r}")
                words.append(parts[1])
    if not words:
        raise RescorerError(f"{path}: no \\1-grams: section; is this an ARPA file?")
    return words


def is_arpa(path: Path) -> bool:
    """True when the file starts like an ARPA file (``\\data\\`` after blank lines)."""
    with open(path, "rb") as f:
        head = f.read(4096)
    return head.lstrip().startswith(b"\\data\\")


class NgramLM:
    """A KenLM n-gram language model whose words are token ids.

    Args:
        path: an ARPA file or a KenLM binary.
        vocab: optional mapping file (see module docstring) for LMs over other word strings.
        unknown: policy for token ids the LM does not know: ``"unk"``, ``"error"`` or a float
            log-prob in nats.
        engine: ``"native"`` (blockdraft's C++ search linked with KenLM), ``"kenlm"`` (the
            ``kenlm`` Python module; slower, for cross-checks and machines without a compiler)
            or ``"auto"`` (native when built).
        bounds: native engine only: build the exact search's pruning bounds from the ARPA
            file (the LM itself, or ``<stem>.arpa`` beside a binary). ``"auto"`` builds them
            when the ARPA file is there; ``True`` requires it. An ARPA file beside a binary
            must be its pair (:func:`check_arpa_pair`: the ``<stem>.fingerprint.json`` that
            ``train_ngram`` writes, else the header's order and unigram count). They cost one
            more read of the ARPA file at load time and make p-best search several times
            faster; results are identical with or without them.

    Attributes:
        path, order, engine, vocab_size (LM words including ``<unk>``, ``<s>``, ``</s>``),
        max_token_id (largest token id the LM knows; -1 if none), tokenizer (the
        :class:`~blockdraft.models.TokenizerInfo` recorded beside the LM, or None),
        native_missing (``engine="auto"`` found no native library: the exact search runs in
        Python, and the first such rescoring warns once, :func:`native.warn_python_search`).

    Raises:
        RescorerError: missing or unreadable file, an LM whose words are not token ids (and no
            ``vocab``), a bad ``unknown`` policy, an ARPA file beside a binary that is not its
            pair, a binary that is not the one recorded in its ``<stem>.fingerprint.json``
            (checked by SHA-256 at every load).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        vocab: str | Path | dict[int, str] | None = None,
        unknown: str | float = "unk",
        engine: str = "auto",
        bounds: bool | str = "auto",
    ) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            found = sorted(p.name for p in self.path.glob("*") if p.suffix in (".arpa", ".bin"))
            raise RescorerError(
                f"n-gram LM {self.path} is a folder, not an LM file; pass the ARPA file or "
                "KenLM binary itself (PREFIX.arpa or PREFIX.bin)"
                + (f", e.g. one of {found[:5]}" if found else "")
            )
        if not self.path.is_file():
            raise RescorerError(f"n-gram LM file {self.path} does not exist")
        if engine not in ("auto", "native", "kenlm"):
            raise RescorerError(f"engine must be 'auto', 'native' or 'kenlm', got {engine!r}")
        if isinstance(unknown, str):
            if unknown not in ("unk", "error"):
                raise RescorerError(
                    f"unknown must be 'unk', 'error' or a float log-prob, got {unknown!r}"
                )
        else:
            unknown = float(unknown)
            if not math.isfinite(unknown) or unknown > 0:
                raise RescorerError(
                    f"unknown penalty must be a finite log-prob <= 0, got {unknown}"
                )
        self.unknown: str | float = unknown
        self.native_missing = engine == "auto" and not native.available()
        if engine == "auto":
            engine = "kenlm" if self.native_missing else "native"
        self.engine = engine
        self.is_arpa = is_arpa(self.path)
        if not self.is_arpa:
            check_binary(self.path)
        self._native: native.NativeModel | None = None
        self._kenlm: Any = None
        if engine == "native":
            self._native = native.NativeModel(self.path)
            self.order = self._native.order
            lm_words = self._native.words()
            arpa = self.arpa_path()
            if bounds is True and arpa is None:
                raise RescorerError(
                    f"bounds=True needs the ARPA file of {self.path} (the file itself or "
                    f"{self.path.with_suffix('.arpa').name} beside it)"
                )
            sibling = self.path.with_suffix(".arpa")
            if (bounds in (True, "auto") and arpa is None and not self.is_arpa
                    and sibling.is_file()):
                raise RescorerError(
                    f"{sibling} beside the KenLM binary {self.path} is not an ARPA file "
                    "(empty, truncated or another file); rebuild the pair (blockdraft ngram "
                    f"train -o {self.path.with_suffix('')}) or load with bounds=False"
                )
            if bounds in (True, "auto") and arpa is not None:
                if arpa != self.path:
                    check_arpa_pair(self.path, arpa, order=self.order, unigrams=len(lm_words))
                self._native.build_bounds(arpa)
        else:
            self.order = self.kenlm_model().order
            if not self.is_arpa:
                raise RescorerError(
                    f"{self.path} is a KenLM binary; listing its vocabulary needs the native "
                    f"library or the ARPA file; to build the library: {native.HOW_TO_BUILD}"
                )
            lm_words = ["<unk>"] + [w for w in _arpa_unigrams(self.path) if w != "<unk>"]
        self.vocab_size = len(lm_words)
        self._lm_words = lm_words
        self._word_index = {w: i for i, w in enumerate(lm_words)}
        mapping = read_vocab_mapping(vocab) if isinstance(vocab, (str, Path)) else vocab
        self._table = self._build_table(lm_words, mapping)
        self.max_token_id = int(self._table.size - 1)
        self.tokenizer: TokenizerInfo | None = read_vocab_record(self.path)

    def arpa_path(self) -> Path | None:
        """The ARPA file of this LM: the file itself, or ``<stem>.arpa`` beside a binary."""
        if self.is_arpa:
            return self.path
        sibling = self.path.with_suffix(".arpa")
        return sibling if sibling.is_file() and is_arpa(sibling) else None

    @property
    def words(self) -> tuple[str, ...]:
        """The LM's words by KenLM index (index 0: ``<unk>``)."""
        return tuple(self._lm_words)

    # ------------------------------------------------------------------ vocabulary
    def _build_table(self, lm_words: list[str], mapping: dict[int, str] | None) -> np.ndarray:
        """uint32 ``[max_id + 1]``: token id -> KenLM index (0 = unknown)."""
        pairs: list[tuple[int, int]] = []
        if mapping is None:
            bad = [w for w in lm_words if w not in _SPECIAL and not (w.isdigit() and w.isascii())]
            if bad:
                raise RescorerError(
                    f"{self.path}: the LM's words are not decimal token ids (e.g. {bad[:3]}); "
                    "pass vocab=<mapping file> to map token ids to the LM's words"
                )
            for i, w in enumerate(lm_words):
                if w not in _SPECIAL:
                    pairs.append((int(w), i))
        else:
            for tid, word in mapping.items():
                idx = self._word_index.get(word)
                if idx is not None and word not in _SPECIAL:
                    pairs.append((int(tid), idx))
            if not pairs:
                raise RescorerError(
                    f"{self.path}: none of the mapping's words are in the LM; wrong mapping?"
                )
        size = max(t for t, _ in pairs) + 1 if pairs else 0
        table = np.zeros(size, dtype=np.uint32)
        for tid, idx in pairs:
            table[tid] = idx
        return table

    def indices(self, token_ids: Any) -> np.ndarray:
        """uint32 KenLM indices of token ids (any shape); 0 (``<unk>``) when unknown.

        Raises:
            RescorerError: with ``unknown="error"``, naming the first unknown id.
        """
        ids = np.asarray(token_ids, dtype=np.int64)
        out = np.zeros(ids.shape, dtype=np.uint32)
        inside = (ids >= 0) & (ids < self._table.size)
        out[inside] = self._table[ids[inside]]
        if self.unknown == "error":
            real = ids >= 0
            miss = real & (out == 0)
            if miss.any():
                raise RescorerError(
                    f"token id {int(ids[miss][0])} is not in the LM {self.path.name} "
                    "(unknown='error'); use unknown='unk' or a penalty to score it"
                )
        return out

    def lattice_indices(self, tokens: np.ndarray) -> np.ndarray:
        """uint32 KenLM indices of a lattice's int64 token array (padding ``-1`` -> 0).

        :meth:`indices` for the hot path of the exact search: one gather, and with
        ``unknown="error"`` only real tokens are checked (never the padding).

        Raises:
            RescorerError: with ``unknown="error"``, naming the first unknown id.
        """
        table = self._table
        ids = tokens
        if table.size == 0 or int(ids.max()) >= table.size:
            return self.indices(ids)  # ids beyond the table: unknown
        out = table.take(ids, mode="clip")  # padding -1 reads table[0]: zeroed below
        pad = ids < 0
        out[pad] = 0
        if self.unknown == "error":
            miss = (out == 0) & ~pad
            if miss.any():
                raise RescorerError(
                    f"token id {int(ids[miss][0])} is not in the LM {self.path.name} "
                    "(unknown='error'); use unknown='unk' or a penalty to score it"
                )
        return out

    def known(self, token_ids: Any) -> np.ndarray:
        """bool array: which token ids the LM has a word for."""
        ids = np.asarray(token_ids, dtype=np.int64)
        inside = (ids >= 0) & (ids < self._table.size)
        out = np.zeros(ids.shape, dtype=bool)
        out[inside] = self._table[ids[inside]] != 0
        return out

    def word(self, token_id: int) -> str:
        """The LM word string of a token id (``"<unk>"`` when unknown)."""
        ids = np.asarray([token_id], dtype=np.int64)
        inside = 0 <= token_id < self._table.size
        idx = int(self._table[ids[0]]) if inside else 0
        return self._lm_words[idx] if idx else "<unk>"

    def check_vocab(self, vocab_size: int, tokenizer: Any = None) -> None:
        """Raise when the LM does not fit a model's vocabulary ``[0, vocab_size)``.

        An LM trained with another tokenizer is the usual cause; scoring with it would be
        silently wrong. Checked: the LM's largest token id; with a tokenizer record beside the
        LM (see the module docstring) also its ``V``, and, when ``tokenizer`` is given (a
        :class:`~blockdraft.models.TokenizerInfo` or any blockdraft tokenizer, e.g. a Hugging
        Face model's ``HFTokenizer``), its vocabulary fingerprint. A ``tokenizer`` given for
        an LM without a record cannot be compared: that is a
        :class:`~blockdraft.core.errors.BlockdraftWarning`.

        Raises:
            RescorerError: naming both tokenizers.
        """
        if self.max_token_id >= vocab_size:
            raise RescorerError(
                f"the LM {self.path.name} knows token id {self.max_token_id}, outside the "
                f"model's vocabulary of {vocab_size}; was it trained with another tokenizer?"
            )
        check_tokenizer_record(self.path, self.tokenizer, vocab_size, tokenizer, RescorerError)

    def unk_ln(self) -> float | None:
        """The fixed unknown log-prob (nats) of the policy, or None for KenLM's own."""
        return self.unknown if isinstance(self.unknown, float) else None

    # ------------------------------------------------------------------ engines
    def kenlm_model(self) -> Any:
        """The ``kenlm.Model`` of this file (loaded on first use)."""
        if self._kenlm is None:
            try:
                import kenlm
            except ImportError as e:  # pragma: no cover - kenlm is a dependency
                raise RescorerError("the kenlm module is not installed: pip install kenlm") from e
            try:
                self._kenlm = kenlm.Model(str(self.path))
            except (OSError, RuntimeError) as e:
                raise RescorerError(f"KenLM could not load {self.path}: {e}") from e
        return self._kenlm

    @property
    def native_model(self) -> native.NativeModel | None:
        """The native model when ``engine == "native"``."""
        return self._native

    def start(self, context: Sequence[int] | np.ndarray | None) -> tuple[bool, np.ndarray]:
        """``(bos, context_indices)``: the LM start for a committed prefix (see module doc)."""
        return self.start_checked(as_context(context))

    def start_checked(self, ctx: np.ndarray) -> tuple[bool, np.ndarray]:
        """:meth:`start` of a context already validated by ``as_context``."""
        if 0 < ctx.size and self.order > 1:  # the hot path: a few ids, looked up one by one
            table, size = self._table, self._table.size
            tail = ctx[-(self.order - 1):].tolist()
            idx = [int(table[t]) if t < size else 0 for t in tail]
            if self.unknown == "error" and 0 in idx:
                self.indices(np.asarray(tail, dtype=np.int64))  # raises, naming the id
            return False, np.array(idx, dtype=np.uint32)
        if ctx.size == 0:
            return True, np.zeros(0, dtype=np.uint32)
        return False, self.indices(ctx[-(self.order - 1):] if self.order > 1 else ctx[:0])

    def score(
        self, tokens: Sequence[int] | np.ndarray, context: Sequence[int] | np.ndarray = ()
    ) -> np.ndarray:
        """float64 ``[n]``: ln P(token_i | context, tokens_<i) under this LM and policy."""
        toks = as_context(tokens)
        bos, ctx = self.start(context)
        idx = self.indices(toks)
        if self._native is not None:
            out = self._native.score(idx, ctx, bos)
        else:
            out = self._score_kenlm(toks, context, bos)
        unk = self.unk_ln()
        if unk is not None:
            out = np.where(idx == 0, unk, out)
        return out

    def _score_kenlm(
        self, toks: np.ndarray, context: Sequence[int] | np.ndarray, bos: bool
    ) -> np.ndarray:
        import kenlm

        m = self.kenlm_model()
        state, nxt = kenlm.State(), kenlm.State()
        if bos:
            m.BeginSentenceWrite(state)
        else:
            m.NullContextWrite(state)
            ctx = as_context(context)
            for t in ctx[-(self.order - 1):].tolist() if self.order > 1 else []:
                m.BaseScore(state, self.word(int(t)), nxt)
                state, nxt = nxt, state
        out = np.zeros(toks.size)
        for i, t in enumerate(toks.tolist()):
            out[i] = m.BaseScore(state, self.word(int(t)), nxt) * LN10
            state, nxt = nxt, state
        return out

    def __repr__(self) -> str:
        return (
            f"NgramLM({str(self.path)!r}, order={self.order}, vocab_size={self.vocab_size}, "
            f"engine={self.engine!r})"
        )
