"""`Step`: one forward's inputs, checked once; what every runtime turns ``hidden(input_ids, past,
position_ids=None, tree_mask=None)`` into.

A verification step is ``T`` new tokens after a cache of ``T_past`` positions: their ids, their
positions (``T_past + arange(T)`` for a chain, ``T_past + depths`` for a token tree,
docs/definitions.md sec. 11), which new tokens each one reads (a tree's ancestor mask; a chain
is the causal case) and the rows of the cache it writes (``T_past .. T_past + T - 1``). Every
runtime takes the same record: the reference :class:`~blockdraft.models.BlockwiseLM` (a boolean
attention mask), the Hugging Face adapter (an additive mask for transformers), ONNX Runtime
(the ``attention_bias`` input over the buffer's rows) and the static runtime (the bias over the
rows it attends: the live rows of its preallocated cache, rounded up to a power of two).
:func:`check_step` builds it from the public arguments and is the one place they are checked;
:meth:`Step.allowed` and :meth:`Step.bias` are the one rule of what a new token attends to.

Public surface:
    Step          frozen: ids [B, T], past, t_past, positions [1 or B, T], tree_mask [T, T] or
                  None, span
        .allowed(columns=None, window=None) -> bool [T, columns]
        .bias(dtype, columns=None, window=None) -> [1, 1, T, columns]   0 or the dtype's min
    check_step(input_ids, past, position_ids, tree_mask, *, cache, vocab_size, device,
               max_seq_len, one_row=None) -> Step
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from blockdraft.models.errors import ModelError
from blockdraft.models.inputs import check_input_ids, check_past_fits


@dataclass(frozen=True, eq=False)
class Step:
    """The checked inputs of one forward (see the module docstring).

    Attributes:
        ids: int64 ``[B, T]`` token ids on the model's device.
        past: the cache of the preceding positions (``B`` rows: a batch-1 cache is expanded),
            or None.
        t_past: the past length ``T_past``: the step writes rows ``T_past .. T_past + T - 1``.
        positions: int64 ``[1 or B, T]`` on the device (default ``T_past + arange(T)``).
        tree_mask: bool ``[T, T]`` on the device, which new tokens each new token reads (a
            token tree's ancestor mask, itself included); None: causal (a chain).
        span: the largest position plus one (what the model's context must hold).
    """

    ids: torch.Tensor
    past: Any
    t_past: int
    positions: torch.Tensor
    tree_mask: torch.Tensor | None
    span: int

    @property
    def length(self) -> int:
        """``T``, the new tokens."""
        return int(self.ids.shape[1])

    def allowed(self, columns: int | None = None, window: int | None = None) -> torch.Tensor:
        """bool ``[T, columns]``: which cache rows new token ``i`` reads.

        Row ``i`` reads the prefix rows ``0 .. T_past - 1`` and the new rows ``T_past + j``
        that :attr:`tree_mask` allows (causal when None); never a row at ``T_past + T`` or
        beyond (``columns`` defaults to ``T_past + T``; a runtime on a preallocated buffer
        passes its capacity), nor, with a sliding ``window``, a key ``window`` or more
        positions before the query's (prefix row ``j`` holds position ``j``; the window
        applies once the step reaches past it).
        """
        t, t_past = self.length, self.t_past
        dev = self.ids.device
        width = t_past + t if columns is None else int(columns)
        allowed = torch.zeros(t, width, dtype=torch.bool, device=dev)  # (T, columns)
        allowed[:, :t_past] = True
        allowed[:, t_past: t_past + t] = (torch.ones(t, t, dtype=torch.bool, device=dev).tril()
                                          if self.tree_mask is None else self.tree_mask)
        if window is not None and self.span > window:
            query = self.positions[0]  # (T,)
            keys = torch.cat((torch.arange(t_past, device=dev), query))  # (T_past + T,)
            far = (query[:, None] - keys[None, :]) >= window  # (T, T_past + T)
            allowed[:, : t_past + t] &= ~far
        return allowed

    def bias(self, dtype: torch.dtype, columns: int | None = None,
             window: int | None = None) -> torch.Tensor:
        """The additive attention bias ``[1, 1, T, columns]`` in ``dtype``: 0 where
        :meth:`allowed`, the dtype's minimum elsewhere (what transformers, ONNX Runtime's
        ``attention_bias`` and a static cache's forward take)."""
        allowed = self.allowed(columns, window)
        out = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
        out.masked_fill_(~allowed, torch.finfo(dtype).min)
        return out[None, None]  # (1, 1, T, columns)


def check_step(input_ids: Any, past: Any, position_ids: Any, tree_mask: Any, *,
               cache: type[Any], vocab_size: int, device: torch.device,
               max_seq_len: int | None, one_row: str | None = None) -> Step:
    """The one check of a forward's inputs (every runtime's ``hidden``): a :class:`Step`.

    Args:
        input_ids: int ``[B, T]`` on ``device``.
        past: a ``cache`` or None; a batch-1 cache under ``B`` rows is expanded (the model
            checks first that it has its layers).
        position_ids: ``[T]`` or ``[B, T]`` (``>= 0``), or None (``T_past + arange(T)``).
        tree_mask: bool ``[T, T]``, or None (causal).
        cache: the model's cache type.
        vocab_size, device, max_seq_len: the model's (``max_seq_len`` None: unchecked).
        one_row: the runtime's name, when it runs one row at a time (a runtime on buffers).

    With explicit positions or a mask (a token tree), the context must hold the largest
    position, not ``T_past + T``: a tree of ``N`` nodes reaches only ``T_past + max depth``.

    Raises:
        ModelError: bad ids, more rows than the runtime runs, a cache of another kind, with
            other rows or on another device, positions or a mask of the wrong shape, a
            sequence longer than the model's context.
    """
    ids = check_input_ids(input_ids, vocab_size, device)
    b, t = (int(n) for n in ids.shape)
    if one_row is not None and b != 1:
        raise ModelError(
            f"{one_row} runs one row at a time, got input_ids of shape {tuple(ids.shape)}; a "
            "batch of drafts is verified as their token tree")
    if past is not None and not isinstance(past, cache):
        raise ModelError(f"past must be this model's {cache.__name__} or None, got "
                         f"{type(past).__name__}")
    explicit = position_ids is not None or tree_mask is not None
    t_past = check_past_fits(past, b, 1 if explicit else t, device, max_seq_len)
    if position_ids is None:
        positions = torch.arange(t_past, t_past + t, device=device)[None]  # (1, T)
        span = t_past + t
    else:
        positions = torch.as_tensor(position_ids, dtype=torch.long, device=device)
        if positions.dim() == 1 or (one_row is not None and positions.numel() == t):
            positions = positions.reshape(1, -1)  # (1, T)
        if positions.dim() != 2 or positions.shape[1] != t or positions.shape[0] not in (1, b):
            raise ModelError(f"position_ids must hold T = {t} positions, as [T] or [B, T] = "
                             f"[{b}, {t}], got shape {tuple(positions.shape)}")
        low, high = (int(v) for v in torch.aminmax(positions))
        if low < 0:
            raise ModelError(f"position_ids must be >= 0, got {positions.tolist()}")
        span = high + 1
    if explicit:
        check_past_fits(None, b, span, device, max_seq_len)
    mask = None
    if tree_mask is not None:
        mask = torch.as_tensor(tree_mask, device=device).to(torch.bool)
        if tuple(mask.shape) != (t, t):
            raise ModelError(f"tree_mask must be bool [T, T] = [{t}, {t}], got "
                             f"{tuple(mask.shape)}")
    if past is not None and past.batch_size != b:
        past = past.expand(b)
    return Step(ids=ids, past=past, t_past=t_past, positions=positions, tree_mask=mask,
                span=span)
