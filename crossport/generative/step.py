"""The torch side of a generative export: one forward step of an HF causal LM with an
explicit, functional KV cache.

``KVCacheStep(lm, max_cache_len)`` computes, for a chunk of ``T`` tokens at cache positions
``input_pos``, the logits of the token at ``last_index`` and the whole updated cache. The
same module serves prefill (``T`` = a prefill length, padded and masked) and decode
(``T = 1``): it is converted once with a dynamic ``T`` and every signature calls the one
Keras model, so the weights are written once.

The cache is a static tensor per k/v, ``[layers, batch, kv_heads, max_cache_len, head_dim]``.
The chunk's keys and values are written at slots ``input_pos[0] ..`` with
``crossport::dynamic_update_slice`` (TFLite's ``DYNAMIC_UPDATE_SLICE`` builtin), so a step
writes O(T) rows instead of blending every slot; the positions must therefore be
consecutive and ``input_pos[0] + T <= max_cache_len`` (the runner keeps to it). The
attention mask lets position ``p`` attend to cache slots ``j <= p`` (and ``p - j < window``
on sliding-window layers). Cache slots beyond the last written position hold stale values
the mask never lets through, which is why padding a prompt is harmless: a pad's slot is
overwritten before it is ever attended.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from crossport.capture.export import exception_line, user_frame
from crossport.capture.update_slice import dynamic_update_slice
from crossport.errors import InputError, UnsupportedOpError

# RoPE types whose frequencies are fixed at construction (a buffer + a scale): the export
# reproduces them exactly. "dynamic" and "longrope" recompute frequencies from the sequence
# length seen at run time, which a static-shape export cannot follow.
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "proportional")
MASK_KINDS = ("full_attention", "sliding_attention")


class _FunctionalCache:
    """Duck-types the part of transformers' ``Cache`` the attention layers call: ``update``
    returns the layer's whole cache with this chunk written in, and records it as output."""

    def __init__(self, k_caches, v_caches, start):
        self.k_caches, self.v_caches = k_caches, v_caches  # one [batch, heads, L, dim] a layer
        self.start = start  # [1]: the slot of the chunk's first token
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}

    def update(self, key_states, value_states, layer_idx, *_args, **_kwargs):
        # the rest is cache_kwargs (transformers < 5.24) or kwargs (5.24): not needed here
        self.keys[layer_idx] = self._write(self.k_caches[layer_idx], key_states)
        self.values[layer_idx] = self._write(self.v_caches[layer_idx], value_states)
        return self.keys[layer_idx], self.values[layer_idx]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """0: models read it only to derive positions or a mask when they are not given, and
        the step always gives both (every export is then checked against HF generate)."""
        return 0

    def _write(self, cache, states):  # cache [batch, heads, L, head_dim], states [.., T, ..]
        return dynamic_update_slice(cache, states, self.start, 2)

    def written(self, layers: int) -> list[torch.Tensor]:
        """Every layer's new keys, then every layer's new values."""
        missing = [i for i in range(layers) if i not in self.keys]
        if missing:
            raise UnsupportedOpError(
                f"decoder layers {missing} did not write the KV cache (shared or absent KV "
                "layers are not supported by the generative export yet)")
        return [self.keys[i] for i in range(layers)] + [self.values[i] for i in range(layers)]


