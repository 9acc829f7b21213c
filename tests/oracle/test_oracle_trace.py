"""Tests of blockdraft.oracle.trace: the trace format, its writer, reader and validation."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockdraft.core.digest import sha256_file
from blockdraft.lattice.sausage import SausageLattice
from blockdraft.oracle import (
    OracleError,
    Trace,
    TraceFormatError,
    TraceWriter,
    synthetic_trace,
)
from blockdraft.oracle.trace import (
    FORMAT_NAME,
    FORMAT_VERSION,
    META_FILE,
    head_entropy_from_logits,
)
from blockdraft.oracle.trace.format import ARRAY_DTYPES


def ragged_examples(rng: np.random.Generator, h: int, K: int, V: int):
    """Three examples with ragged prompt (0, 4, 2) and greedy (1, 5, 3) lengths."""
    out = []
    for n_prompt, m in ((0, 1), (4, 5), (2, 3)):
        ids = np.stack(
            [np.stack([rng.permutation(V)[:K] for _ in range(h)]) for _ in range(m)]
        )  # (m, h, K)
        lp = -np.sort(rng.exponential(size=(m, h, K)), axis=-1)  # sorted best first, <= 0
        ent = rng.uniform(0, 3, size=(m, h))
        out.append((rng.integers(0, V, n_prompt), rng.integers(0, V, m), ids, lp, ent))
    return out


def brute_topk(logits: np.ndarray, K: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-K per row by (log-prob desc, id asc), from a full sort; padding for -inf."""
    z = logits.astype(np.float64)
    mx = z.max(-1, keepdims=True)
    logp = z - mx - np.log(np.sum(np.exp(z - mx), -1, keepdims=True))
    ids = np.empty(z.shape[:-1] + (K,), dtype=np.int64)
    lps = np.empty(z.shape[:-1] + (K,))
    for idx in np.ndindex(z.shape[:-1]):
        order = sorted(range(z.shape[-1]), key=lambda v, idx=idx: (-logp[idx][v], v))[:K]
        ids[idx] = order
        lps[idx] = logp[idx][order]
    ids[np.isneginf(lps)] = -1
    return ids, lps


