"""`HFCache`: a Hugging Face model's own key/value cache behind blockdraft's cache protocol.

A ``transformers.DynamicCache`` is mutable: every forward appends to it in place. blockdraft's
verifier needs immutable caches (it branches ``p`` drafts from one prefix, then keeps the
winner's row), so :class:`HFCache` holds the per-layer key and value tensors themselves and
builds a fresh ``DynamicCache`` around them for each forward (:meth:`HFCache.dynamic`). In
transformers 5.x ``DynamicLayer.update`` concatenates (``torch.cat``) into NEW tensors, so a
forward never writes into the tensors an ``HFCache`` holds, and building the ``DynamicCache``
copies nothing (the layers are filled with the very tensors).

The operations (``expand``, ``select_row``, ``select_rows``, ``crop``, ``gather``, ``to``)
are :class:`blockdraft.models.KVCache`'s, and return an ``HFCache``; this subclass adds only
the conversion to and from ``DynamicCache`` and lets layers differ in heads and head sizes.

Keys are stored as the model's attention layers produce them (after the rotary embedding, for
RoPE models), so a cropped or gathered cache continues at position ``length`` with no
recomputation, provided the kept positions are ``0 .. length - 1`` in the sequence.
"""

from __future__ import annotations

from typing import Any

from blockdraft.models.cache import KVCache
from blockdraft.models.errors import ModelError


class HFCache(KVCache):
    """Per-layer keys and values of a prefix of ``length`` positions, for one HF model.

    Attributes:
        keys: one tensor per attention layer, ``[B, n_kv_head, length, head_dim]``.
        values: one tensor per attention layer, ``[B, n_kv_head, length, head_dim_v]``.

    Layers may differ in heads and head sizes (the model decides); they must agree in
    ``B`` and ``length``.

    Raises:
        ModelError: when the layers disagree in rows or length, or a tensor is not 4-D.
    """

    def _check_layer_shapes(self) -> None:
        """Every tensor is 4-D, with the first layer's ``B`` and ``T``."""
        first = self.keys[0]
        b, t = (first.shape[0], first.shape[2]) if first.dim() == 4 else (-1, -1)
        for i, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            for name, x in (("keys", k), ("values", v)):
                if x.dim() != 4 or x.shape[0] != b or x.shape[2] != t:
                    raise ModelError(
                        f"cache layer {i} {name} have shape {tuple(x.shape)}; every layer must "
                        f"be [B, heads, T, head_dim] with B = {b} and T = {t}"
                    )

    # ---- conversion --------------------------------------------------------------------------

    @classmethod
    def from_dynamic(cls, cache: Any) -> HFCache:
        """The tensors of a ``transformers.DynamicCache`` whose layers are all filled.

        Raises:
            ModelError: when a layer is not a plain ``DynamicLayer`` holding keys and values.
        """
        from transformers.cache_utils import DynamicLayer

        layers = getattr(cache, "layers", None)
        if not layers:
            raise ModelError(
                f"the model returned no key/value cache ({type(cache).__name__}); blockdraft "
                "needs a transformers DynamicCache"
            )
        for i, layer in enumerate(layers):
            if type(layer) is not DynamicLayer or not layer.is_initialized:
                raise ModelError(
                    f"cache layer {i} is a {type(layer).__name__}; blockdraft supports models "
                    "whose every attention layer keeps a plain DynamicLayer"
                )
        return cls(keys=tuple(layer.keys for layer in layers),
                   values=tuple(layer.values for layer in layers))

    def dynamic(self) -> Any:
        """A new ``transformers.DynamicCache`` whose layers hold these very tensors (no copy).

        A forward on it replaces the layers' tensors with concatenations (new tensors), so
        this cache's tensors are never written.
        """
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        cache = DynamicCache()
        for k, v in zip(self.keys, self.values, strict=True):
            layer = DynamicLayer()
            # the attributes a filled layer has (``dtype`` only up to transformers 5.23)
            vars(layer).update(dtype=k.dtype, device=k.device, keys=k, values=v,
                               is_initialized=True)
            cache.layers.append(layer)
        return cache
