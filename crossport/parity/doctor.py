"""The parity doctor: run a torch module and a Keras model side by side, layer by layer.

``check(torch_module, keras_model, inputs)`` works for any pair: a model crossport converted
or a Keras twin written by hand. Torch per-layer outputs come from forward hooks on the leaf
modules (float32 and a float64 copy), Keras ones from a multi-output functional model over
the layers' outputs (Sequential models are run layer by layer). Layers are paired by an
explicit mapping, by name, then by execution order, family and shape (``parity/align.py``);
each pair gets its error, error growth and a rounding/semantic verdict, and the first
semantic divergence gets a diagnosis (``parity/diagnose.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import keras
import numpy as np
import torch

from crossport.capture.borrow import borrowed
from crossport.errors import InputError
from crossport.parity.align import Side, align, keras_family, torch_family
from crossport.parity.compare import keras_feed
from crossport.parity.diagnose import PairContext, Pitfall, diagnose_pair
from crossport.parity.metrics import normalized_error, rounding_verdict
from crossport.weights import flat_feature_order

DISTRIBUTIONS: dict[str, str] = {
    "given": "the inputs passed to check()",
    "normal": "standard normal",
    "uniform_large": "uniform in [-100, 100]",
    "near_zero": "normal * 1e-3",
}


def make_inputs(example: Sequence[torch.Tensor], distribution: str, seed: int = 0) -> tuple:
    """Inputs shaped like ``example`` drawn from one of :data:`DISTRIBUTIONS`."""
    if distribution == "given":
        return tuple(example)
    if distribution not in DISTRIBUTIONS:
        raise InputError(f"unknown input distribution {distribution!r}; "
                         f"supported: {', '.join(DISTRIBUTIONS)}")
    gen = torch.Generator().manual_seed(seed)
    out = []
    for t in example:
        if not t.dtype.is_floating_point:
            out.append(t)  # indices and masks: the given ones
        elif distribution == "normal":
            out.append(torch.randn(t.shape, generator=gen, dtype=t.dtype))
        elif distribution == "uniform_large":
            out.append((torch.rand(t.shape, generator=gen, dtype=t.dtype) * 2 - 1) * 100)
        else:
            out.append(torch.randn(t.shape, generator=gen, dtype=t.dtype) * 1e-3)
    return tuple(out)


@dataclass
class LayerRow:
    """One aligned pair and how far apart the two sides are (worst over the inputs)."""

    index: int
    torch_name: str
    torch_type: str
    keras_name: str
    keras_type: str
    matched_by: str            # mapping | name | order
    torch_shape: tuple
    keras_shape: tuple
    layout: str                # same | channels_last | flat_channels_last | squeezed | mismatch
    max_abs: float
    error: float               # normalized, Keras vs torch fp32
    keras_vs_fp64: float
    torch_vs_fp64: float
    verdict: str               # rounding | semantic
    worst_input: str
    growth: float | None = None
    exceeds: bool = False
    pitfalls: list[Pitfall] = field(default_factory=list)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["pitfalls"] = [p.to_dict() for p in self.pitfalls]
        return {k: (None if isinstance(v, float) and not np.isfinite(v) else v)
                for k, v in data.items()}


@dataclass
class DoctorReport:
    """The per-layer parity report of :func:`check`.

    ``first_divergent`` is the first row past ``atol`` whose verdict is *semantic* (a real
    bug); ``first_exceeding`` the first row past ``atol`` at all (it may be rounding noise).
    ``diagnosis`` holds the pitfalls found for ``first_divergent``.
    """

    rows: list[LayerRow]
    atol: float
    distributions: list[str]
    output_error: float
    output_verdict: str = "rounding"
    unmatched_torch: list[str] = field(default_factory=list)
    unmatched_keras: list[str] = field(default_factory=list)

    @property
    def first_exceeding(self) -> LayerRow | None:
        return next((r for r in self.rows if r.exceeds), None)

    @property
    def first_divergent(self) -> LayerRow | None:
        return next((r for r in self.rows if r.exceeds and r.verdict == "semantic"), None)

    @property
    def diagnosis(self) -> list[Pitfall]:
        row = self.first_divergent
        return [p for p in row.pitfalls if p.affects_inference] if row else []

    @property
    def warnings(self) -> list[tuple[str, Pitfall]]:
        """Findings on other rows and training-only findings (momentum)."""
        first = self.first_divergent
        return [(r.keras_name, p) for r in self.rows for p in r.pitfalls
                if r is not first or not p.affects_inference]

    @property
    def passed(self) -> bool:
        """No semantic divergence, and the output within tolerance or within rounding."""
        return self.first_divergent is None and (self.output_error <= self.atol
                                                 or self.output_verdict == "rounding")

    def summary(self) -> str:
        """A few lines of plain text: verdict, first divergence, diagnosis."""
        lines = [(f"parity doctor: {len(self.rows)} aligned layers, output error "
                  f"{self.output_error:.2e} (tolerance {self.atol:.0e}, verdict "
                  f"{self.output_verdict}) over inputs {', '.join(self.distributions)}: "
                  f"{'PASS' if self.passed else 'FAIL'}")]
        row = self.first_divergent
        if row is None:
            ex = self.first_exceeding
            if ex is not None:
                lines.append(f"first layer past tolerance: {ex.keras_name} ({ex.error:.2e}), "
                             f"verdict rounding: float32 noise, not a bug")
            return "\n".join(lines)
        lines.append(f"first divergent layer: torch {row.torch_name} ({row.torch_type}) <-> "
                     f"Keras {row.keras_name} ({row.keras_type}): error {row.error:.2e} on "
                     f"{row.worst_input} inputs, verdict {row.verdict}")
        for p in self.diagnosis:
            lines.append(f"  pitfall [{p.name}]: {p.message}\n    fix: {p.fix}")
        if not self.diagnosis:
            lines.append("  no known pitfall matched: compare this layer's configuration "
                         "and weights by hand")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        first = self.first_divergent
        return {
            "passed": self.passed, "atol": self.atol, "distributions": self.distributions,
            "output_error": self.output_error if np.isfinite(self.output_error) else None,
            "output_verdict": self.output_verdict,
            "first_divergent": first.index if first else None,
            "first_exceeding": self.first_exceeding.index if self.first_exceeding else None,
            "diagnosis": [p.to_dict() for p in self.diagnosis],
            "rows": [r.to_dict() for r in self.rows],
            "unmatched_torch": self.unmatched_torch, "unmatched_keras": self.unmatched_keras,
        }


# --- torch side ----------------------------------------------------------------------------

@dataclass
class _Event:
    name: str
    module: torch.nn.Module
    in_shape: tuple[int, ...] | None
    out: np.ndarray


def _first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        for v in value:
            t = _first_tensor(v)
            if t is not None:
                return t
    return None


def _leaf_modules(module: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    leaves = [(n, m) for n, m in module.named_modules() if not any(True for _ in m.children())]
    return [(n or type(m).__name__, m) for n, m in leaves]


def torch_events(module: torch.nn.Module, args: tuple) -> tuple[list[_Event], Any]:
    """Every leaf-module call in execution order (a re-used module gets ``name:k``)."""
    events: list[_Event] = []
    calls: dict[str, int] = {}

    def hook(name: str):
        def fn(mod, inputs, output):
            out = _first_tensor(output)
            if out is None:
                return
            k = calls.get(name, 0)
            calls[name] = k + 1
            x = _first_tensor(inputs)
            events.append(_Event(name if k == 0 else f"{name}:{k}", mod,
                                 tuple(x.shape) if x is not None else None,
                                 out.detach().cpu().numpy().copy()))  # in-place ops follow
        return fn

    handles = [m.register_forward_hook(hook(n)) for n, m in _leaf_modules(module)]
    try:
        with torch.no_grad():
            output = module(*args)
    finally:
        for h in handles:
            h.remove()
    return events, output


# --- Keras side ----------------------------------------------------------------------------

def keras_layers(model: keras.Model) -> list[Any]:
    """The model's layers in execution order, without input layers."""
    return [layer for layer in model.layers if type(layer).__name__ != "InputLayer"]


