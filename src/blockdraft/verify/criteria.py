"""Acceptance criteria of the verifier, as small pure vectorised functions.

See docs/definitions.md sec. 8.

One BPD step feeds the draft ``d_1 .. d_h`` after the committed prefix (``d_1`` is the certain
token). At the input position of ``d_j`` the base head (head 1) predicts the token after it,
so the draft token ``d_{1+j}`` is checked against the base head's logits at the position of
``d_j``, for ``j = 1 .. h-1``. A criterion turns those checks into a boolean ``matches
[p, h-1]``; the accepted length is the length of the leading run of matches (Medusa's
``cumprod`` of matches, then ``sum``):

    n = max{n : matches[i] for all 1 <= i <= n}        0 <= n <= h - 1

and the step commits ``d_1 .. d_{1+n}``. At the first rejected position the base head's
argmax is committed instead (it is the next step's certain token).

Public surface (tensors are torch, on any device; numpy arrays are converted):

    exact_matches(drafted, logits)                 d == argmax                (lossless)
    topk_matches(drafted, logits, k)               rank(d) < k                (Stern 5.1)
    distance_matches(drafted, logits, eps)         |d - argmax| <= eps        (Stern 5.2)
    gadpp_matches(drafted, logits, beta, tau)      rank(d) < beta and
                                                   ln P(top1) - ln P(d) <= tau (Ge et al. 3.2.3)
    typical_matches(drafted, logits, eps, delta)   P(d) > min(eps, delta exp(-H)) (Medusa)
    accepted_length(matches) -> n [p]              the leading run of matches
    min_block_length(n, l, width) -> n [p]         at least ``l`` tokens per step (Stern 5.3)
    token_rank(drafted, logits) -> rank [...]      0-based rank, ties to the smaller id
    Criterion(name, params)                        a validated, frozen choice of the above
        .accept_lengths(tokens [p, h], logits [p, h, V]) -> n [p]
    VerifyError                                    the verify room's error class (errors.py)

Conventions: ``drafted`` is int ``[p, m]`` (the draft tokens being checked, ``d_2 ..
d_{1+m}``) and ``logits`` float ``[p, m, V]`` the base head's *raw* logits at the positions
before them. Raw logits rather than log-probs, so that ``exact`` takes ``argmax`` of exactly
what greedy decoding takes it of (``log_softmax`` can merge two logits that differ in the last
bit and move a tie); the criteria that need probabilities take ``log_softmax`` themselves
(natural log, temperature 1). Log-probs are accepted too and give the same answers up to
rounding (``log_softmax`` of log-probs is the identity; ranks and differences are unchanged).
Ties in the argmax and in ranks go to the smaller token id (``torch.argmax`` returns the first
maximum), as in :class:`~blockdraft.lattice.SausageLattice`.

Only ``exact`` guarantees the greedy output (docs/definitions.md sec. 1); every other criterion
trades quality for block efficiency (:attr:`Criterion.lossless` says which settings reduce to
exact).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from blockdraft.verify.errors import VerifyError


def _as_tensors(drafted: Any, logits: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``drafted`` as int64 and ``logits`` as float tensors on the logits' device."""
    lg = logits if isinstance(logits, torch.Tensor) else torch.as_tensor(np.asarray(logits))
    if not lg.dtype.is_floating_point:
        lg = lg.float()
    d = drafted if isinstance(drafted, torch.Tensor) else torch.as_tensor(np.asarray(drafted))
    d = d.to(device=lg.device, dtype=torch.long)
    if tuple(lg.shape[:-1]) != tuple(d.shape):
        raise VerifyError(
            f"drafted tokens {tuple(d.shape)} do not match the logits {tuple(lg.shape)}; "
            "logits must be [..., V] over the same leading dimensions"
        )
    if d.numel() and (int(d.min()) < 0 or int(d.max()) >= lg.shape[-1]):
        bad = int(d.min()) if int(d.min()) < 0 else int(d.max())
        raise VerifyError(f"drafted token id {bad} is outside the vocabulary [0, {lg.shape[-1]})")
    return d, lg


# ---- the pure kernels --------------------------------------------------------------------------