# ---------------------------------------------------------------------------- round trips
def test_round_trip_ragged_memory_mapped(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    h, K, V = 3, 4, 20
    examples = ragged_examples(rng, h, K, V)
    with TraceWriter(tmp_path / "tr", h=h, K=K, V=V, signature={"model": "m1", "n": 3}) as w:
        for j, ex in enumerate(examples):
            assert w.add(*ex) == j
    trace = Trace.open(tmp_path / "tr")
    assert len(trace) == 3 and trace.num_positions == 9
    assert (trace.h, trace.K, trace.V) == (h, K, V)
    assert trace.lengths.tolist() == [1, 5, 3]
    for arr in (trace.topk_ids, trace.topk_logprobs, trace.entropy, trace.greedy_ids):
        assert isinstance(arr, np.memmap) and not arr.flags.writeable
    for j, (prompt, greedy, ids, lp, ent) in enumerate(examples):
        ex = trace[j]
        assert ex.index == j and ex.m == len(greedy)
        np.testing.assert_array_equal(ex.prompt_ids, prompt)
        np.testing.assert_array_equal(ex.greedy_ids, greedy)
        np.testing.assert_array_equal(ex.topk_ids, ids)
        np.testing.assert_array_equal(ex.topk_logprobs, lp.astype(np.float32))
        np.testing.assert_array_equal(ex.entropy, ent.astype(np.float32))
        assert ex.topk_ids.dtype == np.int32 and ex.topk_logprobs.dtype == np.float32
    assert [e.index for e in trace] == [0, 1, 2]
    assert trace[-1].index == 2
    with pytest.raises(IndexError):
        trace[3]
    sig = trace.signature
    assert sig["model"] == "m1" and sig["n"] == 3
    assert (sig["h"], sig["K"], sig["V"]) == (h, K, V)
    assert "version" in sig and "commit" in sig
    assert "model:m1" in trace.signature_string()
    meta = json.loads((tmp_path / "tr" / "meta.json").read_text())
    assert meta["format"] == FORMAT_NAME and meta["version"] == FORMAT_VERSION == 2
    assert sorted(meta["integrity"]["files"]) == sorted(f"{n}.npy" for n in ARRAY_DTYPES)
    assert meta["arrays"]["topk_ids"] == {"dtype": "<i4", "shape": [9, h, K]}
    assert meta["arrays"]["prompt_offsets"]["shape"] == [4]
    assert not list((tmp_path / "tr").glob("*.part"))


def test_add_logits_matches_brute_force_with_ties_and_masks(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    m, h, V, K = 4, 2, 9, 5
    logits = rng.standard_normal((m, h, V))
    logits[0, 1] = 0.0  # all tied: the smallest ids win
    logits[1, 0, 5:] = -np.inf  # 5 real tokens left, K = 5: no padding
    logits[2, 1, 3:] = -np.inf  # 3 real tokens: 2 padding entries
    greedy = np.argmax(logits[:, 0], axis=-1)  # head 1's argmax is the greedy token
    with TraceWriter(tmp_path / "tr", h=h, K=K, V=V) as w:
        w.add_logits([3, 1], greedy, logits)
    ex = Trace.open(tmp_path / "tr")[0]
    ids, lps = brute_topk(logits, K)
    np.testing.assert_array_equal(ex.topk_ids, ids)
    np.testing.assert_allclose(ex.topk_logprobs, lps.astype(np.float32), rtol=0, atol=1e-6)
    assert ex.topk_ids[0, 1].tolist() == [0, 1, 2, 3, 4]
    assert ex.topk_ids[2, 1, 3:].tolist() == [-1, -1]
    # entropy from scratch: -sum p ln p over the whole vocabulary
    full = logits - np.log(np.sum(np.exp(logits), axis=-1, keepdims=True))
    with np.errstate(invalid="ignore"):
        want = -np.nansum(np.where(np.isneginf(full), 0.0, np.exp(full) * full), axis=-1)
    np.testing.assert_allclose(ex.entropy, want, rtol=1e-6, atol=1e-6)
    assert ex.entropy[0, 1] == pytest.approx(np.log(V), rel=1e-6)
    np.testing.assert_array_equal(ex.head1_mismatches(), [])


def test_lattice_and_context(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    h, K, V = 3, 4, 20
    examples = ragged_examples(rng, h, K, V)
    with TraceWriter(tmp_path / "tr", h=h, K=K, V=V) as w:
        for ex in examples:
            w.add(*ex)
    ex = Trace.open(tmp_path / "tr")[1]
    lat = ex.lattice(2, 3)
    assert isinstance(lat, SausageLattice) and (lat.h, lat.k) == (h, 3)
    assert lat.counts.tolist() == [1, 3, 3]
    assert lat.tokens[0, 0] == ex.topk_ids[2, 0, 0]
    np.testing.assert_array_equal(lat.tokens[1:], ex.topk_ids[2, 1:, :3])
    np.testing.assert_array_equal(lat.scores[1:], ex.topk_logprobs[2, 1:, :3].astype(np.float64))
    assert ex.lattice(2, 3, certain_first=False).counts.tolist() == [3, 3, 3]
    np.testing.assert_array_equal(
        ex.context(3), np.concatenate([examples[1][0], examples[1][1][:3]])
    )
    assert ex.context(0).dtype == np.int64 and ex.context(5).size == 4 + 5
    with pytest.raises(OracleError, match=r"k = 5 is outside \[1, K = 4\]"):
        ex.lattice(0, 5)
    with pytest.raises(OracleError, match="t = 5 is outside"):
        ex.lattice(5, 1)
    with pytest.raises(OracleError, match="t = 6 is outside"):
        ex.context(6)


def test_from_head_logits_and_synthetic(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    exs = []
    for m in (2, 5):
        z = rng.standard_normal((m, 3, 12))
        exs.append((rng.integers(0, 12, 3), np.argmax(z[:, 0], -1), z))
    trace = Trace.from_head_logits(tmp_path / "a", exs, K=4, signature={"model": "x"})
    assert len(trace) == 2 and trace.lengths.tolist() == [2, 5]
    np.testing.assert_array_equal(trace[1].topk_ids, brute_topk(exs[1][2], 4)[0])
    with pytest.raises(OracleError, match="no examples"):
        Trace.from_head_logits(tmp_path / "b", [], K=4)
    syn = synthetic_trace(tmp_path / "s", num_examples=4, h=4, K=3, V=16, length=(1, 9), seed=5)
    assert len(syn) == 4 and syn.h == 4
    assert syn.head1_mismatches()[0].size == 0  # head 1 always ranks y_{t+1} first
    # accuracy 1: every head's top-1 is the truth wherever a truth exists
    perfect = synthetic_trace(tmp_path / "p", num_examples=2, h=3, K=2, V=16,
                              accuracy=[1.0, 1.0], seed=6)
    for ex in perfect:
        for t in range(ex.m):
            for i in range(3):
                if t + i < ex.m:
                    assert ex.topk_ids[t, i, 0] == ex.greedy_ids[t + i]


@settings(max_examples=20, deadline=None)
@given(
    h=st.integers(1, 3), K=st.integers(1, 4), V=st.integers(4, 9),
    lengths=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 5)), min_size=1, max_size=3),
    seed=st.integers(0, 2**16),
)
def test_round_trip_property(h: int, K: int, V: int, lengths, seed: int) -> None:
    rng = np.random.default_rng(seed)
    exs = []
    for n_prompt, m in lengths:
        z = np.round(rng.standard_normal((m, h, V)), 1)  # rounding makes ties common
        exs.append((rng.integers(0, V, n_prompt), rng.integers(0, V, m), z))
    with tempfile.TemporaryDirectory() as d:
        trace = Trace.from_head_logits(Path(d) / "t", exs, K=min(K, V))
        assert len(trace) == len(exs)
        for ex, (prompt, greedy, z) in zip(trace, exs, strict=True):
            ids, lps = brute_topk(z, min(K, V))
            np.testing.assert_array_equal(ex.prompt_ids, prompt)
            np.testing.assert_array_equal(ex.greedy_ids, greedy)
            np.testing.assert_array_equal(ex.topk_ids, ids)
            np.testing.assert_allclose(ex.topk_logprobs, lps, atol=1e-5)
            np.testing.assert_allclose(ex.entropy, head_entropy_from_logits(z), atol=1e-5)
        del trace, ex  # release the memory maps before the directory goes


# ---------------------------------------------------------------------------- writer errors
def one_example(m: int = 2, h: int = 2, K: int = 3, V: int = 10):
    ids = np.tile(np.arange(K), (m, h, 1))
    lp = np.tile(np.array([-0.5, -1.0, -2.0][:K]), (m, h, 1))
    return [1, 2], list(range(m)), ids, lp, np.ones((m, h))


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda a: a.__setitem__(1, []), "greedy_ids is empty"),
        (lambda a: a.__setitem__(0, [1, 10]), r"prompt_ids holds token id 10, outside .*\[0, 10\)"),
        (lambda a: a.__setitem__(1, [-1, 2]), "greedy_ids holds token id -1"),
        (lambda a: a.__setitem__(2, a[2][:, :, :2]), r"topk_ids has shape \(2, 2, 2\), expected"),
        (lambda a: a.__setitem__(4, np.ones((2, 3))), r"entropy has shape \(2, 3\)"),
        (lambda a: a[3].__setitem__((1, 0, 1), np.nan), "position t = 1, head 1, rank 2 is NaN"),
        (lambda a: a[3].__setitem__((0, 1, 0), 0.5), "is 0.5 > 0"),
        (lambda a: a[3].__setitem__((0, 1, 2), -0.1), "not sorted best first"),
        (lambda a: a[2].__setitem__((0, 0, 1), 0), "token 0 appears twice"),
        (lambda a: a[2].__setitem__((1, 1, 2), 10), r"topk_ids at position t = 1, head 2, rank 3"),
        (lambda a: a[2].__setitem__((1, 1, 2), -1), "padding is id -1 with log-prob -inf"),
        (lambda a: a[4].__setitem__((0, 0), -0.5), "entropies are finite and >= 0"),
        (lambda a: a.__setitem__(3, a[3].astype(int)), "must be floating point"),
    ],
    ids=["empty greedy", "prompt id", "greedy id", "topk shape", "entropy shape", "nan",
         "positive logprob", "unsorted", "duplicate", "topk id", "bad padding",
         "negative entropy", "int logprobs"],
)
def test_add_rejects_bad_input(tmp_path: Path, mutate: Callable, match: str) -> None:
    args = list(one_example())
    args[2] = args[2].copy()
    args[3] = args[3].astype(np.float64)
    mutate(args)
    with TraceWriter(tmp_path / "tr", h=2, K=3, V=10) as w:
        with pytest.raises(OracleError, match=match):
            w.add(*args)
        w.add(*one_example())  # the failed add wrote nothing: the trace stays consistent
    trace = Trace.open(tmp_path / "tr")
    assert len(trace) == 1 and trace.num_positions == 2