def _probe_model(model: keras.Model, layers: list[Any]) -> tuple[keras.Model | None, list[Any]]:
    outputs, usable = [], []
    for layer in layers:
        try:
            out = layer.output
        except (AttributeError, ValueError):  # shared layer or never called
            continue
        outputs.append(keras.tree.flatten(out)[0])
        usable.append(layer)
    try:
        return keras.Model(model.input, outputs), usable  # same input structure
    except (AttributeError, ValueError, TypeError):
        return None, []


def keras_layer_outputs(model: keras.Model, arrays: list[np.ndarray]
                        ) -> tuple[dict[str, np.ndarray], Any, dict[str, tuple]]:
    """Per-layer outputs (by name), the model output and per-layer input shapes."""
    feed = keras_feed(arrays)
    final = model(feed, training=False)
    layers = keras_layers(model)
    values: dict[str, np.ndarray] = {}
    in_shapes: dict[str, tuple] = {}
    probe, usable = (None, [])
    if not isinstance(model, keras.Sequential):
        probe, usable = _probe_model(model, layers)
    if probe is not None:
        outs = probe(feed, training=False)
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        for layer, out in zip(usable, outs):
            values[layer.name] = np.asarray(out)
            try:
                in_shapes[layer.name] = tuple(keras.tree.flatten(layer.input)[0].shape)
            except (AttributeError, ValueError):
                pass
    elif isinstance(model, keras.Sequential) and len(arrays) == 1:
        x = arrays[0]
        for layer in layers:
            in_shapes[layer.name] = tuple(np.shape(x))
            x = layer(x, training=False)
            values[layer.name] = np.asarray(keras.tree.flatten(x)[0])
    else:
        raise InputError(f"{type(model).__name__}: per-layer outputs need a Sequential or "
                         f"functional Keras model; wrap a subclassed model's layers in "
                         f"keras.Model(inputs, outputs)")
    return values, final, in_shapes


