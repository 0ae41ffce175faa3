"""Graph bookkeeping ops that compute nothing in an inference model."""

from __future__ import annotations

import math
import operator

import torch

from crossport.to_keras.registry import Policy, register, register_complex

aten = torch.ops.aten


@register(aten._assert_tensor_metadata.default, aten._assert_scalar.default,
          aten.sym_constrain_range_for_size.default, aten._assert_async.msg,
          policy=Policy.CUSTOM, dynamic=True)
def aten_assert_tensor_metadata_default(ctx, *args, **kwargs):
    """Assertions torch.export records about shapes and dtypes: checked at export, dropped."""
    return


@register_complex(aten._assert_tensor_metadata.default, policy=Policy.CUSTOM, dynamic=True)
def aten_assert_tensor_metadata_complex(ctx, *args, **kwargs):
    """The same assertion on a complex tensor (a no-op ``.to()`` of one): dropped too."""
    return


@register(aten.sym_size.int, policy=Policy.CUSTOM, dynamic=True)
def aten_sym_size_int(ctx, self, dim):
    """sym_size.int(Tensor self, int dim) -> SymInt

    Shape arithmetic feeds view/expand sizes, which converters read from the output's
    shape; the symbolic value stands in for it (its dynamic dims become -1 / None).
    """
    return ctx.node.meta["val"]


def _symbolic_result(ctx, *args):
    """Arithmetic on symbolic sizes: the traced value (see aten_sym_size_int)."""
    return ctx.node.meta["val"]


for _fn in (operator.add, operator.sub, operator.mul, operator.floordiv, operator.truediv,
            operator.mod, operator.neg, operator.pow, torch.sym_max, torch.sym_min,
            torch.sym_float, torch.sym_int, math.ceil, math.floor, math.trunc):
    register(_fn, policy=Policy.CUSTOM, dynamic=True)(_symbolic_result)
