"""ctypes binding of blockdraft's native KenLM search (``native/kenlm_pbest.cc``).

The library ``libbdkenlm.so`` is built from the kenlm sdist by ``scripts/build_kenlm.sh``
(``make setup`` runs it) into ``src/blockdraft/_native/``; ``$BLOCKDRAFT_NATIVE_LIB`` overrides
the location. When it is absent, :func:`available` is False and the exact backend falls back to
the (much slower, equally exact) pure-Python search over the ``kenlm`` module.

Units: every score crossing this boundary is a natural-log probability; KenLM's log10 values
are converted inside the C++ code, once per lookup.
"""

from __future__ import annotations

import ctypes
import os
from functools import lru_cache
from pathlib import Path

import numpy as np

from blockdraft.rescorers.base import RescorerError

_LIB_NAME = "libbdkenlm.so"

_u32p = np.ctypeslib.ndpointer(dtype=np.uint32, flags="C_CONTIGUOUS")
_i32p = np.ctypeslib.ndpointer(dtype=np.int32, flags="C_CONTIGUOUS")
_i64p = np.ctypeslib.ndpointer(dtype=np.int64, flags="C_CONTIGUOUS")
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
    lib.bd_pbest.restype = ctypes.c_int
    lib.bd_pbest.argtypes = [
        ctypes.c_void_p,  # handle
        ctypes.c_int,  # bos
        _u32p, ctypes.c_int,  # context
        ctypes.c_int, ctypes.c_int,  # h, k
        _u32p, _i32p, _f64p,  # words, counts, head
        ctypes.c_double, ctypes.c_double, ctypes.c_int,  # alpha, unk_ln, p
        _i32p, _f64p, _f64p, _f64p, _i64p,  # outputs
    ]
    return lib


def available() -> bool:
    """True when the native library was built and loads."""
    return _load() is not None


class NativeModel:
    """A KenLM model (ARPA or binary) loaded by the native library.

    Word indices are KenLM's own (``uint32``; 0 is ``<unk>``).
    """

    def __init__(self, path: str | Path) -> None:
        lib = _load()
        if lib is None:
            raise RescorerError(
                f"the native KenLM library is not built ({library_path()}); run `make setup` "
                "(scripts/build_kenlm.sh) or use engine='kenlm'"
            )
        self._lib = lib
        err = ctypes.create_string_buffer(4096)
        handle = lib.bd_load(str(path).encode(), err, len(err))
        if not handle:
            msg = err.value.decode(errors="replace").strip()
            raise RescorerError(f"KenLM could not load {path}: {msg}")
        self._handle = ctypes.c_void_p(handle)
        self.order: int = int(lib.bd_order(self._handle))

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

        Returns:
            ``(arcs [n, h] int32, total [n], head [n], lm [n], stats [h, 2] int64)`` with
            ``n = min(p, paths)``; ``stats[i] = (distinct LM states after slot i, lookups)``.
        """
        h, k = words.shape
        w = np.ascontiguousarray(words, dtype=np.uint32)
        c = np.ascontiguousarray(context, dtype=np.uint32)
        cnt = np.ascontiguousarray(counts, dtype=np.int32)
        hd = np.ascontiguousarray(head, dtype=np.float64)
        hd = np.where(np.isfinite(hd), hd, 0.0)  # padding never read; keep the C side finite
        arcs = np.zeros((p, h), dtype=np.int32)
        total = np.zeros(p)
        head_out = np.zeros(p)
        lm_out = np.zeros(p)
        stats = np.zeros((h, 2), dtype=np.int64)
        n = self._lib.bd_pbest(
            self._handle, int(bos), c, c.size, h, k, w, cnt, hd, float(alpha),
            float("nan") if unk_ln is None else float(unk_ln), int(p),
            arcs, total, head_out, lm_out, stats,
        )
        if n < 0:
            raise RescorerError(f"native p-best search rejected a lattice of shape {(h, k)}")
        return arcs[:n], total[:n], head_out[:n], lm_out[:n], stats
