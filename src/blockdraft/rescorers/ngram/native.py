"""ctypes binding of blockdraft's native KenLM search (``native/kenlm_pbest.cc``).

The library ``libbdkenlm.so`` is part of the package: its build (``setup.py``) compiles it with
the KenLM sources vendored in ``native/kenlm`` into ``blockdraft/_native/`` (a wheel, ``pip
install``, or in place by ``make setup``'s editable install); ``$BLOCKDRAFT_NATIVE_LIB``
overrides the location. When it is absent, :func:`available` is False, the exact backend falls
back to the (much slower, equally exact) pure-Python search over the ``kenlm`` module, and the
first such search warns once (:func:`warn_python_search`).

Units: every score crossing this boundary is a natural-log probability; KenLM's log10 values
are converted inside the C++ code, once per lookup. :class:`NativeContextLM` returns plain
probabilities (:meth:`NativeContextLM.continuation_probs`), as its Python twin
:class:`~blockdraft.rescorers.ngram.context.ContextLM` does.
"""

from __future__ import annotations

import ctypes
import os
import threading
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np

from blockdraft.core.errors import BlockdraftWarning
from blockdraft.rescorers.base import RescorerError

_LIB_NAME = "libbdkenlm.so"
MAX_RAW_ID = 2**32
"""Token ids the native context LM holds (as uint32) are below this."""

PYTHON_SLOWDOWN = "about 50-120x slower (8x16 lattices, p = 1 to 16)"
"""How much slower the Python search is than the native one: ``blockdraft bench rescore --kind
hits --h 8 --k 16 --p 1,16`` with a 4-gram of 116k n-grams, run with ``$BLOCKDRAFT_NATIVE_LIB``
set to a missing file and without (0.18 vs 10.3 ms at p = 1, 0.35 vs 42.9 ms at p = 16)."""

HOW_TO_BUILD = ("`make setup` in a clone, or reinstall blockdraft (`pip install --force-reinstall "
                "--no-deps blockdraft` or your wheel; from source it needs a C++ compiler)")
"""How to get the library, for messages."""

_u32p = np.ctypeslib.ndpointer(dtype=np.uint32, flags="C_CONTIGUOUS")
_f64p = np.ctypeslib.ndpointer(dtype=np.float64, flags="C_CONTIGUOUS")


def library_path() -> Path:
    """Where the native library is looked for."""
    env = os.environ.get("BLOCKDRAFT_NATIVE_LIB")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "_native" / _LIB_NAME


@lru_cache(maxsize=1)
def _load() -> ctypes.CDLL | None:
    path = library_path()
    if not path.is_file():
        return None
    lib = ctypes.CDLL(str(path))
    if hasattr(lib, "bd_write_binary"):  # a library built before it lacks it
        lib.bd_write_binary.restype = ctypes.c_int
        lib.bd_write_binary.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                        ctypes.c_int]
    lib.bd_load.restype = ctypes.c_void_p
    lib.bd_load.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
    lib.bd_free.argtypes = [ctypes.c_void_p]
    lib.bd_order.restype = ctypes.c_int
    lib.bd_order.argtypes = [ctypes.c_void_p]
    lib.bd_vocab_size.restype = ctypes.c_uint32
    lib.bd_vocab_size.argtypes = [ctypes.c_void_p]
    lib.bd_vocab_word.restype = ctypes.c_char_p
    lib.bd_vocab_word.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.bd_index.restype = ctypes.c_uint32
    lib.bd_index.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.bd_score.restype = ctypes.c_double
    lib.bd_score.argtypes = [
        ctypes.c_void_p, ctypes.c_int, _u32p, ctypes.c_int, _u32p, ctypes.c_int, _f64p,
    ]
    lib.bd_build_bounds.restype = ctypes.c_int64
    lib.bd_build_bounds.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
    lib.bd_has_bounds.restype = ctypes.c_int
    lib.bd_has_bounds.argtypes = [ctypes.c_void_p]
    lib.bd_pbest.restype = ctypes.c_int
    # Raw pointers (the arrays are made contiguous with the right dtype by the caller):
    # ndpointer's per-argument checks cost more than the search on small lattices.
    ptr = ctypes.c_void_p
    lib.bd_pbest.argtypes = [
        ptr,  # handle
        ctypes.c_int,  # bos
        ptr, ctypes.c_int,  # context
        ctypes.c_int, ctypes.c_int,  # h, k
        ptr, ptr, ptr,  # words uint32, counts int32, head float64
        ctypes.c_double, ctypes.c_double, ctypes.c_int, ctypes.c_int,  # alpha, unk_ln, p, beam
        ptr, ptr, ptr, ptr, ptr,  # out: arcs int32, total, head, lm float64, stats int64
    ]
    if not hasattr(lib, "bd_pbest_ctx"):  # built before the context LM: the search alone
        return lib
    lib.bd_pbest_ctx.restype = ctypes.c_int
    lib.bd_pbest_ctx.argtypes = [
        ptr, ptr, ctypes.c_double, ptr,  # handle, context LM, lam, raw token ids uint32
        *lib.bd_pbest.argtypes[1:],
    ]
    lib.bd_ctx_new.restype = ctypes.c_void_p
    lib.bd_ctx_new.argtypes = [ctypes.c_int]
    lib.bd_ctx_free.argtypes = [ctypes.c_void_p]
    lib.bd_ctx_extend.restype = ctypes.c_int
    lib.bd_ctx_extend.argtypes = [ctypes.c_void_p, _u32p, ctypes.c_int64]
    lib.bd_ctx_size.restype = ctypes.c_int64
    lib.bd_ctx_size.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)]
    lib.bd_ctx_probs.argtypes = [ctypes.c_void_p, _u32p, ctypes.c_int, _f64p]
    return lib