def test_writer_lifecycle_errors(tmp_path: Path) -> None:
    with pytest.raises(OracleError, match="K = 11 exceeds the vocabulary size V = 10"):
        TraceWriter(tmp_path / "a", h=2, K=11, V=10)
    with pytest.raises(OracleError, match="h must be a positive integer, got 0"):
        TraceWriter(tmp_path / "a", h=0, K=1, V=10)
    with pytest.raises(OracleError, match=r"signature\['model'\] = \[1\] is not a JSON scalar"):
        TraceWriter(tmp_path / "a", h=2, K=1, V=10, signature={"model": [1]})
    with pytest.raises(OracleError, match=r"signature\['h'\] = 3 contradicts h = 2"):
        TraceWriter(tmp_path / "a", h=2, K=1, V=10, signature={"h": 3})
    w = TraceWriter(tmp_path / "a", h=2, K=3, V=10)
    w.add(*one_example())
    w.close()
    w.close()  # idempotent
    with pytest.raises(OracleError, match="is closed"):
        w.add(*one_example())
    with pytest.raises(OracleError, match="not empty; pass overwrite=True"):
        TraceWriter(tmp_path / "a", h=2, K=3, V=10)
    with TraceWriter(tmp_path / "a", h=2, K=3, V=10, overwrite=True) as w2:
        w2.add(*one_example(m=4))
    assert Trace.open(tmp_path / "a").num_positions == 4
    with pytest.raises(OracleError, match=r"head_logits has shape \(2, 2, 9\)"):
        with TraceWriter(tmp_path / "b", h=2, K=3, V=10) as w3:
            w3.add_logits([1], [1, 2], np.zeros((2, 2, 9)))
    with pytest.raises(OracleError, match="rows 0..1: logits contain NaN"):
        with TraceWriter(tmp_path / "c", h=2, K=3, V=10) as w3:
            w3.add_logits([1], [1, 2], np.full((2, 2, 10), np.nan))