def token_rank(drafted: Any, logits: Any) -> torch.Tensor:
    """0-based rank of each drafted token under its logits: ties go to the smaller token id.

    Args:
        drafted: int ``[...]`` token ids.
        logits: float ``[..., V]`` raw logits (any monotone transform gives the same ranks).

    Returns:
        int64 ``[...]``: ``#{v : z_v > z_d} + #{v < d : z_v == z_d}``, so rank 0 is exactly
        ``argmax`` (``torch.argmax`` returns the first maximum).
    """
    d, lg = _as_tensors(drafted, logits)
    z_d = lg.gather(-1, d.unsqueeze(-1))  # (..., 1)
    ids = torch.arange(lg.shape[-1], device=lg.device)  # (V,)
    above = (lg > z_d).sum(-1)  # (...)
    tied_before = ((lg == z_d) & (ids < d.unsqueeze(-1))).sum(-1)  # (...)
    return above + tied_before


def exact_matches(drafted: Any, logits: Any) -> torch.Tensor:
    """bool ``[p, m]``: the drafted token is the base head's argmax. Lossless.

    Args:
        drafted: int ``[p, m]``, the draft tokens ``d_2 .. d_{1+m}``.
        logits: float ``[p, m, V]``, raw base-head logits at the positions before them.
    """
    d, lg = _as_tensors(drafted, logits)
    return d == lg.argmax(-1)


def topk_matches(drafted: Any, logits: Any, k: int) -> torch.Tensor:
    """bool ``[p, m]``: the drafted token is among the base head's top ``k`` (Stern 5.1).

    Not lossless for ``k > 1``: an accepted token may differ from the greedy one. ``k = 1``
    is :func:`exact_matches` (ties to the smaller id, as ``argmax``).
    """
    return token_rank(drafted, logits) < k


def distance_matches(drafted: Any, logits: Any, eps: float) -> torch.Tensor:
    """bool ``[p, m]``: ``|d - argmax| <= eps`` (Stern 5.2), for outputs whose ids are ordinal
    (e.g. quantised pixel intensities). Not lossless for ``eps >= 1``."""
    d, lg = _as_tensors(drafted, logits)
    return (d - lg.argmax(-1)).abs() <= eps


def gadpp_matches(drafted: Any, logits: Any, beta: int, tau: float) -> torch.Tensor:
    """bool ``[p, m]``: GAD++ (Ge et al. 3.2.3): the drafted token is in the base head's top
    ``beta`` and ``ln P(top1) - ln P(d) <= tau`` (nats). Not lossless for ``beta > 1``."""
    d, lg = _as_tensors(drafted, logits)
    z_d = lg.gather(-1, d.unsqueeze(-1)).squeeze(-1)  # (p, m)
    gap = lg.max(-1).values - z_d  # (p, m): ln P(top1) - ln P(d), the log-partition cancels
    return (token_rank(d, lg) < beta) & (gap <= tau)


def typical_matches(drafted: Any, logits: Any, eps: float, delta: float) -> torch.Tensor:
    """bool ``[p, m]``: Medusa's typical acceptance, ``P(d) > min(eps, delta * exp(-H))``.

    ``P = softmax(logits)`` at temperature 1 and ``H`` its entropy in nats. Not lossless: any
    token probable enough passes, the argmax or not (and a flat base head lowers the bar).
    """
    d, lg = _as_tensors(drafted, logits)
    logp = torch.log_softmax(lg.float(), dim=-1)  # (p, m, V), nats
    entropy = -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)  # (p, m), nats
    log_threshold = torch.minimum(
        torch.full_like(entropy, math.log(eps)), math.log(delta) - entropy
    )  # (p, m)
    return logp.gather(-1, d.unsqueeze(-1)).squeeze(-1) > log_threshold


def accepted_length(matches: torch.Tensor) -> torch.Tensor:
    """int64 ``[p]``: the leading run of True in each row of ``matches [p, m]`` (0 .. m)."""
    return matches.long().cumprod(dim=-1).sum(dim=-1)


