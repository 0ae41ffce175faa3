"""Make randomly initialised models *live* before a parity check (see docs/parity.md).

Plain random init hides converter bugs: zero-initialised norm gains and layer scales
switch whole residual branches off, zero heads make the output ignore the input, and
un-calibrated BatchNorm statistics push activations to 1e-20 or 1e15 after a few dozen
layers. :func:`make_live` fixes the weights so every branch contributes and activations
stay O(1); :func:`check_live` asserts the result actually is.
"""

from __future__ import annotations

import torch
from torch.utils import _pytree as pytree

from crossport.capture.borrow import borrowed
from crossport.errors import CrossportError

# Parameter names that hold a multiplicative gain: re-initialised to 1, not to noise.
_GAIN_WORDS = ("gamma", "layer_scale", "layerscale", "ls1", "ls2", "scale", "gain",
               "skipinit", "alpha")
_INIT_STD = 0.02
# A tensor this small everywhere is as dead as a zero one (ConvNeXt's layer scale is 1e-6).
_DEAD_ABS = 1e-5
_LIVE_RANGE = (1e-3, 1e4)
# max|w| * sqrt(fan_in) below this: a scaled-down weight (usual inits give 0.5-3).
_SCALED_DOWN = 1e-2
# A norm layer's gain (usual init 1) whose largest entry is below this: scaled down.
_SCALED_DOWN_NORM_GAIN = 0.1


class DeadModelError(CrossportError):
    """The module's output is not O(1) or does not depend on its input."""


def _is_gain(module: torch.nn.Module, name: str) -> bool:
    leaf = name.rsplit(".", 1)[-1].lower()
    if "norm" in type(module).__name__.lower():  # BatchNorm2d, LayerNorm, GroupNorm, RMSNorm...
        return leaf == "weight"
    return any(word in leaf for word in _GAIN_WORDS)


def _is_plain_bias(name: str) -> bool:
    """``bias``/``*_bias`` (additive, zero is a fine value); not relative-position tables."""
    leaf = name.rsplit(".", 1)[-1].lower()
    return (leaf == "bias" or leaf.endswith("_bias")) and "relative_position" not in leaf


def _is_dead(param: torch.Tensor) -> bool:
    return float(param.detach().abs().max()) <= _DEAD_ABS


def _is_scaled_down(module: torch.nn.Module, name: str, param: torch.Tensor) -> bool:
    """A weight matrix far below any usual init for its fan-in: a head initialised with a
    1e-3 scale (timm's BEiT/EVA ``head_init_scale``) makes the logits ~1e-4, where the
    check's ``max|d| / max(1, max|ref|)`` cannot see a 20% error. Likewise a norm layer's
    gain drawn like a weight (HF EfficientNet's BatchNorm, N(0, 0.02)): each block then
    shrinks activations ~1e-4-fold, to 1e-34 at the output."""
    if _is_gain(module, name):
        return ("norm" in type(module).__name__.lower()
                and float(param.detach().abs().max()) < _SCALED_DOWN_NORM_GAIN)
    if param.ndim < 2:
        return False
    fan_in = param[0].numel()
    return float(param.detach().abs().max()) * fan_in ** 0.5 < _SCALED_DOWN


def _reinit_zero_weights(module: torch.nn.Module, gen: torch.Generator) -> None:
    for mod_name, mod in module.named_modules():
        for name, param in mod.named_parameters(recurse=False):
            if (param.numel() == 0 or not param.is_floating_point()
                    or not (_is_dead(param) or _is_scaled_down(mod, name, param))):
                continue
            full = f"{mod_name}.{name}" if mod_name else name
            if _is_plain_bias(name) and "relative_position" not in full.lower():
                continue
            with torch.no_grad():
                if _is_gain(mod, name):
                    param.fill_(1.0)
                else:
                    noise = torch.randn(param.shape, generator=gen, dtype=torch.float64)
                    param.copy_((noise * _INIT_STD).to(param.dtype))


def _random_like(example_args: tuple, gen: torch.Generator, min_batch: int = 1,
                 integers: bool = False) -> tuple:
    """Standard normal floats shaped like ``example_args`` (batch dim at least ``min_batch``);
    with ``integers``, integer inputs (token ids) are redrawn within the example's range."""
    out = []
    for t in example_args:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            shape = (max(t.shape[0], min_batch),) + tuple(t.shape[1:]) if t.ndim else t.shape
            out.append(torch.randn(shape, generator=gen, dtype=t.dtype))
        elif integers and isinstance(t, torch.Tensor) and t.dtype != torch.bool and t.numel():
            low, high = int(t.min()), int(t.max())
            out.append(torch.randint(low, high + 1, t.shape, generator=gen, dtype=t.dtype))
        else:
            out.append(t)
    return tuple(out)


