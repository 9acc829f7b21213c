"""Every reader, fed mutated copies of valid files (truncated, bit-flipped, bytes deleted,
duplicated or inserted, JSON fields edited or deleted, arrays swapped), returns an object equal
to the original or raises its room's error class: never another exception or a hang.

Formats without a checksum cannot tell a flipped digit of a value from the real one: where a
mutation leaves a valid file holding other values, the reader returns that other object; those
readers pass ``allow_different`` for value-editing mutations only (not for truncation or
swapped files, which must be caught). The default run keeps a few examples per reader
(``fuzz-default``, see conftest.py); the ``slow`` variants run the ``fuzz-slow`` profile.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fuzz_lib import check_outcome, mutated_copy, mutations
from hypothesis import given, settings
from hypothesis import strategies as st

from blockdraft.lattice import LatticeError, SausageLattice
from blockdraft.lattice.io import iter_lattices, load_lattice, save_lattice, save_lattices
from blockdraft.models.errors import ModelError
from blockdraft.oracle import OracleError, Trace, synthetic_trace
from blockdraft.rescorers.base import RescorerError
from blockdraft.rescorers.ngram.arpa import read_arpa

VALUE_EDITS = ("flip", "json_set", "insert", "delete", "duplicate")


class Reader:
    """A folder of valid files, how to load it, and what "equal" means."""

    def __init__(self, folder: Path, load: Callable[[Path], Any], equal: Callable[[Any, Any], bool],
                 error: type[BaseException], *, swap: bool = False,
                 different_ok: tuple[str, ...] = VALUE_EDITS) -> None:
        self.folder, self.load, self.equal, self.error = folder, load, equal, error
        self.swap, self.different_ok = swap, different_ok
        self.original = load(folder)

    def check(self, mutation: tuple[Any, ...]) -> str:
        with mutated_copy(self.folder, mutation) as copy:
            return check_outcome(self.load, self.equal, self.original, copy, self.error,
                                 mutation, allow_different=mutation[0] in self.different_ok)


# ------------------------------------------------------------------------------ the readers
def _lattice_file_equal(a: Any, b: Any) -> bool:
    return (np.array_equal(a.lattice.tokens, b.lattice.tokens)
            and np.array_equal(a.lattice.scores, b.lattice.scores)
            and np.array_equal(a.context, b.context)
            and (a.reference is None) == (b.reference is None)
            and (a.reference is None or np.array_equal(a.reference, b.reference))
            and a.meta == b.meta)


def _lattice(tmp: Path) -> SausageLattice:
    rng = np.random.default_rng(0)
    scores = np.sort(np.log(rng.dirichlet(np.ones(3), size=3)), axis=1)[:, ::-1]
    return SausageLattice(tokens=np.array([[5, 9, 2], [7, 1, 3], [4, 8, 6]]), scores=scores)


def lattice_json(tmp: Path) -> Reader:
    folder = tmp / "lattice"
    folder.mkdir()
    save_lattice(_lattice(tmp), folder / "l.json", context=[1, 2], reference=[5, 7, 4],
                 meta={"model": "m"})
    # context, reference and meta are optional fields: deleting one reads as "not saved"
    return Reader(folder, lambda f: load_lattice(f / "l.json"), _lattice_file_equal,
                  LatticeError, different_ok=(*VALUE_EDITS, "json_delete"))


def lattice_jsonl(tmp: Path) -> Reader:
    folder = tmp / "lattices"
    folder.mkdir()
    lat = _lattice(tmp)
    save_lattices([lat, lat.topk(2) if hasattr(lat, "topk") else lat, lat], folder / "l.jsonl")

    def load(f: Path) -> list[Any]:
        return list(iter_lattices(f / "l.jsonl"))

    def equal(a: list[Any], b: list[Any]) -> bool:
        return len(a) == len(b) and all(map(_lattice_file_equal, a, b))

    # JSON Lines has no count: a file cut at a line end reads as its first lines.
    return Reader(folder, load, equal, LatticeError,
                  different_ok=(*VALUE_EDITS, "truncate", "json_delete"))


def arpa(tmp: Path) -> Reader:
    folder = tmp / "arpa"
    folder.mkdir()
    (folder / "lm.arpa").write_text(
        "\\data\\\nngram 1=5\nngram 2=3\n\n\\1-grams:\n-1.0\t<unk>\t0\n-99\t<s>\t-0.3\n"
        "-1.0\t</s>\t0\n-0.5\t3\t-0.2\n-0.7\t8\t-0.1\n\n\\2-grams:\n-0.1\t<s> 3\n-0.2\t3 8\n"
        "-0.3\t8 3\n\n\\end\\\n")
    return Reader(folder, lambda f: list(read_arpa(f / "lm.arpa")), lambda a, b: a == b,
                  RescorerError)


def _trace_equal(a: Trace, b: Trace) -> bool:
    names = ("prompt_ids", "prompt_offsets", "greedy_ids", "position_offsets", "topk_ids",
             "topk_logprobs", "entropy")
    return ((a.h, a.K, a.V, dict(a.signature)) == (b.h, b.K, b.V, dict(b.signature))
            and all(np.array_equal(getattr(a, n), getattr(b, n), equal_nan=True)
                    for n in names))


def trace(tmp: Path) -> Reader:
    folder = tmp / "trace"
    synthetic_trace(folder, num_examples=2, h=3, K=4, V=30, seed=1, length=(3, 6))
    # the signature is free-form (like a lattice's meta): deleting a key of it is allowed
    return Reader(folder, Trace.open, _trace_equal, OracleError, swap=True,
                  different_ok=(*VALUE_EDITS, "json_delete"))


def _state_equal(a: Any, b: Any) -> bool:
    import torch

    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(
        sa[k].dtype == sb[k].dtype and sa[k].shape == sb[k].shape
        and bool(torch.equal(sa[k], sb[k])) for k in sa)


def checkpoint(tmp: Path) -> Reader:
    import torch

    from blockdraft.models import BlockwiseConfig, BlockwiseLM, load_model, save_model

    torch.manual_seed(0)
    model = BlockwiseLM(BlockwiseConfig.tiny(vocab_size=40, h=2, max_seq_len=16)).eval()
    folder = tmp / "model"
    save_model(model, folder)

    def equal(a: Any, b: Any) -> bool:
        return type(a) is type(b) and a.config == b.config and _state_equal(a, b)

    return Reader(folder, load_model, equal, ModelError)


def tokenizer(tmp: Path) -> Reader:
    from blockdraft.models import Tokenizer
    from blockdraft.models.checkpoint import load_tokenizer

    texts = [f"the value of item {i} is {i * 7 % 13}" for i in range(40)]
    tok = Tokenizer.train(texts, vocab_size=270)
    folder = tmp / "tok"
    folder.mkdir()
    tok.save(folder)
    probe = "the value of item 12 is 3, or é?"

    def equal(a: Any, b: Any) -> bool:
        return (a.vocab_size, a.info().fingerprint, a.encode(probe)) == (
            b.vocab_size, b.info().fingerprint, b.encode(probe))

    return Reader(folder, load_tokenizer, equal, ModelError)


def medusa_heads(tmp: Path) -> Reader:
    import torch

    from blockdraft.models.hf.formats import read_heads, write_heads
    from blockdraft.models.hf.medusa import MedusaHeads

    heads = MedusaHeads(8, 16, 2, 1, True)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    folder = write_heads(heads, tmp / "heads", "medusa-heads", base_model="smollm2")

    def equal(a: Any, b: Any) -> bool:
        return ((a.num_heads, a.num_layers, a.own_projection, a.tie_layers)
                == (b.num_heads, b.num_layers, b.own_projection, b.tie_layers)
                and _state_equal(a, b))

    return Reader(folder, read_heads, equal, ModelError)


def kenlm_binary(tmp: Path) -> Reader:
    from blockdraft.rescorers.ngram import NgramLM, native
    from blockdraft.rescorers.ngram.train import find_kenlm_tool, train_ngram

    try:
        find_kenlm_tool("lmplz")
    except RescorerError as e:
        pytest.skip(f"KenLM's lmplz is not built ({e})")
    if not native.available():
        pytest.skip("the native KenLM search is not built")
    folder = tmp / "kenlm"
    train_ngram([np.array([i % 7, (i * 3) % 11, (i * 5) % 13, i % 4]) for i in range(200)],
                folder / "lm", order=3)
    probes = [([1, 2, 3], []), ([4, 0, 9], [3, 6]), ([12, 12], [1])]

    def load(f: Path) -> Any:
        lm = NgramLM(f / "lm.bin")
        return (lm.order, lm.vocab_size, lm.max_token_id,
                lm.native_model is not None and lm.native_model.has_bounds,
                [lm.score(t, c).tolist() for t, c in probes])

    # the binary and its ARPA file are checked against lm.fingerprint.json: any change to
    # either is refused (its ARPA header and the 1-grams aside: json edits of the record's
    # other fields do not matter)
    return Reader(folder, load, lambda a, b: a == b, RescorerError, swap=True,
                  different_ok=())


READERS: dict[str, Callable[[Path], Reader]] = {
    "lattice-json": lattice_json,
    "lattice-jsonl": lattice_jsonl,
    "arpa": arpa,
    "trace": trace,
    "checkpoint": checkpoint,
    "tokenizer": tokenizer,
    "medusa-heads": medusa_heads,
    "kenlm-binary": kenlm_binary,
}


@pytest.fixture(scope="module")
def readers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each reader built on first use (one may skip: KenLM not built)."""
    cache: dict[str, Any] = {}

    def get(name: str) -> Reader:
        if name not in cache:
            cache[name] = READERS[name](tmp_path_factory.mktemp(name))
        return cache[name]

    return {"get": get}


def _fuzz(readers: dict[str, Any], name: str, data: st.DataObject) -> None:
    r = readers["get"](name)
    mutation = data.draw(mutations(r.folder, swap=r.swap), label="mutation")
    r.check(mutation)


@pytest.mark.parametrize("name", list(READERS))
@given(data=st.data())
def test_reader_survives_mutations(readers, name, data):
    _fuzz(readers, name, data)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(READERS))
@settings(settings.get_profile("fuzz-slow"))
@given(data=st.data())
def test_reader_survives_mutations_slow(readers, name, data):
    _fuzz(readers, name, data)