def available() -> bool:
    """True when the native library was built and loads."""
    return _load() is not None


_warned = False


def warn_python_search() -> None:
    """Warn, once per process, that the exact search runs in Python because the native
    library is missing (:class:`~blockdraft.core.errors.BlockdraftWarning`, one line)."""
    global _warned
    if _warned:
        return
    _warned = True
    warnings.warn(
        f"the native p-best search library is missing ({library_path()}): the exact search "
        f"runs in Python, the same drafts {PYTHON_SLOWDOWN}; to build it: {HOW_TO_BUILD}",
        BlockdraftWarning, stacklevel=4,
    )


def can_write_binary() -> bool:
    """Whether :func:`write_binary` can run (the library is built, with the binary writer)."""
    lib = _load()
    return lib is not None and hasattr(lib, "bd_write_binary")


def write_binary(arpa_path: str | Path, out_path: str | Path) -> None:
    """Write KenLM's probing binary of an ARPA file, byte for byte what ``build_binary
    ARPA OUT`` writes (the same KenLM code and defaults), without the tool.

    Raises:
        RescorerError: the library is missing or predates the writer; KenLM refused the file
            (the reason in the message).
    """
    lib = _load()
    if lib is None or not hasattr(lib, "bd_write_binary"):
        state = "is not built" if lib is None else "predates the binary writer"
        raise RescorerError(f"the native KenLM library {state} ({library_path()}); to build "
                            f"it: {HOW_TO_BUILD}")
    err = ctypes.create_string_buffer(4096)
    if lib.bd_write_binary(str(arpa_path).encode(), str(out_path).encode(), err, len(err)):
        msg = err.value.decode(errors="replace").strip()
        raise RescorerError(f"KenLM could not write the binary of {arpa_path}: {msg}")


