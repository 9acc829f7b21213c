"""Plots of the oracle room's analyses (PNG, PDF or SVG by the file's suffix; matplotlib,
imported lazily; written atomically).

Public surface:
    plot_oracle_curve(curve, path) -> Path
        ``B_oracle(k) / B_vanilla`` against ``k`` (log2 axis), like Kim et al. Fig. 6.
    plot_entropy_densities(stats, path) -> Path
        one entropy density per head (Gaussian KDE, nats), like Kim et al. Fig. 3.
    plot_sweep(result, path) -> Path
        a sweep's ``B`` against each swept axis (one panel per axis).

Each draws on a standalone ``Figure`` (no pyplot, no global backend switch) and write the
trace's signature under the axes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from blockdraft.oracle.analysis import EntropyStats, OracleCurve
from blockdraft.oracle.errors import OracleError

_KDE_MAX_SAMPLES = 5000  # per head; a fixed subsample keeps the KDE cheap on large traces
_KDE_GRID = 256


def _figure(width: float = 6.4, height: float = 4.2) -> Any:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:  # pragma: no cover - matplotlib is a dependency
        raise OracleError("plots need matplotlib; install it with `pip install matplotlib`") from e
    fig = Figure(figsize=(width, height), dpi=120)
    FigureCanvasAgg(fig)
    return fig


def _caption(fig: Any, signature: Mapping[str, Any]) -> None:
    from blockdraft.core.signature import format_signature

    text = format_signature(dict(signature))
    if text:
        fig.text(0.01, 0.01, text, fontsize=6, color="0.4", ha="left", va="bottom", wrap=True)


PLOT_FORMATS = ("png", "pdf", "svg")


def plot_format(path: str | os.PathLike[str]) -> str:
    """The image format of ``path``, by its suffix (``.png``, ``.pdf`` or ``.svg``).

    Raises:
        OracleError: any other suffix (never PNG bytes under another name).
    """
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in PLOT_FORMATS:
        given = f".{suffix}" if suffix else "(none)"
        raise OracleError(
            f"cannot plot to {str(path)!r}: unsupported suffix {given}; use one of "
            f"{', '.join('.' + f for f in PLOT_FORMATS)}"
        )
    return suffix


def _save(fig: Any, path: str | os.PathLike[str]) -> Path:
    from blockdraft.core.files import atomic_writer

    out = Path(path)
    fmt = plot_format(out)
    if out.parent and not out.parent.is_dir():
        raise OracleError(f"cannot write {out}: folder {out.parent} does not exist")
    metadata = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}.get(fmt)
    with atomic_writer(out) as f:
        fig.savefig(f, format=fmt, metadata=metadata)
    return out


def plot_oracle_curve(curve: OracleCurve, path: str | os.PathLike[str]) -> Path:
    """Draw ``B_oracle(k) / B_vanilla`` against ``k``.

    Args:
        curve: from :func:`~blockdraft.oracle.analysis.oracle_curve`.
        path: the PNG to write; its folder must exist.

    Returns:
        ``path``.
    """
    fig = _figure()
    ax = fig.add_axes((0.12, 0.2, 0.84, 0.7))
    ax.plot(curve.ks, curve.ratio, marker="o", color="C0")
    for k, r, b in zip(curve.ks, curve.ratio, curve.b_oracle, strict=True):
        ax.annotate(f"{r:.2f}\n(B={b:.2f})", (k, r), textcoords="offset points",
                    xytext=(0, 6), ha="center", fontsize=7)
    ax.axhline(1.0, color="0.6", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xticks(curve.ks.tolist(), [str(int(k)) for k in curve.ks])
    ax.set_xlabel("k (arcs per slot of the top-k lattice)")
    ax.set_ylabel("B_oracle(k) / B_vanilla")
    ax.set_title(f"Oracle block efficiency (B_vanilla = {curve.b_vanilla:.3f})")
    lo = min(1.0, float(curve.ratio.min()))
    ax.set_ylim(lo - 0.05, float(curve.ratio.max()) * 1.12 + 0.05)
    _caption(fig, curve.signature)
    return _save(fig, path)


def _kde(samples: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Gaussian KDE with Scott's bandwidth (a flat spike for constant samples)."""
    n = samples.size
    sd = float(samples.std())
    bw = 1.06 * sd * n ** (-1 / 5) if sd > 0 else 1e-3
    z = (grid[:, None] - samples[None, :]) / bw  # (G, n)
    return np.exp(-0.5 * z * z).sum(axis=1) / (n * bw * np.sqrt(2 * np.pi))


