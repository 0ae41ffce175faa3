"""Linear layers and matrix products (pitfalls.md items 9, 10)."""

from __future__ import annotations

import keras
import numpy as np
import torch

from crossport.layout import Layout, canonical, physical_axis
from crossport.to_keras.dynamic_dims import is_dynamic_size, tensor_argument, tied_to_static
from crossport.to_keras.fold import is_constant
from crossport.to_keras.initial import call_with_weights
from crossport.to_keras.ops.elementwise import keras_add, keras_multiply
from crossport.to_keras.ops.shape import as_value
from crossport.to_keras.registry import Policy, register
from crossport.to_keras.values import keras_dtype
from crossport.weights import dense_weight_to_keras, flat_feature_order

aten = torch.ops.aten
ops = keras.ops


def _linear_supports(node):
    weight = node.args[1]
    if not is_constant(weight) and weight.meta["val"].dim() != 2:
        return "linear with a 1-D weight computed in the graph"
    return None


def _static_contraction(left: str, right: str):
    """A ``dynamic=`` predicate for ``left @ right``: the dim summed over may not be a
    run-time size of ``left`` where ``right``'s is static.

    torch.export can keep such a dim only as an expression of several dynamic dims that a
    guard pins to the static size: ``flatten(conv(x), 1)`` into a Linear of 256 features
    with H and W dynamic holds where ``4*H*W == 256``. The product is then fixed, so the
    dims are not free sizes (and Keras' Dense needs its features static); a single dim
    torch would have refused at capture already. Every other dim may be dynamic."""

    def check(node: torch.fx.Node) -> str | None:
        x, w = tensor_argument(node, left), tensor_argument(node, right)
        if x is None or w is None or x.ndim == 0 or w.ndim == 0:
            return None
        summed, fixed = x.shape[-1], w.shape[-2 if w.ndim > 1 else 0]
        if node.target is aten.linear.default:
            fixed = w.shape[-1]  # weight [out, in]
        if not is_dynamic_size(summed) or is_dynamic_size(fixed):
            return None
        return tied_to_static(f"the summed dim of {left!r}, against {right!r},", summed, fixed)

    return check


def _dense(ctx, x, kernel: np.ndarray, bias: np.ndarray | None = None):
    """``x @ kernel (+ bias)`` as a Dense layer (FULLY_CONNECTED in TFLite)."""
    dense = keras.layers.Dense(kernel.shape[1], use_bias=bias is not None, name=ctx.name())
    arrays = {"kernel_initializer": kernel}
    if bias is not None:
        arrays["bias_initializer"] = bias
    return call_with_weights(dense, x, **arrays)


@register(aten.linear.default, policy=Policy.CUSTOM, supports=_linear_supports,
          dynamic=_static_contraction("input", "weight"))
def aten_linear_default(ctx, input, weight, bias=None):
    """linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor

    Weight [out, in] -> Dense kernel [in, out]. After flatten of an NHWC block the input
    features are in H,W,C order: the kernel rows are permuted to match (no transpose).
    A 1-D input (torch allows it; Dense needs a rank >= 2) is a matrix-vector product.
    """
    value = as_value(ctx, input)
    if not isinstance(weight, np.ndarray):  # computed in the graph (a hypernetwork, tied
        return _runtime_linear(ctx, value, weight, bias)  # weights scaled in forward)
    kernel = dense_weight_to_keras(weight)
    if value.rank == 1:
        y = ops.matmul(ops.expand_dims(value.tensor, 0), ctx.constant(kernel, "kernel"))[0]
        return y if bias is None else keras_add(y, ctx.constant(bias, "bias"))
    layout = value.layout
    if layout.flat is not None:  # special to Linear: the kernel rows take the feature order
        kernel = kernel[flat_feature_order(layout.flat.block_shape, layout.flat.block_perm)]
        x, out_layout = value.tensor, Layout(layout.perm)
    elif physical_axis(layout, -1) == value.rank - 1:  # features already last in Keras
        x, out_layout = value.tensor, layout
    else:
        x, out_layout = ctx.canonical(value), canonical(value.rank)
    if 0 in kernel.shape:  # no Dense has 0 units (AdaptiveLogSoftmax's smallest clusters)
        y = ops.matmul(x, ctx.constant(kernel, "kernel"))
        y = y if bias is None else keras_add(y, ctx.constant(bias, "bias"))
    else:
        y = _dense(ctx, x, kernel, bias)
    ctx.out_layout = out_layout
    return y