def min_block_length(n: torch.Tensor, l: int, width: int) -> torch.Tensor:  # noqa: E741
    """int64 ``[p]``: ``n`` raised so that every step yields at least ``l`` tokens (Stern 5.3).

    A step yields ``1 + n`` tokens (the certain token and ``n`` draft tokens), so the floor is
    ``n >= l - 1``, capped at the ``width - 1`` draft tokens there are. ``l = 1`` changes
    nothing. Not lossless for ``l > 1``: the forced tokens may differ from the greedy ones.
    """
    floor = max(0, min(int(l) - 1, int(width) - 1))
    return n.clamp(min=floor)


# ---- the criterion object ----------------------------------------------------------------------

_PARAMS: dict[str, tuple[tuple[str, type], ...]] = {
    "exact": (),
    "topk": (("k", int),),
    "distance": (("eps", float),),
    "min_block": (("l", int),),
    "gadpp": (("beta", int), ("tau", float)),
    "typical": (("eps", float), ("delta", float)),
}
CRITERIA = tuple(_PARAMS)
"""Names of the acceptance criteria (docs/definitions.md sec. 8); ``"gad++"`` is accepted for
``"gadpp"``."""

_ALIASES = {"gad++": "gadpp", "min-block": "min_block", "top-k": "topk"}


def _check_value(name: str, key: str, kind: type, value: Any) -> int | float:
    """A parameter value converted to ``kind`` and checked against its domain."""
    where = f"{name}({key}=...)"
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise VerifyError(f"{where}: {key} must be a number, got {value!r}")
    if kind is int:
        if isinstance(value, (float, np.floating)) and not float(value).is_integer():
            raise VerifyError(f"{where}: {key} must be an integer, got {value!r}")
        if not math.isfinite(float(value)) or int(value) < 1:
            raise VerifyError(f"{where}: {key} must be an integer >= 1, got {value!r}")
        return int(value)
    x = float(value)
    if not math.isfinite(x):
        raise VerifyError(f"{where}: {key} must be finite, got {value!r}")
    if (name, key) == ("typical", "eps") and not 0.0 < x <= 1.0:
        raise VerifyError(f"{where}: eps is a probability threshold in (0, 1], got {value!r}")
    if (name, key) == ("typical", "delta") and x <= 0.0:
        raise VerifyError(f"{where}: delta must be > 0 (Medusa uses ~sqrt(eps)), got {value!r}")
    if x < 0.0:
        raise VerifyError(f"{where}: {key} must be >= 0, got {value!r}")
    return x


