"""A KenLM binary and the ``<stem>.arpa`` beside it (the exact search's bounds come from the
ARPA file) must be one model: a stale or foreign ARPA file is refused, never used."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from blockdraft.cli import main
from blockdraft.rescorers.base import RescorerError
from blockdraft.rescorers.ngram import NgramLM, native
from blockdraft.rescorers.ngram.records import check_arpa_pair, fingerprint_path
from blockdraft.training.ngram.train import find_kenlm_tool, train_ngram

pytestmark = pytest.mark.skipif(not native.available(), reason="native KenLM search not built")

A = [np.array([i % 7, (i * 3) % 11, (i * 5) % 13, i % 4]) for i in range(200)]
B = [np.array([(i * 2) % 11, i % 13, (i * 7) % 5, i % 3]) for i in range(200)]


@pytest.fixture()
def pair(tmp_path: Path) -> tuple[Path, Path]:
    try:
        find_kenlm_tool("lmplz")
    except RescorerError as e:
        pytest.skip(f"KenLM's lmplz is not built ({e})")
    a = train_ngram(A, tmp_path / "a", order=3)
    b = train_ngram(B, tmp_path / "b", order=3)
    assert a.binary is not None and b.binary is not None
    return a.binary, b.arpa


def test_train_records_the_pair_and_a_fresh_pair_loads(pair):
    a_bin, _ = pair
    rec = json.loads(fingerprint_path(a_bin).read_text())
    assert rec["order"] == 3 and rec["binary"] == "a.bin" and rec["arpa"] == "a.arpa"
    lm = NgramLM(a_bin, bounds=True)
    assert lm.native_model is not None and lm.native_model.has_bounds


def test_a_stale_arpa_beside_a_binary_is_refused(pair):
    a_bin, b_arpa = pair
    shutil.copyfile(b_arpa, a_bin.with_suffix(".arpa"))  # same vocabulary, another model
    with pytest.raises(RescorerError, match=r"a\.arpa.*a\.bin.*not the pair") as e:
        NgramLM(a_bin)
    assert "ngram train" in str(e.value) and "bounds=False" in str(e.value)
    NgramLM(a_bin, bounds=False)  # the binary alone is fine


def test_without_a_fingerprint_the_header_must_agree(pair, tmp_path):
    a_bin, _ = pair
    fingerprint_path(a_bin).unlink()
    c = train_ngram(B, tmp_path / "c", order=2, binary=False)
    shutil.copyfile(c.arpa, a_bin.with_suffix(".arpa"))
    with pytest.raises(RescorerError, match="order 2 but the KenLM binary .* order 3"):
        NgramLM(a_bin)
    with pytest.raises(RescorerError, match="order 2"):
        check_arpa_pair(a_bin, c.arpa, order=3)


def test_a_binary_only_retrain_leaves_no_stale_fingerprint(pair, tmp_path):
    a_bin, _ = pair
    train_ngram(B, tmp_path / "a", order=3, binary=False)  # new a.arpa, old a.bin stays
    with pytest.raises(RescorerError, match="a.bin is not the one recorded"):
        NgramLM(a_bin)


def test_bench_rescore_refuses_a_foreign_arpa_and_signs_both(pair, capsys):
    a_bin, b_arpa = pair
    code = main(["bench", "rescore", "--lm", str(a_bin), "--arpa", str(b_arpa), "--h", "2",
                 "--k", "2", "--p", "1", "--n", "2", "--backends", "exact"])
    assert code == 1
    assert "b.arpa" in capsys.readouterr().err
    a_arpa = a_bin.with_suffix(".arpa")
    code = main(["bench", "rescore", "--lm", str(a_bin), "--arpa", str(a_arpa), "--h", "2",
                 "--k", "2", "--p", "1", "--n", "2", "--backends", "exact", "--json"])
    assert code == 0
    sig = json.loads(capsys.readouterr().out)["signature"]
    assert "a.bin" in sig and "a.arpa" in sig


def test_a_corrupted_binary_is_refused_by_its_fingerprint(pair):
    a_bin, _ = pair
    data = bytearray(a_bin.read_bytes())
    data[len(data) // 2] ^= 0x10  # KenLM itself would load it and score differently
    a_bin.write_bytes(bytes(data))
    with pytest.raises(RescorerError, match=r"a\.bin is not the one recorded in "
                                            r"a\.fingerprint\.json"):
        NgramLM(a_bin, bounds=False)
    fingerprint_path(a_bin).unlink()  # the documented way to use it as it is
    NgramLM(a_bin, bounds=False)


def test_a_file_named_like_the_arpa_that_is_not_one_is_refused(pair):
    a_bin, _ = pair
    a_bin.with_suffix(".arpa").write_bytes(b"")  # truncated to nothing
    with pytest.raises(RescorerError, match="is not an ARPA file"):
        NgramLM(a_bin)
    NgramLM(a_bin, bounds=False)
