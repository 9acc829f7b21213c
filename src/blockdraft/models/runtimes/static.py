"""`StaticKVModel`: a Hugging Face model with its heads on a static key/value cache
(runtime ``"static"``).

The same model protocol as :class:`~blockdraft.models.hf.HFBlockwiseModel` and
:class:`~blockdraft.models.runtimes.OrtBlockwiseModel` (``hidden``, ``head_states``,
``project``, ``heads_logits``, ``head_topk``), so the verifier, the decode loop, tree
verification, ``greedy_generate`` and traces run on it unchanged. The forward is transformers'
own (the base's body: every architecture the adapter runs) on a ``transformers.StaticCache``
whose layers are transformers' ``StaticLayer`` (keys written in place by ``index_copy_``),
each bound to a view of one preallocated :class:`~.kv_buffer.KVBuffer`:

- the buffer holds ``capacity`` rows, allocated once; a forward that needs more is refused
  (static shapes are what a captured graph replays);
- a forward is a function of static-shaped inputs: ids ``[1, T]``, positions ``[1, T]``, an
  additive attention bias ``[1, 1, T, R]`` over the first ``R`` rows of the buffer (the prefix,
  the new tokens a token tree's mask allows, a chain being the causal case, and a sliding
  window) and the first row it writes, so a chain and a token tree are the same forward;
- the rows attended follow the sequence, not the capacity: ``R`` is the rows the forward reads
  and writes rounded up to a power of two (:func:`~.cuda_graphs.kv_rows`, at least 64), and
  the layers it runs on are views of the buffer's first ``R`` rows (one ``StaticCache`` per
  ``R``, made at its first use); ``kv_buckets=False`` attends every row, as before issue 41;
- a verification keeps its accepted path by moving ``1 + n`` rows within the buffer
  (:meth:`BufferCache.gather`, on the buffer's device), as on ONNX Runtime;
- float32 or bfloat16 (the model's dtype; ``precision``).

A sliding window is applied by the bias (every layer keeps full rows, as the adapter's
``DynamicCache`` does), so models whose layers all use one window (Mistral) run; a mix of
sliding and full layers is refused.

**Buckets and CUDA graphs** (:mod:`.cuda_graphs`). With ``buckets``, a forward of at most 64 new
tokens is padded to its bucket (1, 2, 4, 8, 16, 32, 64); on a CUDA device (the default there,
``graphs``) each (bucket, rows attended) pair's forward is captured once as a CUDA graph and
replayed. On a CPU the
same padded forward runs eagerly (tested equal to the unpadded one). The heads and their
top-k run eagerly after the forward (the heads' rule over the PyTorch modules; a backend of
this runtime's own, :mod:`blockdraft.models.heads`, is the seam where a GPU session moves them
into the graph).

**An EAGLE draft layer** (heads of kind ``"draft-layer"``). Every forward hands the rule the
base's features, as the eager adapter's does (``heads_rule.saw``): the final hidden states
``x [1, T, d]`` and, for a layer of fusion ``"layers"``, the outputs of the decoder layers it
fuses (each ``[1, T, d]``), read by :func:`~blockdraft.models.hf.eagle_heads.capture_layers`'
hooks inside the forward a bucket's graph captures, which returns them beside ``x`` as one
tensor ``[1, T, d * (1 + n)]`` (:meth:`StaticKVModel._features_step`), so a replay rewrites
them too. The verifier then hands the rule each accepted path (``accept_path``) and the layer
runs eagerly on the model's device in its dtype (:class:`~blockdraft.models.heads.
torch_backend.TorchEagle`, its own cache growing by concatenation). Capturing the layer's call
too would hook in at that backend's ``step``: one graph per (rows, cache length rounded up to a
bucket) over a preallocated layer cache with a bias mask like the body's, the tree's depths
padded to a width bucket (not done: untested without a GPU).

**The ``index_copy_`` device assert of issue 30 is the caller's.** In transformers 5.x (read in
5.24.0, ``cache_utils.StaticLayer.update``) a static layer writes the ``T`` new keys at rows
``cumulative_length + arange(T)``, ``cumulative_length`` being a device tensor the layer keeps
itself and advances in place (``add_``) at every update; the ``position_ids`` do not choose the
rows, and nothing checks the bound on the host (on a GPU ``index_copy_`` checks it in the
kernel: a device-side assert). A CUDA graph records that ``add_``: every warm-up run, the
capture and every replay advance the write row by ``T``, so a benchmark that replays a
``T``-token graph over one prefix runs past ``max_cache_len`` after ``(max_cache_len -
prefix) / T`` calls, 16 times sooner at ``T = 16`` than at ``T = 1``. (Reproduced on a CPU: a
16-token forward repeated with the same positions after a 32-token prefix, ``max_cache_len =
64``, raises ``IndexError: index_copy_(): index 64 is out of bounds`` on its third call.) So
transformers does as designed, and a replay must set the cache's length first: here every
forward, captured or not, first copies its start row into every layer's ``cumulative_length``
(a replay is idempotent), and the rows a forward needs are checked on the host.

The heads are the wrapped model's heads object (their rule over the PyTorch modules, on the
model's device); what the runtime shares with the model (sizes, tokenizer, drafting recipe,
heads digest, capabilities) is one record (:class:`~.wrapped.Shared`); a forward's inputs are
one checked :class:`~blockdraft.models.step.Step`.

Public surface:
    StaticKVModel(model, capacity=None, buckets=None, graphs=None, kv_buckets=True,
                  device_steps=False)
        the attributes and methods of HFBlockwiseModel's protocol (h, device, max_seq_len,
        config, tokenizer, drafting, conditional_heads, heads_digest, capabilities, hidden,
        head_states, project, heads_logits, head_topk, expander), plus runtime, precision,
        capacity, buckets, graphs, kv_buckets, attended(rows) -> R,
        use_body(body)       another function in place of the base's forward (a null forward)
        buffer, window, static_forward(ids, positions, bias, start) -> x   a device step's
        device_steps, decoders    (the device decoders made for it: device_step.decoder)
    DEFAULT_CAPACITY
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from blockdraft.models.errors import ModelError
from blockdraft.models.hf.adapter import HFBlockwiseModel
from blockdraft.models.hf.body import call_with_cache
from blockdraft.models.hf.eagle_heads import capture_layers
from blockdraft.models.runtimes.cuda_graphs import BUCKETS, BucketRunner, Forward, kv_rows
from blockdraft.models.runtimes.kv_buffer import BufferCache, KVBuffer
from blockdraft.models.runtimes.wrapped import RuntimeModel, Shared
from blockdraft.models.step import Step, check_step

DEFAULT_CAPACITY = 2048
"""Rows of the static cache when ``capacity`` is not given (or the model's context, if
shorter): the prompt and the tokens a decode generates, plus a step's new tokens."""
PRECISIONS = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _kv_sizes(model: HFBlockwiseModel) -> tuple[int, int, int]:
    """``(n_layer, n_kv_head, head_dim)`` of the base's cache, read from a one-token forward of
    the eager adapter (what transformers really stores, whatever the config calls it).

    Raises:
        ModelError: layers that differ in heads or head sizes, or keys and values of different
            sizes (one buffer holds them all).
    """
    pad = getattr(model.base.config, "pad_token_id", None)
    token = int(pad == 0)  # not the padding id, which transformers warns about
    with torch.no_grad():
        _, past = model.hidden(torch.full((1, 1), token, dtype=torch.long, device=model.device))
    sizes = {(int(k.shape[1]), int(k.shape[3]), int(v.shape[1]), int(v.shape[3]))
             for k, v in zip(past.keys, past.values, strict=True)}  # (kv heads, sizes)
    n_kv, head_dim, v_heads, v_dim = next(iter(sizes))
    if len(sizes) != 1 or (v_heads, v_dim) != (n_kv, head_dim):
        raise ModelError(
            f"runtime 'static' keeps every layer's keys and values in one buffer; "
            f"{model.config.architecture} has layers of (key heads, key size, value heads, "
            f"value size) {sorted(sizes)}: use runtime='torch'")
    return len(past.keys), n_kv, head_dim


