"""The verifier: ``p`` drafts checked in one batched forward pass.

See docs/definitions.md sec. 2, steps 2-3.

Public surface:
    Verifier(model, criterion="exact")
        .prefill(prompt_ids) -> (next_logits [h, V], past)   the prompt's one serial call
        .verify(past, drafts) -> VerifyOutcome               one serial call for p drafts
    VerifyOutcome    frozen: n, winner, tokens, next_logits, past, accept_lengths, timings

One verification call feeds the ``p`` drafts ``d_1 .. d_h`` (``d_1`` is the certain token,
the same in every draft) as a ``[p, h]`` batch on top of the shared prefix cache, expanded
from batch 1 to ``p`` rows without copying: the prefix is never recomputed. The criterion gives
each draft's accepted length ``n``; the winner is the draft with the largest ``n`` (ties: the
lowest index, i.e. the best-scored draft, since a :class:`DraftBatch` is ordered best first).
Only the winner's cache row survives, cropped to the prefix and ``d_1 .. d_{1+n}``; the next
block's head logits come from the same call, at the input position of ``d_{1+n}`` (their
``argmax z^1`` is the next certain token, docs/definitions.md sec. 2).

The model is anything with ``heads_logits(input_ids [B, T], past) -> (logits [B, T, h, V],
cache)`` whose cache offers the operations of :class:`blockdraft.models.KVCache` (``length``,
``batch_size``, ``expand``, ``select_row``, ``crop``). When it also splits into ``hidden``,
``head_states`` and ``project`` (:class:`blockdraft.models.FactoredHeadsModel`, e.g.
:class:`~blockdraft.models.BlockwiseLM`), a call evaluates the base head at the ``p * w`` draft
positions and the ``h`` heads only at the one position the next block starts from: ``p w + h``
head projections instead of ``p w h``, with the same logits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from blockdraft.core.batch import DraftBatch
from blockdraft.models.protocol import HeadsModel, takes_last_only
from blockdraft.verify.criteria import Criterion, VerifyError


def model_limit(model: Any, name: str) -> int | None:
    """``model.<name>`` (``vocab_size``, ``max_seq_len``, ``h``), else ``model.config.<name>``,
    else None (unknown: not checked)."""
    value = getattr(model, name, None)
    if value is None:
        value = getattr(getattr(model, "config", None), name, None)
    return None if value is None else int(value)


def model_device(model: Any) -> torch.device:
    """The device a model's parameters live on (``model.device`` when it has one)."""
    dev = getattr(model, "device", None)
    if isinstance(dev, torch.device):
        return dev
    if isinstance(model, torch.nn.Module):
        for param in model.parameters():
            return param.device
    return torch.device("cpu")


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so wall-clock timings measure it (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True, eq=False)
class VerifyOutcome:
    """What one verification call decided.

    Attributes:
        n: accepted draft tokens of the winner, ``0 <= n <= w - 1`` (none after its EOS when
            ``verify`` was given ``eos_id``).
        winner: row of the winning draft in the :class:`DraftBatch`.
        tokens: the committed tokens ``d_1 .. d_{1+n}`` of the winner (``1 + n`` ids).
        next_logits: float ``[h, V]``, raw logits of every head at the input position of
            ``d_{1+n}``: the next step's lattice; ``argmax`` of row 0 is the next certain token.
        past: the cache of the prefix and ``tokens`` (batch 1, ``length = old + 1 + n``).
        accept_lengths: ``n`` of every draft, in batch order.
        forward_s: wall seconds in the model (device synchronised): the drafts' forward pass
            and, for a factored model, the heads at the winner's last accepted position.
        accept_s: wall seconds applying the criterion and selecting the winner's cache.
    """

    n: int
    winner: int
    tokens: tuple[int, ...]
    next_logits: torch.Tensor
    past: Any
    accept_lengths: tuple[int, ...]
    forward_s: float
    accept_s: float

    @property
    def next_token(self) -> int:
        """The next certain token: ``argmax`` of the base head at ``d_{1+n}``'s position."""
        return int(torch.argmax(self.next_logits[0]))


