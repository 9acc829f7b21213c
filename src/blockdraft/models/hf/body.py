"""How to hand a key/value cache to a ``transformers`` model, whatever its release calls it.

transformers renamed the cache argument of every decoder body and causal LM
(``past_key_values`` up to 5.23, ``cache`` from 5.24; the output field likewise), and may again.
blockdraft never names it: :func:`cache_argument` finds, once per model, the one ``forward``
parameter whose annotation is a ``transformers`` ``Cache``, and :func:`returned_cache` finds the
``Cache`` in a forward's output by its type. Only a ``forward`` without annotations (remote
code) falls back to the argument names transformers has used.

Public surface:
    cache_argument(module) -> str | None      the forward's cache parameter, or None if none
    call_with_cache(module, name, cache, **kwargs) -> (output, cache)
    returned_cache(output) -> Cache           the cache object a forward returned
"""

from __future__ import annotations

import inspect
import re
import typing
from typing import Any

from blockdraft.models.errors import ModelError

_CACHE_WORD = re.compile(r"(?<![\w.])(?:[\w.]*\.)?Cache\b")
"""``Cache`` as a whole name in a string annotation (``Cache | None``, ``Optional[Cache]``,
``transformers.cache_utils.Cache``), not ``DynamicCache`` or ``use_cache``."""
_UNANNOTATED_NAMES = ("cache", "past_key_values")
"""What transformers has called the argument, for a forward without annotations only."""


def _is_cache_annotation(annotation: Any) -> bool:
    """Whether a parameter annotation names the ``transformers`` ``Cache`` base class."""
    if annotation is inspect.Parameter.empty:
        return False
    if isinstance(annotation, str):
        return _CACHE_WORD.search(annotation) is not None
    from transformers.cache_utils import Cache

    if isinstance(annotation, type):
        return issubclass(annotation, Cache)
    return any(_is_cache_annotation(arg) for arg in typing.get_args(annotation))


def cache_argument(module: Any) -> str | None:
    """The name of the parameter of ``module.forward`` that takes the key/value cache.

    The parameter annotated as a ``transformers.cache_utils.Cache`` (alone or in a union);
    for a ``forward`` that annotates none of its parameters, ``cache`` or ``past_key_values``.

    Returns:
        The name, or None when the forward takes no cache.

    Raises:
        ModelError: when two parameters are annotated as caches (ambiguous).
    """
    try:
        params = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - a forward without a signature
        return None
    named = [name for name, p in params.items() if _is_cache_annotation(p.annotation)]
    if len(named) > 1:
        raise ModelError(
            f"{type(module).__name__}.forward has several cache arguments ({', '.join(named)}); "
            "blockdraft cannot tell which one takes the key/value cache"
        )
    if named:
        return named[0]
    if any(p.annotation is not inspect.Parameter.empty for p in params.values()):
        return None
    return next((name for name in _UNANNOTATED_NAMES if name in params), None)


def returned_cache(output: Any) -> Any:
    """The ``transformers`` ``Cache`` a forward returned (found by type, not by field name).

    Raises:
        ModelError: when the output holds no cache.
    """
    from transformers.cache_utils import Cache

    values = output.values() if hasattr(output, "values") else output
    for value in values if isinstance(values, typing.Iterable) else ():
        if isinstance(value, Cache):
            return value
    raise ModelError(
        f"the model returned no key/value cache in its {type(output).__name__}; blockdraft "
        "needs a transformers Cache (run it with use_cache=True)"
    )


def call_with_cache(module: Any, name: str, cache: Any, **kwargs: Any) -> tuple[Any, Any]:
    """``module(**kwargs)`` with ``cache`` passed as its argument ``name``
    (from :func:`cache_argument`), and ``use_cache=True``.

    Returns:
        ``(output, cache)``: the forward's output and the cache it returned.
    """
    output = module(**kwargs, **{name: cache}, use_cache=True)
    return output, returned_cache(output)
