"""Pitfall rules: why a torch module and its Keras twin compute different things.

Each rule looks at one aligned pair (the torch module's attributes, the Keras layer's config
and weights, the shapes seen at run time) and returns a :class:`Pitfall` naming the known
difference (``docs/pitfalls.md``) and the fix, or ``None``. :func:`diagnose_pair` runs them
all. Rules read configuration; the two activation rules also probe the Keras layer on a
fixed ramp, since an ``Activation(lambda ...)`` hides its arguments.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from crossport.weights import (
    conv_transpose_weight_to_keras,
    conv_weight_to_keras,
    dense_weight_to_keras,
    depthwise_weight_to_keras,
    flat_feature_order,
)


@dataclass
class Pitfall:
    """A named, known difference between the torch module and the Keras layer.

    ``affects_inference`` is False for findings that only matter when training (momentum).
    """

    name: str
    message: str
    fix: str
    affects_inference: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class PairContext:
    """What a rule sees: the pair, and the shapes (torch layout) observed when running it."""

    module: torch.nn.Module
    layer: Any
    torch_in_shape: tuple[int, ...] | None = None
    torch_out_shape: tuple[int, ...] | None = None
    keras_out_shape: tuple[int, ...] | None = None
    keras_flat_block: tuple[int, ...] | None = None  # torch (C, H, W) of a Keras Flatten feeding


def _cfg(layer: Any) -> dict:
    try:
        return layer.get_config()
    except (NotImplementedError, TypeError, AttributeError):
        return {}


def _kname(layer: Any) -> str:
    return type(layer).__name__


def _tname(module: Any) -> str:
    return type(module).__name__


def _tuple(v: Any, n: int) -> tuple[int, ...]:
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


def _keras_weights(layer: Any) -> dict[str, np.ndarray]:
    return {w.name.split("/")[-1].split(":")[0]: np.asarray(w.numpy()) for w in layer.weights}


# --- normalisation -------------------------------------------------------------------------

def rule_norm_eps(ctx: PairContext) -> Pitfall | None:
    """BatchNorm / LayerNorm / GroupNorm eps: torch 1e-5, Keras 1e-3 (pitfalls 3, 5, 14)."""
    teps = getattr(ctx.module, "eps", None)
    cfg = _cfg(ctx.layer)
    keps = cfg.get("epsilon", cfg.get("eps"))
    if teps is None or keps is None or math.isclose(teps, keps, rel_tol=1e-6):
        return None
    arg = "epsilon" if "epsilon" in cfg else "eps"
    return Pitfall(
        "norm-eps",
        f"{_tname(ctx.module)} eps is {teps:g} in torch but {_kname(ctx.layer)} uses "
        f"{arg}={keps:g} (the Keras default is 1e-3)",
        f"{_kname(ctx.layer)}({arg}={teps:g}, ...)")


def rule_bn_momentum(ctx: PairContext) -> Pitfall | None:
    """BN momentum is mirrored: Keras momentum = 1 - torch momentum (training only)."""
    if not _tname(ctx.module).startswith("BatchNorm"):
        return None
    tm, km = ctx.module.momentum, _cfg(ctx.layer).get("momentum")
    if tm is None or km is None or math.isclose(km, 1.0 - tm, abs_tol=1e-9):
        return None
    return Pitfall(
        "bn-momentum",
        f"torch momentum {tm:g} weights the NEW batch statistic; Keras momentum {km:g} weights "
        f"the OLD running value, so the Keras equivalent is {1 - tm:g} (only training differs)",
        f"BatchNormalization(momentum={1 - tm:g}, ...)", affects_inference=False)


def _layer_axes(cfg: dict, rank: int) -> list[int]:
    axis = cfg.get("axis", -1)
    axes = axis if isinstance(axis, (list, tuple)) else [axis]
    return sorted(a % rank for a in axes)


def rule_layernorm_axes(ctx: PairContext) -> Pitfall | None:
    """torch LayerNorm(shape) normalises the last len(shape) torch dims (pitfall 3)."""
    if _tname(ctx.module) != "LayerNorm" or _kname(ctx.layer) != "LayerNormalization":
        return None
    m = len(ctx.module.normalized_shape)
    rank = len(ctx.keras_out_shape or ctx.torch_out_shape or ())
    axes = _layer_axes(_cfg(ctx.layer), rank) if rank else []
    if len(axes) == m:
        return None
    eps = ctx.module.eps
    want = list(range(rank - m, rank))
    return Pitfall(
        "layernorm-axes",
        f"torch LayerNorm{tuple(ctx.module.normalized_shape)} normalises (and scales "
        f"elementwise) over the last {m} torch dims, Keras LayerNormalization normalises over "
        f"axis {axes} only",
        f"LayerNormalization(axis={want}, epsilon={eps:g}) (gamma/beta then have the "
        f"channels-last shape; transfer_weights permutes them), or "
        f"crossport.layers.LayerNorm({list(ctx.module.normalized_shape)}, "
        f"data_format='channels_last')")


def rule_contrib_affine(ctx: PairContext) -> Pitfall | None:
    """tf.contrib layer_norm = normalise over C,H,W with a per-channel affine (pitfall 3)."""
    t, k = _tname(ctx.module), _kname(ctx.layer)
    groups = _cfg(ctx.layer).get("groups")
    if t == "LayerNorm" and len(ctx.module.normalized_shape) > 1 and k == "GroupNormalization" \
            and groups == 1:
        return Pitfall(
            "contrib-affine",
            "Keras GroupNormalization(groups=1) is tf.contrib-style layer norm: its gamma/beta "
            f"are per channel, torch LayerNorm{tuple(ctx.module.normalized_shape)} has an "
            "elementwise affine over all normalised dims",
            "LayerNormalization(axis=[1, 2, 3], epsilon=1e-5), or on the torch side "
            "GroupNorm(1, C) if the checkpoint really is tf.contrib layer_norm")
    if t == "GroupNorm" and ctx.module.num_groups == 1 and k == "LayerNormalization":
        rank = len(ctx.keras_out_shape or ())
        if rank and len(_layer_axes(_cfg(ctx.layer), rank)) > 1:
            return Pitfall(
                "contrib-affine",
                "torch GroupNorm(1, C) (tf.contrib layer_norm) has a per-channel affine; Keras "
                "LayerNormalization over several axes has an elementwise one",
                "GroupNormalization(groups=1, epsilon=1e-5) "
                "(or crossport.torch_layers.TFContribLayerNorm on the torch side)")
    return None


def rule_group_count(ctx: PairContext) -> Pitfall | None:
    if _tname(ctx.module) != "GroupNorm":
        return None
    groups = _cfg(ctx.layer).get("groups", _cfg(ctx.layer).get("num_groups"))
    if groups is None or groups == ctx.module.num_groups:
        return None
    return Pitfall("groupnorm-groups", f"torch GroupNorm has {ctx.module.num_groups} groups, "
                   f"the Keras layer {groups}", f"groups={ctx.module.num_groups}")


# --- padding, pooling, resizing ------------------------------------------------------------

def tf_same_pads(size: int, k: int, s: int, d: int = 1) -> tuple[int, int]:
    """TF 'SAME' (before, after) padding of one spatial dim (pitfall 4)."""
    total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


def rule_same_padding(ctx: PairContext) -> Pitfall | None:
    """TF 'same' pads the odd extra at the end; torch pads symmetrically (pitfall 4)."""
    cfg = _cfg(ctx.layer)
    if cfg.get("padding") != "same" or not hasattr(ctx.module, "padding") \
            or ctx.torch_in_shape is None or isinstance(ctx.module.padding, str):
        return None
    if _tname(ctx.module).startswith(("ConvTranspose", "Adaptive")):
        return None
    spatial = ctx.torch_in_shape[2:]
    n = len(spatial)
    k = _tuple(getattr(ctx.module, "kernel_size", 1), n)
    s = _tuple(getattr(ctx.module, "stride", 1) or k, n)
    d = _tuple(getattr(ctx.module, "dilation", 1), n)
    p = _tuple(ctx.module.padding, n)
    tf_pads = [tf_same_pads(spatial[i], k[i], s[i], d[i]) for i in range(n)]
    torch_pads = [(p[i], p[i]) for i in range(n)]
    if tf_pads == torch_pads:
        return None
    return Pitfall(
        "same-padding",
        f"Keras padding='same' pads (before, after) = {tf_pads} here (TF puts the odd extra "
        f"at the end), torch pads symmetrically {torch_pads} (kernel {k}, stride {s}, "
        f"input {tuple(spatial)})",
        f"ZeroPadding{n}D({tuple(torch_pads)}) followed by {_kname(ctx.layer)}(..., "
        f"padding='valid')")


def rule_global_pool_keepdims(ctx: PairContext) -> Pitfall | None:
    """AdaptiveAvgPool2d(1) keeps [N, C, 1, 1]; GlobalAveragePooling2D drops it (pitfall 2)."""
    if not _tname(ctx.module).startswith("Adaptive") or not _kname(ctx.layer).startswith("Global"):
        return None
    out = ctx.torch_out_shape
    if out is None or _cfg(ctx.layer).get("keepdims", False) or len(out) <= 2:
        return None
    return Pitfall(
        "global-pool-keepdims",
        f"torch {_tname(ctx.module)} keeps the spatial dims (output {tuple(out)}), "
        f"{_kname(ctx.layer)}() drops them (output {ctx.keras_out_shape})",
        f"{_kname(ctx.layer)}(keepdims=True)")


def rule_count_include_pad(ctx: PairContext) -> Pitfall | None:
    """Torch averages padded zeros (count_include_pad=True); Keras 'same' does not (item 11)."""
    if not _tname(ctx.module).startswith("AvgPool") or "AveragePooling" not in _kname(ctx.layer):
        return None
    pads = _tuple(ctx.module.padding, 1)
    if not any(pads) or not ctx.module.count_include_pad:
        return None
    return Pitfall(
        "count-include-pad",
        f"torch AvgPool(padding={ctx.module.padding}) divides by the full window including "
        f"the padded zeros (count_include_pad=True); Keras averages only valid elements",
        f"crossport.layers.{_tname(ctx.module)}(kernel_size, stride, padding="
        f"{ctx.module.padding}, count_include_pad=True, data_format='channels_last')")


def rule_ceil_mode(ctx: PairContext) -> Pitfall | None:
    """ceil_mode=True adds a partial window at the end (pitfall 11)."""
    if not getattr(ctx.module, "ceil_mode", False) or "Pooling" not in _kname(ctx.layer):
        return None
    return Pitfall(
        "ceil-mode",
        f"torch {_tname(ctx.module)}(ceil_mode=True) adds a partial window at the end; Keras "
        f"{_kname(ctx.layer)} has no ceil mode (output {ctx.keras_out_shape} vs torch "
        f"{ctx.torch_out_shape})",
        f"crossport.layers.{_tname(ctx.module)}(..., ceil_mode=True, "
        f"data_format='channels_last')")


def rule_resize(ctx: PairContext) -> Pitfall | None:
    """Nearest index rule and align_corners differ between torch and TF (pitfall 12)."""
    mode = getattr(ctx.module, "mode", None)
    if mode is None or _kname(ctx.layer) not in ("UpSampling2D", "Resizing", "UpSampling1D"):
        return None
    cfg = _cfg(ctx.layer)
    kmode = cfg.get("interpolation", "nearest")
    if mode in ("bilinear", "linear", "bicubic") and getattr(ctx.module, "align_corners", False):
        return Pitfall(
            "align-corners",
            f"torch {mode} with align_corners=True maps the corner pixels onto each other; "
            f"Keras {_kname(ctx.layer)}({kmode}) uses half-pixel centres",
            "crossport.torch_layers / convert with crossport.convert (exact resize layer), "
            "or tf.compat.v1.image.resize(..., align_corners=True)")
    ratios = []
    if ctx.torch_in_shape and ctx.torch_out_shape:
        ratios = [o / i for i, o in zip(ctx.torch_in_shape[2:], ctx.torch_out_shape[2:])]
    if mode == "nearest" and (kmode != "nearest" or any(r != int(r) for r in ratios)):
        return Pitfall(
            "nearest-index",
            f"torch nearest picks floor(i*in/out); Keras {kmode} uses half-pixel centres and "
            f"rounding, which differ for non-integer scales (ratios {ratios})",
            "use an integer scale with UpSampling2D(interpolation='nearest'), or "
            "crossport.convert for an exact resize")
    if mode in ("nearest", "bilinear", "bicubic") and mode != kmode:
        return Pitfall("resize-mode", f"torch mode {mode!r}, Keras interpolation {kmode!r}",
                       f"interpolation={mode!r}")
    return None


# --- activations (probed) ------------------------------------------------------------------

_RAMP = np.linspace(-6.0, 6.0, 241, dtype=np.float32)


def _probe(layer: Any) -> np.ndarray | None:
    try:
        return np.asarray(layer(_RAMP[None, :], training=False))[0]
    except Exception:  # a layer that cannot take a 2-D ramp: no probe
        return None


def rule_gelu(ctx: PairContext) -> Pitfall | None:
    """GELU approximation: torch 'none'|'tanh', Keras approximate=False|True (pitfall 14)."""
    if _tname(ctx.module) != "GELU":
        return None
    got = _probe(ctx.layer)
    if got is None:
        return None
    x = torch.from_numpy(_RAMP)
    exact = torch.nn.functional.gelu(x).numpy()
    tanh = torch.nn.functional.gelu(x, approximate="tanh").numpy()
    keras_tanh = np.abs(got - tanh).max() < np.abs(got - exact).max()
    torch_tanh = ctx.module.approximate == "tanh"
    if keras_tanh == torch_tanh:
        return None
    return Pitfall(
        "gelu-approximation",
        f"torch GELU(approximate={ctx.module.approximate!r}) but the Keras layer computes the "
        f"{'tanh approximation' if keras_tanh else 'exact erf form'}",
        f"keras.activations.gelu(x, approximate={torch_tanh})")


def rule_leaky_slope(ctx: PairContext) -> Pitfall | None:
    """LeakyReLU negative slope: torch 0.01, Keras 0.3 by default."""
    if _tname(ctx.module) != "LeakyReLU":
        return None
    got = _probe(ctx.layer)
    if got is None:
        return None
    slope = float(got[0] / _RAMP[0])
    if math.isclose(slope, ctx.module.negative_slope, rel_tol=1e-4, abs_tol=1e-7):
        return None
    return Pitfall(
        "leaky-relu-slope",
        f"torch LeakyReLU negative_slope={ctx.module.negative_slope:g}, the Keras layer "
        f"{slope:g} (Keras' default is 0.3)",
        f"LeakyReLU(negative_slope={ctx.module.negative_slope:g})")


# --- transposed convolution ----------------------------------------------------------------

def rule_conv_transpose(ctx: PairContext) -> Pitfall | None:
    """Torch crops `padding` from both ends and adds output_padding at the end (pitfall 6)."""
    if not _tname(ctx.module).startswith("ConvTranspose") or "Transpose" not in _kname(ctx.layer):
        return None
    if _kname(ctx.layer).startswith("ConvTranspose"):  # crossport's exact layer
        return None
    p, op = ctx.module.padding, ctx.module.output_padding
    if not any(_tuple(p, 1)) and not any(_tuple(op, 1)) and _cfg(ctx.layer).get(
            "padding") == "valid" and not _cfg(ctx.layer).get("output_padding"):
        return None
    if ctx.torch_out_shape == ctx.keras_out_shape and not any(_tuple(p, 1)):
        return None
    return Pitfall(
        "conv-transpose-crop",
        f"torch ConvTranspose(padding={p}, output_padding={op}) crops {p} from both ends of "
        f"the full result and adds output_padding at the end; Keras "
        f"{_kname(ctx.layer)}(padding={_cfg(ctx.layer).get('padding')!r}) crops differently",
        f"crossport.layers.{_tname(ctx.module)}.from_torch(module, "
        f"data_format='channels_last'), or {_kname(ctx.layer)}(padding='valid') followed by "
        f"a Cropping layer removing {p} before and {p} - output_padding after")


# --- weights -------------------------------------------------------------------------------

def _expected_kernel(module: Any, layer: Any) -> tuple[np.ndarray, str] | None:
    t, k = _tname(module), _kname(layer)
    w = module.weight.detach().cpu().numpy()
    if t.startswith("ConvTranspose"):
        return conv_transpose_weight_to_keras(w), "conv_transpose_weight_to_keras"
    if t.startswith("Conv") and k.startswith("Depthwise"):
        return depthwise_weight_to_keras(w, module.in_channels), "depthwise_weight_to_keras"
    if t.startswith("Conv"):
        return conv_weight_to_keras(w), "conv_weight_to_keras"
    if t == "Linear":
        return dense_weight_to_keras(w), "dense_weight_to_keras"
    return None


def rule_weight_layout(ctx: PairContext) -> Pitfall | None:
    """Kernel copied with a wrong transpose, or not copied at all (pitfall 10)."""
    if getattr(ctx.module, "weight", None) is None or not hasattr(ctx.layer, "weights"):
        return None
    kw = _keras_weights(ctx.layer)
    kernel = kw.get("kernel", kw.get("depthwise_kernel"))
    expected = _expected_kernel(ctx.module, ctx.layer) if kernel is not None else None
    if expected is None:
        return None
    want, rule = expected
    if _tname(ctx.module) == "Linear" and ctx.keras_flat_block is not None:
        order = flat_feature_order(ctx.keras_flat_block,
                                   (*range(1, len(ctx.keras_flat_block)), 0))
        if kernel.shape == want.shape and np.array_equal(kernel, want) and \
                not np.array_equal(order, np.arange(order.size)):
            return Pitfall(
                "flatten-order",
                f"the Dense kernel rows are in torch's C-major flatten order, but the Keras "
                f"Flatten of the channels-last block {ctx.keras_flat_block} (torch C,H,W) "
                f"yields features in H,W,C order",
                "permute the kernel rows: kernel = dense_weight_to_keras(W)[flat_feature_order("
                "(C, H, W), (1, 2, 0))] (crossport.transfer_weights does this)")
        want = want[order] if want.shape[0] == order.size else want
    if kernel.shape == want.shape and np.array_equal(kernel, want):
        return None
    w = ctx.module.weight.detach().cpu().numpy()
    for perm in itertools.permutations(range(w.ndim)):
        cand = np.transpose(w, perm)
        if cand.shape == kernel.shape and np.array_equal(cand, kernel):
            return Pitfall(
                "weight-layout",
                f"the Keras kernel {kernel.shape} is the torch weight {w.shape} transposed with "
                f"axes {perm}, not the layout {_kname(ctx.layer)} expects",
                f"kernel = crossport.weights.{rule}(weight) (or crossport.transfer_weights)")
    if kernel.shape == want.shape and _spatially_flipped(kernel, want):
        return Pitfall("weight-layout", "the Keras kernel is the expected one flipped spatially",
                       f"kernel = crossport.weights.{rule}(weight), without flipping")
    return Pitfall(
        "weights-differ",
        f"the Keras kernel {kernel.shape} is not the torch weight {w.shape} in any layout: "
        f"weights were not copied (or belong to another layer)",
        "crossport.transfer_weights(torch_module, keras_model)")


def _spatially_flipped(kernel: np.ndarray, want: np.ndarray) -> bool:
    axes = tuple(range(kernel.ndim - 2))
    return bool(axes) and np.array_equal(np.flip(kernel, axes), want)


def rule_bn_stats(ctx: PairContext) -> Pitfall | None:
    """Running statistics not copied into moving_mean / moving_variance."""
    if not _tname(ctx.module).startswith("BatchNorm") or ctx.module.running_mean is None:
        return None
    kw = _keras_weights(ctx.layer)
    pairs = [("moving_mean", "running_mean"), ("moving_variance", "running_var"),
             ("gamma", "weight"), ("beta", "bias")]
    bad = [k for k, t in pairs if k in kw and getattr(ctx.module, t) is not None and not
           np.array_equal(kw[k], getattr(ctx.module, t).detach().cpu().numpy())]
    if not bad:
        return None
    return Pitfall("bn-weights-differ", f"BatchNormalization {', '.join(bad)} differ from torch "
                   f"(running statistics / affine not copied)",
                   "crossport.transfer_weights(torch_module, keras_model)")


RULES: list[Callable[[PairContext], Pitfall | None]] = [
    rule_norm_eps, rule_layernorm_axes, rule_contrib_affine, rule_group_count, rule_same_padding,
    rule_global_pool_keepdims, rule_count_include_pad, rule_ceil_mode, rule_resize, rule_gelu,
    rule_leaky_slope, rule_conv_transpose, rule_weight_layout, rule_bn_stats, rule_bn_momentum,
]


def diagnose_pair(ctx: PairContext, rules: Sequence[Callable] = RULES) -> list[Pitfall]:
    """All pitfalls the rules find for one aligned pair (inference-affecting ones first)."""
    found = [p for p in (rule(ctx) for rule in rules) if p is not None]
    return sorted(found, key=lambda p: not p.affects_inference)
