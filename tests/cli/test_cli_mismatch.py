"""Mismatched or impossible arguments are refused with one line naming the value and its valid
range, never silently replaced (issue "Nothing lost, nothing silently wrong", item 2)."""

from __future__ import annotations

import pytest

from blockdraft.cli import main


def _one_line_error(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err
    assert err.startswith("blockdraft: error: ") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, err
    return err


def test_decode_refuses_an_lm_with_a_rescorer_model(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["decode", "--model", str(tmp_path), "--prompt", "x", "--lm", "a.arpa",
              "--rescorer-model", "r"])
    assert e.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize(("flag", "value"), [("--h", "0"), ("--h", "-2"), ("--n-layer", "0"),
                                             ("--d-model", "-1")])
def test_train_refuses_sizes_below_one(flag, value, tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b c\n")
    out = tmp_path / "m"
    with pytest.raises(SystemExit) as e:  # issue 42: an invalid value exits 2, at the parser
        main(["train", "--corpus", str(corpus), "-o", str(out), flag, value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: expected a positive integer (>= 1), got '{value}'" in err, err
    assert not out.exists()


def test_train_refuses_heads_for_a_rescorer(tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b c\n")
    assert main(["train", "--corpus", str(corpus), "-o", str(tmp_path / "m"), "--rescorer",
                 "--h", "4"]) == 2  # issue 42: a conflict of options exits 2
    _one_line_error(capsys, "--h 4")


def test_oracle_and_repetition_refuse_k_above_the_trace_k(tmp_path, capsys):
    from blockdraft.oracle import synthetic_trace

    trace = tmp_path / "trace"
    synthetic_trace(trace, num_examples=2, h=3, K=4, V=30, seed=1)
    assert main(["oracle", str(trace), "--k", "1,100000"]) == 2  # issue 42: a value out of
    _one_line_error(capsys, "--k 100000", "K = 4", "[1, 4]")  # the range its input sets: 2
    assert main(["oracle", str(trace), "--json"]) == 0  # the default list is cut at K
    capsys.readouterr()


def test_repetition_refuses_k_above_the_trace_k(tmp_path, capsys):
    from blockdraft.oracle import synthetic_trace

    trace = tmp_path / "trace"
    synthetic_trace(trace, num_examples=2, h=3, K=4, V=30, seed=1)
    arpa = tmp_path / "lm.arpa"
    arpa.write_text("\\data\\\nngram 1=4\nngram 2=1\n\n\\1-grams:\n-1.0\t<unk>\t0\n-99\t<s>\t0\n"
                    "-1.0\t</s>\t0\n-0.5\t3\t0\n\n\\2-grams:\n-0.1\t3 3\n\n\\end\\\n")
    assert main(["repetition", str(trace), "--lm", str(arpa), "--k", "9"]) == 2
    _one_line_error(capsys, "--k 9", "[1, 4]")
    assert main(["repetition", str(trace), "--lm", str(arpa), "--json"]) == 0
