"""Converters state dims; ``crossport.layout`` maps them. These checks keep it that way.

A CUSTOM converter that reads a layout's permutation or flat order itself (``.perm``,
``.flat``, ``.axis(``, ``.without(`` ...) instead of calling ``crossport.layout.dims`` must
be one of the few whose remapping is not a dim translation (listed with the reason).
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
import sys

import crossport.to_keras.ops  # noqa: F401  (registers the converters)
from crossport.layout import Policy
from crossport.to_keras.registry import complex_ops, registered_ops
from crossport.to_torch.registry import registered_layers as reverse_layers
from crossport.to_torch.registry import registered_ops as reverse_ops

INTERNALS = re.compile(r"\.perm\b|\.flat\b|\bLayout\(|\.axis\(|\.axes\(|\.without\(|"
                       r"\.with_inserted\(|permuted_shape\(|% rank\b")

SPECIAL = {
    # a view merges/splits dims by size: reshape in held order, gather, flat layout or transpose
    "aten_view_default": "reshape",
    "aten_squeeze_dim": "reshape",  # the same reshape rule, on static dims only
    # the flat feature order of flatten(1) -> Linear permutes the kernel rows (pitfall 9)
    "aten_linear_default": "aten_linear_default",
    # the same for LayerNorm's affine vectors after flatten(1)
    "aten_layer_norm_default": "aten_layer_norm_default",
    # crossport.layers.Pad maps the F.pad list itself (physical_pad), given the layout's perm
    **{name: "emit_pad" for name in (
        "aten_pad_default", "aten_constant_pad_nd_default", "aten_reflection_pad2d_default",
        "aten_replication_pad2d_default", "aten_pad_circular_default",
        "crossport_pad_circular_default")},
}


def _functions(module) -> dict[str, str]:
    return _functions_of(module.__name__)


@functools.cache
def _functions_of(module_name: str) -> dict[str, str]:
    """Each top-level function's source (parsed once per module: re-parsing per call made
    these checks 90 s of CI)."""
    source = inspect.getsource(sys.modules[module_name])
    return {node.name: ast.get_source_segment(source, node)
            for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)}


def _touches_internals(fn) -> str | None:
    """The first function reached from ``fn`` (same module, by name) reading internals."""
    functions = _functions(sys.modules[fn.__module__])
    seen, todo = set(), [fn.__name__]
    while todo:
        name = todo.pop()
        if name in seen or name not in functions:
            continue
        seen.add(name)
        if INTERNALS.search(functions[name]):
            return name
        # bare calls only: ``ops.reshape(`` is Keras', not this module's ``reshape``
        todo += re.findall(r"(?<![\w.])(\w+)\(", functions[name])
    return None


def test_custom_converters_remap_dims_through_the_layout_contract():
    converters = [*registered_ops().values(), *complex_ops().values()]  # FFTs, view_as_real
    custom = {c.fn for c in converters if c.policy is Policy.CUSTOM}
    found = {fn.__name__: where for fn in custom if (where := _touches_internals(fn))}
    unexpected = {name: where for name, where in found.items() if name not in SPECIAL}
    assert not unexpected, (
        f"converters remapping dims by hand: {unexpected}. State the dims and use "
        "crossport.layout (physical_axis/axes/index/order/pad, after_reduce/permute/insert, "
        "ctx.plain); a genuinely special case goes in SPECIAL with its reason")
    assert set(found) == set(SPECIAL), f"no longer special: {set(SPECIAL) - set(found)}"


REVERSE_SPECIAL = {
    # the flat feature order of Flatten -> Dense permutes the Linear weight's columns (pitfall 9)
    "core.Dense": "Dense",
    # Flatten of a held block *makes* the flat-permuted layout (FlatOrder from the held order)
    "shape.Flatten": "flatten_held",
    # a reshape moving only unit dims runs as held when the real dims keep their held order
    "shape.Reshape": "unit_reshape",
}


def reverse_converters_remapping_by_hand() -> dict[str, str]:
    """CUSTOM Keras -> PyTorch converters (layers and keras.ops) reading layout internals,
    named ``module.function`` (layers and keras.ops share names: ``merge.Concatenate``,
    ``kops.Concatenate``); converters made by a factory (``kops._reduce``) are read whole."""
    converters = {*reverse_layers().values(), *reverse_ops().values()}
    found = {}
    for fn in {c.fn for c in converters if c.policy is Policy.CUSTOM}:
        own = inspect.getsource(fn)
        where = fn.__name__ if INTERNALS.search(own) else _touches_internals(fn)
        if where is None:  # a factory-made converter: follow the calls of its own source
            fn_calls = re.findall(r"\b(\w+)\(", own)
            where = next((w for name in fn_calls if (w := _touches_internals_by_name(
                fn.__module__, name))), None)
        if where:
            found[f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}"] = where
    return found


def _touches_internals_by_name(module_name: str, name: str) -> str | None:
    functions = _functions(sys.modules[module_name])
    if name not in functions:
        return None
    probe = type("probe", (), {"__module__": module_name, "__name__": name})
    return _touches_internals(probe)


def test_reverse_converters_remap_dims_through_the_layout_contract():
    found = reverse_converters_remapping_by_hand()
    unexpected = {name: where for name, where in found.items() if name not in REVERSE_SPECIAL}
    assert not unexpected, (
        f"Keras -> PyTorch converters remapping dims by hand: {unexpected}. State the Keras "
        "axes and use crossport.layout (physical_axis/axes/array, after_reduce/permute, "
        "ctx.plain); a genuinely special case goes in REVERSE_SPECIAL with its reason")
    assert set(found) == set(REVERSE_SPECIAL), (
        f"no longer special: {set(REVERSE_SPECIAL) - set(found)}")


def test_layout_imports_no_direction():
    """``crossport.layout`` is shared: it imports nothing of crossport but itself (importing
    it at run time loads the package, so the check reads the import statements)."""
    from pathlib import Path

    import crossport.layout

    for path in Path(crossport.layout.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                assert not name.startswith("crossport") or name.startswith("crossport.layout"), (
                    f"{path.name} imports {name}")
