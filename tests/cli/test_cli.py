"""The CLI: exit codes, tables, JSON, and the commands end to end on tiny inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from blockdraft.cli import main
from blockdraft.lattice import SausageLattice
from blockdraft.lattice.io import save_lattice


@pytest.fixture()
def lattice_file(tmp_path, word_corpus):
    held = word_corpus.held_out
    rng = np.random.default_rng(0)
    from blockdraft.lattice.synthetic import hits_heavy

    lat = hits_heavy(rng, held[20:24], 3, word_corpus.unigram, certain_first=True)
    path = tmp_path / "lat.json"
    save_lattice(lat, path, context=held[:20], reference=held[20:24])
    return path, lat, held[:20]


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["rescore"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["bench", "rescore", "--lm", "x", "--h", "0"])
    assert e.value.code == 2


def test_errors_exit_1_with_a_message(tmp_path, capsys):
    assert main(["rescore", str(tmp_path / "missing.json"), "--lm", "x"]) == 1
    assert "blockdraft: error" in capsys.readouterr().err


def test_rescore_json_matches_the_library(lattice_file, arpa_lms, capsys):
    from blockdraft.rescorers.ngram import NgramLM, NgramRescorer

    path, lat, ctx = lattice_file
    assert main(["rescore", str(path), "--lm", str(arpa_lms[3]), "--p", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ref = NgramRescorer(NgramLM(arpa_lms[3])).rescore(lat, ctx, 5)
    assert out["tokens"] == ref.tokens.tolist()
    np.testing.assert_allclose(out["scores"], ref.scores)
    assert out["exhausted"] is False
    # More drafts than paths: all returned, and said so.
    assert main(["rescore", str(path), "--lm", str(arpa_lms[3]), "--p", "1000"]) == 0
    assert "fewer than p = 1000" in capsys.readouterr().out


def test_lattice_draw_writes_the_file(lattice_file, tmp_path):
    path, _, _ = lattice_file
    out = tmp_path / "lat.svg"
    assert main(["lattice", "draw", str(path), "-o", str(out)]) == 0
    assert out.read_text().lstrip().startswith("<?xml")


def test_ngram_train_from_ids(tmp_path, word_corpus, capsys):
    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(" ".join(map(str, line)) for line in word_corpus.train[:300]))
    assert main(["ngram", "train", "--ids", str(ids), "--order", "3", "-o",
                 str(tmp_path / "lm"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["order"] == 3 and len(out["counts"]) == 3
    lat = SausageLattice(tokens=np.array([[int(word_corpus.train[0][0])]]),
                         scores=np.zeros((1, 1)))
    from blockdraft.rescorers.ngram import NgramLM, NgramRescorer

    assert NgramRescorer(NgramLM(out["binary"])).rescore(lat, [], 1).p == 1


def _distill_folder(tmp_path, train, held):
    """A distillation set on disk (plan + shards, as the distill step writes them), with the
    given answers in its training and held-out splits (hidden states are dummies)."""
    import torch

    from blockdraft.training.heads.shards import Shard, write_shard

    folder = tmp_path / "distill"
    folder.mkdir()
    shards = []
    for name, split, answers in (("heldout-00000", "heldout", held),
                                 ("train-00000", "train", train[:150]),
                                 ("train-00001", "train", train[150:])):
        idx = list(range(len(shards) * 1000, len(shards) * 1000 + len(answers)))
        shard = Shard.from_lists(idx, [[1, 2]] * len(answers), answers,
                                 [torch.zeros(len(a), 4) for a in answers])
        write_shard(folder / f"{name}.safetensors", shard, {"prompts": str(len(answers))})
        shards.append({"name": name, "split": split, "prompts": idx})
    (folder / "plan.json").write_text(json.dumps({"settings": {}, "shards": shards}))
    return folder


def test_ngram_train_from_a_distillation_set(tmp_path, word_corpus, capsys):
    """--distilled adds the training answers (every one, never the held-out split), alone or
    beside --ids; a set without a finished training shard is refused."""
    train = [list(map(int, line)) for line in word_corpus.train[:300]]
    held = [[7] * 50] * 20  # would change the counts if it were read
    folder = _distill_folder(tmp_path, train, held)
    assert main(["ngram", "train", "--distilled", str(folder), "--order", "3", "-o",
                 str(tmp_path / "lm"), "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert alone["tokens"] == sum(len(a) for a in train)
    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(" ".join(map(str, line)) for line in word_corpus.train[300:400]))
    assert main(["ngram", "train", "--ids", str(ids), "--distilled", str(folder), "--order", "3",
                 "-o", str(tmp_path / "lm2"), "--json"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert both["tokens"] == alone["tokens"] + sum(len(x) for x in word_corpus.train[300:400])
    for f in folder.glob("train-*"):
        f.unlink()
    assert main(["ngram", "train", "--distilled", str(folder), "-o", str(tmp_path / "x")]) == 1
    assert "no finished training shard" in capsys.readouterr().err
    assert main(["ngram", "train", "-o", str(tmp_path / "x")]) == 2  # no sources: a usage error
    assert "--distilled" in capsys.readouterr().err


def test_bench_rescore_runs_both_backends(tmp_path, word_corpus, arpa_lms, capsys):
    held = tmp_path / "held.txt"
    held.write_text(" ".join(map(str, word_corpus.held_out[:2000])))
    args = ["bench", "rescore", "--lm", str(arpa_lms[3]), "--h", "3", "--k", "3",
            "--p", "1,4", "--n", "4", "--kind", "hits", "--heldout", str(held), "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["rows"]
    assert {(r["backend"], r["p"]) for r in rows} == {(b, p) for b in ("exact", "wfst")
                                                       for p in (1, 4)}
    assert all(r["median_ms"] > 0 for r in rows)
    assert "kind:hits" in out["signature"] and "commit:" in out["signature"]


@pytest.fixture()
def trace_dir(tmp_path):
    from blockdraft.oracle import synthetic_trace

    synthetic_trace(tmp_path / "trace", num_examples=6, h=4, K=8, V=40, seed=3)
    return tmp_path / "trace"


def test_oracle_command_matches_the_library(trace_dir, tmp_path, capsys):
    from blockdraft.oracle import Trace, oracle_curve

    png = tmp_path / "curve.png"
    assert main(["oracle", str(trace_dir), "--k", "1,2,4", "--json", "--plot", str(png)]) == 0
    out = json.loads(capsys.readouterr().out)
    ref = oracle_curve(Trace.open(trace_dir), ks=[1, 2, 4])
    np.testing.assert_allclose([row["b_oracle"] for row in out["curve"]], ref.b_oracle)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["oracle", str(trace_dir)]) == 0
    assert "B_oracle(k)" in capsys.readouterr().out


def test_entropy_and_repetition_commands(trace_dir, tmp_path, capsys):
    png = tmp_path / "ent.png"
    assert main(["entropy", str(trace_dir), "--plot", str(png), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["mean"]) == 4 and 1 <= out["h_max"] <= 4 and png.stat().st_size > 0
    assert main(["repetition", str(trace_dir), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows[0]["drafts"] == "vanilla" and 0 <= rows[0]["pct_consecutive"] <= 100


def test_repetition_with_an_lm_of_another_vocabulary_fails_clearly(trace_dir, arpa_lms,
                                                                   capsys):
    # The fixture LMs know word ids far above the trace's V = 40.
    assert main(["repetition", str(trace_dir), "--lm", str(arpa_lms[2])]) == 1
    assert "outside the model's vocabulary" in capsys.readouterr().err


def test_trace_commands_reject_a_missing_trace(tmp_path, capsys):
    assert main(["oracle", str(tmp_path / "nope")]) == 1
    assert "blockdraft: error" in capsys.readouterr().err


def test_train_then_trace_then_oracle(tmp_path, capsys):
    """`blockdraft train` (tiny) -> `blockdraft trace` -> `blockdraft oracle`, end to end."""
    from pydoc_data.topics import topics

    paras = [" ".join(p.split()) for k in sorted(topics)[:60] for p in topics[k].split("\n\n")
             if p.strip()]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(paras[:-5]))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(p[:60] for p in paras[-5:]))
    out = tmp_path / "model"
    assert main(["train", "--corpus", str(corpus), "-o", str(out), "--preset", "tiny",
                 "--steps", "5", "--vocab-size", "300", "--batch-size", "4", "--seq-len", "32",
                 "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["steps"] == 5 and np.isfinite(res["final_loss"])
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    assert main(["trace", "--model", str(out), "--prompts", str(prompts), "-o",
                 str(tmp_path / "trace"), "--max-new-tokens", "12", "--K", "4"]) == 0
    assert "5 examples" in capsys.readouterr().out
    assert main(["oracle", str(tmp_path / "trace"), "--json"]) == 0
    curve = json.loads(capsys.readouterr().out)["curve"]
    assert [row["k"] for row in curve] == [1, 2, 4]
    assert main(["train", "--corpus", str(tmp_path / "missing.txt"), "-o", str(out)]) == 1


def test_train_heads_by_distillation_from_a_trained_base(tmp_path, capsys):
    """`--mode heads --init M --distill N`: the heads learn the base's own greedy outputs; the
    base (and so greedy decoding) is unchanged; bad combinations are refused."""
    from pydoc_data.topics import topics

    import torch

    from blockdraft.models import load_model

    paras = [" ".join(p.split()) for k in sorted(topics)[:40] for p in topics[k].split("\n\n")
             if p.strip()]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(paras))
    base = tmp_path / "base"
    common = ["--batch-size", "4", "--seq-len", "32", "--json"]
    assert main(["train", "--corpus", str(corpus), "-o", str(base), "--preset", "tiny",
                 "--steps", "4", "--vocab-size", "300", "--mode", "base", *common]) == 0
    capsys.readouterr()
    out = tmp_path / "distilled"
    assert main(["train", "--corpus", str(corpus), "-o", str(out), "--mode", "heads",
                 "--init", str(base), "--distill", "3", "--distill-len", "6",
                 "--distill-prompt-len", "8", "--steps", "3", *common]) == 0
    capsys.readouterr()
    before, after = load_model(base), load_model(out)
    assert after.config == before.config
    b_state, a_state = before.state_dict(), after.state_dict()
    heads = [n for n in a_state if n.startswith("extra_heads.")]
    assert heads and any(not torch.equal(a_state[n], b_state[n]) for n in heads)
    for name in a_state:
        if name not in heads:
            assert torch.equal(a_state[name], b_state[name]), name
    meta = json.loads((out / "config.json").read_text())
    assert meta["meta"]["train"]["distill"] == 3
    assert main(["train", "--corpus", str(corpus), "-o", str(out), "--distill", "3"]) == 2
    assert "needs a trained base" in capsys.readouterr().err
    assert main(["train", "--corpus", str(corpus), "-o", str(out), "--init", str(base),
                 "--d-model", "32"]) == 2
    assert "drop --d-model" in capsys.readouterr().err


def test_decode_command_is_lossless_and_reports_b(tmp_path, capsys):
    """`blockdraft decode` on a tiny saved model: the exact criterion reproduces greedy
    decoding (checked by --compare-greedy), with an n-gram LM and with the neural rescorer."""
    import torch

    from blockdraft.models import BlockwiseConfig, BlockwiseLM, RescorerLM, Tokenizer, save_model
    from blockdraft.training.ngram import train_ngram

    texts = [f"the value of item {i} is {i * 7 % 13} and the next one follows" for i in range(300)]
    tok = Tokenizer.train(texts, vocab_size=300)
    torch.manual_seed(0)
    model = BlockwiseLM(BlockwiseConfig.tiny(vocab_size=tok.vocab_size, h=4))
    save_model(model, tmp_path / "m", tokenizer=tok)
    rescorer = RescorerLM(BlockwiseConfig.tiny(vocab_size=tok.vocab_size, h=1))
    save_model(rescorer, tmp_path / "r", tokenizer=tok)
    lm = train_ngram([tok.encode(t) for t in texts], tmp_path / "lm", order=3).arpa
    base = ["decode", "--model", str(tmp_path / "m"), "--prompt", "the value of item 4",
            "--max-new-tokens", "12", "--k", "4", "--compare-greedy", "--json"]
    for extra in ([], ["--lm", str(lm), "--p", "3"],
                  ["--rescorer-model", str(tmp_path / "r"), "--neural-backend", "torch"],
                  ["--lookup"], ["--lm", str(lm), "--lookup"], ["--lm", str(lm), "--iad"]):
        assert main(base + extra) == 0
        out = json.loads(capsys.readouterr().out)
        assert 1.0 <= out["block_efficiency"] <= 12.0 and out["greedy_s"] > 0
        assert len(out["tokens"]) <= 12
        assert ("lookup" in out["drafter"]) == ("--lookup" in extra), out["drafter"]
    # --iad beside --lookup was dropped without a word: two copy sources are refused by name
    assert main(base + ["--lookup", "--iad"]) == 2
    assert "drop one of them" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # issue 42: an invalid value exits 2, at the parser
        main(base + ["--criterion", "topk:k=0"])
    assert e.value.code == 2
    assert "argument --criterion: topk(k=...): k must be an integer >= 1, got 0" in \
        capsys.readouterr().err
    # A rescoring LM saved with another tokenizer of the same size: its ids fit the model's
    # vocabulary but mean other tokens, so it is refused (issue 13 item 2).
    other = Tokenizer.train([t.replace("value", "price") for t in texts], vocab_size=300)
    assert other.vocab_size == tok.vocab_size and other.fingerprint() != tok.fingerprint()
    save_model(rescorer, tmp_path / "r2", tokenizer=other)
    assert main(base + ["--rescorer-model", str(tmp_path / "r2")]) == 1
    assert "another tokenizer than the model's" in capsys.readouterr().err


def test_train_is_reproducible_with_a_seed(tmp_path, capsys):
    """Two `blockdraft train` runs with the same --seed give bit-identical weights; another
    seed gives other weights (the model's initialisation is seeded, not only the data)."""
    from pydoc_data.topics import topics

    from safetensors.numpy import load_file

    paras = [" ".join(p.split()) for k in sorted(topics)[:30] for p in topics[k].split("\n\n")
             if p.strip()]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(paras))

    def weights(name: str, seed: int) -> dict[str, np.ndarray]:
        out = tmp_path / name
        assert main(["train", "--corpus", str(corpus), "-o", str(out), "--preset", "tiny",
                     "--steps", "2", "--vocab-size", "300", "--batch-size", "2", "--seq-len",
                     "16", "--seed", str(seed), "--json"]) == 0
        capsys.readouterr()
        return load_file(str(out / "model.safetensors"))

    a, b, c = weights("a", 3), weights("b", 3), weights("c", 4)
    assert a.keys() == b.keys()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert any(not np.array_equal(a[k], c[k]) for k in a)