def _runtime_linear(ctx, value, weight, bias):
    """``x @ w.T (+ b)`` with ``w`` a graph value: an einsum in torch's order (no Dense
    holds a kernel that changes per call)."""
    x = ctx.canonical(value)
    w = as_value(ctx, weight)
    if w.layout.flat is None and tuple(w.layout.perm) == (1, 0):  # held [in, out] (a .T)
        y = ops.einsum("...i,io->...o", x, w.tensor)
    else:  # TF contracts [out, in] as given, without a transpose
        y = ops.einsum("...i,oi->...o", x, ctx.canonical(w))
    if bias is not None:
        b = bias if isinstance(bias, np.ndarray) else ctx.canonical(as_value(ctx, bias))
        y = keras_add(y, b)
    ctx.out_layout = canonical(value.rank)
    return y


# Constant operands of a matrix product are weights of the model, never constants inlined
# in the graph: GPT-2's 85M Conv1D (addmm) weights inlined made its SavedModel 26 s and its
# TFLite conversion 43 s (a graph of 500 MB), against 3 and 12 s as variables.
INLINE_LIMIT = 1024  # elements; smaller constants stay in the graph (TF folds them)


def _is_kernel(x, value) -> bool:
    """``value`` can be a Dense kernel for ``x @ value``: a float32 constant matrix, ``x``
    a float32 tensor of rank >= 2."""
    return (isinstance(value, np.ndarray) and value.ndim == 2 and value.dtype == np.float32
            and not isinstance(x, np.ndarray) and len(x.shape) >= 2 and x.dtype == "float32")


def _operand(ctx, value):
    """A large constant operand as a weight (a ``Constant`` layer's), others as they are."""
    if isinstance(value, np.ndarray) and value.size >= INLINE_LIMIT:
        return ctx.constant(value, "weight")
    return value


def _matmul(ctx, x, y):
    if _is_kernel(x, y):
        return _dense(ctx, x, y)
    if not keras.backend.is_float_dtype(keras_dtype(ctx.out_dtype)):
        return _integer_matmul(ctx, x, y)
    if not isinstance(y, np.ndarray):  # computed at run time (constants are weights)
        return _batch_of_one_matmul(_operand(ctx, x), _operand(ctx, y))
    return ops.matmul(_operand(ctx, x), _operand(ctx, y))


def _batch_of_one_matmul(x, y):
    """``x @ y`` with a run-time ``y``, matrices given a batch dim of one. LiteRT runs a
    2-D product as FULLY_CONNECTED with ``y`` as run-time weights, a kernel that clamps an
    infinite result to +-FLT_MAX (torch: +-inf); a batch of one is BATCH_MATMUL, which keeps
    it. Batched products (BATCH_MATMUL already) are left as they are."""
    vector_x, vector_y = len(x.shape) == 1, len(y.shape) == 1
    if len(x.shape) > 2 or len(y.shape) > 2:
        return ops.matmul(x, y)
    # both rank 3 (a vector as a one-row / one-column matrix): TF's mixed-rank matmul is a
    # Tensordot, which the TFLite converter lowers to an invalid BATCH_MATMUL
    x = ops.expand_dims(x, (0, 1) if vector_x else 0)
    y = ops.expand_dims(y, (0, 2) if vector_y else 0)
    out = ops.squeeze(ops.matmul(x, y), 0)
    out = ops.squeeze(out, -1) if vector_y else out
    return ops.squeeze(out, 0) if vector_x else out


