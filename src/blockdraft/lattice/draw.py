"""Drawings of a sausage lattice in the style of Kim et al. (2024), Fig. 4.

Public functions:
    draw_lattice(lattice, path=None, *, reference=None, labels=None, fmt=None,
                 max_label_len=16, title=None) -> str
        the lattice as Graphviz DOT text (always returned); with ``path``, also written as
        ``.dot`` text or rendered to ``.svg`` / ``.png`` / ``.pdf`` with matplotlib.
    token_text(token, labels=None, max_label_len=16) -> str
        the visible, truncated text shown for one token.
    dot_quote(text) -> str
        ``text`` as a double-quoted DOT string (quotes, backslashes, newlines escaped).

The picture: states ``0..h`` as circles left to right (state 0 is the start, state ``h`` the
final state, drawn doubled); the arcs of slot ``i`` go from state ``i - 1`` to state ``i``,
stacked top to bottom best first, each labelled with its token (through ``labels``, else the
id) and its score (natural-log probability, nats, two decimals). The reference path (e.g. the
greedy continuation) is highlighted: its arc in each slot is thick and red; a reference token
absent from its slot is shown as a red note under that slot.

Token text: control characters are shown as visible escapes (a newline token reads ``\\n``,
a tab ``\\t``, others ``\\xNN`` / ``\\uNNNN``), an empty string as ``(empty)``, and text longer
than ``max_label_len`` characters is cut with ``…``. Non-ASCII text is kept (DOT output is
UTF-8; in rendered figures, characters the font lacks are drawn as ``\\uNNNN``). Matplotlib
is imported lazily, with the Agg canvas and no pyplot state, so no display or Graphviz
binary is needed; the figure is 1 data unit per inch, its width grows with ``h``
and with the longest label, its height with the widest slot.
"""

from __future__ import annotations

import functools
import io
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.core.checks import check_int
from blockdraft.core.files import atomic_writer
from blockdraft.lattice.sausage import LatticeError, SausageLattice

Labels = Mapping[int, str] | Callable[[int], str]
"""Token id -> display text: a mapping (ids it lacks are shown as ids) or a callable."""

FORMATS = ("dot", "svg", "png", "pdf")
"""Output formats of :func:`draw_lattice` (file suffixes, without the dot)."""

REFERENCE_COLOR = "red"
_ARC_COLOR = "#444444"
_FONT = "DejaVu Sans"  # ships with matplotlib; good Unicode coverage
_PNG_DPI = 150

# Layout of the matplotlib figure, in inches.
_STATE_RADIUS = 0.2
_ROW_HEIGHT = 0.34  # vertical distance between two arcs of a slot
_CHAR_WIDTH = 0.078  # mean advance of a 9 pt DejaVu Sans character
_MIN_SLOT_WIDTH = 1.5
_MARGIN = 0.45


