"""`Tokenizer`: byte-level BPE (HF ``tokenizers``), trained on a corpus or read from GPT-2 files.

Public surface:
    Tokenizer.train(corpus, vocab_size=4096, min_frequency=2)   files or an iterator of strings
    Tokenizer.from_gpt2_files(vocab_json, merges_txt)           the GPT-2 BPE
    Tokenizer.load(path)     a ``tokenizer.json`` file, a directory holding one, or a directory
                             with GPT-2 ``vocab.json`` + ``merges.txt`` (or ``gpt2_*`` names)
    tok.encode(text) -> list[int];  tok.decode(ids) -> str;  tok.save(directory) -> Path
    tok.vocab_size, tok.eos_id, tok.pad_id
    BaseTokenizer            the part every tokenizer shares (``backend``, ``vocab_size``,
                             checked ``encode`` and ``decode``, ``len``, ``vocabulary``,
                             ``fingerprint``, ``info``); also the base of
                             :class:`blockdraft.models.hf.HFTokenizer`
    TokenizerInfo            frozen: a tokenizer's name, ``V`` and vocabulary fingerprint (what
                             an n-gram LM records of the tokenizer it was trained with)

Byte-level BPE round-trips any text exactly: ``decode(encode(s)) == s``. The end-of-text token
``<|endoftext|>`` is EOS (and doubles as BOS where a model needs a first token); a trained
tokenizer also has ``<pad>``. Special-token strings inside the text are encoded as the special
tokens.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blockdraft.core.checks import check_int
from blockdraft.core.files import atomic_path
from blockdraft.models.errors import ModelError

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<pad>"
TOKENIZER_FILE = "tokenizer.json"
_GPT2_NAMES = (("vocab.json", "merges.txt"), ("gpt2_vocab.json", "gpt2_merges.txt"))


def _byte_level(backend: Any) -> Any:
    """Set GPT-2's byte-level pre-tokenizer and decoder on a ``tokenizers.Tokenizer``."""
    from tokenizers import decoders, pre_tokenizers

    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return backend


