"""`HFBlockwiseModel`: a Hugging Face causal LM plus Medusa heads as a blockwise parallel LM.

The base model's final hidden state ``x`` (after its final norm) feeds ``h`` heads
(docs/definitions.md sec. 1 and 10):

    head 1:          z^1 = lm_head(x)                       the base LM itself
    head j + 2:      z^{j+2} = P_j(ResBlocks_j(x))          Medusa head j = 0 .. h-2

where ``P_j`` is the base ``lm_head`` (Medusa "version 2") or head ``j``'s own projection. Head
``i`` at position ``t`` predicts the token at ``t + i``, so everything downstream (lattices,
rescorers, the verifier, traces) works unchanged. The model satisfies
:class:`blockdraft.models.FactoredHeadsModel`: the verifier runs the body once, projects the
base head at every draft position and all ``h`` heads only where the next block starts.

The heads are one object of their kind (``heads_rule``: :class:`~blockdraft.models.heads
.MedusaRule` for Medusa heads, :class:`~blockdraft.models.heads.PrefixRule` for
prefix-conditioned ones, :class:`~blockdraft.models.heads.EagleRule` for an EAGLE draft layer,
:class:`~blockdraft.models.hf.eagle_heads.EagleHeads`) over the PyTorch modules
(:mod:`blockdraft.models.heads.torch_backend`): ``head_states``, ``project``, ``head_topk``,
``expander`` and ``accept_path`` are theirs (:class:`~blockdraft.models.heads.HeadsLM`),
whatever the kind. Every forward hands the rule what it read (``heads_rule.saw``: the final
hidden states, and the decoder layers' outputs a draft layer fuses).

The key/value cache is the model's own (``transformers.DynamicCache``) behind the project's
immutable cache protocol (:class:`~blockdraft.models.hf.cache.HFCache`). A forward's inputs
are checked once into a :class:`~blockdraft.models.step.Step`; position ids are passed
explicitly (the cache's length plus ``0 .. T-1`` by default), and a token tree's ancestor mask
as the step's additive bias.

Public surface:
    HFBlockwiseModel(base, heads, tokenizer=None, *, device=None, dtype=None)
        .heads_logits(input_ids [B, T], past=None, last_only=False) -> ([B, T, h, V], HFCache)
        .hidden(input_ids, past=None, position_ids=None, tree_mask=None)
            -> (x [B, T, d], HFCache)
        .head_states(x [..., d], heads=None) -> [..., n, d];  .project(states) -> [..., n, V]
        .head_topk(x, k, heads=None, first=None), .expander(x, k, first=None, chain=None)
        .h, .device, .max_seq_len, .config (HFBlockwiseConfig), .tokenizer (HFTokenizer | None),
        .capabilities, .heads_digest, .conditional_heads, .heads_rule
    HFBlockwiseConfig      frozen: the sizes the rest of blockdraft reads (h, vocab_size, ...)
    check_supported(base)  raise a ModelError naming what is supported
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from blockdraft.models.capabilities import Capabilities
from blockdraft.models.errors import ModelError
from blockdraft.models.heads import HeadsLM, HeadsRule, torch_rule
from blockdraft.models.hf.body import cache_argument, call_with_cache
from blockdraft.models.hf.cache import HFCache
from blockdraft.models.hf.drafting import check_recipe_tokenizer
from blockdraft.models.hf.eagle_heads import EagleHeads, capture_layers
from blockdraft.models.hf.medusa import MedusaHeads
from blockdraft.models.hf.tokenizer import HFTokenizer
from blockdraft.models.step import check_step

SUPPORTED = (
    "supported: decoder-only transformers causal LMs whose logits are lm_head(final hidden "
    "state) and whose attention layers keep plain keys and values (full or sliding-window "
    "attention), e.g. Llama (SmolLM2), Mistral, Qwen2, GPT-2 (tested: llama, mistral, gpt2)"
)
CACHE_LAYER_TYPES = ("full_attention", "sliding_attention")
"""Attention layer types whose cache is a plain ``DynamicLayer`` of keys and values (a
sliding window is applied by the attention mask, so a full cache gives the same outputs)."""
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")
_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length",
                 "seq_length")


@dataclass(frozen=True)
class HFBlockwiseConfig:
    """The sizes of an :class:`HFBlockwiseModel` (what the verifier, the oracle and the CLI
    read as ``model.config``; the base model's own config is ``model.base.config``).

    Attributes:
        name: the base model's ``name_or_path`` (a folder), or its class name.
        architecture: the base model's class, e.g. ``"LlamaForCausalLM"``.
        model_type: ``config.model_type``, e.g. ``"llama"``.
        h: heads, the base included (``1 + num Medusa heads``).
        vocab_size: ``V``, rows of the base ``lm_head``.
        d_model: ``d``, the final hidden state's size.
        n_layer: the base's transformer layers.
        max_seq_len: the longest sequence (positions) the model reads, or None if unknown.
        medusa_layers: ResBlocks per Medusa head (``L``).
        own_projection: the Medusa heads have their own ``[V, d]`` projections.
        dtype: the parameters' dtype, e.g. ``"float32"``.
    """

    name: str
    architecture: str
    model_type: str
    h: int
    vocab_size: int
    d_model: int
    n_layer: int
    max_seq_len: int | None
    medusa_layers: int
    own_projection: bool
    dtype: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (for signatures and metadata)."""
        return dataclasses.asdict(self)


def _text_config(base: Any) -> Any:
    config = base.config
    getter = getattr(config, "get_text_config", None)
    return getter(decoder=True) if callable(getter) else config


def _unsupported(base: Any) -> str | None:
    """Why ``base`` cannot run behind the protocol, or None when it can."""
    if not isinstance(base, nn.Module) or getattr(base, "config", None) is None:
        return "it is not a transformers model (an nn.Module with a config)"
    config = _text_config(base)
    if getattr(base.config, "is_encoder_decoder", False):
        return "it is an encoder-decoder model"
    if getattr(config, "add_cross_attention", False):
        return "it has cross-attention layers"
    getter = getattr(base, "get_output_embeddings", None)
    lm_head = getter() if callable(getter) else None
    if not isinstance(lm_head, nn.Linear):
        return "it has no linear lm_head (get_output_embeddings())"
    body = getattr(base, "base_model", None)
    if not isinstance(body, nn.Module) or body is base:
        return "it has no separate body (base_model) under its lm_head"
    if cache_argument(body) is None:
        return ("its body's forward takes no key/value cache (no argument annotated as a "
                "transformers Cache)")
    if "position_ids" not in inspect.signature(body.forward).parameters:
        return "its body's forward takes no position_ids"
    for attr in _LOGIT_TRANSFORMS:
        value = getattr(config, attr, None)
        neutral = value is None or (attr != "final_logit_softcapping" and value == 1)
        if not neutral:
            return f"its logits are post-processed after the lm_head ({attr} = {value})"
    try:
        from transformers.cache_utils import get_layer_types_and_kwargs

        layer_types, _ = get_layer_types_and_kwargs(config)
    except Exception:  # noqa: BLE001 - an unusual config: judged by the cache it returns
        layer_types = []
    bad = sorted({str(t) for t in layer_types} - set(CACHE_LAYER_TYPES))
    if bad:
        return f"its layers of type {', '.join(bad)} keep a cache other than plain keys/values"
    return None


def check_supported(base: Any) -> None:
    """Raise a :class:`ModelError` when ``base`` is not a supported causal LM.

    Raises:
        ModelError: naming the reason and what is supported.
    """
    problem = _unsupported(base)
    if problem is not None:
        kind = getattr(getattr(base, "config", None), "model_type", None)
        name = type(base).__name__ + (f" (model_type {kind!r})" if kind else "")
        raise ModelError(f"unsupported architecture {name}: {problem}; {SUPPORTED}")


def context_length(base: Any) -> int | None:
    """The base model's context in positions (``max_position_embeddings``, ``n_positions``,
    ...), or None when its config names none."""
    config = _text_config(base)
    for key in _CONTEXT_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


class HFBlockwiseModel(HeadsLM, nn.Module):
    """A ``transformers`` causal LM with Medusa heads, behind blockdraft's model protocol.

    Args:
        base: a causal LM (``LlamaForCausalLM``, ``GPT2LMHeadModel``, ...; see
            :data:`SUPPORTED`); put it in eval mode for decoding (this constructor does).
        heads: the Medusa heads (or prefix heads, or an EAGLE draft layer's
            :class:`~blockdraft.models.hf.eagle_heads.EagleHeads`); moved to the base's device
            and dtype (in place).
        tokenizer: the base's ``transformers`` tokenizer (wrapped as :class:`HFTokenizer`),
            or None.
        device: move the base there first (default: leave it where it is).
        dtype: cast the base to this dtype first (``torch.float32``, ...; default: leave it).

    Raises:
        ModelError: on an unsupported architecture, heads that are not :class:`MedusaHeads`
            or :class:`EagleHeads`, or heads whose hidden size or vocabulary does not match
            the base (a draft layer: any size of the base's block).
    """

    kind: ClassVar[str] = "hf-medusa"

    def __init__(
        self,
        base: Any,
        heads: MedusaHeads | EagleHeads,
        tokenizer: Any = None,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_supported(base)
        if not isinstance(heads, (MedusaHeads, EagleHeads)):
            raise ModelError(f"heads must be MedusaHeads or EagleHeads, got "
                             f"{type(heads).__name__}")
        lm_head = base.get_output_embeddings()
        d, vocab = int(lm_head.in_features), int(lm_head.out_features)
        if heads.d_model != d:
            raise ModelError(
                f"the Medusa heads have hidden size d = {heads.d_model} but the base model's "
                f"final hidden state has d = {d}; they were trained for another model"
            )
        if heads.vocab_size is not None and heads.vocab_size != vocab:
            raise ModelError(
                f"the Medusa heads project onto V = {heads.vocab_size} tokens but the base "
                f"model's vocabulary has V = {vocab}; they were trained for another model"
            )
        if device is not None or dtype is not None:
            base.to(device=device, dtype=dtype)
        weight = lm_head.weight
        heads.to(device=weight.device, dtype=weight.dtype)
        self.base = base
        self.heads = heads
        self.heads_rule: HeadsRule = torch_rule(base, heads)  # the kind's rule, in PyTorch
        self._cache_argument: str = cache_argument(base.base_model) or ""  # checked above
        self.tokenizer: HFTokenizer | None = (
            None if tokenizer is None else HFTokenizer(tokenizer, vocab_size=vocab)
        )
        # the heads' packaged recipe: its n-gram LM over this base's tokenizer, or refused now
        check_recipe_tokenizer(getattr(heads, "drafting", None), vocab, self.tokenizer)
        text = _text_config(base)
        self.config = HFBlockwiseConfig(
            name=str(getattr(base.config, "name_or_path", "") or type(base).__name__),
            architecture=type(base).__name__,
            model_type=str(getattr(base.config, "model_type", "") or ""),
            h=1 + heads.num_heads,
            vocab_size=vocab,
            d_model=d,
            n_layer=int(getattr(text, "num_hidden_layers", 0) or 0),
            max_seq_len=context_length(base),
            medusa_layers=heads.num_layers,
            own_projection=heads.own_projection,
            dtype=str(weight.dtype).removeprefix("torch."),
        )
        self.eval()

    # ---- properties --------------------------------------------------------------------------

    @property
    def h(self) -> int:
        """Prediction heads, the base LM (head 1) included."""
        return self.config.h

    @property
    def device(self) -> torch.device:
        """Where the parameters live (inputs must be there)."""
        return self.lm_head.weight.device

    @property
    def max_seq_len(self) -> int | None:
        """The longest sequence the base model reads (positions), or None if unknown."""
        return self.config.max_seq_len

    @property
    def drafting(self) -> Any:
        """The drafting recipe packaged with the heads
        (:class:`~blockdraft.models.hf.drafting.DraftingRecipe`), or None."""
        return self.heads.drafting

    @property
    def capabilities(self) -> Capabilities:
        """What the model can do (:class:`~blockdraft.models.capabilities.Capabilities`):
        Medusa or prefix-conditioned heads (a tree lattice), PyTorch eager in its dtype."""
        return Capabilities(
            heads="none" if self.h == 1 else self.heads_rule.kind, h=self.h,
            vocab_size=self.config.vocab_size, max_seq_len=self.config.max_seq_len,
            runtime="torch", precision=self.config.dtype, factored=True, head_topk=True,
            last_only=True, drafting=self.heads.drafting, device=self.device.type,
            name=self.config.name)

    @property
    def lm_head(self) -> nn.Linear:
        """The base model's vocabulary projection (head 1)."""
        head = self.base.get_output_embeddings()
        assert isinstance(head, nn.Linear)
        return head

    # ---- the forward pass -------------------------------------------------------------------

    def hidden(
        self,
        input_ids: torch.Tensor,
        past: HFCache | None = None,
        position_ids: torch.Tensor | None = None,
        tree_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, HFCache]:
        """The base model's final hidden states (after its final norm).

        Args:
            input_ids: int ``[B, T]`` token ids (after the ``past`` positions), on the model's
                device.
            past: the cache of the preceding positions (batch ``B``, or 1 to share it), or
                None. It is never modified.
            position_ids: ``[T]`` or ``[B, T]``; default ``past.length + arange(T)`` (the only
                value a contiguous cache needs; a token tree passes ``past.length + depths``).
            tree_mask: bool ``[T, T]``, which new tokens each new token attends to (a token
                tree's ancestor mask, docs/definitions.md sec. 11); the prefix is always
                attended. Passed to the base as a 4D additive mask ``[1, 1, T, T_past + T]``
                (:meth:`Step.bias <blockdraft.models.step.Step.bias>`; transformers returns a
                4D mask as it is, and an additive float mask works for the eager and SDPA
                attentions alike). Default: causal (transformers builds the mask).

        Returns:
            ``x`` float ``[B, T, d]`` (``output_hidden_states[-1]`` of the base) and the cache
            of all ``T_past + T`` positions.

        Raises:
            ModelError: on bad ids (empty, wrong dtype/shape/device, outside the vocabulary),
                a sequence longer than ``max_seq_len``, or a cache that does not fit.
        """
        from transformers import DynamicCache

        if isinstance(past, HFCache) and self.config.n_layer and (
                past.n_layer != self.config.n_layer):
            raise ModelError(f"past has {past.n_layer} layers but this model has "
                             f"{self.config.n_layer} (was it made by another model?)")
        step = check_step(input_ids, past, position_ids, tree_mask, cache=HFCache,
                          vocab_size=self.config.vocab_size, device=self.device,
                          max_seq_len=self.config.max_seq_len)
        cache = DynamicCache() if step.past is None else step.past.dynamic()
        extra: dict[str, Any] = {}
        if step.tree_mask is not None:  # (1, 1, T, T_past + T)
            extra["attention_mask"] = step.bias(self.lm_head.weight.dtype,
                                                window=self._tree_window(step.span))
        with capture_layers(self.base, self.heads_rule.feature_layers) as layers:
            out, returned = call_with_cache(
                self.base.base_model, self._cache_argument, cache,
                input_ids=step.ids, position_ids=step.positions.expand(step.ids.shape),
                **extra,
            )
        self.heads_rule.saw(out.last_hidden_state, layers)  # a draft layer reads its features
        new = HFCache.from_dynamic(returned)
        expected = step.t_past + step.length
        if new.length != expected:
            raise ModelError(
                f"the model's cache holds {new.length} positions after a forward over "
                f"{expected}; {SUPPORTED}"
            )
        return out.last_hidden_state, new  # (B, T, d)

    def _tree_window(self, span: int) -> int | None:
        """The sliding window a token tree reaching ``span`` positions must apply itself (every
        layer sliding), or None (full attention, or a span within the window).

        Raises:
            ModelError: a model mixing sliding and full attention layers, beyond the window.
        """
        window = getattr(_text_config(self.base), "sliding_window", None)
        if not (isinstance(window, int) and window > 0 and span > window):
            return None
        try:
            from transformers.cache_utils import get_layer_types_and_kwargs

            kinds = set(get_layer_types_and_kwargs(_text_config(self.base))[0])
        except Exception:  # noqa: BLE001 - judged as all sliding
            kinds = {"sliding_attention"}
        if kinds != {"sliding_attention"}:
            raise ModelError(
                "tree verification with a mix of sliding-window and full attention layers "
                f"is not supported beyond the window ({window} positions)"
            )
        return window

    # ---- the heads (their rule: self.heads_rule) -----------------------------------------------

    @property
    def heads_digest(self) -> str:
        """16 hex digits of the heads' weights (names, dtypes, shapes, bytes) and shortlist:
        what a trace records, so that one made with other heads is told apart."""
        from blockdraft.models.hf.formats import tensors_digest

        state = dict(self.heads.state_dict())
        if self.heads.shortlist is not None:
            state["shortlist"] = self.heads.shortlist
        return tensors_digest(state)[:16]

    def head_parameters(self) -> list[nn.Parameter]:
        """The Medusa heads' parameters (what head training updates)."""
        return list(self.heads.parameters())