def test_exception_in_with_block_aborts(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        with TraceWriter(tmp_path / "tr", h=2, K=3, V=10) as w:
            w.add(*one_example())
            raise RuntimeError("boom")
    assert not (tmp_path / "tr").exists()
    (tmp_path / "kept").mkdir()
    with pytest.raises(RuntimeError):
        with TraceWriter(tmp_path / "kept", h=2, K=3, V=10) as w:
            raise RuntimeError("boom")
    assert (tmp_path / "kept").is_dir() and not list((tmp_path / "kept").iterdir())


def test_close_leaves_exactly_the_trace_files(tmp_path: Path) -> None:
    """Every file is written through a temporary that is renamed into place: none is left."""
    with TraceWriter(tmp_path / "tr", h=2, K=3, V=10) as w:
        w.add(*one_example())
    names = sorted(f.name for f in (tmp_path / "tr").iterdir())
    assert names == sorted([META_FILE] + [f"{n}.npy" for n in ARRAY_DTYPES])
    with TraceWriter(tmp_path / "tr", h=2, K=3, V=10, overwrite=True) as w:
        w.add(*one_example(m=4))
    assert sorted(f.name for f in (tmp_path / "tr").iterdir()) == names
    assert Trace.open(tmp_path / "tr").num_positions == 4


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(folder.iterdir())}


def test_failed_overwrite_leaves_the_old_trace_byte_identical(tmp_path: Path) -> None:
    """``overwrite=True`` replaces the old trace only once the new one is complete: a writer
    that raises mid-write (in add, in the with block, or while finalising) leaves every old
    byte in place and no temporary beside it."""
    with TraceWriter(tmp_path / "tr", h=2, K=3, V=10) as w:
        w.add(*one_example())
    before = _snapshot(tmp_path / "tr")
    with pytest.raises(KeyboardInterrupt):
        with TraceWriter(tmp_path / "tr", h=2, K=3, V=10, overwrite=True) as w:
            w.add(*one_example(m=4))
            raise KeyboardInterrupt  # Ctrl-C mid-run
    with pytest.raises(OracleError):
        with TraceWriter(tmp_path / "tr", h=2, K=3, V=10, overwrite=True) as w:
            w.add(*one_example(m=4))
            w.add_logits([1], [1, 2], np.full((2, 2, 10), np.nan))
    import blockdraft.oracle.trace.writer as writer_module

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    w = TraceWriter(tmp_path / "tr", h=2, K=3, V=10, overwrite=True)
    w.add(*one_example(m=4))
    real = writer_module.replace_directory
    writer_module.replace_directory = broken  # type: ignore[assignment]
    try:
        with pytest.raises(OSError, match="No space left"):
            w.close()
    finally:
        writer_module.replace_directory = real
    assert _snapshot(tmp_path / "tr") == before
    assert [p.name for p in tmp_path.iterdir()] == ["tr"]