class KVCacheStep(nn.Module):
    """``forward(tokens, input_pos, last_index, k_cache_0, .., v_cache_0, ..) -> (logits,
    k_cache_0, .., v_cache_0, ..)``: one key and one value cache tensor per layer.

    Per-layer tensors, not one stacked ``[layers, ...]`` tensor: each layer's write is then
    a ``DYNAMIC_UPDATE_SLICE`` straight from input to output, with no per-layer slice of a
    stacked input and no stacking of the outputs (whole-cache copies; measured: ~5x the
    cost of the writes themselves at 1024 slots).

    Args of forward:
        tokens: int32 ``[1, T]`` token ids (pads after the real tokens are allowed).
        input_pos: int32 ``[T]`` cache positions of the tokens: consecutive,
            ``start .. start + T - 1`` with ``start + T <= max_cache_len``.
        last_index: int32 ``[1]`` index in the chunk whose logits are returned.
        k_cache_<i>, v_cache_<i>: float32 ``[1, kv_heads, max_cache_len, head_dim]``
            (``cache_names``, ``layer_cache_shape``).

    Example:
        >>> import torch, transformers
        >>> cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
        ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
        >>> step = KVCacheStep(transformers.LlamaForCausalLM(cfg).eval(), max_cache_len=16)
        >>> step.cache_shape, step.cache_names
        ((1, 1, 1, 16, 16), ['k_cache_0', 'v_cache_0'])
    """

    def __init__(self, lm: nn.Module, max_cache_len: int):
        super().__init__()
        self.lm = lm
        self.max_cache_len = int(max_cache_len)
        self.config = lm.config
        self.window = check_supported(lm, self.max_cache_len)
        self.dict_masks = _takes_mask_dict(lm)
        self._keeps_logits = "logits_to_keep" in inspect.signature(lm.forward).parameters
        self._cache_arg = _cache_argument(lm)
        self.cache_shape = self._probe_cache_shape()  # [layers, *layer_cache_shape]
        self.layers = self.cache_shape[0]
        self.layer_cache_shape = self.cache_shape[1:]
        self.cache_names = ([f"k_cache_{i}" for i in range(self.layers)]
                            + [f"v_cache_{i}" for i in range(self.layers)])
        # capture names the inputs after forward's parameters: one per cache tensor
        self.forward = _named(self._step, ["tokens", "input_pos", "last_index",
                                           *self.cache_names])

    def _step(self, tokens, input_pos, last_index, *caches):
        # a chunk never holds more tokens than the cache has slots; said to torch.export,
        # the chunk's size gets that upper bound, which proves index arithmetic fits int32
        torch._check(tokens.shape[1] <= self.max_cache_len)
        slots = torch.arange(self.max_cache_len, dtype=input_pos.dtype)
        cache = _FunctionalCache(caches[:self.layers], caches[self.layers:], input_pos[:1])
        out = self.lm(input_ids=tokens, position_ids=input_pos[None], **{self._cache_arg: cache},
                      attention_mask=self._masks(slots, input_pos), use_cache=True,
                      **({"logits_to_keep": last_index} if self._keeps_logits else {}))
        logits = out.logits if self._keeps_logits else out.logits.index_select(1, last_index)
        return (logits[:, 0], *cache.written(self.layers))

    def _masks(self, slots, input_pos):
        allowed = slots[None, :] <= input_pos[:, None]                 # [T, L]
        full = _additive(allowed)
        local = None
        if self.window is not None:  # HF's sliding window: p sees p - window < j <= p
            local = _additive(allowed & (slots[None, :] > input_pos[:, None] - self.window))
        if not self.dict_masks:  # the model applies one mask kind to every layer
            return full if local is None else local
        # a window no shorter than the cache hides no slot: its layers take the full mask
        return {"full_attention": full, "sliding_attention": full if local is None else local}

    def _probe_cache_shape(self) -> tuple[int, ...]:
        """Runs the model once on two tokens to learn the cache's heads and head size."""
        shapes = {}

        class Probe:
            def update(_, key_states, value_states, layer_idx, *_args, **_kwargs):
                shapes[layer_idx] = tuple(key_states.shape)
                return key_states, value_states

            def get_seq_length(_, layer_idx=0):
                return 0

        tokens, positions = torch.zeros(1, 2, dtype=torch.long), torch.arange(2)
        mask = _additive(torch.tril(torch.ones(2, 2, dtype=torch.bool)))
        masks = {kind: mask for kind in MASK_KINDS} if self.dict_masks else mask
        try:
            with torch.no_grad():
                self.lm(input_ids=tokens, position_ids=positions[None], attention_mask=masks,
                        use_cache=True, **{self._cache_arg: Probe()})
        except Exception as exc:  # a decoder whose forward the step's inputs do not fit
            name = type(self.lm).__name__
            raise UnsupportedOpError(
                f"{name} ({self.config.model_type}) did not run with the generative export's "
                f"cache and masks: {type(exc).__name__}: {exception_line(exc)}{user_frame(exc)}. "
                "The export supports HF decoders whose attention layers write "
                "past_key_values.update and take a 4-D additive mask (docs/generative.md); "
                "convert the forward pass with crossport.convert instead") from exc
        if not shapes:
            raise UnsupportedOpError(
                f"{type(self.lm).__name__}: no layer wrote past_key_values; the generative "
                "export needs attention layers that update a KV cache")
        kinds = {(s[1], s[3]) for s in shapes.values()}
        if len(kinds) != 1 or len(shapes) != self.config.num_hidden_layers:
            raise UnsupportedOpError(
                f"{type(self.lm).__name__}: the layers' KV caches differ in heads/head size or "
                f"are shared ({shapes}); one stacked cache tensor cannot hold them")
        heads, head_dim = kinds.pop()
        return (len(shapes), 1, heads, self.max_cache_len, head_dim)