def _window(model: HFBlockwiseModel) -> int | None:
    """Every layer's sliding window, or None when every layer attends to the whole prefix.

    Raises:
        ModelError: a mix of sliding and full attention layers.
    """
    from transformers.cache_utils import get_layer_types_and_kwargs

    text = model.base.config.get_text_config(decoder=True)
    kinds = set(get_layer_types_and_kwargs(text)[0])
    if kinds == {"full_attention"}:
        return None
    if kinds == {"sliding_attention"}:
        return int(text.sliding_window)
    raise ModelError(
        f"runtime 'static' runs models whose layers all attend fully or all through one "
        f"sliding window; {model.config.architecture} mixes {sorted(kinds)}: use "
        "runtime='torch'")


def _static_cache(model: HFBlockwiseModel, buffer: KVBuffer, rows: int) -> Any:
    """A ``transformers.StaticCache`` of ``rows`` rows whose layers are full ``StaticLayer`` s
    bound to views of the buffer's first ``rows`` rows, layer by layer (already initialised:
    they never allocate; their writes land in the buffer).

    Raises:
        ModelError: a transformers whose ``StaticLayer`` keeps no ``cumulative_length`` tensor
            (the write row this runtime sets before every forward).
    """
    from transformers import StaticCache
    from transformers.cache_utils import StaticLayer

    cache = StaticCache(config=model.base.config, max_cache_len=rows)
    if len(cache.layers) != buffer.n_layer:
        raise ModelError(f"transformers' StaticCache has {len(cache.layers)} layers, the model's "
                         f"cache {buffer.n_layer}: use runtime='torch'")
    for i in range(buffer.n_layer):
        layer = StaticLayer(max_cache_len=rows)
        if not isinstance(getattr(layer, "cumulative_length", None), torch.Tensor):
            import transformers

            raise ModelError(
                f"runtime 'static' needs a transformers whose StaticLayer keeps its write row "
                f"in a cumulative_length tensor (5.24 does); {transformers.__version__} does "
                "not: use runtime='torch'")
        vars(layer).update(
            device=buffer.device, batch_size=1, num_heads=buffer.n_kv_head,
            k_head_dim=buffer.head_dim, v_head_dim=buffer.head_dim,
            keys=buffer.keys(i)[:, :, :rows], values=buffer.values(i)[:, :, :rows],
            is_initialized=True,
            cumulative_length=torch.zeros((), dtype=torch.long, device=buffer.device))
        cache.layers[i] = layer
    return cache