def test_overwrite_never_deletes_files_that_are_not_a_trace(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "notes.txt").write_text("mine")
    with pytest.raises(OracleError, match=r"not a trace's \(notes.txt\)"):
        TraceWriter(tmp_path / "results", h=2, K=3, V=10, overwrite=True)
    assert (tmp_path / "results" / "notes.txt").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir()] == ["results"]


def test_concurrent_writers_last_complete_one_wins(tmp_path: Path) -> None:
    """Two writers of the same path at once: each builds its own folder; the swaps are
    serialised, and the trace there is the last one to finish, whole."""
    with TraceWriter(tmp_path / "tr", h=2, K=3, V=10) as w:
        w.add(*one_example())
    a = TraceWriter(tmp_path / "tr", h=2, K=3, V=10, overwrite=True)
    b = TraceWriter(tmp_path / "tr", h=2, K=3, V=10, overwrite=True)
    a.add(*one_example(m=3))
    b.add(*one_example(m=4))
    b.close()
    assert Trace.open(tmp_path / "tr").num_positions == 4
    a.close()
    assert Trace.open(tmp_path / "tr").num_positions == 3
    assert [p.name for p in tmp_path.iterdir()] == ["tr"]


def test_a_killed_writers_leftover_is_swept(tmp_path: Path) -> None:
    """A writer killed outright (SIGKILL) leaves its hidden folder; the next writer of that
    path removes it, since its process is gone."""
    import subprocess
    import sys

    code = ("import os, sys; from blockdraft.oracle.trace import TraceWriter; "
            "w = TraceWriter(sys.argv[1], h=2, K=3, V=10); os.kill(os.getpid(), 9)")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "tr")], check=False)
    [left] = list(tmp_path.iterdir())
    assert left.name.startswith(".tr.") and left.name.endswith(".partial")
    with TraceWriter(tmp_path / "tr", h=2, K=3, V=10) as w:
        w.add(*one_example())
    assert [p.name for p in tmp_path.iterdir()] == ["tr"]


# ---------------------------------------------------------------------------- open errors
@pytest.fixture
def good(tmp_path: Path) -> Path:
    with TraceWriter(tmp_path / "tr", h=2, K=3, V=10) as w:
        w.add(*one_example(m=2))
        w.add(*one_example(m=3))
    return tmp_path / "tr"


def as_version_1(path: Path) -> Path:
    """Make a trace a version 1 one, as blockdraft wrote them before digests: no
    ``integrity`` member in meta.json."""
    meta = json.loads((path / "meta.json").read_text())
    del meta["integrity"]
    meta["version"] = 1
    (path / "meta.json").write_text(json.dumps(meta))
    return path


def edit_meta(path: Path, **changes) -> None:
    meta = json.loads((path / "meta.json").read_text())
    meta.update(changes)
    (path / "meta.json").write_text(json.dumps(meta))


def resave(path: Path, name: str, fn: Callable[[np.ndarray], np.ndarray]) -> None:
    arr = np.array(np.load(path / f"{name}.npy"))
    np.save(path / f"{name}.npy", fn(arr))


def set_value(index, value):
    def fn(a: np.ndarray) -> np.ndarray:
        a[index] = value
        return a

    return fn