def _keras_input_shapes(model: keras.Model) -> list[tuple | None]:
    try:
        return [tuple(t.shape) for t in model.inputs]
    except (AttributeError, ValueError, TypeError):
        return []


def _channels_last_inputs(model: keras.Model, args: tuple, channels_last: bool | None
                          ) -> list[bool]:
    if channels_last is not None:
        return [channels_last and a.ndim >= 3 for a in args]
    shapes = _keras_input_shapes(model)
    flags = []
    for i, a in enumerate(args):
        ts = tuple(a.shape[1:])
        ks = tuple(shapes[i][1:]) if i < len(shapes) else None
        if a.ndim < 3 or (ks is not None and _fits(ts, ks)):
            flags.append(False)
        else:
            flags.append(True)
    return flags


def _check_keras_takes(model: keras.Model, args: tuple, flags: list[bool]) -> None:
    """An ``InputError`` when the Keras model cannot take the inputs (their count, or a
    shape in the layout it expects): Keras' own error printed the whole input tensor."""
    shapes = _keras_input_shapes(model)
    if not shapes:  # a subclassed model states no inputs: Keras' call decides
        return
    if len(shapes) != len(args):
        raise InputError(f"the Keras model takes {len(shapes)} input(s), the torch inputs are "
                         f"{len(args)}: give one input per Keras Input")
    for i, (a, cl, want) in enumerate(zip(args, flags, shapes)):
        given = (a.shape[0], *a.shape[2:], a.shape[1]) if cl else tuple(a.shape)
        if not _fits(tuple(given), tuple(want)):
            layout = f" ({tuple(given)} channels-last)" if cl else ""
            raise InputError(f"input {i} has shape {tuple(a.shape)}{layout}; the Keras model "
                             f"expects {tuple(want)}: is it the twin of this torch module?")


