"""The demo end to end on a small text (BPE, 4-gram, simulated-head trace, simulation)."""

from __future__ import annotations

import pytest


def test_demo_runs_and_its_numbers_are_consistent(tmp_path, monkeypatch):
    from pydoc_data.topics import topics

    from blockdraft.demo import DEMO_H, run_demo

    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(topics[k] for k in sorted(topics)[:80]))
    res = run_demo(corpus, tmp_path / "out", num_examples=6, log=lambda m: None)
    b = {r.strategy: r.block_efficiency for r in res.rows}
    assert list(b) == ["vanilla BPD", "16-best 0-gram", "4-gram rescored", "16-best 4-gram",
                       "oracle (k=16)"]
    assert all(1.0 <= v <= DEMO_H for v in b.values())
    for r in res.rows:
        assert r.relative == pytest.approx(r.block_efficiency / b["vanilla BPD"] - 1)
    assert res.lattice_png.read_bytes()[:4] == b"\x89PNG"
    assert "heads:SIMULATED" in res.signature
    # The second run reuses the cache.
    again = run_demo(corpus, tmp_path / "out", num_examples=6, log=pytest.fail)
    assert [r.block_efficiency for r in again.rows] == [r.block_efficiency for r in res.rows]


def test_demo_rejects_a_tiny_corpus(tmp_path):
    from blockdraft.demo import DemoError, run_demo

    corpus = tmp_path / "tiny.txt"
    corpus.write_text("just a few words\n\nand a few more\n")
    with pytest.raises(DemoError, match="too little text"):
        run_demo(corpus, tmp_path / "out", log=lambda m: None)