CORRUPTIONS: list[tuple[str, Callable[[Path], None], str]] = [
    ("no meta", lambda p: (p / "meta.json").unlink(), r"meta.json: missing"),
    ("bad json", lambda p: (p / "meta.json").write_text("{"), r"meta.json: not valid JSON"),
    ("format", lambda p: edit_meta(p, format="x"), r"format is 'x', expected 'blockdraft.trace'"),
    ("version", lambda p: edit_meta(p, version=3), r"format version 3 is not supported"),
    ("extra key", lambda p: edit_meta(p, extra=1), r"unknown keys \['extra'\]"),
    ("count", lambda p: edit_meta(p, num_positions=6),
     r"arrays\['greedy_ids'\].shape is \[5\], expected \[6\]"),
    ("missing file", lambda p: (p / "entropy.npy").unlink(), r"entropy.npy: missing"),
    ("dtype", lambda p: resave(p, "topk_ids", lambda a: a.astype(np.int64)),
     r"topk_ids.npy: dtype is '<i8', expected '<i4'"),
    ("shape", lambda p: resave(p, "entropy", lambda a: a[:, :1].copy()),
     r"entropy.npy: shape is \(5, 1\), but meta.json says \(5, 2\)"),
    ("truncated", lambda p: open(p / "topk_logprobs.npy", "r+b").truncate(150),
     r"topk_logprobs.npy: truncated: 150 bytes"),
    ("trailing", lambda p: open(p / "greedy_ids.npy", "ab").write(b"\0" * 8),
     r"greedy_ids.npy: 8 bytes of trailing data"),
    ("not npy", lambda p: (p / "entropy.npy").write_bytes(b"garbage"),
     r"entropy.npy: not a readable .npy file"),
    ("offsets order", lambda p: resave(p, "position_offsets", set_value(1, 6)),
     r"position_offsets.npy: offsets must be strictly increasing .* example 1 spans \[6, 5\)"),
    ("offsets start", lambda p: resave(p, "prompt_offsets", set_value(0, 1)),
     r"prompt_offsets.npy: first offset is 1, must be 0"),
    ("offsets end", lambda p: resave(p, "prompt_offsets", set_value(2, 3)),
     r"prompt_offsets.npy: last offset is 3, but prompt_ids.npy holds 4"),
    ("nan", lambda p: resave(p, "topk_logprobs", set_value((3, 1, 2), np.nan)),
     r"topk_logprobs at example 1, position t = 1, head 2, rank 3 is NaN"),
    ("unsorted", lambda p: resave(p, "topk_logprobs", set_value((4, 0, 2), 0.0)),
     r"example 1, position t = 2, head 1.*not sorted best first"),
    ("entropy", lambda p: resave(p, "entropy", set_value((0, 0), np.inf)),
     r"entropy at example 0, position t = 0, head 1 is inf"),
    ("greedy id", lambda p: resave(p, "greedy_ids", set_value(2, 10)),
     r"greedy_ids.npy: id 10 at example 1, position t = 0 is outside the vocabulary"),
]


BEFORE_DIGESTS = {"no meta", "bad json", "format", "version", "missing file"}
"""Corruptions found before the digests are checked; a sealed trace reports the others as a
file changed since it was written."""
CHANGED = r"the file was changed or corrupted since"


@pytest.mark.parametrize("sealed", [False, True], ids=["v1", "sealed"])
@pytest.mark.parametrize("corrupt, match", [c[1:] for c in CORRUPTIONS],
                         ids=[c[0] for c in CORRUPTIONS])
def test_open_rejects_corrupt_traces(good: Path, corrupt: Callable, match: str,
                                     sealed: bool) -> None:
    """Version 1 traces (no digests) name the broken value; sealed ones are refused by their
    digests first (issue 13 item 5), the checks of a value stay for traces of other writers."""
    if not sealed:
        as_version_1(good)
    assert len(Trace.open(good)) == 2
    corrupt(good)
    name = next(c[0] for c in CORRUPTIONS if c[1] is corrupt)
    if sealed and name not in BEFORE_DIGESTS:
        match = CHANGED
    with pytest.raises(TraceFormatError, match=match) as info:
        Trace.open(good)
    assert str(good) in str(info.value)
    assert isinstance(info.value, OracleError) and isinstance(info.value, ValueError)


def test_open_value_checks_can_be_skipped(good: Path, tmp_path: Path) -> None:
    resave(as_version_1(good), "topk_logprobs", set_value((0, 0, 0), np.nan))
    assert len(Trace.open(good, check_values=False)) == 2
    with pytest.raises(TraceFormatError, match="is NaN"):
        Trace.open(good)
    with pytest.raises(TraceFormatError, match="no trace directory there"):
        Trace.open(tmp_path / "nowhere")


