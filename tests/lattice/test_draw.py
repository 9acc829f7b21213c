"""Tests of blockdraft.lattice.draw: DOT text and matplotlib renderings."""

from __future__ import annotations

import re
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from blockdraft.lattice import LatticeError, SausageLattice
from blockdraft.lattice.draw import dot_quote, draw_lattice, token_text

# A DOT double-quoted string, a bare ID, and one attribute "name=value".
QSTR = r'"(?:[^"\\\n]|\\.)*"'
ID = r"[A-Za-z_][A-Za-z0-9_]*|-?\d+(?:\.\d+)?|#[0-9a-fA-F]{6}"
ATTR = rf"[a-z]+=(?:{QSTR}|{ID})"
ATTRS = rf"\[(?:{ATTR})(?:, {ATTR})*\]"
STATEMENT = re.compile(
    rf"^  (?:rankdir=LR;|// .*|(?:graph|node|edge) {ATTRS};|(?:{ID}) {ATTRS};"
    rf"|(?P<src>{ID}) -> (?P<dst>{ID}) (?P<attrs>{ATTRS});)$"
)


def unquote(q: str) -> str:
    """Inverse of DOT's quoting, as Graphviz reads it (``\\n`` is a line break)."""
    assert q[0] == q[-1] == '"'
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), q[1:-1])


def parse(dot: str) -> tuple[list[str], list[tuple[str, str, dict[str, str]]]]:
    """Check every line is a well-formed statement; return node names and edges."""
    lines = dot.splitlines()
    assert lines[0] == "digraph lattice {" and lines[-1] == "}"
    nodes, edges = [], []
    for line in lines[1:-1]:
        m = STATEMENT.match(line)
        assert m, f"not a well-formed DOT statement: {line!r}"
        if m.group("src"):
            attrs = dict(re.findall(rf"([a-z]+)=({QSTR}|{ID})", m.group("attrs")))
            edges.append((m.group("src"), m.group("dst"), attrs))
        elif re.match(r"^  [a-z]+\d+ \[", line):
            nodes.append(line.split()[0])
    return nodes, edges


def lattice() -> SausageLattice:
    return SausageLattice(
        tokens=np.array([[7, -1, -1], [3, 0, 9], [5, 2, -1], [4, 1, 8]]),
        scores=np.array(
            [[-0.1, -np.inf, -np.inf], [-0.25, -1.5, -2.0], [-1.0, -3.0, -np.inf],
             [-0.5, -0.5, -4.0]]
        ),
    )


def arc_edges(edges):
    return [(s, d, a) for s, d, a in edges if d.startswith("s")]


# ---------------------------------------------------------------------------- DOT
def test_dot_structure() -> None:
    lat = lattice()
    dot = draw_lattice(lat)
    assert "  rankdir=LR;" in dot.splitlines()
    nodes, edges = parse(dot)
    assert nodes == [f"s{i}" for i in range(lat.h + 1)]
    assert "doublecircle" in next(x for x in dot.splitlines() if x.startswith("  s4 ["))
    arcs = arc_edges(edges)
    assert len(arcs) == int(lat.counts.sum()) == 9
    for i in range(lat.h):
        slot = [a for s, d, a in arcs if (s, d) == (f"s{i}", f"s{i + 1}")]
        toks, scores = lat.slot(i)
        shown = [unquote(a["label"]).split("\n") for a in slot]
        # best on top: the DOT edges of a slot are in the lattice's order (by weight)
        assert [int(t) for t, _ in shown] == toks.tolist()
        assert [float(s) for _, s in shown] == [round(float(x), 2) for x in scores]
    assert not any("color" in a for _, _, a in arcs)  # nothing highlighted without reference


def test_reference_highlights_exactly_its_arcs() -> None:
    lat = lattice()
    reference = [7, 0, 6, 1]  # slot 3 lacks token 6
    dot = draw_lattice(lat, reference=reference)
    _, edges = parse(dot)
    arcs = arc_edges(edges)
    red = [(s, d, a) for s, d, a in arcs if a.get("color") == "red"]
    assert [(s, d, unquote(a["label"]).split("\n")[0]) for s, d, a in red] == [
        ("s0", "s1", "7"), ("s1", "s2", "0"), ("s3", "s4", "1"),
    ]
    assert all(a["penwidth"] == "3" for _, _, a in red)
    notes = [(s, d, a) for s, d, a in edges if d.startswith("note")]
    assert [(s, d) for s, d, _ in notes] == [("s2", "note3")]
    note_line = next(x for x in dot.splitlines() if x.startswith("  note3 ["))
    assert "not in slot 3" in note_line and "6" in note_line


