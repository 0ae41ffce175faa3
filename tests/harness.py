"""One harness for every conversion test: export, convert, run both, compare.

``assert_converts`` runs the torch module and the converted Keras model on the same seeded
random inputs (never all-ones) and checks structure, shape, dtype and values: integers
exactly, floats to a stated normalized tolerance. ``expect_layers`` asserts the intended
converter ran (a layer class appears in the model), ``max_transposes`` bounds the
transposes inside the model, as the emitter counts them and as the traced TF graph has them
(``kernel_transposes=True`` exempts the graph count for ops whose TF kernel only works
on the last axis or time-major: top_k, softmax on another axis, recurrent scans).
"""

from __future__ import annotations

import json
import os

import torch
from torch.utils import _pytree as pytree

import crossport
from crossport.parity.compare import compare_outputs
from crossport.parity.graph import graph_transposes
from crossport.parity.verify import fresh_inputs, run_keras
from crossport.to_keras.emit import converters_ran


def random_inputs(shapes, seed: int = 0, dtype=torch.float32) -> tuple:
    """Seeded normal inputs; ``shapes`` is one shape or a list of shapes."""
    if shapes and isinstance(shapes[0], int):
        shapes = [shapes]
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(s, generator=gen, dtype=dtype) for s in shapes)


def assert_converts(module: torch.nn.Module, args, *, atol: float = 1e-5,
                    expect_layers: tuple[str, ...] = (), max_transposes: int | None = 0,
                    kernel_transposes: bool = False, expect_converters: tuple[str, ...] = (),
                    **options) -> crossport.Conversion:
    """Convert ``module`` and assert the Keras model computes what torch computes.

    ``expect_converters`` names converter functions (``aten_conv_nd``) that must have run:
    tests/ops/test_coverage.py checks that every registered converter is named by a row.
    """
    module = module.eval()
    args = args if isinstance(args, tuple) else (args,)
    with converters_ran() as ran:
        conversion = crossport.convert_with_report(module, args, check=False, **options)
    _log_converters(ran)
    missing = [name for name in expect_converters if name not in ran]
    assert not missing, f"expected converters {missing} to run; ran {sorted(ran)}"
    channels_last_io = options.get("channels_last_io", False)
    for seed, inputs in enumerate([args, fresh_inputs(args, 1234)]):
        with torch.no_grad():
            ref = module(*(x.clone() for x in inputs))  # forward may write to its inputs
        got = conversion.model(_keras_args(inputs, channels_last_io), training=False)
        _compare(ref, got, atol, channels_last_io, inputs, conversion)
    layer_types = {type(layer).__name__ for layer in conversion.model.layers}
    for name in expect_layers:
        assert name in layer_types, f"expected a {name} layer, model has {sorted(layer_types)}"
    if max_transposes is not None:
        assert conversion.transposes <= max_transposes, (
            f"{conversion.transposes} transposes inside the model (at most {max_transposes})")
    if max_transposes is not None and not kernel_transposes:
        # what actually runs: layers must not hide transposes the emitter cannot count
        in_graph = graph_transposes(conversion.model) - conversion.boundary_transposes
        assert in_graph <= max_transposes, (
            f"{in_graph} transposes in the TF graph (at most {max_transposes})")
    return conversion


def assert_matches_at_sizes(module: torch.nn.Module, conversion, shapes, *,
                            atol: float = 1e-5, seed: int = 0) -> None:
    """The converted model at other input sizes (its dynamic dims) against torch.

    ``shapes``: one input shape per check, or a tuple of shapes for several inputs. A
    module returning a tuple has each output compared.
    """
    gen = torch.Generator().manual_seed(seed)
    for shape in shapes:
        several = isinstance(shape[0], tuple)
        args = tuple(torch.randn(s, generator=gen) for s in (shape if several else [shape]))
        with torch.no_grad():
            ref = module(*args)
        got = run_keras(conversion.model, args, False, like=ref)
        refs = list(ref) if isinstance(ref, tuple) else [ref]  # several outputs: each one
        comparison = compare_outputs(refs, got[:len(refs)])
        assert not comparison.mismatches and comparison.error <= atol, (shape, comparison)


def _log_converters(ran) -> None:
    """With ``CROSSPORT_CONVERTER_LOG=path``, append ``{test id: converters}`` to path (to
    find a row for each converter when adding ``expect_converters``)."""
    path = os.environ.get("CROSSPORT_CONVERTER_LOG")
    if path:
        with open(path, "a") as log:
            log.write(json.dumps({os.environ.get("PYTEST_CURRENT_TEST", "?"): sorted(ran)}) + "\n")


def _keras_args(inputs, channels_last_io):
    from crossport.parity.verify import to_keras_inputs

    arrays = to_keras_inputs(inputs, channels_last_io)
    return arrays if len(arrays) > 1 else arrays[0]


def _compare(ref, got, atol, channels_last_io, inputs, conversion):
    ref_leaves, _ = pytree.tree_flatten(ref)
    got_flat = run_keras(conversion.model, inputs, channels_last_io, like=ref)
    assert len(got_flat) == len(ref_leaves), (
        f"torch returns {len(ref_leaves)} tensors, Keras {len(got_flat)}")
    _assert_same_structure(ref, got)
    # shapes, dtypes (exactly torch's), NaN/inf positions, integers exactly, floats to atol
    comparison = compare_outputs(ref_leaves, got_flat)
    assert not comparison.mismatches, "; ".join(comparison.mismatches)
    for out in comparison.outputs:
        assert out.error <= atol, f"output {out.index}: normalized error {out.error:.3e} > {atol:.0e}"


def _assert_same_structure(ref, got):
    if isinstance(ref, torch.Tensor):
        return
    if isinstance(ref, dict):
        assert isinstance(got, dict) and set(got) == set(ref), f"dict keys {set(got)} != {set(ref)}"
        for k in ref:
            _assert_same_structure(ref[k], got[k])
        return
    assert isinstance(got, (list, tuple)) and len(got) == len(ref), (
        f"structure {type(got).__name__}[{len(got)}] != {type(ref).__name__}[{len(ref)}]")
    for r, g in zip(ref, got):
        _assert_same_structure(r, g)