def _accumulator(dtype: str) -> str:
    """The integer type an exact product of ``dtype`` values is summed in: 64 bits for
    64-bit types, else 32 (the same bits mod 2**k as torch's wrapping arithmetic)."""
    return "int64" if dtype in ("int64", "uint64") else "int32"


def _integer_matmul(ctx, x, y):
    """An integer product, exact and wrapping as torch's: Keras' TF matmul computes integers
    in float32 (``[[2**40 + 1, 3]] @ [[2**20 + 1], [5]]`` lost its low bits, an int32
    overflow saturated). Products summed over the shared dim, in 64 bits for int64 and 32
    for narrower types (the same bits mod 2**k), then cast to torch's dtype."""
    want = keras_dtype(ctx.out_dtype)
    wide = _accumulator(want)
    x, y = (ops.cast(_operand(ctx, v), wide) for v in (x, y))
    vector_x, vector_y = len(x.shape) == 1, len(y.shape) == 1
    x = ops.expand_dims(x, 0) if vector_x else x
    y = ops.expand_dims(y, -1) if vector_y else y
    out = ops.sum(ops.multiply(ops.expand_dims(x, -1), ops.expand_dims(y, -3)), axis=-2)
    out = ops.squeeze(out, -1) if vector_y else out
    out = ops.squeeze(out, -1 if vector_y else -2) if vector_x else out
    return out if want == wide else ops.cast(out, want)


@register(aten.addmm.default, policy=Policy.CANONICAL,
          dynamic=_static_contraction("mat1", "mat2"))
def aten_addmm_default(ctx, self, mat1, mat2, beta=1, alpha=1):
    """addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor

    HF's Conv1D (GPT-2): ``bias + x @ W`` with constant ``W`` and a vector bias is one Dense.
    """
    if (alpha == 1 and beta == 1 and _is_kernel(mat1, mat2) and isinstance(self, np.ndarray)
            and self.dtype == np.float32 and self.shape == (mat2.shape[1],)):
        return _dense(ctx, mat1, mat2, self)
    return _beta_self_plus_alpha(ctx, self, _matmul(ctx, mat1, mat2), beta, alpha)


def _beta_self_plus_alpha(ctx, self, product, beta, alpha):
    """``beta * self + alpha * product`` with torch's (BLAS') zero rules: ``beta=0`` leaves
    ``self`` out and ``alpha=0`` the product, NaN and inf in them included (``0 * nan`` is
    NaN, not the 0 torch gives). ``product`` has the result's shape."""
    if alpha == 0:
        product = ops.zeros_like(product)
    elif alpha != 1:
        product = keras_multiply(product, alpha)
    if beta == 0:
        return product
    return keras_add(product, _operand(ctx, self) if beta == 1 else keras_multiply(self, beta))


@register(aten.addmv.default, policy=Policy.CANONICAL,
          dynamic=_static_contraction("mat", "vec"))
