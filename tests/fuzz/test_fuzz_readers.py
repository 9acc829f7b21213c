"""Every reader, fed mutated copies of valid files (truncated, bit-flipped, bytes deleted,
duplicated or inserted, JSON fields edited or deleted, arrays swapped), returns an object equal
to the original or raises its room's error class: never another exception or a hang.

Two kinds of format (docs/architecture.md, "Integrity"):

- Formats blockdraft writes and nobody edits by hand carry SHA-256 digests recorded when they
  were written (trace folders, model checkpoints, the safetensors heads file of blockdraft's
  Medusa heads): for those NO mutation may load a different object (``different_ok=()``).
- Interchange formats, meant to be edited or produced by other tools (lattice JSON/JSONL, ARPA
  text, ``tokenizer.json``, Medusa-1 ``.pt`` heads as other tools write them, GGUF headers,
  GPT-2 ``vocab.json`` + ``merges.txt``) and the version 1
  traces and checkpoints written before digests existed, cannot tell a flipped digit of a value
  from the real one: where a mutation leaves a valid file holding other values, the reader
  returns that other object. Those readers allow a different object for value-editing
  mutations only (``different_ok``; never for truncation or swapped files, which must be
  caught); they are fuzzed all the same, for errors that escape, hangs and huge allocations.

The model cache (a GGUF file dequantised once into a folder, with a sealed manifest) is fuzzed
end to end: whatever is done to the cached folder, loading the model gives the model the GGUF
file holds (the cache rebuilt) and never an error; a mutated GGUF file gives that model, another
one (a changed weight: GGUF has no checksum), or a ModelError, never anything else.

The default run keeps a few examples per reader (``fuzz-default``, see conftest.py); the
``slow`` variants run the ``fuzz-slow`` profile.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
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
"""The mutations that may leave a valid file holding other values (interchange formats)."""


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


def unseal_to_v1(file: Path, version_key: str) -> None:
    """Make a sealed ``meta.json``/``config.json`` a version 1 file (no digests), as
    blockdraft wrote them before they carried any."""
    data = json.loads(file.read_text())
    del data["integrity"]
    data[version_key] = 1
    file.write_text(json.dumps(data, indent=2))


def trace(tmp: Path) -> Reader:
    folder = tmp / "trace"
    synthetic_trace(folder, num_examples=2, h=3, K=4, V=30, seed=1, length=(3, 6))
    # sealed: meta.json and every .npy file are checked against their digests
    return Reader(folder, Trace.open, _trace_equal, OracleError, swap=True, different_ok=())


def trace_v1(tmp: Path) -> Reader:
    folder = tmp / "trace"
    synthetic_trace(folder, num_examples=2, h=3, K=4, V=30, seed=1, length=(3, 6))
    unseal_to_v1(folder / "meta.json", "version")
    # no digests: the signature is free-form (like a lattice's meta), deleting a key of it is
    # allowed, and a changed value cannot be told from the real one
    return Reader(folder, Trace.open, _trace_equal, OracleError, swap=True,
                  different_ok=(*VALUE_EDITS, "json_delete"))


def _state_equal(a: Any, b: Any) -> bool:
    import torch

    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(
        sa[k].dtype == sb[k].dtype and sa[k].shape == sb[k].shape
        and bool(torch.equal(sa[k], sb[k])) for k in sa)


def _checkpoint(tmp: Path, v1: bool) -> Reader:
    import torch

    from blockdraft.models import BlockwiseConfig, BlockwiseLM, load_model, save_model

    torch.manual_seed(0)
    model = BlockwiseLM(BlockwiseConfig.tiny(vocab_size=40, h=2, max_seq_len=16)).eval()
    folder = tmp / "model"
    save_model(model, folder)
    if v1:
        unseal_to_v1(folder / "config.json", "format_version")

    def equal(a: Any, b: Any) -> bool:
        return type(a) is type(b) and a.config == b.config and _state_equal(a, b)

    # sealed: config.json and model.safetensors are checked against their digests
    return Reader(folder, load_model, equal, ModelError,
                  different_ok=VALUE_EDITS if v1 else ())


def checkpoint(tmp: Path) -> Reader:
    return _checkpoint(tmp, v1=False)


def checkpoint_v1(tmp: Path) -> Reader:
    return _checkpoint(tmp, v1=True)


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

    # interchange (any Hugging Face tokenizers file): its normalizer, pre-tokenizer,
    # post-processor and decoder are optional, so deleting one is a valid other tokenizer
    return Reader(folder, load_tokenizer, equal, ModelError,
                  different_ok=(*VALUE_EDITS, "json_delete"))


def hf_tokenizer(tmp: Path) -> Reader:
    pytest.importorskip("transformers")
    from transformers import PreTrainedTokenizerFast

    from blockdraft.models import Tokenizer
    from blockdraft.models.hf import load_hf_tokenizer

    texts = [f"the value of item {i} is {i * 7 % 13}" for i in range(40)]
    folder = tmp / "hf-tok"
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer.train(texts, vocab_size=270).backend,
                            eos_token="<|endoftext|>").save_pretrained(folder)
    probe = "the value of item 12 is 3, or é?"

    def load(f: Path) -> Any:
        tok = load_hf_tokenizer(f)
        return tok.vocab_size, tok.eos_id, tok.encode(probe)

    # a saved transformers tokenizer (tokenizer.json + tokenizer_config.json): interchange
    return Reader(folder, load, lambda a, b: a == b, ModelError,
                  different_ok=(*VALUE_EDITS, "json_delete", "truncate"))


def _heads_equal(a: Any, b: Any) -> bool:
    return ((a.num_heads, a.num_layers, a.own_projection, a.tie_layers)
            == (b.num_heads, b.num_layers, b.own_projection, b.tie_layers)
            and _state_equal(a, b))


def _random_heads(vocab: int | None, layers: int) -> Any:
    import torch

    from blockdraft.models.hf.medusa import MedusaHeads

    heads = MedusaHeads(8, vocab, 2, layers, vocab is not None)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in heads.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return heads


def medusa_heads(tmp: Path) -> Reader:
    from blockdraft.models.hf.formats import read_heads, write_heads

    # Medusa-1 heads (a torch.save file, as Medusa writes them): no digest, interchange
    folder = write_heads(_random_heads(16, 1), tmp / "heads", "medusa-heads",
                         base_model="smollm2")
    return Reader(folder, read_heads, _heads_equal, ModelError)


def medusa_v2(tmp: Path) -> Reader:
    from blockdraft.models.hf.formats import read_heads, write_heads

    # blockdraft's own layout: the safetensors file carries the digest of its tensors, and
    # config.json's sizes are checked against them (its other fields do not change the heads)
    folder = write_heads(_random_heads(None, 2), tmp / "heads", "medusa-v2",
                         base_model="smollm2")
    return Reader(folder, read_heads, _heads_equal, ModelError, different_ok=())


def vllm_heads(tmp: Path) -> Reader:
    from blockdraft.models.hf.formats import read_heads, write_heads

    # vLLM's layout as blockdraft writes it: sealed like medusa-v2 (own projections here)
    folder = write_heads(_random_heads(16, 1), tmp / "heads", "vllm", base_model="smollm2")
    return Reader(folder, read_heads, _heads_equal, ModelError, different_ok=())


def kenlm_binary(tmp: Path) -> Reader:
    from blockdraft.rescorers.ngram import NgramLM, native
    from blockdraft.training.ngram.train import find_kenlm_tool, train_ngram

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


def gguf_header(tmp: Path) -> Reader:
    pytest.importorskip("gguf")
    from blockdraft.models.hf.gguf import read_gguf_header
    from gguf_testlib import write_tiny_gguf

    folder = tmp / "gguf"
    folder.mkdir()
    write_tiny_gguf(folder / "tiny.gguf")

    def load(f: Path) -> Any:
        h = read_gguf_header(f / "tiny.gguf")
        return h.version, h.metadata, h.tensors, h.alignment, h.data_offset

    # interchange, no checksum: a flipped value or tensor data is another valid file; a cut
    # one never is (every tensor's data must fit), and nothing may escape or hang
    return Reader(folder, load, lambda a, b: a == b, ModelError)


def gpt2_files(tmp: Path) -> Reader:
    from blockdraft.models import Tokenizer

    tok = Tokenizer.train([f"the value of item {i} is {i * 7 % 13}" for i in range(40)],
                          vocab_size=270)
    folder = tmp / "gpt2"
    folder.mkdir()
    backend = json.loads(tok.backend.to_str())["model"]
    (folder / "vocab.json").write_text(json.dumps(backend["vocab"]), encoding="utf-8")
    merges = [m if isinstance(m, str) else " ".join(m) for m in backend["merges"]]
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n",
                                       encoding="utf-8")

    def load(f: Path) -> Any:
        t = Tokenizer.load(f)
        return t.vocab_size, t.encode("the value of item 12 is 3")

    return Reader(folder, load, lambda a, b: a == b, ModelError,
                  different_ok=(*VALUE_EDITS, "json_delete", "truncate"))


READERS: dict[str, Callable[[Path], Reader]] = {
    "lattice-json": lattice_json,
    "lattice-jsonl": lattice_jsonl,
    "arpa": arpa,
    "trace": trace,
    "trace-v1": trace_v1,
    "checkpoint": checkpoint,
    "checkpoint-v1": checkpoint_v1,
    "tokenizer": tokenizer,
    "hf-tokenizer": hf_tokenizer,
    "medusa-heads": medusa_heads,
    "medusa-v2": medusa_v2,
    "vllm-heads": vllm_heads,
    "kenlm-binary": kenlm_binary,
    "gguf-header": gguf_header,
    "gpt2-files": gpt2_files,
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


@pytest.fixture
def reader(readers: dict[str, Any], name: str) -> Reader:
    """The reader ``name``, built before hypothesis times its first example."""
    return readers["get"](name)  # type: ignore[no-any-return]


def _fuzz(r: Reader, data: st.DataObject) -> None:
    mutation = data.draw(mutations(r.folder, swap=r.swap), label="mutation")
    r.check(mutation)


@pytest.mark.parametrize("name", list(READERS))
@given(data=st.data())
def test_reader_survives_mutations(reader, data):
    _fuzz(reader, data)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(READERS))
@settings(settings.get_profile("fuzz-slow"))
@given(data=st.data())
def test_reader_survives_mutations_slow(reader, data):
    _fuzz(reader, data)


# ------------------------------------------------------------- sealed formats, by example
def _flip_last_value(name: str) -> Callable[[Path], None]:
    """Flip the lowest mantissa bit of the last float32 of a file (its byte ``size - 4``)."""

    def edit(folder: Path) -> None:
        data = bytearray((folder / name).read_bytes())
        data[-4] ^= 1
        (folder / name).write_bytes(bytes(data))

    return edit


def _edit_json(name: str, edit: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        data = json.loads((folder / name).read_text())
        edit(data)
        (folder / name).write_text(json.dumps(data))

    return apply


# Edits that leave a valid file holding other values: a version 1 (unsealed) file loads each as
# a different object; the sealed one refuses every one with the room's error.
VALUE_CHANGES: dict[str, list[Callable[[Path], None]]] = {
    "trace": [
        _flip_last_value("entropy.npy"),
        _flip_last_value("topk_logprobs.npy"),
        _edit_json("meta.json", lambda d: d["signature"].update(note="edited")),
    ],
    "checkpoint": [
        _flip_last_value("model.safetensors"),
        _edit_json("config.json", lambda d: d["config"].update(dropout=0.5)),
        _edit_json("config.json", lambda d: d["config"].update(max_seq_len=17)),
    ],
}


def _outcome(r: Reader, edit: Callable[[Path], None]) -> str:
    with tempfile.TemporaryDirectory(prefix="edit-") as tmp:
        copy = Path(tmp) / r.folder.name
        shutil.copytree(r.folder, copy)
        edit(copy)
        return check_outcome(r.load, r.equal, r.original, copy, r.error, ("edit",),
                             allow_different=True)


@pytest.mark.parametrize("name", list(VALUE_CHANGES))
def test_sealed_formats_refuse_what_unsealed_ones_load_as_another_object(readers, name):
    """Issue 13 item 5: no silently different object from a format blockdraft writes."""
    sealed, v1 = readers["get"](name), readers["get"](f"{name}-v1")
    edits = VALUE_CHANGES[name]
    assert [_outcome(v1, e) for e in edits] == ["different"] * len(edits)  # they do change it
    assert [_outcome(sealed, e) for e in edits] == ["error"] * len(edits)  # digests catch them


def test_sealed_heads_refuse_changed_tensors_and_sizes(readers):
    """blockdraft's medusa-v2 heads: a changed weight or a config naming fewer heads or layers
    is refused, a new base model name is not; Medusa-1 .pt heads (interchange, no digest) load
    with the config's fewer heads."""
    v2 = readers["get"]("medusa-v2")
    fewer_heads = _edit_json("config.json", lambda d: d.update(medusa_num_heads=1))
    assert _outcome(v2, _flip_last_value("medusa_lm_head.safetensors")) == "error"
    assert _outcome(v2, fewer_heads) == "error"
    assert _outcome(v2, _edit_json("config.json", lambda d: d.update(medusa_num_layers=1))) \
        == "error"
    assert _outcome(v2, _edit_json("config.json", lambda d: d.update(
        base_model_name_or_path="/elsewhere/smollm2"))) == "equal"
    assert _outcome(readers["get"]("medusa-heads"), fewer_heads) == "different"



