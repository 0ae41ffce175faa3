"""Never silently wrong at any size: the Keras -> torch layer and op tables swept over sizes.

Every row of the tables below (imported, not copied) is rebuilt with run-time dims: each
Keras input's non-channel dims made ``None`` (else only the first, else only the batch)
where Keras builds the model, converted at the row's own example size, and compared with
Keras at three other sizes Keras accepts: size 1 everywhere (batch 1), odd and larger
(batch 3), uneven per dim (H != W). A variant Keras runs at none of them, or that the
conversion refuses with a clear ``CrossportError`` (not a ParityError, not a converter's
"please report"), falls back to the next. The project's compare routine judges shapes,
dtypes, NaN/inf positions and integer values exactly, floats by the normalized error; a
module that runs and differs, or raises where Keras runs, fails the row. The second test
repeats the sizes with NaN and +-inf in the float inputs; the rows whose special values
diverge for the op's own semantics (at the example's size too) are listed with the reason.

The bugs it found are listed in docs/parity.md ("Keras -> PyTorch", run-time sizes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import keras
import numpy as np
import pytest
import torch

import crossport
from crossport.parity.compare import REVERSE, compare_outputs
from tests.to_torch import (
    test_adaptive_pooling,
    test_attention,
    test_attention_layers,
    test_channels_first,
    test_conv,
    test_graphs,
    test_keras_ops_elementwise,
    test_keras_ops_fft,
    test_keras_ops_image,
    test_keras_ops_indexing,
    test_keras_ops_linalg,
    test_keras_ops_more,
    test_keras_ops_nn,
    test_keras_ops_numeric,
    test_keras_ops_numpy,
    test_keras_ops_quantiles,
    test_layers,
    test_masks,
    test_preprocessing,
    test_wrappers,
)
from tests.to_torch.harness import make_live

pytestmark = pytest.mark.slow
ATOL = 1e-4
# rows whose NaN / inf positions differ from Keras at the example's own size too (value
# semantics, not sizes): docs/parity.md, "Keras -> PyTorch"
_SOFTMAX = "softmax of a row with +inf: TF gives the finite entries 0, torch NaN"
_RESIZE = "bilinear/bicubic resize of +-inf: TF's kernel and torch's mix infinities apart"
_ORDER = "sort / top_k of rows with NaN: TF leaves no order (documented, docs/parity.md)"
_FFT = "FFT of inputs with +-inf: TF's and torch's FFT kernels place NaN / inf apart"
NAN_DIVERGES: dict[str, str] = {
    "layers-act-softmax-axis1": _SOFTMAX,
    "layers-act-softmax-last": _SOFTMAX,
    "layers-shape-flatten-unit-spatial": _SOFTMAX,
    "layers-shape-upsampling2d-bilinear": _RESIZE,
    "layers-more-resizing-bilinear-down": _RESIZE,
    "preprocessing-resizing-box-crop-wide-to-square": _RESIZE,
    "preprocessing-resizing-box-crop-tall-odd": _RESIZE,
    "preprocessing-resizing-box-pad-wide": _RESIZE,
    "preprocessing-resizing-box-pad-tall-odd-difference": _RESIZE,
    "preprocessing-resizing-box-pad-not-needed": _RESIZE,
    "einsum-dense-sequence": "gelu(+inf): NaN in torch's vectorised kernel, inf in TF",
    "ops-fft-fft2-real-input": _FFT,
    "ops-fft-fft-transposed": _FFT,
    "ops-fft-irfft-default-length": _FFT,
    "ops-more-ops-sort-flat": _ORDER,
    "ops-more-ops-sort-axis-1": _ORDER,
    "ops-more-ops-sort-held-nchw": _ORDER,
    "ops-more-ops-argsort-transposed": _ORDER,
    "ops-more-ops-top-k": _ORDER,
    "ops-more-ops-top-k-held-nchw": _ORDER,
    "ops-more-ops-top-k-unsorted-all": _ORDER,
    "ops-more-ops-take-along-argsort": _ORDER,
    "ops-more-ops-take-along-transposed": _ORDER,
    "channels-first-upsampling2d-bilinear": _RESIZE,
    "channels-first-resizing-bilinear": _RESIZE,
    "ops-more-ops-image-resize-bilinear-nearest": _RESIZE,
    "ops-more-ops-image-resize-aspect-ratio-area": _RESIZE,
    "ops-more-ops-image-resize-channels-first": _RESIZE,
    "ops-more-ops-image-resize-held-nchw": _RESIZE,
}
# op rows swept from a size above 1: TF's adaptive max pool kills the process (SIGFPE) at 1,
# and a valid patch larger than the image is an empty tensor in Keras where torch's conv
# raises (loud, not wrong)
_OPS_MIN_SIZE = {"nn-adaptive-max-2d-held-nchw": 2, "nn-adaptive-max-3d": 2,
                 "image-patches-2d": 2, "image-patches-dilated": 3, "image-patches-held-nchw": 4}
_SPARSEMAX = ("sparsemax of a row with NaN: TF's result depends on where its sort puts the "
              "NaN; the module gives the row NaN (to_torch/ops/kops_nn.py)")
_RAISES_ON_NAN = "Keras' cholesky / eigh raise on a NaN or inf matrix: no size runs"
NAN_DIVERGES.update({
    "ops-nn-sparsemax-last": _SPARSEMAX,
    "ops-nn-sparsemax-axis-1": _SPARSEMAX,
    "ops-nn-sparsemax-held-nchw": _SPARSEMAX,
    "ops-linalg-matrix_ops-cholesky-logdet": _RAISES_ON_NAN,
    "ops-linalg-matrix_ops-eigh-svd-values": _RAISES_ON_NAN,
})
# rows where Keras itself is wrong at a swept size (checked against its channels_last twin)
KERAS_WRONG = {
    "channels-first-conv2d-same-stride2": "TF's oneDNN NCHW conv adds the bias along the "
    "width where the output width equals the filter count (5 at the uneven 11 x 10 size): "
    "Keras' own channels_last twin differs by the bias there",
}


@dataclass
class Case:
    """A table row as inputs (shapes without the batch) and a builder of the outputs."""
    shapes: list[tuple]
    build: Callable
    dtype: str = "float32"
    int_high: int = 10
    live: bool = True
    channel_last: bool = True   # keep each input's last dim fixed, else its first (channels)
    min_size: int = 1           # Keras' AdaptiveMaxPooling kills the process (SIGFPE) at 1


def _fresh(layer):
    """A new, unbuilt layer from ``layer``'s config: a table's instance may already be built
    at its own sizes when another test ran first, and its serialized ``build_config`` would
    rebuild the copy there too (the row's result then depended on test order)."""
    return keras.layers.deserialize(_unbuilt(keras.layers.serialize(layer)))


def _unbuilt(config):
    """``config`` without any ``build_config`` (wrapped layers' too)."""
    if isinstance(config, dict):
        return {k: _unbuilt(v) for k, v in config.items() if k != "build_config"}
    if isinstance(config, list):
        return [_unbuilt(v) for v in config]
    return config


def _chain(shape, layers, dtype="float32", **kw) -> Case:
    def build(x):
        for layer in layers:
            x = _fresh(layer)(x)
        return x
    return Case([shape], lambda xs: build(xs[0]), dtype, **kw)


def _fn(shape, fn, dtype="float32", **kw) -> Case:
    return Case([shape], lambda xs: fn(xs[0]), dtype, **kw)


def _attention(layer, causal=False, key=False, tq=5, tv=7, dim=4) -> Case:
    def build(xs):
        return _fresh(layer)(list(xs), use_causal_mask=causal)
    return Case([(tq, dim), (tv, dim)] + ([(tv, dim)] if key else []), build)


def _self_attention(layer, causal) -> Case:
    return Case([(6, 8)], lambda xs: _fresh(layer)(xs[0], xs[0], use_causal_mask=causal))


def _more_cases() -> dict[str, Case]:
    """test_graphs' recurrent and op tables, MultiHeadAttention, adaptive and channels-first
    pooling/conv rows, RNNs over mask_zero embeddings."""
    g, cases = test_graphs, {}
    for name, layer in {**g.RNN, **g.GENERIC_RNN}.items():
        cases[f"graphs-rnn-{name}"] = _chain((7, 6), [layer])
    for name, (shape, layer) in g.CONV_LSTM.items():
        cases[f"graphs-conv-lstm-{name}"] = _chain(shape, [layer],
                                                    channel_last="channels-first" not in name)
    for name, (shape, dtype, fn) in g.MORE_OPS.items():
        cases[f"graphs-ops-{name}"] = _fn(shape, fn, dtype=dtype)
    for name, (layer, causal) in test_attention.CASES.items():
        cases[f"mha-{name}"] = _self_attention(layer, causal)
    for name, (shape, layer) in test_adaptive_pooling.ADAPTIVE.items():
        cases[f"adaptive-{name}"] = _chain(shape, [layer],
                                           channel_last="channels-first" not in name,
                                           min_size=2 if name.startswith("max") else 1)
    for name, (shape, layers) in test_channels_first.ROWS.items():
        cases[f"channels-first-{name}"] = _chain(shape, layers, channel_last=False)
    m = test_masks
    for name, layers in m.RNNS.items():
        cases[f"masks-{name}"] = _chain(
            (m.T,), [keras.layers.Embedding(m.VOCAB, 5, mask_zero=True), *layers], "int32",
            int_high=m.VOCAB)
    return cases


def _cases() -> dict[str, Case]:
    t = test_layers
    cases = {}
    for name, layer in t.ACT_LAYERS.items():
        cases[f"layers-act-{name}"] = _chain(t.IMG, [keras.layers.Conv2D(4, 1), layer])
    for name, (shape, layers, _) in t.NORM.items():
        cases[f"layers-norm-{name}"] = _chain(shape, layers)
    for name, (shape, layer) in t.POOL.items():
        first = (keras.layers.Conv1D(4, 1) if len(shape) == 2 else keras.layers.Conv2D(
            shape[-1], 1) if len(shape) == 3 else keras.layers.Conv3D(2, 1))
        cases[f"layers-pool-{name}"] = _chain(shape, [first, layer])
    for name, (shape, layers, _) in t.SHAPE.items():
        cases[f"layers-shape-{name}"] = _chain(shape, layers)
    for name, (shape, layers) in t.MORE.items():
        cases[f"layers-more-{name}"] = _chain(shape, layers)
    for name, (shape, layer, _) in test_conv.CASES.items():
        cases[f"conv-{name}"] = _chain(shape, [layer])
    for name, (shape, layers) in test_wrappers.ROWS.items():
        cases[f"wrappers-td-{name}"] = _chain(shape, layers)
    for name, (layer, kwargs) in test_attention_layers.ATTENTION.items():
        cases[f"attention-{name}"] = _attention(layer, **kwargs)
    for name, (shape, layer) in test_attention_layers.EINSUM.items():
        cases[f"einsum-dense-{name}"] = _chain(shape, [layer])
    p = test_preprocessing
    for name, (shape, layers) in {**p.RESCALING, **p.NORMALIZATION}.items():
        cases[f"preprocessing-{name}"] = _chain(shape, layers, live=False)
    for name, (shape, layers, dtype) in p.CENTER_CROP.items():
        cases[f"preprocessing-center-crop-{name}"] = _chain(
            shape, layers, dtype, channel_last=not name.startswith("channels-first"))
    for name, (shape, layer, after_conv) in p.RESIZING_BOX.items():
        layers = [keras.layers.Conv2D(shape[-1], 1), layer] if after_conv else [layer]
        cases[f"preprocessing-resizing-box-{name}"] = _chain(shape, layers)
    for name, (shape, mode) in p.CATEGORY_ENCODING.items():
        cases[f"preprocessing-category-{name}"] = _chain(
            shape, [keras.layers.CategoryEncoding(5, output_mode=mode)], "int32", int_high=7)
    for module in (test_keras_ops_elementwise, test_keras_ops_fft, test_keras_ops_indexing,
                   test_keras_ops_linalg, test_keras_ops_nn, test_keras_ops_image):
        tag = module.__name__.rsplit("_", 1)[-1]
        for name, (shape, fn) in module.OPS.items():  # a channels_first row keeps dim 0
            cases[f"ops-{tag}-{name}"] = _fn(shape, fn, channel_last="channels-first" not in name,
                                             min_size=_OPS_MIN_SIZE.get(f"{tag}-{name}", 1))
    for table in ("MATRIX_OPS",):
        for name, (shape, fn) in getattr(test_keras_ops_linalg, table).items():
            cases[f"ops-linalg-{table.lower()}-{name}"] = _fn(shape, fn)
    for table in ("AXES", "ELEMENTWISE"):
        for name, (shape, fn) in getattr(test_keras_ops_numpy, table).items():
            cases[f"ops-numpy-{table.lower()}-{name}"] = _fn(shape, fn)
    m = test_keras_ops_more
    for table in ("OPS", "ORDER_FREE", "BINARY_AND_SHAPE", "PAD_PROD"):
        for name, (shape, fn) in getattr(m, table).items():
            cases[f"ops-more-{table.lower()}-{name}"] = _fn(shape, fn)
    for name, fn in test_keras_ops_numeric.NORMS.items():
        cases[f"ops-numeric-{name}"] = _fn((5, 6), fn)
    for name, fn in test_keras_ops_quantiles.QUANTILES.items():
        cases[f"ops-quantiles-{name}"] = _fn((4, 6), fn)
    return {**cases, **_more_cases()}


CASES = _cases()


def _dynamic_masks(case: Case) -> list[list[list[bool]]]:
    """Which dims to make ``None``, per input, most dynamic first."""
    def mask(shape, pick):
        dims = list(range(len(shape)))
        if len(shape) > 1:  # the channel dim stays fixed
            dims.remove(len(shape) - 1 if case.channel_last else 0)
        return [pick(d, dims) for d in range(len(shape))]
    picks = [lambda d, dims: d in dims, lambda d, dims: dims[:1] == [d],
             lambda d, dims: False]
    return [[mask(shape, pick) for shape in case.shapes] for pick in picks]


def _dynamic_models(case: Case):
    """The row's model with ``None`` dims (most first) wherever Keras builds it."""
    for masks in _dynamic_masks(case):
        inputs = [keras.Input(tuple(None if m else s for s, m in zip(shape, mask)),
                              dtype=case.dtype)
                  for shape, mask in zip(case.shapes, masks)]
        try:
            yield keras.Model(inputs, case.build(inputs)), masks
        except Exception:  # noqa: BLE001  (Keras cannot build it with these None dims)
            continue


# (name, batch, new size of a dynamic dim from its example size and its dim index)
SIZE_SETS = [("one", 1, lambda v, d: 1),
             ("odd-larger", 3, lambda v, d: 2 * v + 1),
             ("uneven", 2, lambda v, d: v + 1 + d)]


def _inputs(case: Case, shapes: list[tuple], seed: int, specials: bool) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for shape in shapes:
        if "int" in case.dtype:
            out.append(rng.integers(0, case.int_high, shape).astype(case.dtype))
            continue
        a = rng.standard_normal(shape).astype("float32")
        if specials and a.size >= 4:
            flat = a.reshape(-1)
            spots = rng.choice(flat.size, max(3, flat.size // 20), replace=False)
            flat[spots] = rng.choice([np.nan, np.inf, -np.inf], spots.size)
        out.append(a)
    return out


def _run_keras(model, arrays):
    out = model(arrays if len(arrays) > 1 else arrays[0], training=False)
    return [np.asarray(o) for o in keras.tree.flatten(out)]


def _run_torch(module, arrays):
    with torch.no_grad():
        out = module(*[torch.from_numpy(a) for a in arrays])
    return [t.numpy() for t in keras.tree.flatten(out)]


def _refusal_is_clear(exc: crossport.CrossportError) -> bool:
    """A refusal, not the converter's own failure (ParityError: the module was wrong;
    "please report": a converter crashed)."""
    return not isinstance(exc, crossport.ParityError) and "please report" not in str(exc)


def _overflow_as_inf(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Float values within 2x of the dtype's largest as +-inf. Keras' max pooling of an
    all -inf/NaN window gives the lowest float, and a Dense sum of such terms overflows or
    not by summation order (seen: torch's MKL sgemm 3.0e38, TF +inf on an AMD CPU)."""
    out = []
    for a in arrays:
        if a.dtype.kind == "f":
            a = np.where(np.abs(a) >= np.finfo(a.dtype).max / 2, np.sign(a) * np.inf, a)
        out.append(a)
    return out


def _sweep(case: Case, model, masks, specials: bool) -> int | None:
    """Compare at the swept sizes; the number of sizes Keras ran at, None if refused."""
    if case.live:
        make_live(model)
    example = _inputs(case, [(2, *s) for s in case.shapes], 0, specials=False)
    try:
        module = crossport.to_torch(model, tuple(torch.from_numpy(a) for a in example))
    except crossport.CrossportError as exc:
        assert _refusal_is_clear(exc), f"{masks}: {exc}"
        return None
    checked = 0
    for set_name, batch, size in SIZE_SETS:
        shapes = [(batch, *[max(case.min_size, size(v, d)) if m else v for d, (v, m) in
                            enumerate(zip(shape, mask))])
                  for shape, mask in zip(case.shapes, masks)]
        arrays = _inputs(case, shapes, 1 + checked, specials)
        try:
            ref = _run_keras(model, arrays)
        except Exception:  # noqa: BLE001  (Keras does not accept these sizes)
            continue
        try:
            got = _run_torch(module, arrays)
        except Exception as exc:  # noqa: BLE001
            pytest.fail(f"{set_name} {shapes}: Keras runs, torch raises {exc!r}")
        if specials:
            ref, got = _overflow_as_inf(ref), _overflow_as_inf(got)
        comparison = compare_outputs(ref, got, names=REVERSE)
        assert comparison.passed(ATOL), (set_name, shapes, comparison.error,
                                         comparison.mismatches[:3])
        checked += 1
    return checked


def _check_every_size(name: str, specials: bool):
    keras.utils.set_random_seed(0)  # the same weights whichever tests ran before
    case = CASES[name]
    for model, masks in _dynamic_models(case):
        if _sweep(case, model, masks, specials):
            return masks
    pytest.fail("no variant of the row converted and ran at a swept size")


def _params(known: dict) -> list:
    return [pytest.param(n, marks=pytest.mark.xfail(reason=known[n], strict=True))
            if n in known else n for n in CASES]


@pytest.mark.parametrize("name", _params(KERAS_WRONG))
def test_every_size_keras_accepts(name):
    """The most dynamic variant of the row that converts matches Keras at every swept size."""
    _check_every_size(name, specials=False)


@pytest.mark.parametrize("name", _params({**NAN_DIVERGES, **KERAS_WRONG}))
def test_nan_and_inf_positions_at_every_size(name):
    """The same sizes with NaN and +-inf in the float inputs: positions must match."""
    if "int" in CASES[name].dtype:
        pytest.skip("integer inputs hold no NaN")
    _check_every_size(name, specials=True)
