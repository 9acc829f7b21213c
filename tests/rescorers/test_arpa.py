"""The streaming ARPA reader: valid files, and every malformed or truncated case it names."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from blockdraft.rescorers.base import RescorerError
from blockdraft.rescorers.ngram.arpa import ArpaFormatError, ArpaNgram, arpa_header, read_arpa

VALID = """\
\\data\\
ngram 1=4
ngram 2=2
ngram 3=1

\\1-grams:
-1.5\t<unk>\t0
-99\t<s>\t-0.5
-0.7\t3\t-0.25
-0.9\t</s>

\\2-grams:
-0.3\t<s> 3\t-0.1
-0.2\t3 </s>

\\3-grams:
-0.05\t<s> 3 </s>

\\end\\
"""


def write(tmp_path: Path, text: str, name: str = "lm.arpa") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def read_all(path: Path) -> list[ArpaNgram]:
    return list(read_arpa(path))


def test_reads_every_ngram_in_order(tmp_path: Path) -> None:
    path = write(tmp_path, VALID)
    grams = read_all(path)
    assert arpa_header(path) == (4, 2, 1)
    assert [g.order for g in grams] == [1, 1, 1, 1, 2, 2, 3]
    assert grams[1] == ArpaNgram(1, ("<s>",), -99.0, -0.5)
    assert grams[3] == ArpaNgram(1, ("</s>",), -0.9, 0.0)  # back-off absent -> 0
    assert grams[4].words == ("<s>", "3") and grams[4].log10_backoff == -0.1
    assert grams[6] == ArpaNgram(3, ("<s>", "3", "</s>"), -0.05, 0.0)
    assert isinstance(grams[0], ArpaNgram) and grams[0]._fields[2] == "log10_prob"


def test_blank_lines_spaces_and_neg_inf_are_accepted(tmp_path: Path) -> None:
    text = (
        "\n\n\\data\\\nngram 1=2\nngram 2=1\n\n\n\\1-grams:\n\n-1 0   -0.2\n-inf 1\n\n"
        "\\2-grams:\n-0.5 0 1\n\\end\\\ntrailing text is ignored\n"
    )
    grams = read_all(write(tmp_path, text))
    assert grams[0] == ArpaNgram(1, ("0",), -1.0, -0.2)
    assert grams[1].log10_prob == -math.inf
    assert grams[2] == ArpaNgram(2, ("0", "1"), -0.5, 0.0)


def test_real_lmplz_file_reads_completely(arpa_lms: dict[int, Path]) -> None:
    path = arpa_lms[3]
    counts = arpa_header(path)
    seen = [0] * len(counts)
    for g in read_arpa(path):
        assert len(g.words) == g.order
        seen[g.order - 1] += 1
    assert tuple(seen) == counts


def lines_with(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


# (case, text, 1-based line of the error, fragment of the message)
BAD = [
    ("empty", "\n\n", 2, "empty file"),
    ("no data", VALID.replace("\\data\\\n", "", 1), 1, "expected '\\data\\'"),
    ("header line", lines_with(VALID, "ngram 2=2", "ngram 2 2"), 3, "expected 'ngram N=COUNT'"),
    ("order sequence", lines_with(VALID, "ngram 2=2", "ngram 3=2"), 3, "orders must be 1, 2"),
    ("no counts", "\\data\\\n\\1-grams:\n-1\t0\n\\end\\\n", 2, "declares no n-gram counts"),
    ("section order", lines_with(VALID, "\\2-grams:", "\\3-grams:"), 12,
     "expected section header '\\\\2-grams:'"),
    ("too few", lines_with(VALID, "ngram 1=4", "ngram 1=5"), 12,
     "section \\1-grams: has 4 n-grams but \\data\\ declares 5"),
    ("too many", lines_with(VALID, "ngram 2=2", "ngram 2=1"), 14,
     "has more n-grams than the 1 declared"),
    ("fields, too few", lines_with(VALID, "-0.3\t<s> 3\t-0.1", "-0.3\t<s>"), 13,
     "2-gram line has 2 fields, expected 3 or 4"),
    ("fields, back-off on top order",
     lines_with(VALID, "-0.05\t<s> 3 </s>", "-0.05\t<s> 3 </s>\t0"), 17,
     "3-gram line has 5 fields, expected 4"),
    ("non-numeric prob", lines_with(VALID, "-0.7\t3", "abc\t3"), 9,
     "non-numeric log10 probability 'abc'"),
    ("non-numeric back-off", lines_with(VALID, "-0.25", "x"), 9, "non-numeric log10 back-off"),
    ("NaN prob", lines_with(VALID, "-0.7\t3", "nan\t3"), 9, "log10 probability is NaN"),
    ("NaN back-off", lines_with(VALID, "-0.25", "NaN"), 9, "log10 back-off is NaN"),
    ("+inf prob", lines_with(VALID, "-0.7\t3", "inf\t3"), 9, "log10 probability is +inf"),
    ("-inf back-off", lines_with(VALID, "-0.25", "-inf"), 9, "log10 back-off is -inf"),
    ("positive prob", lines_with(VALID, "-0.7\t3", "0.5\t3"), 9,
     "log10 probability 0.5 is above 0"),
    ("missing end", VALID.replace("\\end\\\n", ""), 18, "missing '\\end\\'"),
    ("garbage for end", VALID.replace("\\end\\", "\\fin\\"), 19, "expected '\\end\\'"),
]


@pytest.mark.parametrize(("case", "text", "lineno", "fragment"), BAD, ids=[b[0] for b in BAD])
def test_malformed_files_name_file_line_and_problem(
    tmp_path: Path, case: str, text: str, lineno: int, fragment: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ArpaFormatError) as info:
        read_all(path)
    err = info.value
    assert isinstance(err, RescorerError)
    assert err.path == path and err.lineno == lineno, (case, err)
    assert fragment in str(err), (case, str(err))
    assert str(err).startswith(f"{path}:{lineno}: ")


def test_header_errors_also_raise_from_arpa_header(tmp_path: Path) -> None:
    with pytest.raises(ArpaFormatError, match="expected 'ngram N=COUNT'"):
        arpa_header(write(tmp_path, lines_with(VALID, "ngram 2=2", "ngram two=2")))
    with pytest.raises(ArpaFormatError, match="inside the \\\\data\\\\ header"):
        arpa_header(write(tmp_path, "\\data\\\nngram 1=3\n"))


def test_every_truncation_raises(tmp_path: Path) -> None:
    """A file cut after any line before ``\\end\\`` is reported, never read as complete."""
    lines = VALID.splitlines(keepends=True)
    end = lines.index("\\end\\\n")
    for cut in range(end):
        path = write(tmp_path, "".join(lines[:cut]), name=f"cut{cut}.arpa")
        with pytest.raises(ArpaFormatError) as info:
            read_all(path)
        expected = "empty file" if cut == 0 else "(truncated file?)"
        assert expected in str(info.value), (cut, str(info.value))


def test_ngrams_before_the_error_are_yielded(tmp_path: Path) -> None:
    path = write(tmp_path, lines_with(VALID, "-0.2\t3 </s>", "-0.2\t3 </s> extra junk"))
    it = read_arpa(path)
    got = [next(it) for _ in range(5)]
    assert got[-1].words == ("<s>", "3")
    with pytest.raises(ArpaFormatError, match=":14: 2-gram line has 5 fields"):
        next(it)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(RescorerError, match="does not exist"):
        read_all(tmp_path / "nope.arpa")
    with pytest.raises(RescorerError, match="does not exist"):
        arpa_header(tmp_path / "nope.arpa")