# ------------------------------------------------------------- GGUF files and the model cache
@contextlib.contextmanager
def _cache_root(root: Path) -> Iterator[None]:
    """``$BLOCKDRAFT_CACHE`` set to ``root`` (hypothesis runs many examples in one test
    call: no function-scoped monkeypatch), blockdraft's warnings of a rebuild silenced."""
    from blockdraft.core.errors import BlockdraftWarning

    old = os.environ.get("BLOCKDRAFT_CACHE")
    os.environ["BLOCKDRAFT_CACHE"] = str(root)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", BlockdraftWarning)
            yield
    finally:
        if old is None:
            del os.environ["BLOCKDRAFT_CACHE"]
        else:
            os.environ["BLOCKDRAFT_CACHE"] = old


def _model_facts(gguf: Path) -> Any:
    """What a load of ``gguf`` gives: the weights and the tokenizer's ids of a probe."""
    from blockdraft.models.hf.loading import load_causal_lm

    model, tok = load_causal_lm(gguf)
    return ({k: v.clone() for k, v in model.state_dict().items()},
            tok.encode("abcab cab") if tok is not None else None)


def _facts_equal(a: Any, b: Any) -> bool:
    import torch

    return (a[0].keys() == b[0].keys() and all(torch.equal(a[0][k], b[0][k]) for k in a[0])
            and a[1] == b[1])


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Any]:
    """(the tiny GGUF file, its cached folder, what loading it gives)."""
    pytest.importorskip("gguf")
    pytest.importorskip("transformers")
    from blockdraft.models.hf.loading import cache_folder
    from gguf_testlib import write_tiny_gguf

    root = tmp_path_factory.mktemp("model-cache")
    (root / "gguf").mkdir()
    gguf = write_tiny_gguf(root / "gguf" / "tiny.gguf")
    with _cache_root(root / "cache"):
        facts = _model_facts(gguf)
        return gguf, cache_folder(gguf), facts