@dataclass(frozen=True)
class Criterion:
    """An acceptance criterion of the verifier with its parameters (docs/definitions.md sec. 8).

    Build one with the class methods (``Criterion.topk(4)``), from a string
    (``Criterion.parse("gadpp:beta=5,tau=3")``), or directly
    (``Criterion("topk", {"k": 4})``; ``params`` may be a mapping or ``(key, value)`` pairs).

    Attributes:
        name: one of :data:`CRITERIA` (``"gad++"`` is normalised to ``"gadpp"``).
        params: ``(key, value)`` pairs in the criterion's own order (a mapping is accepted
            and converted): ``topk``: ``k`` (int
            >= 1); ``distance``: ``eps`` (>= 0, in token-id units); ``min_block``: ``l`` (int
            >= 1, tokens per step); ``gadpp``: ``beta`` (int >= 1), ``tau`` (nats, >= 0);
            ``typical``: ``eps`` (probability in (0, 1]), ``delta`` (> 0).

    Only ``exact`` (and the settings :attr:`lossless` names) guarantees the greedy output;
    the others trade output quality for block efficiency.

    Raises:
        VerifyError: on an unknown name, a missing or unknown parameter, or a value outside
            its domain; the message names the value.
    """

    name: str = "exact"
    params: tuple[tuple[str, int | float], ...] | Mapping[str, int | float] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise VerifyError(f"criterion name must be a string, got {self.name!r}")
        name = _ALIASES.get(self.name.strip().lower(), self.name.strip().lower())
        if name not in _PARAMS:
            raise VerifyError(
                f"unknown acceptance criterion {self.name!r}; choose one of {', '.join(CRITERIA)}"
            )
        raw = self.params
        given: dict[str, Any]
        if isinstance(raw, Mapping):
            given = dict(raw)
        else:
            try:
                given = dict(raw)
            except (TypeError, ValueError) as e:
                raise VerifyError(
                    f"criterion params must be a mapping or (key, value) pairs, got {raw!r}"
                ) from e
        spec = _PARAMS[name]
        keys = [key for key, _ in spec]
        unknown = sorted(set(given) - set(keys))
        if unknown:
            raise VerifyError(
                f"{name} takes parameters {keys or 'none'}, got unknown {unknown}"
            )
        missing = [key for key in keys if key not in given]
        if missing:
            raise VerifyError(f"{name} needs parameter(s) {keys}; missing {missing}, got "
                              f"{sorted(given)}")
        params = tuple((key, _check_value(name, key, kind, given[key])) for key, kind in spec)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "params", params)

    # ---- constructors --------------------------------------------------------------------------

    @classmethod
    def exact(cls) -> Criterion:
        """``d == argmax`` of the base head: lossless, the default."""
        return cls("exact")

    @classmethod
    def topk(cls, k: int) -> Criterion:
        """``d`` in the base head's top ``k`` (Stern 5.1). Not lossless for ``k > 1``."""
        return cls("topk", {"k": k})

    @classmethod
    def distance(cls, eps: float) -> Criterion:
        """``|d - argmax| <= eps`` for ordinal ids (Stern 5.2). Not lossless for ``eps >= 1``."""
        return cls("distance", {"eps": eps})

    @classmethod
    def min_block(cls, l: int) -> Criterion:  # noqa: E741 - Stern's name
        """Exact matching, but every step yields at least ``l`` tokens (Stern 5.3).

        Not lossless for ``l > 1``.
        """
        return cls("min_block", {"l": l})

    @classmethod
    def gadpp(cls, beta: int, tau: float) -> Criterion:
        """GAD++ (Ge et al. 3.2.3): top-``beta`` and within ``tau`` nats of the top-1.

        Not lossless for ``beta > 1``.
        """
        return cls("gadpp", {"beta": beta, "tau": tau})

    @classmethod
    def typical(cls, eps: float, delta: float) -> Criterion:
        """Medusa's typical acceptance ``P(d) > min(eps, delta exp(-H))``. Never lossless."""
        return cls("typical", {"eps": eps, "delta": delta})

    @classmethod
    def parse(cls, spec: str | Criterion) -> Criterion:
        """A criterion from ``"name"`` or ``"name:key=value,key=value"`` (the form of
        ``str(criterion)``), e.g. ``"topk:k=4"``, ``"gad++:beta=5,tau=3.0"``.

        Raises:
            VerifyError: on a malformed string or invalid parameters.
        """
        if isinstance(spec, Criterion):
            return spec
        if not isinstance(spec, str):
            raise VerifyError(
                f"a criterion is a Criterion or a string like 'topk:k=4', got {spec!r}"
            )
        name, _, rest = spec.partition(":")
        params: dict[str, float] = {}
        for item in filter(None, (s.strip() for s in rest.split(","))):
            key, eq, value = item.partition("=")
            if not eq:
                raise VerifyError(f"criterion {spec!r}: expected key=value, got {item!r}")
            try:
                number = float(value)
            except ValueError as e:
                raise VerifyError(
                    f"criterion {spec!r}: {key.strip()} must be a number, got {value!r}"
                ) from e
            if key.strip() in params:
                raise VerifyError(
                    f"criterion {spec!r}: {key.strip()} is given twice; give each parameter once"
                )
            params[key.strip()] = int(number) if number.is_integer() and "." not in value \
                else number
        return cls(name, params)

    def check_model(self, vocab_size: int | None, h: int | None) -> None:
        """Refuse parameters the model cannot satisfy: ``topk`` ``k`` and ``gadpp`` ``beta``
        above the vocabulary size ``V``, ``min_block`` ``l`` above the ``h`` tokens a step
        can yield (None: not known, not checked).

        Raises:
            VerifyError: naming the value and its valid range.
        """
        kw = self.kwargs
        for key in ("k", "beta"):
            if key in kw and vocab_size is not None and kw[key] > vocab_size:
                raise VerifyError(
                    f"{self.name}({key}={kw[key]}): {key} must be in [1, {vocab_size}] for a "
                    f"model of vocabulary V = {vocab_size}"
                )
        if "l" in kw and h is not None and kw["l"] > h:
            raise VerifyError(
                f"min_block(l={kw['l']}): a step yields at most h = {h} tokens, so l must be "
                f"in [1, {h}]"
            )

    # ---- properties ----------------------------------------------------------------------------

    @property
    def kwargs(self) -> dict[str, int | float]:
        """The parameters as a dict."""
        return dict(self.params)  # always (key, value) pairs after __post_init__

    @property
    def lossless(self) -> bool:
        """True when the criterion accepts exactly what ``exact`` accepts (the greedy output
        is guaranteed): ``exact``, ``topk(1)``, ``distance(eps < 1)``, ``min_block(1)``,
        ``gadpp(beta=1, any tau)``."""
        kw = self.kwargs
        return (
            self.name == "exact"
            or (self.name == "topk" and kw["k"] == 1)
            or (self.name == "distance" and kw["eps"] < 1)
            or (self.name == "min_block" and kw["l"] == 1)
            or (self.name == "gadpp" and kw["beta"] == 1)
        )

    def __str__(self) -> str:
        if not self.params:
            return self.name
        return self.name + ":" + ",".join(f"{k}={v}" for k, v in self.kwargs.items())

    # ---- applying it ---------------------------------------------------------------------------

    def matches(self, drafted: Any, logits: Any) -> torch.Tensor:
        """bool ``[p, m]``: which drafted tokens pass, position by position (for
        ``min_block``, the exact matches; its floor applies in :meth:`accept_lengths`).

        Args:
            drafted: int ``[p, m]``, draft tokens ``d_2 .. d_{1+m}``.
            logits: float ``[p, m, V]``, raw base-head logits at the positions before them.
        """
        kw = self.kwargs
        if self.name in ("exact", "min_block"):
            return exact_matches(drafted, logits)
        if self.name == "topk":
            return topk_matches(drafted, logits, int(kw["k"]))
        if self.name == "distance":
            return distance_matches(drafted, logits, float(kw["eps"]))
        if self.name == "gadpp":
            return gadpp_matches(drafted, logits, int(kw["beta"]), float(kw["tau"]))
        return typical_matches(drafted, logits, float(kw["eps"]), float(kw["delta"]))

    def accept_lengths(self, tokens: Any, logits: Any) -> torch.Tensor:
        """int64 ``[p]``: accepted draft tokens ``n`` per draft, ``0 <= n <= h - 1``.

        Args:
            tokens: int ``[p, h]``, the drafts ``d_1 .. d_h`` as fed to the model (``d_1`` is
                the certain token and is not checked).
            logits: float ``[p, h, V]``, the base head's raw logits (or natural-log
                probabilities) at the ``h`` input positions: position ``j`` (0-based)
                predicts the token after ``d_{1+j}``; the last position is not needed here
                (it follows ``d_h``).

        Returns:
            ``n``: draft ``j`` commits ``d_1 .. d_{1+n_j}``; ``n`` counts ``d_2 .. d_{1+n}``.
        """
        t = tokens if isinstance(tokens, torch.Tensor) else torch.as_tensor(np.asarray(tokens))
        if t.dim() != 2:
            raise VerifyError(f"tokens must be [p, h], got shape {tuple(t.shape)}")
        lg = logits if isinstance(logits, torch.Tensor) else torch.as_tensor(np.asarray(logits))
        if lg.dim() != 3 or tuple(lg.shape[:2]) != tuple(t.shape):
            raise VerifyError(
                f"logits must be [p, h, V] = [{t.shape[0]}, {t.shape[1]}, V], got "
                f"{tuple(lg.shape)}"
            )
        width = int(t.shape[1])
        n = accepted_length(self.matches(t[:, 1:], lg[:, :-1]))  # (p,)
        if self.name == "min_block":
            n = min_block_length(n, int(self.kwargs["l"]), width)
        return n