class StaticKVModel(RuntimeModel):
    """A Hugging Face causal LM with its heads on a static KV cache (module docstring).

    Args:
        model: an :class:`~blockdraft.models.hf.HFBlockwiseModel` in float32 or bfloat16 on
            any device (kept: its body runs the forward, its heads the heads).
        capacity: rows of the cache, the longest sequence it holds (default
            :data:`DEFAULT_CAPACITY`, or the model's context if shorter).
        buckets: pad forwards of up to ``max(buckets)`` new tokens to the next bucket
            (default :data:`~.cuda_graphs.BUCKETS` with graphs, none without).
        graphs: capture one CUDA graph per bucket (default: on a CUDA device).
        kv_buckets: attend the rows a forward reaches, rounded up to a power of two (default);
            False attends every row of the buffer (the runtime before issue 41, for
            comparisons).
        device_steps: decode's steps run on the device when its drafter is one the device
            drafts (vanilla heads' chain, a static Medusa tree, the rated tree with N fixed,
            prompt lookup, chain + lookup; :mod:`.device_step` and
            :mod:`blockdraft.verify.device_decode`); a plain attribute, set it any time.

    Raises:
        ModelError: another kind of model, another dtype, graphs off a CUDA device, bad
            buckets or capacity, or an architecture one buffer cannot hold.
    """

    kind: ClassVar[str] = "hf-medusa-static"
    runtime: ClassVar[str] = "static"

    def __init__(self, model: Any, capacity: int | None = None,
                 buckets: tuple[int, ...] | None = None, graphs: bool | None = None,
                 kv_buckets: bool = True, device_steps: bool = False) -> None:
        if not isinstance(model, HFBlockwiseModel):
            raise ModelError(f"runtime 'static' runs Hugging Face models with Medusa heads; "
                             f"{type(model).__name__} runs on runtime 'torch'")
        super().__init__(Shared.of(model, runtime=self.runtime), model.heads_rule)
        self.model = model
        if self.precision not in PRECISIONS:
            raise ModelError(f"runtime 'static' computes in {', '.join(PRECISIONS)}; the model "
                             f"is {self.precision}: load it with dtype='float32' or 'bfloat16'")
        device = model.device
        self.graphs = device.type == "cuda" if graphs is None else bool(graphs)
        if self.graphs and device.type != "cuda":
            raise ModelError(f"CUDA graphs need a CUDA device; the model is on {device}: pass "
                             "graphs=False (buckets still pad)")
        self.buckets = tuple(BUCKETS if buckets is None and self.graphs else buckets or ())
        if list(self.buckets) != sorted(set(self.buckets)) or any(
                isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in self.buckets):
            raise ModelError(f"buckets must be increasing positive ints, got {self.buckets!r}")
        limit = model.max_seq_len
        self.capacity = int(capacity if capacity is not None
                            else min(limit or DEFAULT_CAPACITY, DEFAULT_CAPACITY))
        if self.capacity < 1:
            raise ModelError(f"capacity must be at least 1 row, got {capacity!r}")
        n_layer, n_kv, head_dim = _kv_sizes(model)
        scratch = max(self.buckets, default=0)  # padding and warm-ups write past the capacity
        self._buffer = KVBuffer(n_layer, n_kv, head_dim, self.capacity + scratch, device,
                                PRECISIONS[self.precision])
        self.kv_buckets = bool(kv_buckets)
        self._caches: dict[int, Any] = {}  # rows attended -> its StaticCache over the buffer
        self._body: Forward | None = None  # use_body's replacement of the base's forward
        self.decoders: dict[Any, Any] = {}  # a device strategy's key -> its device decoder
        self.device_steps = bool(device_steps)
        self._cache_of(self.attended(1))  # the first one now: transformers' refusals here
        self._window = _window(model)
        self._runner = (BucketRunner(self._features_step, self._inputs, self.buckets,
                                     capture=self.graphs) if self.buckets else None)

    @property
    def device(self) -> torch.device:
        """Where the model, its cache and its inputs live."""
        return self.model.device

    def __repr__(self) -> str:
        return (f"StaticKVModel({self.config.name!r}, precision={self.precision!r}, "
                f"capacity={self.capacity}, buckets={self.buckets}, graphs={self.graphs}, "
                f"kv_buckets={self.kv_buckets})")

    def use_body(self, body: Forward | None) -> None:
        """Run ``body(ids [1, T], positions [1, T], bias [1, 1, T, R], start []) -> x [1, T,
        d]`` (in the model's dtype, on its device) in place of the base's forward, or the base
        again (None); graphs captured so far are dropped. Everything else of a step stays: the
        checks, the bias, the padding, the cache's book-keeping, the heads. A null body (the
        embeddings of ``ids``, say) leaves what a step costs outside the forward:
        ``benchmarks.bench_static_host --null-forward`` measures it."""
        self._body = body
        self.decoders.clear()
        if self._runner is not None:
            self._runner = BucketRunner(self._features_step, self._inputs, self.buckets,
                                        capture=self.graphs)

    @property
    def buffer(self) -> KVBuffer:
        """The preallocated key/value buffer (``capacity`` rows and the buckets' scratch)."""
        return self._buffer

    @property
    def window(self) -> int | None:
        """Every layer's sliding window (applied by the bias), or None."""
        return self._window

    def static_forward(self, ids: torch.Tensor, positions: torch.Tensor, bias: torch.Tensor,
                       start: torch.Tensor) -> torch.Tensor:
        """The forward on static-shaped device tensors, unchecked (what a CUDA graph captures:
        a device step, :mod:`.device_step`): ``ids [1, T]``, ``positions [1, T]``, ``bias [1,
        1, T, R]`` over the first ``R`` rows (one of :meth:`attended`'s), the first row
        written ``start`` (0-d int64) -> ``x [1, T, d]``; the caller keeps ``start + T <=``
        the buffer's rows."""
        return self._step(ids, positions, bias, start)

    def attended(self, rows: int) -> int:
        """The rows a forward attends when it reads and writes the buffer's first ``rows``
        (the prefix, its new tokens and their padding): :func:`~.cuda_graphs.kv_rows`, or the
        whole buffer without ``kv_buckets``."""
        total = self._buffer.capacity
        return kv_rows(rows, total) if self.kv_buckets else total

    # ---- the forward ------------------------------------------------------------------------

    def hidden(self, input_ids: torch.Tensor, past: BufferCache | None = None,
               position_ids: Any = None, tree_mask: Any = None
               ) -> tuple[torch.Tensor, BufferCache]:
        """The final hidden states of ``T`` new tokens (after the final norm).

        Args:
            input_ids: int ``[1, T]`` token ids after the ``past`` positions, on the device.
            past: the cache of the preceding positions (from this model), or None.
            position_ids: ``[T]`` or ``[1, T]`` (default ``past.length + arange(T)``; a token
                tree passes ``past.length + depths``).
            tree_mask: bool ``[T, T]``, which new tokens each new token attends to (a token
                tree's ancestor mask, parents before children); default causal.

        Returns:
            ``x`` ``[1, T, d]`` in the model's dtype and the cache of ``past.length + T``
            positions (rows of the buffer). The heads' rule is handed what the forward read
            (``heads_rule.saw``: ``x``, and the decoder layers' outputs a draft layer fuses).

        Raises:
            ModelError: bad ids, more than one row, a cache from elsewhere or overwritten
                since it was made, a mask of the wrong shape, a sequence longer than the
                model's context or than the cache's ``capacity``.
        """
        step = check_step(input_ids, past, position_ids, tree_mask, cache=BufferCache,
                          vocab_size=self.config.vocab_size, device=self.device,
                          max_seq_len=self.max_seq_len, one_row="the static-cache model")
        t, t_past = step.length, step.t_past
        if step.past is not None:
            self._buffer.check(step.past)
        if t_past + t > self.capacity:
            raise ModelError(
                f"a forward of {t} tokens after {t_past} cached ones needs {t_past + t} rows; "
                f"the static cache holds {self.capacity} (load it with a larger capacity, "
                f"StaticKVModel(model, capacity={t_past + t}))")
        epoch = self._buffer.begin_write(t_past)
        with torch.no_grad():
            if self._runner is not None and t <= self._runner.largest:
                out = self._runner.run(step)
            else:
                out = self._features_step(*self._inputs(step))
        x, layers = out, ()
        if self.heads_rule.feature_layers:  # a fused draft layer's features beside x
            d = self.config.d_model
            x, layers = out[..., :d].contiguous(), out[..., d:].split(d, dim=-1)
        self.heads_rule.saw(x, layers)  # a draft layer reads its features
        return x, BufferCache(self._buffer, t_past + t, epoch)

    def _inputs(self, step: Step) -> tuple[torch.Tensor, ...]:
        """The step's arguments on the device: ``(ids [1, T], positions [1, T], bias [1, 1, T,
        R] in the model's dtype over the ``R`` rows it attends (:meth:`attended`), start [])``."""
        rows = self.attended(step.t_past + step.length)
        bias = step.bias(PRECISIONS[self.precision], columns=rows,
                         window=self._window)  # (1, 1, T, R)
        return (step.ids, step.positions, bias,
                torch.tensor(step.t_past, dtype=torch.long, device=self.device))

    def _cache_of(self, rows: int) -> Any:
        """The ``StaticCache`` over the buffer's first ``rows`` rows (made once)."""
        cache = self._caches.get(rows)
        if cache is None:
            cache = self._caches[rows] = _static_cache(self.model, self._buffer, rows)
        return cache

    def _features_step(self, ids: torch.Tensor, positions: torch.Tensor, bias: torch.Tensor,
                       start: torch.Tensor) -> torch.Tensor:
        """:meth:`_step` and what the heads' rule reads beside ``x`` (what a bucket's graph
        captures): ``x [1, T, d]`` itself, or for a draft layer fusing the base's decoder
        layers ``i`` of ``heads_rule.feature_layers`` (``n`` of them) ``[1, T, d * (1 + n)]``,
        ``x`` then each layer's output (the residual stream entering layer ``i``), in that
        order. A replaced body (:meth:`use_body`) runs no decoder layer: ``x`` stands in for
        each (a stand-in of the right shape, as the rule's own for a state alone)."""
        indices = self.heads_rule.feature_layers
        if not indices:
            return self._step(ids, positions, bias, start)
        with capture_layers(self.model.base, indices) as layers:
            x = self._step(ids, positions, bias, start)
        if self._body is not None:
            layers = [x] * len(indices)
        return torch.cat((x, *layers), dim=-1)  # (1, T, d * (1 + n))

    def _step(self, ids: torch.Tensor, positions: torch.Tensor, bias: torch.Tensor,
              start: torch.Tensor) -> torch.Tensor:
        """One forward on static-shaped tensors (what a CUDA graph captures): every layer
        writes its new keys and values from row ``start`` and attends the bias's ``R`` rows;
        returns ``x [1, T, d]``."""
        if self._body is not None:
            return self._body(ids, positions, bias, start)
        cache = self._cache_of(int(bias.shape[-1]))
        for layer in cache.layers:
            layer.cumulative_length.copy_(start)
        out, _ = call_with_cache(self.model.base.base_model, self.model._cache_argument,
                                 cache, input_ids=ids, position_ids=positions,
                                 attention_mask=bias)
        return out.last_hidden_state  # type: ignore[no-any-return]  # (1, T, d)