def test_nasty_labels_are_escaped() -> None:
    nasty = {
        7: 'say "hi"',
        3: "back\\slash",
        0: "line\nbreak",
        9: '\\"',
        5: "日本語 ✓",
        2: "",
        4: "tab\there",
        1: "\x00\x7f",
        8: "a" * 40,
    }
    lat = lattice()
    dot = draw_lattice(lat, labels=nasty, reference=[7, 3, 5, 4], title='T "1"\nsecond')
    _, edges = parse(dot)  # every line well-formed: no stray quote or raw newline
    shown = {int(unquote(a["tooltip"]).split("token ")[1].split(",")[0]):
             unquote(a["label"]).split("\n")[0] for _, _, a in arc_edges(edges)}
    assert shown == {
        7: 'say "hi"',
        3: "back\\slash",
        0: "line\\nbreak",  # a newline token reads as a visible escape
        9: '\\"',
        5: "日本語 ✓",
        2: "(empty)",
        4: "tab\\there",
        1: "\\x00\\x7f",
        8: "a" * 15 + "…",
    }
    assert '"T \\"1\\"\\nsecond"' in dot  # the title's own newline is a DOT line break


def test_dot_quote_and_token_text() -> None:
    assert dot_quote('a"b\\c\nd\r') == '"a\\"b\\\\c\\nd"'
    assert unquote(dot_quote('x"\\y')) == 'x"\\y'
    assert token_text(12) == "12"
    assert token_text(12, {12: "twelve"}) == "twelve"
    assert token_text(13, {12: "twelve"}) == "13"  # ids a mapping lacks are shown as ids
    assert token_text(3, lambda t: "<" * t) == "<<<"
    assert token_text(0, lambda t: "abcdefghij", max_label_len=5) == "abcd…"
    assert len(token_text(0, lambda t: "x" * 99)) == 16


def test_errors() -> None:
    lat = lattice()
    with pytest.raises(LatticeError, match=r"reference must be 4 token ids .* shape \(3,\)"):
        draw_lattice(lat, reference=[7, 3, 5])
    with pytest.raises(LatticeError, match=r"shape \(1, 4\)"):
        draw_lattice(lat, reference=[[7, 3, 5, 4]])
    with pytest.raises(LatticeError, match="integer token ids"):
        draw_lattice(lat, reference=[7.5, 3, 5, 4])
    with pytest.raises(LatticeError, match="max_label_len"):
        draw_lattice(lat, max_label_len=1)
    with pytest.raises(LatticeError, match="without a path"):
        draw_lattice(lat, fmt="png")
    with pytest.raises(LatticeError, match="SausageLattice"):
        draw_lattice(np.zeros((2, 2)))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["lattice.jpg", "lattice", "lattice.dot.txt"])
def test_bad_suffix(tmp_path: Path, name: str) -> None:
    with pytest.raises(LatticeError, match="suffix"):
        draw_lattice(lattice(), tmp_path / name)
    assert list(tmp_path.iterdir()) == []


def test_bad_fmt(tmp_path: Path) -> None:
    with pytest.raises(LatticeError, match="unknown drawing format 'gif'"):
        draw_lattice(lattice(), tmp_path / "x.png", fmt="gif")


# ---------------------------------------------------------------------------- files
def test_dot_file(tmp_path: Path) -> None:
    path = tmp_path / "lat.dot"
    dot = draw_lattice(lattice(), path, labels={5: "日本"})
    assert path.read_text(encoding="utf-8") == dot
    assert "日本" in dot


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_png_written_and_grows_with_h_and_k(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    sizes = {}
    for h, k in [(2, 2), (6, 2), (2, 8)]:
        lat = SausageLattice.from_logits(rng.normal(size=(h, 30)), k=k)
        path = tmp_path / f"l{h}x{k}.png"
        dot = draw_lattice(lat, path, reference=lat.vanilla(), title="demo")
        assert dot.startswith("digraph")  # DOT is returned whatever the format
        sizes[h, k] = png_size(path.read_bytes())
    (w22, h22), (w62, h62), (w28, h28) = sizes[2, 2], sizes[6, 2], sizes[2, 8]
    assert w62 > w22 and h62 == h22
    assert h28 > h22 and w28 == w22


def test_svg_and_pdf(tmp_path: Path) -> None:
    lat = lattice()
    labels = {7: "<&>", 3: "$x$"}
    draw_lattice(lat, tmp_path / "lat.svg", labels=labels, reference=[7, 3, 6, 4])
    root = ET.fromstring((tmp_path / "lat.svg").read_bytes())
    assert root.tag.endswith("svg")
    text = "".join(root.itertext())
    assert "<&>" in text and "$x$" in text  # text kept as text, no mathtext
    assert "not in slot" in text
    draw_lattice(lat, tmp_path / "out.bin", fmt="pdf")
    assert (tmp_path / "out.bin").read_bytes()[:5] == b"%PDF-"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lat.svg", "out.bin"]