# ---------------------------------------------------------------------------- text helpers
def _visible(text: str) -> str:
    """Control and other unprintable characters as visible escapes."""
    out = []
    for ch in text:
        if ch.isprintable() or ch == " ":
            out.append(ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x100:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(f"\\u{ord(ch):04x}")
    return "".join(out)


def token_text(token: int, labels: Labels | None = None, max_label_len: int = 16) -> str:
    """The text shown for a token: its label (or id), made visible and truncated.

    Args:
        token: the token id.
        labels: a mapping or callable id -> text (e.g. a tokenizer's decode); None shows ids.
        max_label_len: the most characters shown; longer text ends in ``…``.

    Returns:
        A single-line string of at most ``max_label_len`` characters (``(empty)`` for an
        empty label).
    """
    if labels is None:
        text = str(int(token))
    elif isinstance(labels, Mapping):
        text = str(labels.get(int(token), int(token)))
    else:
        text = str(labels(int(token)))
    text = _visible(text) if text else "(empty)"
    if len(text) > max_label_len:
        text = text[: max_label_len - 1] + "…"
    return text


def dot_quote(text: str) -> str:
    """A DOT double-quoted string for ``text``.

    Backslashes and double quotes are escaped; a newline becomes DOT's centred line break
    ``\\n``; carriage returns are dropped. Any other character (non-ASCII included) is kept:
    DOT files are UTF-8.
    """
    body = text.replace("\\", "\\\\").replace('"', '\\"').replace("\r", "").replace("\n", "\\n")
    return f'"{body}"'


def _score_text(score: float) -> str:
    return f"{score:.2f}"


@functools.lru_cache(maxsize=1)
def _font_charmap() -> frozenset[int]:
    """Code points the drawing font has glyphs for."""
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    return frozenset(FT2Font(font_manager.findfont(_FONT)).get_charmap())


def _drawable(text: str) -> str:
    """``text`` with characters the font lacks written as ``\\uNNNN`` (no tofu boxes)."""
    have = _font_charmap()
    return "".join(
        ch if ord(ch) in have or ch in " \n" else f"\\u{ord(ch):04x}" for ch in text
    )


# ---------------------------------------------------------------------------- validation
def _check_reference(lattice: SausageLattice, reference: Any) -> np.ndarray | None:
    if reference is None:
        return None
    ref = np.asarray(reference)
    if ref.ndim != 1 or ref.shape[0] != lattice.h:
        raise LatticeError(
            f"reference must be {lattice.h} token ids (one per slot), got shape {ref.shape}"
        )
    if ref.size and ref.dtype.kind not in "iu":
        raise LatticeError(f"reference must hold integer token ids, got dtype {ref.dtype}")
    return ref.astype(np.int64)


def _output_format(path: Path, fmt: str | None) -> str:
    if fmt is not None:
        name = str(fmt).lower().lstrip(".")
        if name not in FORMATS:
            raise LatticeError(f"unknown drawing format {fmt!r}; use one of {FORMATS}")
        return name
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise LatticeError(
            f"cannot tell the drawing format of {str(path)!r} from its suffix "
            f"{path.suffix or '(none)'!r}; use a suffix in {['.' + f for f in FORMATS]} or "
            "pass fmt="
        )
    return suffix


# ---------------------------------------------------------------------------- DOT
def _to_dot(
    lattice: SausageLattice,
    reference: np.ndarray | None,
    labels: Labels | None,
    max_label_len: int,
    title: str | None,
) -> str:
    h = lattice.h
    lines = ["digraph lattice {", "  rankdir=LR;"]
    if title is not None:
        lines.append(f"  graph [label={dot_quote(title)}, labelloc=t, fontname=Helvetica];")
    lines += [
        "  node [shape=circle, fontname=Helvetica, fontsize=12];",
        "  edge [fontname=Helvetica, fontsize=10, color=\"#444444\"];",
    ]
    for s in range(h + 1):
        shape = ", shape=doublecircle" if s == h else ""
        lines.append(f"  s{s} [label=\"{s}\"{shape}];")
    for i in range(h):
        tokens, scores = lattice.slot(i)
        lines.append(f"  // slot {i + 1}: {tokens.size} arcs, best first")
        ref_tok = None if reference is None else int(reference[i])
        for j, (tok, score) in enumerate(zip(tokens.tolist(), scores.tolist(), strict=True)):
            text = token_text(tok, labels, max_label_len)
            attrs = [
                f"label={dot_quote(text + chr(10) + _score_text(score))}",
                f"tooltip={dot_quote(f'slot {i + 1}, arc {j + 1}: token {tok}, ln p = {score!r}')}",
            ]
            if tok == ref_tok:
                attrs += [
                    f"color={REFERENCE_COLOR}",
                    f"fontcolor={REFERENCE_COLOR}",
                    "penwidth=3",
                    "class=reference",
                ]
            lines.append(f"  s{i} -> s{i + 1} [{', '.join(attrs)}];")
        if ref_tok is not None and ref_tok not in tokens:
            text = token_text(ref_tok, labels, max_label_len)
            note = f'reference "{text}" (id {ref_tok}) not in slot {i + 1}'
            lines.append(
                f"  note{i + 1} [shape=note, label={dot_quote(note)}, "
                f"color={REFERENCE_COLOR}, fontcolor={REFERENCE_COLOR}];"
            )
            lines.append(
                f"  s{i} -> note{i + 1} [style=dashed, arrowhead=none, "
                f"color={REFERENCE_COLOR}];"
            )
    lines.append("}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- matplotlib
def _render(
    lattice: SausageLattice,
    reference: np.ndarray | None,
    labels: Labels | None,
    max_label_len: int,
    title: str | None,
    fmt: str,
) -> bytes:
    """The drawing rendered by matplotlib (Agg canvas) as ``fmt`` bytes."""
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Circle, FancyArrowPatch
        from matplotlib.path import Path as MplPath
    except ImportError as e:  # pragma: no cover - matplotlib is a declared dependency
        raise LatticeError(
            "drawing to svg/png/pdf needs matplotlib; install it with `pip install matplotlib`"
        ) from e

    h = lattice.h
    counts = lattice.counts.tolist()
    arc_texts = [
        [
            _drawable(f"{token_text(t, labels, max_label_len)}  {_score_text(s)}")
            for t, s in zip(*(a.tolist() for a in lattice.slot(i)), strict=True)
        ]
        for i in range(h)
    ]
    longest = max(len(t) for slot in arc_texts for t in slot)
    dx = max(_MIN_SLOT_WIDTH, longest * _CHAR_WIDTH + 0.9)  # inches per slot
    half = (max(counts) - 1) / 2 * _ROW_HEIGHT  # inches above (and below) the state line
    missing = reference is not None and any(
        int(reference[i]) not in lattice.slot(i)[0] for i in range(h)
    )
    top = half + _MARGIN + (0.45 if title else 0.0)
    bottom = half + _MARGIN + (0.35 if missing else 0.0) + 0.3  # + the caption
    width = 2 * _MARGIN + 0.3 + h * dx
    height = top + bottom
    x0 = _MARGIN + 0.3  # state 0 (room on the left for the start arrow)

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(0.0, width)
    ax.set_ylim(-bottom, top)
    ax.set_axis_off()
    text_kw: dict[str, Any] = {"fontfamily": _FONT, "parse_math": False}

    xs = [x0 + s * dx for s in range(h + 1)]
    r = _STATE_RADIUS
    for s, x in enumerate(xs):
        ax.add_patch(Circle((x, 0.0), r, fc="white", ec="black", lw=1.4, zorder=4))
        if s == h:
            ax.add_patch(Circle((x, 0.0), r * 0.78, fc="none", ec="black", lw=1.0, zorder=4))
        ax.text(x, 0.0, str(s), ha="center", va="center", fontsize=10, zorder=5, **text_kw)
    ax.add_patch(
        FancyArrowPatch(
            (x0 - r - 0.3, 0.0), (x0 - r, 0.0), arrowstyle="-|>", mutation_scale=10,
            lw=1.2, color="black", zorder=3,
        )
    )

    for i in range(h):
        tokens, _ = lattice.slot(i)
        ref_tok = None if reference is None else int(reference[i])
        a, b = np.array([xs[i], 0.0]), np.array([xs[i + 1], 0.0])
        n = tokens.size
        for j in range(n):
            y = ((n - 1) / 2 - j) * _ROW_HEIGHT  # best on top
            c1 = np.array([xs[i] + 0.3 * dx, y * 4 / 3])
            c2 = np.array([xs[i + 1] - 0.3 * dx, y * 4 / 3])
            start = a + r * (c1 - a) / np.linalg.norm(c1 - a)
            end = b + r * (c2 - b) / np.linalg.norm(c2 - b)
            mid = (start + 3 * c1 + 3 * c2 + end) / 8  # the cubic at t = 1/2 (its apex)
            is_ref = int(tokens[j]) == ref_tok
            color = REFERENCE_COLOR if is_ref else _ARC_COLOR
            path = MplPath([start, c1, c2, end], [MplPath.MOVETO] + [MplPath.CURVE4] * 3)
            ax.add_patch(
                FancyArrowPatch(
                    path=path, arrowstyle="-|>", mutation_scale=9 if not is_ref else 12,
                    lw=2.6 if is_ref else 0.9, color=color, zorder=3 if is_ref else 2,
                )
            )
            ax.text(
                mid[0], mid[1], arc_texts[i][j], ha="center", va="center", fontsize=9,
                color=color, fontweight="bold" if is_ref else "normal", zorder=5 if is_ref else 4,
                bbox={"boxstyle": "round,pad=0.12", "fc": "white", "ec": "none", "alpha": 0.9},
                **text_kw,
            )
        if ref_tok is not None and ref_tok not in tokens:
            ax.text(
                (xs[i] + xs[i + 1]) / 2, -half - 0.4,
                _drawable(f'reference "{token_text(ref_tok, labels, max_label_len)}" not in slot'),
                ha="center", va="center", fontsize=8.5, color=REFERENCE_COLOR,
                style="italic", **text_kw,
            )
    if title:
        ax.text(
            width / 2, top - 0.3, _drawable(title), ha="center", va="center", fontsize=12,
            **text_kw,
        )
    caption = "arc label: token  ln p (nats)"
    if reference is not None:
        caption += f";  {REFERENCE_COLOR}: reference path"
    ax.text(0.15, -bottom + 0.18, caption, ha="left", va="center", fontsize=7.5,
            color="#777777", **text_kw)

    buf = io.BytesIO()
    metadata: dict[str, Any] = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}.get(
        fmt, {}
    )
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "blockdraft"}):
        fig.savefig(buf, format=fmt, dpi=_PNG_DPI, metadata=metadata or None)
    return buf.getvalue()