def plot_entropy_densities(stats: EntropyStats, path: str | os.PathLike[str]) -> Path:
    """Draw the entropy density of every head over the visited positions.

    Args:
        stats: from :func:`~blockdraft.oracle.analysis.head_entropy`.
        path: the PNG to write; its folder must exist.

    Returns:
        ``path``.
    """
    ent = stats.entropy  # (S, h)
    rng = np.random.default_rng(0)
    if ent.shape[0] > _KDE_MAX_SAMPLES:
        ent = ent[np.sort(rng.choice(ent.shape[0], _KDE_MAX_SAMPLES, replace=False))]
    hi = float(ent.max()) if ent.size else 1.0
    grid = np.linspace(0.0, max(hi * 1.05, 1e-2), _KDE_GRID)
    fig = _figure()
    ax = fig.add_axes((0.12, 0.2, 0.84, 0.7))
    for i in range(stats.h):
        ax.plot(grid, _kde(ent[:, i], grid), label=f"head {i + 1} (H={stats.mean[i]:.2f})")
    ax.set_xlabel("entropy (nats)")
    ax.set_ylabel("density")
    ax.set_title(f"Head entropy over {stats.entropy.shape[0]} positions (h_max = {stats.h_max})")
    ax.legend(fontsize=7)
    _caption(fig, stats.signature)
    return _save(fig, path)


SWEEP_AXES = ("strategy", "k", "p", "rescorer", "alpha", "tree", "budget")
"""The axes of a sweep a plot can put on x (those with more than one value get a panel)."""


_TIED = {"rescorer": ("alpha",), "tree": ("rescorer", "alpha")}
"""Axes that change with another (no rescorer has no alpha): a line of that other's panel
joins configurations across them."""


def _axis_value(setting: Any, axis: str) -> Any:
    """The setting's value on ``axis``, or None where the axis does not apply to it."""
    if axis == "rescorer":
        return setting.rescorer_label
    value = getattr(setting, axis)
    return None if value is None or value == "" or (axis == "budget" and value == 0) else value


def _order(values: Any) -> list[Any]:
    """Distinct values, numbers ascending before words."""
    return sorted(set(values), key=lambda v: (isinstance(v, str), v if not isinstance(v, str)
                                              else 0, str(v)))


def plot_sweep(result: Any, path: str | os.PathLike[str]) -> Path:
    """Draw ``B`` against each swept axis of a sweep, one panel per axis with more than one
    value where it applies (``alpha`` with a rescorer, ``tree`` and ``budget`` for trees); in a
    panel, one line joins the configurations that differ in that axis alone.

    Args:
        result: a :class:`~blockdraft.oracle.sweep.SweepResult`.
        path: the image to write (.png, .pdf or .svg); its folder must exist.

    Returns:
        ``path``.
    """
    rows = list(result.rows)
    axes = [a for a in SWEEP_AXES
            if len({_axis_value(r.setting, a) for r in rows} - {None}) > 1] or ["strategy"]
    cols = min(3, len(axes))
    lines = -(-len(axes) // cols)
    fig = _figure(4.2 * cols, 3.4 * lines + 0.6)
    for j, axis in enumerate(axes):
        ax = fig.add_subplot(lines, cols, j + 1)
        mine = [r for r in rows if _axis_value(r.setting, axis) is not None]
        xs = _order(_axis_value(r.setting, axis) for r in mine)
        groups: dict[tuple[Any, ...], list[tuple[int, float]]] = {}
        for r in mine:
            rest = tuple(_axis_value(r.setting, a) for a in SWEEP_AXES
                         if a != axis and a not in _TIED.get(axis, ()))
            groups.setdefault(rest, []).append((xs.index(_axis_value(r.setting, axis)),
                                                r.block_efficiency))
        for points in groups.values():
            points.sort()
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", lw=0.8,
                    ms=3, alpha=0.8)
        ax.set_xticks(range(len(xs)), [str(x) for x in xs], fontsize=7,
                      rotation=20 if any(isinstance(x, str) and len(x) > 6 for x in xs) else 0)
        ax.set_xlabel(axis)
        ax.set_ylabel("B")
        ax.grid(alpha=0.3)
    fig.suptitle(f"Block efficiency B over {len(rows)} configurations ({result.engine})",
                 fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 0.96))
    _caption(fig, result.signature)
    return _save(fig, path)