def _fits(torch_shape: tuple, keras_shape: tuple) -> bool:
    return len(torch_shape) == len(keras_shape) and all(
        k is None or k == t for t, k in zip(torch_shape, keras_shape))


def _to_keras(args: tuple, flags: list[bool]) -> list[np.ndarray]:
    arrays = []
    for a, cl in zip(args, flags):
        x = a.detach().cpu().numpy()
        arrays.append(np.moveaxis(x, 1, -1) if cl else x)
    return arrays


# --- comparing one pair --------------------------------------------------------------------

def candidates(ref: np.ndarray, got_shape: tuple, flat_block: tuple | None
               ) -> list[tuple[str, Any]]:
    """Ways to read torch's ``ref`` in the Keras tensor's layout: (name, transform)."""
    out: list[tuple[str, Any]] = []
    if ref.shape == got_shape:
        out.append(("same", lambda a: a))
    if ref.ndim >= 3 and (ref.shape[0], *ref.shape[2:], ref.shape[1]) == got_shape:
        out.append(("channels_last", lambda a: np.moveaxis(a, 1, -1)))
    if flat_block is not None and ref.ndim == 2 and ref.shape == got_shape and len(flat_block) > 1:
        order = flat_feature_order(flat_block, (*range(1, len(flat_block)), 0))
        if order.size == ref.shape[1]:
            out.append(("flat_channels_last", lambda a: a[:, order]))
    if not out:
        squeezed = tuple(s for i, s in enumerate(ref.shape) if i < 2 or s != 1)
        if squeezed == got_shape:
            out.append(("squeezed", lambda a: a.reshape(got_shape)))
    return out


def _compare(ref: np.ndarray, ref64: np.ndarray, got: np.ndarray, flat_block: tuple | None
             ) -> tuple[str, float, float, float, float]:
    """(layout, max_abs, error, keras_vs_fp64, torch_vs_fp64) under the best layout."""
    best = ("mismatch", float("inf"), float("inf"), float("inf"), 0.0)
    for name, fn in candidates(ref, tuple(got.shape), flat_block):
        r, r64 = fn(ref), fn(ref64)
        err = normalized_error(r, got)
        if err < best[2] or best[0] == "mismatch":
            max_abs = float(np.max(np.abs(r.astype(np.float64) - got), initial=0.0))
            best = (name, max_abs, err, normalized_error(r64, got), normalized_error(r64, r))
    return best


def _flat_block(event: _Event) -> tuple | None:
    if type(event.module).__name__ == "Flatten" and event.in_shape and len(event.in_shape) >= 3:
        return tuple(event.in_shape[1:])
    return None


def _keras_flat_block(layers: list[Any], j: int, in_shapes: dict[str, tuple]) -> tuple | None:
    """Torch (C, H, W) of a channels-last Keras Flatten feeding layer ``j``, if any."""
    for layer in reversed(layers[:j]):
        kind = type(layer).__name__
        if kind == "Flatten":
            shape = in_shapes.get(layer.name)
            if shape and len(shape) >= 3 and _cfg_get(layer, "data_format") != "channels_first":
                return (shape[-1], *shape[1:-1])
            return None
        if keras_family(layer) not in ("dropout", "act"):
            return None
    return None


def _cfg_get(layer: Any, key: str) -> Any:
    try:
        return layer.get_config().get(key)
    except (NotImplementedError, TypeError):
        return None


def _fused_activation(layer: Any) -> bool:
    act = _cfg_get(layer, "activation")
    return family_is_compute(layer) and act not in (None, "linear")


def family_is_compute(layer: Any) -> bool:
    return keras_family(layer) in ("conv", "conv_transpose", "dense")


# --- the check -----------------------------------------------------------------------------