def aten_addmv_default(ctx, self, mat, vec, beta=1, alpha=1):
    """addmv(Tensor self, Tensor mat, Tensor vec, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    return _beta_self_plus_alpha(ctx, self, _matmul(ctx, mat, vec), beta, alpha)


@register(aten.addbmm.default, policy=Policy.CANONICAL,
          dynamic=_static_contraction("batch1", "batch2"))
def aten_addbmm_default(ctx, self, batch1, batch2, beta=1, alpha=1):
    """addbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor

    The batch of products summed over the batch (a BATCH_MATMUL and a SUM in LiteRT).
    """
    total = ops.sum(_matmul(ctx, batch1, batch2), axis=0)
    want = keras_dtype(ctx.out_dtype)
    if keras.backend.standardize_dtype(total.dtype) != want:  # Keras sums int32 into int32
        total = ops.cast(total, want)
    return _beta_self_plus_alpha(ctx, self, total, beta, alpha)


@register(aten.matmul.default, policy=Policy.CANONICAL,
          dynamic=_static_contraction("self", "other"))
def aten_matmul_default(ctx, self, other):
    """matmul(Tensor self, Tensor other) -> Tensor"""
    return _matmul(ctx, self, other)


@register(aten.bmm.default, aten.mm.default, policy=Policy.CANONICAL,
          dynamic=_static_contraction("self", "mat2"))
def aten_bmm_default(ctx, self, mat2):
    """bmm(Tensor self, Tensor mat2) -> Tensor (mm alike; the schema names it mat2)"""
    return _matmul(ctx, self, mat2)


def _einsum_supports(node, equation, tensors, path=None):
    dtype = node.meta["val"].dtype
    if dtype.is_floating_point or dtype == torch.bool:
        return None
    operands = equation.replace(" ", "").partition("->")[0].replace("...", "").split(",")
    if any(len(set(sub)) != len(sub) for sub in operands):
        return (f"a {dtype} einsum with a repeated subscript in one operand (a diagonal, "
                f"{equation!r}): compute it in float, or take torch.diagonal first")
    return None


@register(aten.einsum.default, policy=Policy.CANONICAL, supports=_einsum_supports,
          dynamic=True)
def aten_einsum_default(ctx, equation, tensors, path=None):
    """einsum(str equation, Tensor[] tensors, *, int[]? path=None) -> Tensor

    torch accepts spaces and upper-case subscripts (maxvit: ``"B G H I D, ..."``); Keras
    neither: spaces are dropped and upper-case letters renamed to unused lower-case ones.
    A one-operand reduction of narrow integers sums into int64 like torch.sum: the
    operands are widened to torch's result dtype first (Keras kept int32).
    """
    want = keras_dtype(ctx.out_dtype)
    if want != "bool" and not keras.backend.is_float_dtype(want):
        return _integer_einsum(ctx, _with_output(equation), tensors, want)
    tensors = [t if keras.backend.standardize_dtype(t.dtype) == want else ops.cast(t, want)
               for t in tensors]
    return ops.einsum(_keras_equation(_with_output(equation)), *tensors)


def _with_output(equation: str) -> str:
    """``equation`` with torch's implicit output spelled out: the subscripts used once,
    sorted A-Z before a-z (after ``...``); Keras renames upper-case letters first and would
    sort them among the lower-case ones (``ab,bC`` is ``Ca`` in torch)."""
    equation = equation.replace(" ", "")
    if "->" in equation:
        return equation
    used = equation.replace("...", "").replace(",", "")
    once = sorted(c for c in set(used) if used.count(c) == 1)
    return equation + "->" + "..." * ("..." in equation) + "".join(once)


def _integer_einsum(ctx, equation: str, tensors, want: str):
    """An integer einsum, exact and wrapping as torch's (Keras' TF einsum computes integers
    in float32, as its matmul does): every operand broadcast over all subscripts (in the
    order they first appear), the product summed over those the output drops, in 64 bits
    for int64, else 32 (the same bits mod 2**k as torch's wrapping arithmetic)."""
    inputs, out = _explicit_subscripts(equation, [len(t.shape) for t in tensors])
    inputs, out = _split(_keras_equation(",".join(inputs) + "->" + out))  # after torch's order
    letters = list(dict.fromkeys("".join(inputs)))  # first use: no transpose when it can be
    wide = _accumulator(want)
    product = None
    for sub, t in zip(inputs, tensors):
        x = ops.cast(_operand(ctx, t), wide)
        order = sorted(range(len(sub)), key=lambda i: letters.index(sub[i]))
        x = ops.transpose(x, order) if order != list(range(len(sub))) else x
        for axis, letter in enumerate(letters):
            if letter not in sub:
                x = ops.expand_dims(x, axis)
        product = x if product is None else ops.multiply(product, x)
    contracted = [i for i, letter in enumerate(letters) if letter not in out]
    if contracted:
        product = ops.sum(product, axis=contracted)
    kept = [letter for letter in letters if letter in out]
    if kept != list(out):
        product = ops.transpose(product, [kept.index(letter) for letter in out])
    return product if want == wide else ops.cast(product, want)


def _split(equation: str) -> tuple[list[str], str]:
    lhs, _, out = equation.partition("->")
    return lhs.split(","), out


def _explicit_subscripts(equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """Each operand's subscripts and the output's (``equation`` has one: _with_output),
    with ``...`` spelled out as letters (right-aligned, broadcast as torch does)."""
    inputs, out = _split(equation)
    free = [c for c in "abcdefghijklmnopqrstuvwxyz" if c not in equation]
    widest = max((rank - len(sub) + 3 for sub, rank in zip(inputs, ranks) if "..." in sub),
                 default=0)
    ellipsis = "".join(free[:widest])
    inputs = [sub.replace("...", ellipsis[widest - (rank - len(sub) + 3):] if widest else "")
              if "..." in sub else sub for sub, rank in zip(inputs, ranks)]
    return inputs, out.replace("...", ellipsis)


def _keras_equation(equation: str) -> str:
    equation = equation.replace(" ", "")
    free = iter(c for c in "abcdefghijklmnopqrstuvwxyz" if c not in equation)
    rename = {c: next(free) for c in sorted(set(equation)) if c.isupper()}
    return "".join(rename.get(c, c) for c in equation)



def _trilinear_subscripts(ranks, expands, sumdim) -> tuple[list[str], str]:
    """Einsum subscripts of ``_trilinear``: each operand holds the dims of the full rank it
    is not unsqueezed at; the output keeps the dims not summed."""
    rank = ranks[0] + len(expands[0])
    letters = "abcdefghijklmnopqrstuvwxyz"[:rank]
    inputs = ["".join(c for d, c in enumerate(letters) if d not in expand) for expand in expands]
    return inputs, "".join(c for d, c in enumerate(letters) if d not in sumdim)


def _trilinear_supports(node, i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    tensors = [i.meta["val"] for i in (i1, i2, i3)]
    inputs, _ = _trilinear_subscripts([t.dim() for t in tensors], (expand1, expand2, expand3),
                                      sumdim)
    sizes: dict[str, set] = {}
    for sub, t in zip(inputs, tensors):
        for letter, size in zip(sub, t.shape):
            sizes.setdefault(letter, set()).add(str(size))
    if any(len(s) > 1 for s in sizes.values()):
        return "_trilinear with operands broadcast against each other (sizes differ in a dim)"
    return None


@register(aten._trilinear.default, policy=Policy.CANONICAL, supports=_trilinear_supports,
          dynamic=True)
def aten__trilinear_default(ctx, i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """_trilinear(Tensor i1, Tensor i2, Tensor i3, int[] expand1, int[] expand2, int[] expand3, int[] sumdim, int unroll_dim=1) -> Tensor

    What ``nn.Bilinear`` / ``F.bilinear`` decompose into (``x1 W x2``, then ``+ bias``): the
    three operands unsqueezed at their ``expand`` dims, multiplied and summed over
    ``sumdim``; an einsum, integers exact (``_integer_einsum``). ``unroll_dim`` only picks
    torch's loop order.
    """
    tensors = [i1, i2, i3]
    inputs, out = _trilinear_subscripts([len(t.shape) for t in tensors],
                                        (expand1, expand2, expand3), sumdim)
    equation = ",".join(inputs) + "->" + out
    want = keras_dtype(ctx.out_dtype)
    if want != "bool" and not keras.backend.is_float_dtype(want):
        return _integer_einsum(ctx, equation, tensors, want)
    tensors = [ops.cast(_operand(ctx, t), want) for t in tensors]
    return ops.einsum(equation, *tensors)