def _fuzz_cache(built: tuple[Path, Path, Any], data: st.DataObject) -> None:
    from blockdraft.models.hf.model_cache import cache_problem

    gguf, folder, original = built
    mutation = data.draw(mutations(folder), label="mutation")
    with mutated_copy(folder, mutation) as copy:

        def load(mutated: Path) -> Any:
            root = mutated.parent / "root"
            shutil.copytree(mutated, root / "hf" / mutated.name)  # times kept: copy2
            with _cache_root(root):
                facts = _model_facts(gguf)
            assert cache_problem(root / "hf" / mutated.name, deep=True) is None, "not rebuilt"
            return facts

        # sealed: whatever was done to the folder, the model loaded is the GGUF file's
        assert check_outcome(load, _facts_equal, original, copy, ModelError,
                             mutation) == "equal", mutation


@settings(deadline=None)  # a rebuild dequantises the file again
@given(data=st.data())
def test_the_model_cache_survives_mutations(built_cache, data):
    _fuzz_cache(built_cache, data)


@pytest.mark.slow
@settings(settings.get_profile("fuzz-slow"), deadline=None)
@given(data=st.data())
def test_the_model_cache_survives_mutations_slow(built_cache, data):
    _fuzz_cache(built_cache, data)


def _fuzz_gguf(built: tuple[Path, Path, Any], data: st.DataObject) -> None:
    gguf, _, original = built
    mutation = data.draw(mutations(gguf.parent), label="mutation")
    with mutated_copy(gguf.parent, mutation) as copy:

        def load(mutated: Path) -> Any:
            with _cache_root(mutated.parent / "cache"):
                return _model_facts(mutated / gguf.name)

        check_outcome(load, _facts_equal, original, copy, ModelError, mutation,
                      allow_different=mutation[0] in VALUE_EDITS)


@settings(deadline=None)
@given(data=st.data())
def test_a_gguf_file_survives_mutations(built_cache, data):
    _fuzz_gguf(built_cache, data)


@pytest.mark.slow
@settings(settings.get_profile("fuzz-slow"), deadline=None)
@given(data=st.data())
def test_a_gguf_file_survives_mutations_slow(built_cache, data):
    _fuzz_gguf(built_cache, data)