def check(torch_module: torch.nn.Module, keras_model: keras.Model, inputs: Any, *,
          mapping: Mapping[str, str] | None = None, atol: float = 1e-4,
          distributions: Sequence[str] = tuple(DISTRIBUTIONS), channels_last: bool | None = None,
          seed: int = 0) -> DoctorReport:
    """Compare a torch module and a Keras model layer by layer; find and explain divergence.

    Args:
        torch_module: the reference, run in eval mode and left unchanged (a float64 copy
            gives the verdicts).
        keras_model: a Sequential or functional Keras model, converted or written by hand.
        inputs: a tensor or tuple of tensors in torch layout (image inputs are transposed to
            channels-last when the Keras model expects it, or as ``channels_last`` says).
        mapping: explicit ``{torch module name: Keras layer name}`` pairs.
        atol: normalized tolerance per layer.
        distributions: input sets, keys of :data:`DISTRIBUTIONS`.
        channels_last: force the Keras input layout (default: from the model's input shape).
        seed: seed of the generated inputs.

    Returns:
        A :class:`DoctorReport` (``.summary()``, ``.first_divergent``, ``.diagnosis``).

    Example:
        >>> import keras, torch, crossport
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1),
        ...                           torch.nn.BatchNorm2d(4)).eval()
        >>> twin = keras.Sequential([keras.Input((8, 8, 3)),
        ...                          keras.layers.Conv2D(4, 3, padding="same"),
        ...                          keras.layers.BatchNormalization()])
        >>> _ = crossport.transfer_weights(net, twin, verbose=False)
        >>> report = crossport.check(net, twin, torch.randn(1, 3, 8, 8))
        >>> report.first_divergent.keras_type, report.diagnosis[0].name
        ('BatchNormalization', 'norm-eps')
    """
    args = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    if not args or not all(isinstance(a, torch.Tensor) for a in args):
        raise InputError("check() needs torch tensor inputs (a tensor or a tuple of tensors)")
    with borrowed(torch_module):  # eval mode; attributes forward writes are undone after
        return _check_eval(torch_module, keras_model, args, mapping, atol, distributions,
                           channels_last, seed)


def _check_eval(torch_module: torch.nn.Module, keras_model: keras.Model, args: tuple,
                mapping, atol: float, distributions, channels_last, seed: int) -> DoctorReport:
    module64 = copy.deepcopy(torch_module).to(torch.float64)
    flags = _channels_last_inputs(keras_model, args, channels_last)
    _check_keras_takes(keras_model, args, flags)
    layers = keras_layers(keras_model)
    by_name = {layer.name: layer for layer in layers}
    pairs: list[tuple[int, int, str]] | None = None
    acc: dict[tuple[int, int], list] = {}
    out_err, out_verdict = 0.0, "rounding"
    t_items = k_items = None
    keras_in: dict[str, tuple] = {}
    for dist in distributions:
        x = make_inputs(args, dist, seed)
        x64 = tuple(a.to(torch.float64) if a.is_floating_point() else a for a in x)
        ev32, out32 = torch_events(torch_module, x)
        ev64, out64 = torch_events(module64, x64)
        kvals, kout, keras_in = keras_layer_outputs(keras_model, _to_keras(x, flags))
        if pairs is None:
            t_items = [Side(e.name, e.module, torch_family(e.module), e.out.shape) for e in ev32]
            k_items = [Side(layer.name, layer, keras_family(layer),
                            kvals[layer.name].shape) for layer in layers
                       if layer.name in kvals]
            pairs = align(t_items, k_items, mapping)
            pairs = _fuse_activations(pairs, t_items, k_items)
        ref_out = _first_tensor(out32)
        got_out = np.asarray(keras.tree.flatten(kout)[0])
        if ref_out is not None:
            _, _, e, k64, t64 = _compare(ref_out.numpy(), _first_tensor(out64).numpy(),
                                         got_out, None)
            if e >= out_err:
                out_err, out_verdict = e, rounding_verdict(k64, t64)
        for ti, kj, _how in pairs:
            ref_i = ti[1] if isinstance(ti, tuple) else ti
            got = kvals[k_items[kj].name]
            block = _flat_block(ev32[ref_i])
            res = _compare(ev32[ref_i].out, ev64[ref_i].out, got, block)
            prev = acc.get((_key(ti), kj))
            if prev is None or res[2] > prev[0][2]:
                acc[(_key(ti), kj)] = [res, dist]
    rows = _rows(pairs or [], acc, ev32, t_items, k_items, keras_in, layers, atol)
    paired_t = {i for ti, _, _ in pairs or [] for i in (ti if isinstance(ti, tuple) else (ti,))}
    paired_k = {kj for _, kj, _ in pairs or []}
    return DoctorReport(
        rows=rows, atol=atol, distributions=list(distributions), output_error=out_err,
        output_verdict=out_verdict,
        unmatched_torch=[t.name for i, t in enumerate(t_items or []) if i not in paired_t],
        unmatched_keras=[k.name for j, k in enumerate(k_items or []) if j not in paired_k
                         and k.name in by_name])