class Verifier:
    """Verify ``p`` drafts in one batched forward pass and keep the best (definitions sec. 2).

    Args:
        model: a blockwise LM (see :class:`HeadsModel`); put it in eval mode (dropout off).
        criterion: a :class:`Criterion` or its string form (``"exact"``, ``"topk:k=4"``, ...).
            Only ``exact`` guarantees the greedy output.

    Raises:
        VerifyError: on a model without ``heads_logits``, an invalid criterion, or one the
            model cannot satisfy (:meth:`Criterion.check_model`: ``topk`` k > V, ``min_block``
            l > h).
    """

    def __init__(self, model: HeadsModel, criterion: Criterion | str = "exact") -> None:
        if not callable(getattr(model, "heads_logits", None)):
            raise VerifyError(
                f"the model must have heads_logits(input_ids, past), got {type(model).__name__}"
            )
        self.model = model
        self.criterion = Criterion.parse(criterion)
        self.vocab_size: int | None = model_limit(model, "vocab_size")
        self.max_seq_len: int | None = model_limit(model, "max_seq_len")
        self.h: int | None = model_limit(model, "h")
        self.criterion.check_model(self.vocab_size, self.h)
        self._factored = factored(model)

    @property
    def device(self) -> torch.device:
        """The model's device; drafts are moved there."""
        return model_device(self.model)

    def __repr__(self) -> str:
        return f"Verifier({type(self.model).__name__}, criterion={str(self.criterion)!r})"

    # ---- the prompt --------------------------------------------------------------------------

    @torch.no_grad()
    def prefill(self, prompt_ids: Sequence[int] | np.ndarray) -> tuple[torch.Tensor, Any]:
        """The prompt's serial call: ``(next_logits [h, V], past)``.

        ``next_logits`` are the raw head logits at the prompt's last position (their
        ``argmax z^1`` is the first certain token ``d_1``); ``past`` is the batch-1 cache of
        the prompt. The prompt is validated by the model.
        """
        ids = torch.as_tensor(np.asarray(prompt_ids, dtype=np.int64),
                              device=self.device).reshape(1, -1)  # (1, T)
        kwargs = {"last_only": True} if takes_last_only(self.model) else {}
        logits, past = self.model.heads_logits(ids, None, **kwargs)  # (1, T or 1, h, V)
        return logits[0, -1].clone(), past  # (h, V)

    # ---- one verification call ---------------------------------------------------------------

    @torch.no_grad()
    def verify(self, past: Any, drafts: DraftBatch, eos_id: int | None = None) -> VerifyOutcome:
        """Feed the ``p`` drafts in one batched call on ``past``; accept the best one.

        Args:
            past: the batch-1 cache of the committed prefix (every token before ``d_1``).
            drafts: ``p`` drafts ``[p, w]`` (``w`` is usually ``h``; fewer columns verify a
                shorter block) sharing the certain token ``d_1`` in column 0.
            eos_id: when given, a draft's tokens after its first EOS (among ``d_2 ..``) are
                never accepted: decoding ends there, so they cannot count (as in the offline
                simulator, docs/definitions.md sec. 6). The EOS itself is accepted like any token.

        Returns:
            A :class:`VerifyOutcome`: the winner's ``n``, committed ``d_1 .. d_{1+n}``, the
            next block's head logits and the cache of prefix + committed tokens.

        Raises:
            VerifyError: when ``drafts`` is not a :class:`DraftBatch`, the drafts disagree on
                ``d_1``, a token is outside the vocabulary, the block would run past the
                model's ``max_seq_len``, or ``past`` is missing or has more than one row.
        """
        self._check(past, drafts)
        tokens = torch.tensor(drafts.tokens, dtype=torch.long, device=self.device)  # (p, w)
        start = time.perf_counter()
        base, states, cache = self._forward(past, tokens)
        forward_s = time.perf_counter() - start

        start = time.perf_counter()
        lengths = self._accept_lengths(tokens, base, eos_id)
        winner = lengths.index(max(lengths))  # the first maximum: the best-scored draft
        n = lengths[winner]
        new_past = cache.select_row(winner).crop(past.length + 1 + n)
        synchronize(self.device)
        accept_s = time.perf_counter() - start

        start = time.perf_counter()
        next_logits = self._next_logits(states, winner, n)
        forward_s += time.perf_counter() - start
        return VerifyOutcome(
            n=n,
            winner=winner,
            tokens=tuple(int(t) for t in drafts.tokens[winner, : 1 + n]),
            next_logits=next_logits,
            past=new_past,
            accept_lengths=tuple(lengths),
            forward_s=forward_s,
            accept_s=accept_s,
        )

    # ---- the named steps of a verification call -----------------------------------------------

    def _check(self, past: Any, drafts: DraftBatch) -> None:
        """Refuse drafts and caches one call cannot verify (see :meth:`verify`'s Raises)."""
        if not isinstance(drafts, DraftBatch):
            raise VerifyError(f"drafts must be a DraftBatch, got {type(drafts).__name__}")
        first = drafts.tokens[:, 0]
        if (first != first[0]).any():
            raise VerifyError(
                f"all drafts must start with the same certain token d_1, got {first.tolist()}"
            )
        self._check_past(
            past, call="verify", needs="expand", tokens=drafts.tokens, what="draft",
            positions=drafts.tokens.shape[1],
            shorten=lambda room: f"verify at most {room} columns (drafts.tokens[:, :w])",
        )

    def _check_past(
        self,
        past: Any,
        *,
        call: str,
        needs: str,
        tokens: np.ndarray,
        what: str,
        positions: int,
        shorten: Callable[[int], str],
    ) -> None:
        """The checks every verification call makes of its cache and its new tokens.

        Args:
            past: the prefix cache; must be present (with a method ``needs``) and hold one row.
            call: the method's name, for the messages (``"verify"``, ``"verify_tree"``).
            needs: the cache method the call uses (``"expand"``, ``"gather"``).
            tokens: int array of the new token ids (any shape); each in ``[0, V)``.
            what: what the tokens are, for the messages (``"draft"``, ``"tree"``).
            positions: positions the call adds after the cache; ``past.length + positions``
                must not exceed the model's ``max_seq_len``.
            shorten: ``room -> advice`` for a call that does not fit: ``room >= 1`` is the
                number of positions still free in the context.

        Raises:
            VerifyError: naming the first check that fails.
        """
        if past is None or not hasattr(past, needs):
            raise VerifyError(
                f"{call} needs the prefix cache as past (a KVCache, from prefill or the previous "
                f"call), got {type(past).__name__}"
            )
        if past.batch_size != 1:
            raise VerifyError(
                f"past must hold one row (the shared prefix), got {past.batch_size}; keep "
                "the winner's row with select_row(j)"
            )
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or (self.vocab_size is not None and hi >= self.vocab_size):
            raise VerifyError(
                f"{what} token id {lo if lo < 0 else hi} is outside the model's vocabulary "
                f"[0, {self.vocab_size})"
            )
        if self.max_seq_len is not None and past.length + positions > self.max_seq_len:
            room = self.max_seq_len - past.length
            advice = shorten(room) if room > 0 else "the context is full, nothing fits"
            raise VerifyError(
                f"{call}: {positions} new positions after {past.length} cached ones need "
                f"{past.length + positions} > max_seq_len = {self.max_seq_len}; {advice}"
            )

    def _forward(self, past: Any, tokens: torch.Tensor) -> tuple[torch.Tensor, Any, Any]:
        """The one serial call: ``p`` drafts on ``p`` views of the prefix cache.

        Returns ``(base [p, w, V], states, cache)``: the base head's raw logits at every draft
        position; ``states`` is what :meth:`_next_logits` needs (the hidden states ``[p, w, d]``
        of a factored model, else every head's logits ``[p, w, h, V]``); the cache holds the
        prefix and all ``p`` rows of drafts.
        """
        p = tokens.shape[0]
        model: Any = self.model
        if self._factored:
            x, cache = model.hidden(tokens, past.expand(p))  # (p, w, d)
            base = model.project(model.head_states(x, heads=1))[:, :, 0]  # (p, w, V)
            states = x
        else:
            logits, cache = model.heads_logits(tokens, past.expand(p))  # (p, w, h, V)
            base, states = logits[:, :, 0], logits  # (p, w, V)
        synchronize(self.device)
        return base, states, cache

    def _accept_lengths(
        self, tokens: torch.Tensor, base: torch.Tensor, eos_id: int | None
    ) -> list[int]:
        """``n`` of every draft under the criterion; nothing after a draft's first EOS."""
        width = tokens.shape[1]
        n_all = self.criterion.accept_lengths(tokens, base)  # (p,)
        if eos_id is not None and width > 1:
            slot = torch.arange(1, width, device=tokens.device)  # (w-1,): i of d_{1+i}
            first_eos = torch.where(tokens[:, 1:] == eos_id, slot, width).min(-1).values  # (p,)
            n_all = torch.minimum(n_all, first_eos)
        return [int(x) for x in n_all.tolist()]

    def _next_logits(self, states: torch.Tensor, winner: int, n: int) -> torch.Tensor:
        """Every head's raw logits ``[h, V]`` at ``d_{1+n}`` of the winner: the next lattice."""
        model: Any = self.model
        if self._factored:  # every head at the one position the next step starts from
            out = model.project(model.head_states(states[winner, n]))  # (h, V)
        else:
            out = states[winner, n].clone()  # (h, V)
        synchronize(self.device)
        return out


def factored(model: Any) -> bool:
    """Whether the model splits into ``hidden``, ``head_states`` and ``project`` (see
    :class:`blockdraft.models.FactoredHeadsModel`); then a verification call projects the base
    head at every draft position but all ``h`` heads only at the winner's last accepted one."""
    return all(callable(getattr(model, name, None)) for name in ("hidden", "head_states",
                                                                  "project"))