def _calibrate_batch_norm(module, example_args: tuple, batches: int,
                          gen: torch.Generator) -> None:
    norms = [m for m in module.modules()  # BatchNorm*d, SyncBatchNorm, tracking InstanceNorm
             if getattr(m, "track_running_stats", False) and hasattr(m, "reset_running_stats")]
    if not norms or batches <= 0:
        return
    # train-mode BN after global pooling needs more than one value per channel: batch >= 2,
    # unless a non-float input (token ids, masks) fixes the batch size
    tensors = [a for a in example_args if isinstance(a, torch.Tensor)]
    min_batch = 2 if all(a.is_floating_point() for a in tensors) else 1
    saved = {m: m.momentum for m in norms}
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative moving average over the calibration batches
    module.train()
    try:
        with torch.no_grad():
            for _ in range(batches):
                module(*_random_like(example_args, gen, min_batch=min_batch))
    finally:
        for m, momentum in saved.items():
            m.momentum = momentum


def make_live(module: torch.nn.Module, example_args, calibration_batches: int = 4,
              seed: int = 0) -> torch.nn.Module:
    """Re-initialise dead weights and calibrate BatchNorm so a random model is testable.

    Follows docs/parity.md ("random weights hide bugs"): weight tensors that are all zero
    (or all below 1e-5 in magnitude, like ConvNeXt's 1e-6 layer scales), and weight
    matrices scaled far below their fan-in's usual init (a classifier head initialised
    with a 1e-3 scale) are re-initialised:
    norm gains and layer scales to 1, everything else to a small normal (std 0.02);
    ordinary biases stay zero, relative-position bias tables do not. Then BatchNorm
    running statistics are recomputed as a cumulative average over
    ``calibration_batches`` random batches in train mode. The module is modified in place
    and returned in eval mode.

    Args:
        module: the model (random or pretrained weights).
        example_args: a tensor or tuple of tensors shaped like ``forward``'s inputs; float
            inputs are replaced by standard normal batches, other inputs are reused as is.
        calibration_batches: how many random batches to run for the BatchNorm statistics.
        seed: seed of the re-initialisation and of the calibration batches.

    Returns:
        ``module`` itself, in eval mode.

    Example:
        >>> import torch
        >>> from crossport.parity.live import check_live, make_live
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8))
        >>> torch.nn.init.zeros_(net[1].weight)  # a zero-init residual gain: dead output
        Parameter containing:
        tensor([0., 0., 0., 0., 0., 0., 0., 0.], requires_grad=True)
        >>> x = torch.randn(1, 3, 16, 16)
        >>> net = make_live(net, (x,))
        >>> bool((net[1].weight == 1).all()), net.training
        (True, False)
        >>> check_live(net, (x,))
    """
    args = example_args if isinstance(example_args, (tuple, list)) else (example_args,)
    gen = torch.Generator().manual_seed(seed)
    _reinit_zero_weights(module, gen)
    _calibrate_batch_norm(module, tuple(args), calibration_batches, gen)
    return module.eval()


def _float_leaves(out) -> list[torch.Tensor]:
    return [t.detach().double() for t in pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor) and t.is_floating_point()]


def check_live(module: torch.nn.Module, example_args, seed: int = 1) -> None:
    """Raise ``DeadModelError`` unless the module's output is O(1) and input-dependent.

    Every float output must have ``max|y|`` in [1e-3, 1e4], be finite, and change when
    the inputs are replaced by other random values (integer ones within the example's
    range, so a text model's token ids change too).

    Args:
        module: the model, in eval mode.
        example_args: a tensor or tuple of tensors in ``forward``'s argument order.
        seed: seed of the second, different input.

    Raises:
        DeadModelError: an output is tiny, huge, not finite or ignores the input.

    Example:
        >>> import torch
        >>> from crossport.parity.live import check_live
        >>> check_live(torch.nn.Linear(4, 3).eval(), (torch.randn(2, 4),))
    """
    args = tuple(example_args) if isinstance(example_args, (tuple, list)) else (example_args,)
    other = _random_like(args, torch.Generator().manual_seed(seed), integers=True)
    with torch.no_grad(), borrowed(module):  # whatever forward writes on self is undone
        first, second = _float_leaves(module(*args)), _float_leaves(module(*other))
    if not first:
        raise DeadModelError(f"{type(module).__name__} returns no float tensor to check")
    low, high = _LIVE_RANGE
    for i, (a, b) in enumerate(zip(first, second)):
        if not torch.isfinite(a).all():
            raise DeadModelError(f"output {i} of {type(module).__name__} is not finite")
        peak = float(a.abs().max()) if a.numel() else 0.0
        if not low <= peak <= high:
            raise DeadModelError(
                f"output {i} of {type(module).__name__} has max|y| = {peak:.3g}, outside "
                f"[{low:g}, {high:g}]: call make_live(module, example_args) first")
        change = float((a - b).abs().max()) / max(peak, 1e-30)
        if change < 1e-6:
            raise DeadModelError(
                f"output {i} of {type(module).__name__} does not change with the input "
                f"(relative change {change:.1e}): a dead branch or constant head")