# ---------------------------------------------------------------------------- public
def draw_lattice(
    lattice: SausageLattice,
    path: str | os.PathLike[str] | None = None,
    *,
    reference: Any = None,
    labels: Labels | None = None,
    fmt: str | None = None,
    max_label_len: int = 16,
    title: str | None = None,
) -> str:
    """Draw a lattice like Kim et al. Fig. 4; return DOT text, and write a file if asked.

    Args:
        lattice: the lattice to draw.
        path: where to write the drawing, or None to only return the DOT text. Written
            atomically; its folder must exist.
        reference: ``h`` token ids of the path to highlight (e.g. the greedy continuation),
            or None.
        labels: token id -> display text (a mapping or a callable such as a tokenizer's
            decode); None shows the ids.
        fmt: the file format, one of :data:`FORMATS`; None takes it from ``path``'s suffix.
            Only meaningful with ``path``.
        max_label_len: the most characters of a token's text shown (>= 2).
        title: a caption above the drawing, or None.

    Returns:
        The drawing as Graphviz DOT text (``digraph``, ``rankdir=LR``, UTF-8 safe), whatever
        the file format.

    Raises:
        LatticeError: if ``lattice`` is not a lattice, ``reference`` is not ``h`` integer ids,
            ``max_label_len`` < 2, ``fmt`` is given without ``path``, or the format (``fmt``
            or the suffix) is not one of :data:`FORMATS`.
        OSError: if the file cannot be written.
    """
    if not isinstance(lattice, SausageLattice):
        raise LatticeError(f"draw_lattice expects a SausageLattice, got {type(lattice).__name__}")
    max_label_len = check_int(max_label_len, "max_label_len", LatticeError, minimum=2)
    ref = _check_reference(lattice, reference)
    out_format = None
    if path is not None:
        out_format = _output_format(Path(path), fmt)
    elif fmt is not None:
        raise LatticeError(f"fmt={fmt!r} was given without a path to write to")
    dot = _to_dot(lattice, ref, labels, int(max_label_len), title)
    if path is None:
        return dot
    if out_format == "dot":
        data = dot.encode("utf-8")
    else:
        assert out_format is not None
        data = _render(lattice, ref, labels, int(max_label_len), title, out_format)
    with atomic_writer(path) as f:
        f.write(data)
    return dot