def test_sealed_trace_refuses_a_changed_value(good: Path) -> None:
    """Issue 13 item 5: a value changed to another valid one (the version 1 reader cannot
    tell) is refused by the digest meta.json recorded; check_values=False skips the arrays'
    digests (not meta.json's)."""
    meta = json.loads((good / "meta.json").read_text())
    assert meta["integrity"]["files"]["entropy.npy"] == sha256_file(good / "entropy.npy")
    resave(good, "entropy", set_value((0, 0), 0.25))  # still a valid entropy
    with pytest.raises(TraceFormatError, match=r"entropy.npy: its SHA-256 .* is not the one "
                                               r"recorded when it was written .*" + CHANGED):
        Trace.open(good)
    assert len(Trace.open(good, check_values=False)) == 2
    edit_meta(good, V=11)  # a valid size, but not the one written
    with pytest.raises(TraceFormatError, match=r"meta.json: its content does not match the "
                                               r"SHA-256 recorded"):
        Trace.open(good, check_values=False)


@pytest.mark.parametrize(("edit", "match"), [
    (lambda m: m.pop("integrity"), r"version 2 traces carry an 'integrity' member, this one "
                                   r"has none"),
    (lambda m: m["integrity"]["files"].pop("entropy.npy"), r"must hold the digests of"),
    (lambda m: m["integrity"].update(algorithm="md5"), r"algorithm 'md5' is not 'sha256'"),
    (lambda m: m["integrity"].update(self="x"), r"malformed digests"),
    (lambda m: m.update(version=1), r"content does not match"),
])
def test_sealed_trace_refuses_a_changed_integrity_member(good: Path, edit, match) -> None:
    meta = json.loads((good / "meta.json").read_text())
    edit(meta)
    (good / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(TraceFormatError, match=match):
        Trace.open(good)


def test_version_1_traces_still_open(good: Path) -> None:
    """Traces written before digests open as before, unchecked and without a warning."""
    as_version_1(good)
    trace = Trace.open(good)
    assert trace.version == 1 and len(trace) == 2
    resave(good, "entropy", set_value((0, 0), 0.25))  # nothing to tell it from the real one
    assert float(Trace.open(good).entropy[0, 0]) == 0.25


def test_unfinished_trace_is_not_at_its_path(tmp_path: Path) -> None:
    """While a trace is written it lives in a hidden sibling folder; ``path`` appears (whole)
    only at close."""
    w = TraceWriter(tmp_path / "tr", h=2, K=3, V=10)
    w.add(*one_example())
    with pytest.raises(TraceFormatError, match="no trace directory there"):
        Trace.open(tmp_path / "tr")
    [partial] = list(tmp_path.iterdir())
    assert partial.name.startswith(".tr.") and partial.name.endswith(".partial")
    w.close()
    assert len(Trace.open(tmp_path / "tr")) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["tr"]


def test_lazy_root_import() -> None:
    import blockdraft

    assert blockdraft.Trace is Trace


# ---------------------------------------------------------------------------- head ablation view
def test_first_heads_equals_a_trace_written_with_fewer_heads(tmp_path: Path) -> None:
    from blockdraft.drafts.heads import HeadDrafter
    from blockdraft.oracle import Oracle, simulate

    full = synthetic_trace(tmp_path / "full", num_examples=6, h=6, K=4, V=40, seed=3,
                           accuracy=[0.9, 0.8, 0.7, 0.6, 0.5], signature={"model": "m"})
    for h in (1, 3, 6):
        view = full.first_heads(h)
        assert (view.h, view.K, view.V) == (h, full.K, full.V)
        assert view.signature["heads_used"] == h and view.signature["model"] == "m"
        with TraceWriter(tmp_path / f"h{h}", h=h, K=full.K, V=full.V) as w:
            for ex in full:
                w.add(ex.prompt_ids, ex.greedy_ids, ex.topk_ids[:, :h],
                      ex.topk_logprobs[:, :h], ex.entropy[:, :h])
        written = Trace.open(tmp_path / f"h{h}")
        for strategy in (HeadDrafter(k=1, p=1), HeadDrafter(k=4, p=3), Oracle(4)):
            a, b = simulate(view, strategy), simulate(written, strategy)
            assert a.block_efficiency == b.block_efficiency
            np.testing.assert_array_equal(a.steps.n, b.steps.n)
            assert (a.steps.n <= h - 1).all()
    # one head drafts nothing beyond the certain token: every call yields one token
    assert simulate(full.first_heads(1), Oracle(4)).block_efficiency == 1.0
    for bad in (0, 7, 2.0, True):
        with pytest.raises(OracleError, match="first_heads"):
            full.first_heads(bad)  # type: ignore[arg-type]