def _cache_argument(lm: nn.Module) -> str:
    """The forward argument that takes the KV cache: ``cache`` from transformers 5.24 on
    (``past_key_values`` still works there, deprecated), ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(lm.forward).parameters else "past_key_values"


def _named(fn, names: list[str]):
    """``fn(*args)`` whose signature names its positional parameters ``names``."""
    def forward(*args):
        return fn(*args)

    forward.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names])
    return forward


def _additive(allowed):
    return torch.where(allowed, 0.0, torch.finfo(torch.float32).min)[None, None]


def _takes_mask_dict(lm: nn.Module) -> bool:
    """Whether the base model accepts ``{layer_type: mask}`` (alternating local/global)."""
    return "causal_mask_mapping" in _base_source(lm)


def rope_types(config) -> set[str]:
    """Every RoPE type a config names (top level or per layer type)."""
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    found = set()
    if isinstance(params, dict):
        if "rope_type" in params or "type" in params:
            found.add(params.get("rope_type", params.get("type")))
        found |= {p.get("rope_type", p.get("type", "default")) for p in params.values()
                  if isinstance(p, dict)}
    return found or {"default"}


def check_supported(lm: nn.Module, max_cache_len: int) -> int | None:
    """Refuses what the export cannot reproduce, by name; returns the sliding window or None.

    Raises:
        UnsupportedOpError: a data-dependent RoPE type, an unsupported attention kind, or an
            encoder-decoder model.
        InputError: not a float32 causal LM, or a cache longer than the model's positions.
    """
    config = getattr(lm, "config", None)
    name = type(lm).__name__
    if config is None or getattr(config, "is_encoder_decoder", False):
        raise InputError(f"{name}: expected a transformers causal LM (AutoModelForCausalLM); "
                         "encoder-decoder models are not supported by the generative export")
    _check_attention_kind(lm, name, max_cache_len)
    dtypes = {p.dtype for p in lm.parameters()}
    if dtypes != {torch.float32}:
        raise InputError(f"{name} has {sorted(map(str, dtypes))} parameters; the export starts "
                         "from float32 (call model.float(); use quantize= for a smaller file)")
    bad = sorted(t for t in rope_types(config) if t not in STATIC_ROPE_TYPES)
    if bad:
        raise UnsupportedOpError(
            f"{name}: RoPE type {', '.join(map(repr, bad))} is not supported by the generative "
            f"export: it recomputes its frequencies from the run-time sequence length. "
            f"Supported: {', '.join(STATIC_ROPE_TYPES)}")
    kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
    if kinds - set(MASK_KINDS):
        raise UnsupportedOpError(f"{name}: attention layer types {sorted(kinds - set(MASK_KINDS))} "
                                 f"are not supported by the generative export ({MASK_KINDS} are)")
    limit = getattr(config, "max_position_embeddings", None)
    if limit is not None and max_cache_len > limit:
        raise InputError(f"max_cache_len={max_cache_len} exceeds {name}'s "
                         f"max_position_embeddings={limit}")
    return _sliding_window(lm, kinds, max_cache_len)


def _check_attention_kind(lm: nn.Module, name: str, max_cache_len: int) -> None:
    """Refuses, by name, decoders whose state or position scheme the cache cannot carry."""
    source = _base_source(lm)
    if "cache_params" in source or hasattr(lm.config, "state_size"):
        raise UnsupportedOpError(
            f"{name} ({lm.config.model_type}) is a state-space (Mamba-style) model: it carries "
            "a convolution state and an SSM state between steps, not a KV cache, and the "
            "generative export supports attention decoders only. Convert its forward pass "
            "with crossport.convert (full-sequence logits) and generate by re-running it")
    if getattr(lm.config, "alibi", False) or (
            "build_alibi_tensor" in source and not hasattr(lm.config, "alibi")):
        raise UnsupportedOpError(
            f"{name}: ALiBi attention biases (config.alibi) are not supported by the "
            "generative export (its RoPE and learned-position paths are); use a config with "
            "alibi=False where the model has one (Falcon), or convert the forward pass with "
            "crossport.convert")
    window = getattr(lm.config, "window_size", None)
    if "local" in (getattr(lm.config, "attention_layers", None) or ()) and not (
            isinstance(window, int) and max_cache_len <= window):
        raise UnsupportedOpError(
            f"{name}: its 'local' attention layers (config.attention_layers) place their window "
            "by the key length, assuming the queries end the cache; the export's cache has a "
            f"fixed length, so with max_cache_len={max_cache_len} above their window_size="
            f"{window} they are not supported. Export with max_cache_len <= {window} (the "
            "window then covers the whole cache, and those layers attend to every earlier "
            "position exactly as in transformers), or convert the forward pass with "
            "crossport.convert")


def _sliding_window(lm: nn.Module, kinds: set[str], max_cache_len: int) -> int | None:
    """The window the model's own mask code would apply, or None when it never hides a slot."""
    config = lm.config
    window = getattr(config, "sliding_window", None)
    if getattr(config, "use_sliding_window", True) is False:
        window = None
    if window is None or window >= max_cache_len:
        return None
    if _takes_mask_dict(lm):
        return int(window) if "sliding_attention" in kinds else None
    return int(window) if "create_sliding_window_causal_mask" in _base_source(lm) else None


def _base_source(lm: nn.Module) -> str:
    try:
        # HF's base_model is the decoder stack whatever its attribute (model, transformer ..)
        base = getattr(lm, "base_model", None) or getattr(lm, "model", lm)
        return inspect.getsource(type(base).forward)
    except (OSError, TypeError):
        return ""
