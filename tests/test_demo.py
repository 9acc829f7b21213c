"""The demo end to end on a slice of Python's docs, with tiny models (same code path as
``blockdraft demo``: BPE, BlockwiseLM, RescorerLM, 4-gram, online decode, trace, oracle)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

# Seconds, not minutes: one layer, d = 32, h = 4, a few dozen steps.
TINY = dict(vocab_size=400, n_layer=1, d_model=32, h=4, steps=40, batch_size=8, seq_len=32,
            rescorer_n_layer=1, rescorer_d_model=32, rescorer_steps=20, heldout_fraction=0.1)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from pydoc_data.topics import topics

    path = tmp_path_factory.mktemp("demo") / "corpus.txt"
    path.write_text("\n\n".join(topics[k] for k in sorted(topics)[:80]))
    return path


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("demo-cache")


def test_demo_runs_and_its_numbers_are_consistent(tmp_path, monkeypatch, corpus, cache):
    from blockdraft.demo import DEMO_K, DEMO_P, DemoConfig, run_demo
    from blockdraft.models import load_tokenizer
    from blockdraft.oracle import Trace

    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(cache))
    config = DemoConfig(**TINY)
    messages: list[str] = []
    res = run_demo(corpus, tmp_path / "out", config=config, num_examples=3,
                   max_new_tokens=20, log=messages.append)
    assert res.trained and any(m.startswith("training a BlockwiseLM") for m in messages)
    assert res.num_examples == 3
    b = {r.strategy: r.block_efficiency for r in res.rows}
    assert list(b) == ["vanilla BPD", "neural rescoring", f"{DEMO_P}-best 0-gram",
                       "4-gram rescoring", f"{DEMO_P}-best 4-gram", f"oracle (k={DEMO_K})"]
    h = config.h
    assert all(1.0 <= v <= h for v in b.values())
    for r in res.rows:
        assert r.relative == pytest.approx(r.block_efficiency / b["vanilla BPD"] - 1)
        assert r.agrees, f"{r.strategy}: online {r.block_efficiency} vs offline " \
                         f"{r.offline_block_efficiency}"
        # Every number carries the settings that produced it.
        for field in (f"h:{h}", "corpus:corpus.txt", "order:4", "criterion:exact",
                      "device:cpu", "version:", "model:blockwise(1L,d32,h4"):
            assert field in r.signature
        assert r.signature.endswith(r.settings)
    assert "p:16|alpha:1.0|lm:4-gram" in res.rows[4].signature
    assert "k:1|p:1|alpha:0" in res.rows[0].signature
    assert res.rows[-1].wall_s is None and all(r.wall_s for r in res.rows[:-1])
    # Held-out numbers: one per head, finite, accuracy a share.
    assert len(res.heldout_loss) == len(res.heldout_accuracy) == h
    assert all(math.isfinite(x) and x > 0 for x in res.heldout_loss)
    assert all(0 <= a <= 1 for a in res.heldout_accuracy)
    assert math.isfinite(res.rescorer_loss) and math.isfinite(res.ngram_loss)
    assert 0 <= res.vanilla_repetition <= 100
    # The trace holds the greedy outputs the decodes were checked against.
    trace = Trace.open(res.trace_dir)
    assert len(trace) == 3 and trace.h == h
    assert res.generated_tokens == sum(trace[i].m for i in range(3))
    tok = load_tokenizer(res.cache_dir / "blockwise")
    assert tok.decode(trace[0].greedy_ids.tolist()) == res.sample_output
    assert res.lattice_png.read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "out" / "demo.json").is_file()

    # The second run trains nothing and gives the same numbers.
    weights = res.cache_dir / "blockwise" / "model.safetensors"
    mtime = weights.stat().st_mtime_ns

    def no_training(msg: str) -> None:
        if msg.startswith("training"):
            pytest.fail(f"a cached run trained: {msg}")

    again = run_demo(corpus, tmp_path / "out", config=config, num_examples=3,
                     max_new_tokens=20, log=no_training)
    assert not again.trained and again.train_s == 0.0
    assert weights.stat().st_mtime_ns == mtime
    assert again.cache_dir == res.cache_dir
    assert [r.block_efficiency for r in again.rows] == [r.block_efficiency for r in res.rows]
    assert again.heldout_loss == res.heldout_loss


def test_the_demo_command_prints_both_tables(tmp_path, monkeypatch, corpus, cache, capsys):
    import functools

    import blockdraft.demo
    from blockdraft.cli import main
    from blockdraft.demo import DemoConfig

    monkeypatch.setenv("BLOCKDRAFT_CACHE", str(cache))  # the tiny models of the test above
    monkeypatch.setattr(blockdraft.demo, "run_demo", functools.partial(
        blockdraft.demo.run_demo, config=DemoConfig(**TINY), max_new_tokens=20))
    out = tmp_path / "out"
    assert main(["demo", "--blockwise", "--corpus", str(corpus), "--out", str(out),
                 "--examples", "3"]) == 0
    text = capsys.readouterr().out
    for part in ("held-out", "head 4", "unigram", "vanilla BPD", "16-best 4-gram",
                 "oracle (k=16)", "signature: model:blockwise(1L,d32,h4",
                 "16-best 4-gram: k:16|p:16|alpha:1.0|lm:4-gram"):
        assert part in text
    assert (out / "demo_lattice.png").is_file()
    assert main(["demo", "--blockwise", "--corpus", str(corpus), "--out", str(out),
                 "--examples", "3", "--json"]) == 1  # an earlier run's output is not replaced
    assert "--out" in capsys.readouterr().err and (out / "demo_lattice.png").is_file()
    assert main(["demo", "--blockwise", "--corpus", str(corpus), "--out", str(out),
                 "--examples", "3", "--json", "--overwrite"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["trained"] is False and len(data["rows"]) == 6
    assert all("version:" in row["signature"] for row in data["rows"])


def test_the_cache_key_covers_every_setting():
    from blockdraft.demo import DemoConfig, cache_key

    paras = ["one paragraph", "another one"]
    base = cache_key(paras, DemoConfig(), 0)
    assert cache_key(paras, DemoConfig(), 0) == base
    assert cache_key(paras, DemoConfig(), 1) != base
    assert cache_key([*paras, "more"], DemoConfig(), 0) != base
    default = DemoConfig()
    for field in dataclasses.fields(DemoConfig):
        value = getattr(default, field.name)
        other = value - 1 if isinstance(value, int) else value / 2
        changed = dataclasses.replace(default, **{field.name: other})
        assert cache_key(paras, changed, 0) != base, field.name


def test_demo_rejects_a_tiny_corpus(tmp_path):
    from blockdraft.demo import DemoError, run_demo

    corpus = tmp_path / "tiny.txt"
    corpus.write_text("just a few words\n\nand a few more\n")
    with pytest.raises(DemoError, match="too little text"):
        run_demo(corpus, tmp_path / "out", log=lambda m: None)


def test_demo_config_rejects_bad_sizes():
    from blockdraft.demo import DemoConfig, DemoError

    with pytest.raises(DemoError, match="steps"):
        DemoConfig(steps=0)
    with pytest.raises(DemoError, match="heldout_fraction"):
        DemoConfig(heldout_fraction=0.9)