def read_gpt2_merges(path: str | Path) -> list[tuple[str, str]]:
    """The merges of a GPT-2 ``merges.txt``, in rank order.

    Every line is a merge ``"left right"`` except a first line starting with ``#version``
    (present in OpenAI's release, absent from some copies: it is skipped only when present)
    and blank lines.

    Raises:
        ModelError: when the file is missing or a line is not two space-separated symbols.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ModelError(f"cannot read the GPT-2 merges file {path}: {e}") from e
    merges: list[tuple[str, str]] = []
    for number, line in enumerate(lines, start=1):
        if number == 1 and line.startswith("#version"):
            continue
        if not line.strip():
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise ModelError(
                f"{path}, line {number}: expected a merge 'left right', got {line!r}"
            )
        merges.append((parts[0], parts[1]))
    if not merges:
        raise ModelError(f"the GPT-2 merges file {path} holds no merges")
    return merges


@dataclass(frozen=True)
class TokenizerInfo:
    """What identifies a tokenizer's token ids, to refuse artefacts made with another one.

    Attributes:
        name: where it came from (a model name or a path; informative only).
        vocab_size: ``V``, the ids ``[0, V)`` (a model's padded vocabulary included).
        fingerprint: :meth:`BaseTokenizer.fingerprint`, equal for two tokenizers exactly when
            they map the same token strings to the same ids.
    """

    name: str
    vocab_size: int
    fingerprint: str

    def to_dict(self) -> dict[str, object]:
        """A JSON-serialisable dict."""
        return {"name": self.name, "vocab_size": self.vocab_size,
                "fingerprint": self.fingerprint}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> TokenizerInfo:
        """The inverse of :meth:`to_dict`.

        Raises:
            ModelError: a missing or mistyped field.
        """
        name, size, fp = data.get("name"), data.get("vocab_size"), data.get("fingerprint")
        if not isinstance(size, int) or isinstance(size, bool) or size < 1 or not isinstance(
                fp, str) or not fp:
            raise ModelError(f"not a tokenizer record (name, vocab_size, fingerprint): {data!r}")
        return cls(str(name or ""), size, fp)


def vocabulary_fingerprint(vocab: Mapping[str, int]) -> str:
    """16 hex digits of SHA-256 over a ``{token string: id}`` vocabulary, in id order."""
    pairs = sorted((int(i), str(t)) for t, i in vocab.items())
    raw = json.dumps(pairs, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(raw).hexdigest()[:16]


class BaseTokenizer:
    """What blockdraft's tokenizers share over a wrapped backend: ``backend``,
    ``vocab_size``, ``encode`` (a str check, then the subclass's :meth:`_encode`), ``decode``
    (with the vocabulary check) and ``len``. Subclasses set ``_backend`` and ``_vocab_size``
    (this :class:`Tokenizer` over HF ``tokenizers``, and
    :class:`blockdraft.models.hf.HFTokenizer` over a ``transformers`` tokenizer).
    """

    __slots__ = ("_backend", "_vocab_size")

    _backend: Any
    _vocab_size: int

    @property
    def backend(self) -> Any:
        """The wrapped backend tokenizer (treat it as read-only)."""
        return self._backend

    @property
    def vocab_size(self) -> int:
        """``V``: every valid id is in ``[0, V)`` (special tokens included; for a model's
        tokenizer, every id the model can produce)."""
        return self._vocab_size

    @property
    def eos_id(self) -> int | None:
        """The end-of-text id (a chat model's end of turn), or None when there is none."""
        raise NotImplementedError

    @property
    def pad_id(self) -> int | None:
        """The padding id, or None."""
        raise NotImplementedError

    @property
    def has_chat_template(self) -> bool:
        """Whether prompts can be wrapped as chat turns (``apply_chat_template``): a plain BPE
        tokenizer has no template; a Hugging Face model's may."""
        return False

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`encode` of each text."""
        return [self.encode(t) for t in texts]

    def save(self, directory: str | Path) -> Path:
        """Write the tokenizer's files into ``directory`` (created)."""
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, without special tokens added (no BOS/EOS).

        Raises:
            ModelError: when ``text`` is not a string.
        """
        if not isinstance(text, str):
            raise ModelError(f"encode expects a str, got {type(text).__name__}")
        return self._encode(text)

    def _encode(self, text: str) -> list[int]:
        """The backend's token ids of a str ``text`` (no special tokens added)."""
        raise NotImplementedError

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """The text of ``ids``; special tokens are written out unless ``skip_special_tokens``.

        Raises:
            ModelError: on an id outside ``[0, vocab_size)``.
        """
        ids = [int(i) for i in ids]
        for i in ids:
            if not 0 <= i < self._vocab_size:
                raise ModelError(f"token id {i} is outside the vocabulary [0, {self._vocab_size})")
        return str(self._backend.decode(ids, skip_special_tokens=skip_special_tokens))

    def __len__(self) -> int:
        return self._vocab_size

    def vocabulary(self) -> dict[str, int]:
        """``{token string: id}`` of every token the backend knows (added tokens included)."""
        raise NotImplementedError

    def fingerprint(self) -> str:
        """The vocabulary's fingerprint (:func:`vocabulary_fingerprint`): two tokenizers with
        the same one give every token string the same id, whatever their class or files."""
        return vocabulary_fingerprint(self.vocabulary())

    def info(self, name: str = "") -> TokenizerInfo:
        """This tokenizer's :class:`TokenizerInfo` (``name``: where it came from)."""
        return TokenizerInfo(name=str(name), vocab_size=self.vocab_size,
                             fingerprint=self.fingerprint())


class Tokenizer(BaseTokenizer):
    """A byte-level BPE tokenizer with an end-of-text token.

    Build one with :meth:`train`, :meth:`from_gpt2_files` or :meth:`load`; the wrapped HF
    ``tokenizers.Tokenizer`` is ``self.backend`` (treat it as read-only).

    Raises:
        ModelError: when the backend lacks the end-of-text token ``<|endoftext|>``.
    """

    __slots__ = ("_eos_id", "_pad_id")

    def __init__(self, backend: Any) -> None:
        eos = backend.token_to_id(EOS_TOKEN)
        if eos is None:
            raise ModelError(
                f"the tokenizer has no end-of-text token {EOS_TOKEN!r}; train it with "
                "Tokenizer.train (which adds it) or add it as a special token"
            )
        self._backend = backend
        self._eos_id = int(eos)
        pad = backend.token_to_id(PAD_TOKEN)
        self._pad_id = None if pad is None else int(pad)
        self._vocab_size = int(backend.get_vocab_size(with_added_tokens=True))

    # ---- construction ------------------------------------------------------------------------

    @classmethod
    def train(
        cls,
        corpus: Sequence[Path] | Iterable[str],
        vocab_size: int = 4096,
        min_frequency: int = 2,
    ) -> Tokenizer:
        """Train a byte-level BPE.

        Args:
            corpus: a list of ``pathlib.Path`` text files (read as UTF-8), or an iterable of
                ``str`` texts. A ``str`` is always text, never a file name: wrap file names
                in ``Path``.
            vocab_size: the largest final vocabulary, the 256 byte symbols and the special
                tokens ``<|endoftext|>`` (id 0) and ``<pad>`` (id 1) included; a small corpus
                can run out of pairs to merge first (read ``vocab_size`` afterwards).
            min_frequency: a pair is merged only if it occurs at least this often.

        Raises:
            ModelError: on ``vocab_size < 259``, a missing file, or an empty corpus.
        """
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import models, pre_tokenizers, trainers

        vocab_size = check_int(vocab_size, "vocab_size (256 bytes + 2 special tokens + 1)",
                               ModelError, minimum=259)
        if isinstance(corpus, (str, Path)):
            raise ModelError(
                "corpus must be a list of file paths or an iterable of strings, got a single "
                f"{type(corpus).__name__}; wrap a path in a list: [path]"
            )
        backend = _byte_level(HFTokenizer(models.BPE()))
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=[EOS_TOKEN, PAD_TOKEN],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        if isinstance(corpus, Sequence) and len(corpus) > 0 and all(
            isinstance(x, Path) for x in corpus
        ):
            files = [Path(x) for x in corpus]
            missing = [str(f) for f in files if not f.is_file()]
            if missing:
                raise ModelError(f"corpus file(s) not found: {missing}")
            if not any(f.stat().st_size for f in files):
                raise ModelError("the corpus files are empty; give at least some text to train on")
            backend.train([str(f) for f in files], trainer)
            return cls(backend)
        seen = False

        def checked() -> Iterator[str]:
            nonlocal seen
            for text in corpus:
                if not isinstance(text, str):
                    raise ModelError(
                        f"corpus items must all be str (texts) or all Path (files), got "
                        f"{type(text).__name__}"
                    )
                seen = seen or bool(text)
                yield text

        backend.train_from_iterator(checked(), trainer)
        if not seen:
            raise ModelError("the corpus is empty; give at least some text to train on")
        return cls(backend)

    @classmethod
    def from_gpt2_files(cls, vocab_json: str | Path, merges_txt: str | Path) -> Tokenizer:
        """The GPT-2 BPE from its ``vocab.json`` and ``merges.txt`` (see
        :func:`read_gpt2_merges` for the ``#version`` line).

        Raises:
            ModelError: when a file is missing or malformed, or a merge uses an unknown symbol.
        """
        from tokenizers import AddedToken, models
        from tokenizers import Tokenizer as HFTokenizer

        vocab_path = Path(vocab_json)
        try:
            vocab = json.loads(vocab_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:  # ValueError: not UTF-8, not JSON
            raise ModelError(f"cannot read the GPT-2 vocabulary {vocab_path}: {e}") from e
        if not isinstance(vocab, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
            and 0 <= v < 2**32 for k, v in vocab.items()
        ):
            raise ModelError(f"{vocab_path} must map token strings to integer ids in "
                             "[0, 2**32)")
        merges = read_gpt2_merges(merges_txt)
        for number, (left, right) in enumerate(merges, start=1):
            if left not in vocab or right not in vocab or left + right not in vocab:
                raise ModelError(
                    f"merge {number} ({left!r} {right!r}) of {merges_txt} uses a symbol missing "
                    f"from {vocab_path}; are the two files from the same tokenizer?"
                )
        try:
            backend = _byte_level(HFTokenizer(models.BPE(vocab=vocab, merges=merges)))
        except Exception as e:  # tokenizers raises bare Exceptions on what it cannot build
            raise ModelError(f"{vocab_path} and {merges_txt} do not make a BPE tokenizer: "
                             f"{e}") from e
        backend.add_special_tokens([AddedToken(EOS_TOKEN, special=True, normalized=False)])
        return cls(backend)

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        """Load a tokenizer.

        Args:
            path: a ``tokenizer.json`` file, a directory with ``tokenizer.json``, or a
                directory with the GPT-2 files ``vocab.json`` + ``merges.txt`` (also accepted
                as ``gpt2_vocab.json`` + ``gpt2_merges.txt``).

        Raises:
            ModelError: when nothing loadable is there (the message lists what was looked
                for) or the file is not a valid tokenizer.
        """
        from tokenizers import Tokenizer as HFTokenizer

        path = Path(path)
        file = path / TOKENIZER_FILE if path.is_dir() else path
        if file.is_file():
            try:
                backend = HFTokenizer.from_file(str(file))
            except Exception as e:  # tokenizers raises a bare Exception on bad JSON
                raise ModelError(f"{file} is not a valid tokenizer file: {e}") from e
            return cls(backend)
        if path.is_dir():
            for vocab_name, merges_name in _GPT2_NAMES:
                if (path / vocab_name).is_file() and (path / merges_name).is_file():
                    return cls.from_gpt2_files(path / vocab_name, path / merges_name)
        raise ModelError(
            f"no tokenizer at {path}: expected a {TOKENIZER_FILE} file, or a directory with "
            f"{TOKENIZER_FILE} or with vocab.json + merges.txt; save one with Tokenizer.save"
        )

    # ---- use ---------------------------------------------------------------------------------

    @property
    def eos_id(self) -> int:
        """Id of ``<|endoftext|>``."""
        return self._eos_id

    @property
    def pad_id(self) -> int | None:
        """Id of ``<pad>``, or None when the tokenizer has none (GPT-2)."""
        return self._pad_id

    def _encode(self, text: str) -> list[int]:
        return list(self._backend.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`encode` of each text (parallel in the Rust backend)."""
        for text in texts:
            if not isinstance(text, str):
                raise ModelError(f"encode_batch expects strings, got {type(text).__name__}")
        return [list(e.ids) for e in self._backend.encode_batch(list(texts),
                                                                add_special_tokens=False)]

    def id_to_token(self, token_id: int) -> str:
        """The BPE symbol of ``token_id`` (byte-level: a leading space shows as ``Ġ``)."""
        token = self._backend.id_to_token(int(token_id))
        if token is None:
            raise ModelError(
                f"token id {token_id} is outside the vocabulary [0, {self._vocab_size})"
            )
        return str(token)

    def token_to_id(self, token: str) -> int | None:
        """The id of a BPE symbol, or None."""
        i = self._backend.token_to_id(token)
        return None if i is None else int(i)

    def vocabulary(self) -> dict[str, int]:
        """``{BPE symbol: id}``, special tokens included."""
        return {str(t): int(i) for t, i in
                self._backend.get_vocab(with_added_tokens=True).items()}

    def save(self, directory: str | Path) -> Path:
        """Write ``directory/tokenizer.json`` (the directory is created); returns its path."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        file = directory / TOKENIZER_FILE
        with atomic_path(file) as tmp:
            self._backend.save(str(tmp))
        return file

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self._vocab_size}, eos_id={self._eos_id})"
