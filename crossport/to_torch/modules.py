"""Small torch modules the reverse converters emit where no plain torch layer fits.

Each holds the Keras layer's state as buffers (so ``state_dict`` has every Keras weight) and
does one line of arithmetic; none needs keras or TF at run time.
"""

from __future__ import annotations

import torch
from torch import nn

from crossport.to_torch.noise import keras_dropout


class Standardize(nn.Module):
    """``keras.layers.Normalization``: ``(x - mean) / max(sqrt(var), eps)`` (buffers held).

    Example:
        >>> import torch
        >>> Standardize(torch.zeros(1, 3), torch.ones(1, 3))(torch.ones(2, 3))
        tensor([[1., 1., 1.],
                [1., 1., 1.]])
    """

    def __init__(self, mean: torch.Tensor, variance: torch.Tensor, invert: bool = False) -> None:
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("variance", variance)
        self.invert = invert

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        std = torch.clamp(torch.sqrt(self.variance), min=1e-7)  # keras.config.epsilon()
        if self.invert:
            return self.mean + x * std
        return (x - self.mean) / std


class KerasUnitNorm(nn.Module):
    """``keras.layers.UnitNormalization``: ``x * min(rsqrt(sum(x^2, dims)), 1/epsilon)``.

    Example:
        >>> import torch
        >>> KerasUnitNorm([1])(torch.tensor([[3.0, 4.0]]))
        tensor([[0.6000, 0.8000]])
    """

    def __init__(self, dims, epsilon: float = 1e-12) -> None:
        super().__init__()
        self.dims, self.epsilon = list(dims), float(epsilon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        square_sum = x.square().sum(self.dims, keepdim=True)
        return x * torch.clamp(torch.rsqrt(square_sum), max=1.0 / self.epsilon)


class Scale(nn.Module):
    """``x * scale + offset`` with Keras ``Rescaling``'s constants.

    Example:
        >>> import torch
        >>> Scale(1 / 255, -1.0)(torch.tensor([255.0]))
        tensor([0.])
    """

    def __init__(self, scale: float, offset: float) -> None:
        super().__init__()
        self.scale, self.offset = scale, offset

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + self.offset

    def extra_repr(self) -> str:
        return f"scale={self.scale}, offset={self.offset}"


class ScaleShift(nn.Module):
    """``x * scale + offset`` with tensor constants (buffers) shaped to broadcast on ``x``.

    Example:
        >>> import torch
        >>> ScaleShift(torch.tensor([[[2.0]], [[3.0]]]), torch.zeros(1))(torch.ones(1, 2, 1, 1))
        tensor([[[[2.]],
        <BLANKLINE>
                 [[3.]]]])
    """

    def __init__(self, scale: torch.Tensor, offset: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("scale", scale)
        self.register_buffer("offset", offset)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + self.offset


class KerasMultiHeadAttention(nn.Module):
    """``keras.layers.MultiHeadAttention`` / ``GroupQueryAttention`` (attention over axis 1)
    from plain ``nn.Linear``s.

    Submodules ``query``/``key``/``value``/``attention_output`` (and ``gate``) as in Keras;
    any ``key_dim``, ``value_dim`` and ``output_shape`` (``nn.MultiheadAttention`` needs
    ``heads * head_dim == embed_dim``). ``num_kv_heads < num_heads``: grouped-query attention,
    each key/value head serving ``num_heads // num_kv_heads`` consecutive query heads (Keras'
    ``ops.repeat`` on the head axis). Masks: ``attention_mask [B, T, S]`` (1 = attend),
    ``use_causal_mask`` (row ``i`` sees columns ``<= i``, Keras' rule) and ``sliding_window``
    (``|i - j| < window``). Masked scores become ``-1e9``; ``zero_masked`` also zeroes masked
    probabilities afterwards, as Keras' Softmax path does (``dropout > 0``, or attention
    scores returned), so a fully masked row gives zeros instead of Keras'
    ``dot_product_attention``'s uniform row. ``use_gate``: the output is multiplied by
    ``sigmoid(gate(query))`` per head before ``attention_output``. ``dropout``: in
    ``train()`` the probabilities are dropped as Keras' Dropout does (kept with probability
    ``1 - dropout``, scaled by ``1 / (1 - dropout)``, torch's generator) before the value
    product; the scores returned are the undropped ones, as Keras returns.
    ``return_attention_scores=True`` returns ``(output, probabilities [B, heads, T, S])``.

    Example:
        >>> import torch
        >>> mha = KerasMultiHeadAttention(8, 8, 8, num_heads=2, key_dim=4, value_dim=4,
        ...                               output_dim=8)
        >>> mha(torch.randn(1, 3, 8), torch.randn(1, 5, 8)).shape
        torch.Size([1, 3, 8])
    """

    def __init__(self, query_dim: int, key_dim_in: int, value_dim_in: int, num_heads: int,
                 key_dim: int, value_dim: int, output_dim: int, use_bias: bool = True,
                 zero_masked: bool = False, num_kv_heads: int | None = None,
                 sliding_window: int | None = None, use_gate: bool = False,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = float(dropout)
        self.num_heads, self.key_dim, self.value_dim = num_heads, key_dim, value_dim
        self.num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        self.zero_masked, self.sliding_window = zero_masked, sliding_window
        kv = self.num_kv_heads
        self.query = nn.Linear(query_dim, num_heads * key_dim, bias=use_bias)
        self.key = nn.Linear(key_dim_in, kv * key_dim, bias=use_bias)
        self.value = nn.Linear(value_dim_in, kv * value_dim, bias=use_bias)
        self.gate = nn.Linear(query_dim, num_heads * value_dim, bias=use_bias) if use_gate \
            else None
        self.attention_output = nn.Linear(num_heads * value_dim, output_dim, bias=use_bias)

    def _heads(self, x: torch.Tensor, heads: int, dim: int) -> torch.Tensor:
        x = x.reshape(x.shape[0], x.shape[1], heads, dim).transpose(1, 2)
        if heads != self.num_heads:  # head h reads key/value head h // repeats
            x = x.repeat_interleave(self.num_heads // heads, dim=1)
        return x

    def forward(self, query: torch.Tensor, value: torch.Tensor, key: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, use_causal_mask: bool = False,
                return_attention_scores: bool = False):
        key = value if key is None else key
        q = self._heads(self.query(query), self.num_heads, self.key_dim)
        k = self._heads(self.key(key), self.num_kv_heads, self.key_dim)
        v = self._heads(self.value(value), self.num_kv_heads, self.value_dim)
        mask = None if attention_mask is None else attention_mask.bool().unsqueeze(1)
        if use_causal_mask or self.sliding_window is not None:
            rows = torch.arange(q.shape[2], device=q.device).unsqueeze(1)
            cols = torch.arange(k.shape[2], device=q.device)
            if use_causal_mask:
                mask = rows >= cols if mask is None else mask & (rows >= cols)
            if self.sliding_window is not None:
                band = (rows - cols).abs() < self.sliding_window
                mask = band if mask is None else mask & band
        probs = None
        drop = self.training and self.dropout > 0.0
        if mask is None and not return_attention_scores and not drop:
            out = nn.functional.scaled_dot_product_attention(q, k, v, scale=self.key_dim ** -0.5)
        else:  # a fully masked row is uniform (Keras' dot_product_attention) or zero
            scores = (q * self.key_dim ** -0.5) @ k.transpose(-2, -1)
            if mask is not None:
                scores = torch.where(mask, scores, -1.0e9)
            probs = torch.softmax(scores, dim=-1)
            if mask is not None and (self.zero_masked or return_attention_scores):
                probs = torch.where(mask, probs, 0.0)  # Keras' Softmax-layer path
            # Keras drops the probabilities in training but returns them undropped
            out = (keras_dropout(probs, self.dropout) if drop else probs) @ v
        out = out.transpose(1, 2)
        if self.gate is not None:
            gate = torch.sigmoid(self.gate(query))
            out = out * gate.reshape(*gate.shape[:2], self.num_heads, self.value_dim)
        out = self.attention_output(out.reshape(query.shape[0], query.shape[1], -1))
        return (out, probs) if return_attention_scores else out


class ChannelScale(nn.Module):
    """``x * gamma`` with a learned ``gamma`` laid out to broadcast on the held tensor.

    ``keras.applications``' ``LayerScale`` (ConvNeXt) scales Keras' last axis; on an NCHW
    tensor ``gamma`` is held as ``[C, 1, 1]``.

    Example:
        >>> import torch
        >>> ChannelScale(torch.full((3, 1, 1), 2.0))(torch.ones(1, 3, 2, 2)).sum()
        tensor(24., grad_fn=<SumBackward0>)
    """

    def __init__(self, gamma: torch.Tensor) -> None:
        super().__init__()
        self.gamma = nn.Parameter(gamma)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class KerasAttention(nn.Module):
    """``keras.layers.Attention`` (Luong dot or Bahdanau concat scores), masks included.

    Scores ``q @ k^T`` (times the learned ``scale`` if ``use_scale``) or, ``concat``,
    ``concat_score_weight * sum(tanh(scale * (q_i + k_j)))``; masked scores lose ``1e9``
    (Keras' rule, not ``-inf``); the output rows of masked queries are zero.
    ``return_attention_scores=True`` also returns the softmax weights ``[B, Tq, Tv]``.
    ``dropout``: in ``train()`` the weights are dropped as Keras' ``random.dropout`` does
    (torch's generator) before the value product, and returned dropped, as Keras does.

    Example:
        >>> import torch
        >>> KerasAttention(use_scale=True)(torch.randn(2, 3, 4), torch.randn(2, 5, 4)).shape
        torch.Size([2, 3, 4])
    """

    def __init__(self, use_scale: bool = False, score_mode: str = "dot",
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = float(dropout)
        self.score_mode = score_mode
        self.scale = nn.Parameter(torch.ones(())) if use_scale else None
        self.concat_score_weight = nn.Parameter(torch.ones(())) if score_mode == "concat" \
            else None

    def _scores(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        if self.score_mode == "dot":
            scores = query @ key.transpose(-2, -1)
            return scores if self.scale is None else scores * self.scale
        pairs = query.unsqueeze(-2) + key.unsqueeze(-3)
        if self.scale is not None:
            pairs = self.scale * pairs
        return self.concat_score_weight * torch.tanh(pairs).sum(-1)

    def forward(self, query: torch.Tensor, value: torch.Tensor, key: torch.Tensor | None = None,
                query_mask: torch.Tensor | None = None, value_mask: torch.Tensor | None = None,
                use_causal_mask: bool = False, return_attention_scores: bool = False):
        scores = self._scores(query, value if key is None else key)
        mask = None if value_mask is None else value_mask.bool().unsqueeze(-2)
        if use_causal_mask:
            causal = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).tril()
            mask = causal if mask is None else mask & causal
        if mask is not None:
            scores = torch.where(mask, scores, scores - 1.0e9)
        weights = torch.softmax(scores, dim=-1)
        if self.training and self.dropout > 0.0:  # Keras returns the dropped weights too
            weights = keras_dropout(weights, self.dropout)
        out = weights @ value
        if query_mask is not None:  # (the weights Keras returns keep masked query rows)
            out = torch.where(query_mask.bool().unsqueeze(-1), out, 0.0)
        return (out, weights) if return_attention_scores else out


class KerasAdditiveAttention(KerasAttention):
    """``keras.layers.AdditiveAttention``: scores ``sum(scale * tanh(q_i + k_j))`` with a
    learned ``scale`` vector (``use_scale``, one entry per feature; else 1); masks, causal
    mask and the softmax as ``KerasAttention``.

    Example:
        >>> import torch
        >>> KerasAdditiveAttention(4)(torch.randn(2, 3, 4), torch.randn(2, 5, 4)).shape
        torch.Size([2, 3, 4])
    """

    def __init__(self, dim: int, use_scale: bool = True, dropout: float = 0.0) -> None:
        super().__init__(False, "additive", dropout)
        self.scale = nn.Parameter(torch.ones(dim)) if use_scale else None

    def _scores(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        pairs = torch.tanh(query.unsqueeze(-2) + key.unsqueeze(-3))
        return (pairs if self.scale is None else self.scale * pairs).sum(-1)


class Einsum(nn.Module):
    """``keras.layers.EinsumDense``: ``einsum(equation, x, kernel) (+ bias)``, the kernel
    (and bias, shaped to broadcast from the right as Keras holds it) as parameters.

    Example:
        >>> import torch
        >>> Einsum("abc,cd->abd", torch.ones(4, 2), torch.zeros(2))(torch.ones(1, 3, 4)).shape
        torch.Size([1, 3, 2])
    """

    def __init__(self, equation: str, kernel: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.equation = equation
        self.kernel = nn.Parameter(kernel)
        self.bias = None if bias is None else nn.Parameter(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.einsum(self.equation, x, self.kernel)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"{self.equation!r}, kernel={tuple(self.kernel.shape)}"