class NativeModel:
    """A KenLM model (ARPA or binary) loaded by the native library.

    Word indices are KenLM's own (``uint32``; 0 is ``<unk>``).
    """

    def __init__(self, path: str | Path) -> None:
        lib = _load()
        if lib is None:
            raise RescorerError(
                f"the native KenLM library is not built ({library_path()}); build it "
                f"({HOW_TO_BUILD}) or use engine='kenlm'"
            )
        self._lib = lib
        err = ctypes.create_string_buffer(4096)
        handle = lib.bd_load(str(path).encode(), err, len(err))
        if not handle:
            msg = err.value.decode(errors="replace").strip()
            raise RescorerError(f"KenLM could not load {path}: {msg}")
        self._handle: ctypes.c_void_p | None = ctypes.c_void_p(handle)
        self.order: int = int(lib.bd_order(self._handle))
        self._local = threading.local()  # per thread: the pbest scratch buffer

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is not None and handle.value:
            self._lib.bd_free(handle)
            self._handle = None

    def words(self) -> list[str]:
        """The LM vocabulary by KenLM index (index 0 is ``<unk>``)."""
        n = int(self._lib.bd_vocab_size(self._handle))
        out = []
        for i in range(n):
            w = self._lib.bd_vocab_word(self._handle, i)
            out.append(w.decode("utf-8", errors="surrogateescape") if w is not None else "")
        return out

    def build_bounds(self, arpa_path: str | Path) -> int:
        """Read the LM's ARPA file once more to build the search's future bounds.

        The table holds, per token pair (c, w), an upper bound on ln P(w | any context ending
        in c); it makes branch-and-bound pruning tight (see native/kenlm_pbest.cc). Returns the
        number of pairs.
        """
        err = ctypes.create_string_buffer(4096)
        n = self._lib.bd_build_bounds(self._handle, str(arpa_path).encode(), err, len(err))
        if n < 0:
            msg = err.value.decode(errors="replace").strip()
            raise RescorerError(f"could not build search bounds from {arpa_path}: {msg}")
        return int(n)

    @property
    def has_bounds(self) -> bool:
        """Whether :meth:`build_bounds` has run."""
        return bool(self._lib.bd_has_bounds(self._handle))

    def index(self, word: str) -> int:
        """KenLM index of a word string (0 when unknown)."""
        return int(self._lib.bd_index(self._handle, word.encode("utf-8", "surrogateescape")))

    def score(self, words: np.ndarray, context: np.ndarray, bos: bool) -> np.ndarray:
        """float64 ``[n]``: ln P(word_i | start, context, words_<i)``.

        Args:
            words: uint32 KenLM indices ``[n]``.
            context: uint32 KenLM indices fed after the start state.
            bos: start from ``<s>`` (else from the null context).
        """
        w = np.ascontiguousarray(words, dtype=np.uint32)
        c = np.ascontiguousarray(context, dtype=np.uint32)
        out = np.zeros(w.size, dtype=np.float64)
        self._lib.bd_score(self._handle, int(bos), c, c.size, w, w.size, out)
        return out

    def pbest(
        self,
        words: np.ndarray,
        counts: np.ndarray,
        head: np.ndarray,
        context: np.ndarray,
        bos: bool,
        alpha: float,
        unk_ln: float | None,
        p: int,
        beam: int = 8,
        context_lm: NativeContextLM | None = None,
        context_weight: float = 0.0,
        raw: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Exact p-best paths of a lattice given as KenLM indices.

        Args:
            words: uint32 ``[h, k]`` KenLM indices (padding arcs are ignored via ``counts``).
            counts: int32 ``[h]`` real arcs per slot.
            head: float64 ``[h, k]`` head scores (nats).
            context: uint32 indices of the LM context (at most order-1 are used by KenLM).
            bos: start from ``<s>``.
            alpha: LM weight.
            unk_ln: LM log-prob (nats) for ``<unk>`` words, or None for KenLM's own.
            p: paths wanted.
            beam: width of the bounding pre-pass (0 disables pruning; the result is exact
                either way, only the work differs).
            context_lm: a context LM to interpolate, ``P = lam * P_ctx + (1 - lam) *
                P_kenlm``, with its counts and history those of its whole text (which must be
                the committed prefix ``context`` ends). None: KenLM alone.
            context_weight: ``lam`` in ``(0, 1]`` (with ``context_lm``).
            raw: with ``context_lm``: the lattice's raw token ids ``[h, k]`` (int64 ids below
                ``2**32``; padding is never read).

        Returns:
            ``(arcs [n, h] int32, total [n], head [n], lm [n], stats [h, 2] int64)`` with
            ``n = min(p, paths)``; ``lm`` the (interpolated) LM's log-prob of each path;
            ``stats[i] = (LM states kept after slot i, LM lookups made for slot i)``, summed
            over the pre-pass and the main pass (with a context LM a state is a pair).
        """
        h, k = words.shape
        sc = self._scratch(h * k, h, p, int(np.size(context)))
        # Inputs copied into this thread's scratch buffer, whose addresses are known: no
        # per-call ctypes pointer objects (they cost more than small searches).
        sc.words[: h * k] = words.reshape(-1)
        sc.ctx[: np.size(context)] = context
        sc.counts[:h] = counts
        sc.head[: h * k] = head.reshape(-1)  # padding (-inf) is never read
        a = sc.addr
        args = (
            int(bos), a["ctx"], int(np.size(context)), h, k, a["words"],
            a["counts"], a["head"], float(alpha),
            float("nan") if unk_ln is None else float(unk_ln), int(p), int(beam),
            a["arcs"], a["total"], a["head_out"], a["lm"], a["stats"],
        )
        if context_lm is None:
            n = self._lib.bd_pbest(self._handle, *args)
        else:
            assert raw is not None
            sc.raw[: h * k] = raw.reshape(-1)  # padding -1 wraps around: never read
            n = self._lib.bd_pbest_ctx(self._handle, context_lm.handle, float(context_weight),
                                       a["raw"], *args)
        if n < 0:
            raise RescorerError(f"native p-best search rejected a lattice of shape {(h, k)}")
        return (sc.arcs[: n * h].reshape(n, h).copy(), sc.total[:n].copy(),
                sc.head_out[:n].copy(), sc.lm[:n].copy(), sc.stats[: 2 * h].reshape(h, 2).copy())

    def _scratch(self, hk: int, h: int, p: int, nctx: int) -> _Scratch:
        sc: _Scratch | None = getattr(self._local, "scratch", None)
        if sc is None or not sc.fits(hk, h, p, nctx):
            old = (0, 0, 0, 0) if sc is None else sc.sizes
            sc = _Scratch(max(hk, old[0]), max(h, old[1]), max(p, old[2]), max(nctx, old[3], 8))
            self._local.scratch = sc
        return sc


class _Scratch:
    """One thread's input and output arrays for :meth:`NativeModel.pbest`, views of one
    buffer whose addresses are computed once."""

    def __init__(self, hk: int, h: int, p: int, nctx: int) -> None:
        self.sizes = (hk, h, p, nctx)
        layout = [("words", np.uint32, hk), ("raw", np.uint32, hk), ("ctx", np.uint32, nctx),
                  ("counts", np.int32, h),
                  ("head", np.float64, hk), ("arcs", np.int32, p * h), ("total", np.float64, p),
                  ("head_out", np.float64, p), ("lm", np.float64, p), ("stats", np.int64, 2 * h)]
        offsets, at = {}, 0
        for name, dtype, count in layout:
            offsets[name] = at
            at += -(-count * np.dtype(dtype).itemsize // 8) * 8  # 8-byte aligned sections
        self._buf = np.zeros(at, dtype=np.uint8)
        base = self._buf.ctypes.data
        self.addr = {name: base + off for name, off in offsets.items()}
        for name, dtype, count in layout:
            off = offsets[name]
            view = self._buf[off: off + count * np.dtype(dtype).itemsize].view(dtype)
            setattr(self, name, view)

    words: np.ndarray
    raw: np.ndarray
    ctx: np.ndarray
    counts: np.ndarray
    head: np.ndarray
    arcs: np.ndarray
    total: np.ndarray
    head_out: np.ndarray
    lm: np.ndarray
    stats: np.ndarray

    def fits(self, hk: int, h: int, p: int, nctx: int) -> bool:
        return (hk <= self.sizes[0] and h <= self.sizes[1] and p <= self.sizes[2]
                and nctx <= self.sizes[3])


class NativeContextLM:
    """The context LM of :mod:`blockdraft.rescorers.ngram.context` in the native library: the
    same counts and estimates (the same floating-point operations), held where the native
    search reads them.

    Args:
        order: ``n``, 1 to 16.

    Token ids must lie in ``[0, 2**32)``. Not thread-safe (:meth:`extend` mutates it).

    Raises:
        RescorerError: the library is not built, a bad order.
    """

    def __init__(self, order: int) -> None:
        lib = _load()
        if lib is None or not hasattr(lib, "bd_ctx_new"):
            state = "is not built" if lib is None else "predates the context LM"
            raise RescorerError(
                f"the native KenLM library {state} ({library_path()}); build it "
                f"({HOW_TO_BUILD}) or use engine='kenlm'"
            )
        self._lib = lib
        handle = lib.bd_ctx_new(int(order))
        if not handle:
            raise RescorerError(f"context LM order must be 1 to 16, got {order}")
        self.handle: ctypes.c_void_p | None = ctypes.c_void_p(handle)
        self.order = int(order)
        self._size = 0

    def __del__(self) -> None:
        handle = getattr(self, "handle", None)
        if handle is not None and handle.value:
            self._lib.bd_ctx_free(handle)
            self.handle = None

    def __len__(self) -> int:
        """Tokens of the text so far."""
        return self._size

    def extend(self, tokens: np.ndarray) -> None:
        """Append token ids (non-negative ints, already validated) to the text.

        Raises:
            RescorerError: an id ``>= 2**32`` (nothing is counted then).
        """
        _check_raw(tokens)
        t = np.ascontiguousarray(tokens, dtype=np.uint32)
        if self._lib.bd_ctx_extend(self.handle, t, t.size) != 0:
            raise RescorerError(f"out of memory growing the context LM by {t.size} tokens")
        self._size += int(t.size)

    def sizes(self) -> tuple[int, int]:
        """``(histories, n-gram entries)`` held: the state's size."""
        entries = ctypes.c_int64(0)
        nodes = self._lib.bd_ctx_size(self.handle, ctypes.byref(entries))
        return int(nodes), int(entries.value)

    def continuation_probs(self, tokens: np.ndarray) -> np.ndarray:
        """float64 ``[n]``: ``P_ctx`` (a probability) of each token after the text and the
        tokens before it (the counts stay those of the text)."""
        _check_raw(tokens)
        t = np.ascontiguousarray(tokens, dtype=np.uint32)
        out = np.zeros(t.size, dtype=np.float64)
        self._lib.bd_ctx_probs(self.handle, t, t.size, out)
        return out


def _check_raw(tokens: np.ndarray) -> None:
    if np.size(tokens) and int(np.max(tokens)) >= MAX_RAW_ID:
        raise RescorerError(
            f"token id {int(np.max(tokens))} is too large for the native context LM (ids must "
            f"be < {MAX_RAW_ID})"
        )