def _key(ti: int | tuple[int, int]) -> int:
    return ti[1] if isinstance(ti, tuple) else ti


def _fuse_activations(pairs: list, t_items: list[Side], k_items: list[Side]) -> list:
    """A Keras Conv2D(activation=...) matches torch conv + the activation that follows."""
    used = {ti for ti, _, _ in pairs}
    out = []
    for ti, kj, how in pairs:
        nxt = ti + 1
        if _fused_activation(k_items[kj].obj) and nxt < len(t_items) and nxt not in used \
                and t_items[nxt].family == "act":
            out.append(((ti, nxt), kj, how))
            used.add(nxt)
        else:
            out.append((ti, kj, how))
    return out


def _rows(pairs: list, acc: dict, ev32: list[_Event], t_items: list[Side],
          k_items: list[Side], keras_in: dict, layers: list[Any], atol: float) -> list[LayerRow]:
    rows: list[LayerRow] = []
    layer_index = {layer.name: j for j, layer in enumerate(layers)}
    prev_err: float | None = None
    for n, (ti, kj, how) in enumerate(pairs):
        first = ti[0] if isinstance(ti, tuple) else ti
        last = _key(ti)
        (layout, max_abs, err, k64, t64), dist = acc[(last, kj)]
        ev, kside = ev32[last], k_items[kj]
        tname = "+".join(t_items[i].name for i in (ti if isinstance(ti, tuple) else (ti,)))
        verdict = "semantic" if layout == "mismatch" else rounding_verdict(k64, t64)
        shape_bad = layout in ("mismatch", "squeezed")
        row = LayerRow(
            index=n, torch_name=tname, torch_type=type(ev32[first].module).__name__,
            keras_name=kside.name, keras_type=type(kside.obj).__name__, matched_by=how,
            torch_shape=tuple(int(s) for s in ev.out.shape),
            keras_shape=tuple(int(s) for s in kside.shape), layout=layout, max_abs=max_abs,
            error=err, keras_vs_fp64=k64, torch_vs_fp64=t64,
            verdict="semantic" if shape_bad else verdict, worst_input=dist,
            growth=(err / prev_err) if prev_err and np.isfinite(err) else None,
            exceeds=err > atol or shape_bad)
        ctx = PairContext(
            module=ev32[first].module, layer=kside.obj, torch_in_shape=ev32[first].in_shape,
            torch_out_shape=tuple(ev32[first].out.shape), keras_out_shape=tuple(kside.shape),
            keras_flat_block=_keras_flat_block(layers, layer_index.get(kside.name, 0),
                                               keras_in))
        row.pitfalls = diagnose_pair(ctx)
        prev_err = err if np.isfinite(err) and err > 1e-9 else None  # growth from ~0: none
        rows.append(row)
    return rows
