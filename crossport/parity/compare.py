"""The one compare routine: torch output leaves against Keras output leaves.

Used by the conversion check (``verify``), the export and generated-source re-checks and the
test harness, so that all of them see the same things:

- **shape**: a different shape is a mismatch;
- **dtype**: Keras must return torch's dtype exactly (int64 stays int64, bool stays bool,
  float16 / bfloat16 stay float16 / bfloat16); a different dtype is a mismatch naming both;
- **NaN / inf positions**: a NaN, +inf or -inf must sit at the same positions in both, else a
  mismatch says how many positions differ;
- **values**: integers and bools compare exactly, by value, without casting Keras' array to
  torch's dtype first; floats give the normalized error ``max|d| / max(1, max|ref|)`` over
  the positions where both are finite.

A mismatch fails the check whatever the tolerance. The error is always a finite float
(never NaN, never inf): ``None`` for an output whose values cannot be compared (a shape
mismatch), which JSON writes as ``null``; the reason is in ``mismatches``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

# float64 values near the float64 limit can overflow the difference: report this instead.
LARGEST_ERROR = float(np.finfo(np.float64).max)


def keras_feed(arrays: list):
    """What a Keras model's call takes for these inputs: the array itself for one input
    (Keras warns about a one-element list against a single-input structure), else the list.

    Example:
        >>> keras_feed([1]), keras_feed([1, 2])
        (1, [1, 2])
    """
    return list(arrays) if len(arrays) > 1 else arrays[0]


def to_numpy(value) -> np.ndarray:
    """A torch tensor or array-like as numpy, keeping bfloat16 (as ``ml_dtypes.bfloat16``)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if value.dtype == torch.bfloat16:
            import ml_dtypes  # TF's own dependency: numpy's bfloat16

            return value.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return value.numpy()
    return np.asarray(value)


def as_real(value: np.ndarray) -> np.ndarray:
    """A complex array as its (real, imag) pairs (a last dim of 2), what the comparison
    rules take; a real array as it is.

    Example:
        >>> as_real(np.array([1 + 2j])).tolist()
        [[1.0, 2.0]]
    """
    return np.stack([value.real, value.imag], -1) if np.iscomplexobj(value) else value


def from_numpy(array: np.ndarray) -> torch.Tensor:
    """A numpy array as a torch tensor sharing its memory, bfloat16 (``ml_dtypes``) too."""
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


@dataclass
class OutputComparison:
    """One output leaf: its normalized error (``None`` if not comparable) and mismatches."""

    index: int
    error: float | None
    torch_dtype: str
    keras_dtype: str
    mismatches: list[str] = field(default_factory=list)


@dataclass
class Comparison:
    """All output leaves of one input set.

    Example:
        >>> import numpy as np
        >>> c = compare_outputs([np.array([1.0, np.nan])], [np.array([1.0, 2.0])])
        >>> c.error, c.mismatches
        (0.0, ['output 0: NaN at 1 of 2 position(s) in torch but not in Keras (first at (1,): Keras 2)'])
    """

    outputs: list[OutputComparison] = field(default_factory=list)
    structure: list[str] = field(default_factory=list)  # leaf-count mismatch

    @property
    def error(self) -> float:
        """The worst normalized error over the comparable outputs (finite; 0.0 if none)."""
        return max((o.error for o in self.outputs if o.error is not None), default=0.0)

    @property
    def mismatches(self) -> list[str]:
        return self.structure + [m for o in self.outputs for m in o.mismatches]

    def passed(self, atol: float) -> bool:
        return not self.mismatches and self.error <= atol

    def to_dict(self) -> dict:
        return {"error": self.error, "mismatches": self.mismatches,
                "outputs": [asdict(o) for o in self.outputs]}


# Which framework is the reference (``ref``) and which the conversion (``got``), for messages.
FORWARD = ("torch", "Keras")
REVERSE = ("Keras", "torch")


def compare_outputs(ref: Sequence, got: Sequence, *, check_dtype: bool = True,
                    names: tuple[str, str] = FORWARD) -> Comparison:
    """Compare reference leaves ``ref`` with converted leaves ``got`` (same order).

    ``ref`` items may be torch tensors or numpy arrays; ``got`` items anything array-like.
    ``check_dtype=False`` skips the dtype rule (comparing intermediate values whose dtype
    the Keras layer chooses, as the layer-by-layer doctor does). ``names`` labels the two
    sides in messages: torch is the reference in this direction, Keras in ``to_torch``'s
    (``REVERSE``).
    """
    comparison = Comparison()
    if len(ref) != len(got):
        comparison.structure.append(f"{names[0]} returns {len(ref)} output tensor(s), "
                                    f"{names[1]} {len(got)}")
    for i, (r, g) in enumerate(zip(ref, got)):
        comparison.outputs.append(compare_output(r, g, i, check_dtype=check_dtype, names=names))
    return comparison


def compare_output(ref, got, index: int = 0, *, check_dtype: bool = True,
                   names: tuple[str, str] = FORWARD) -> OutputComparison:
    """Compare one reference leaf with one converted leaf (the module docstring's rules)."""
    ref, got = to_numpy(ref), to_numpy(got)
    result = OutputComparison(index, None, str(ref.dtype), str(got.dtype))
    where = f"output {index}"
    if ref.shape != got.shape:
        result.mismatches.append(f"{where}: shape {tuple(got.shape)} in {names[1]}, "
                                 f"{names[0]} {tuple(ref.shape)}")
        return result
    if check_dtype and ref.dtype != got.dtype:
        result.mismatches.append(f"{where}: dtype {got.dtype} in {names[1]}, {names[0]} "
                                 f"{ref.dtype}")
    if ref.size == 0:
        result.error = 0.0
        return result
    if _is_exact(ref.dtype):
        result.error = _exact_error(ref, got, where, result.mismatches)
        return result
    ref64, got64 = ref.astype(np.float64), got.astype(np.float64)
    result.mismatches.extend(nonfinite_mismatches(ref64, got64, index, names))
    result.error = _finite_error(ref64, got64)
    return result


def _is_exact(dtype: np.dtype) -> bool:
    return dtype.kind in "biu"


def _exact_error(ref: np.ndarray, got: np.ndarray, where: str, mismatches: list[str]) -> float:
    """Integers and bools: equal by value (2 != 2.5), reported as a normalized error too."""
    with np.errstate(invalid="ignore"):
        differ = ref != got  # numpy compares across dtypes by value, no cast to ref's dtype
    count = int(np.count_nonzero(differ))
    if count:
        mismatches.append(f"{where}: {count} of {ref.size} integer/bool value(s) differ "
                          "(integers compare exactly)")
    return _finite_error(ref.astype(np.float64), got.astype(np.float64))


def nonfinite_mismatches(ref, got, index: int = 0,
                         names: tuple[str, str] = FORWARD) -> list[str]:
    """Where NaN, +inf and -inf sit in one side only: one line per kind and side, with a
    count and the first such position and the other side's value there. Shapes must match.

    Example:
        >>> nonfinite_mismatches(np.array([np.inf, 1.0]), np.array([3.4e38, 1.0]))[0][:50]
        'output 0: +inf at 1 of 2 position(s) in torch but '
        >>> nonfinite_mismatches(np.array([np.inf, 1.0]), np.array([3.4e38, 1.0]))[0][50:]
        'not in Keras (first at (0,): Keras 3.4e+38)'
    """
    ref64 = to_numpy(ref).astype(np.float64)
    got64 = to_numpy(got).astype(np.float64)
    out = []
    for name, test in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
        in_ref, in_got = test(ref64), test(got64)
        for (this, other), only, values in (
                (names, in_ref & ~in_got, got64), (names[::-1], in_got & ~in_ref, ref64)):
            count = int(np.count_nonzero(only))
            if count:
                first = tuple(int(j) for j in np.argwhere(only)[0])
                out.append(f"output {index}: {name} at {count} of {only.size} position(s) in "
                           f"{this} but not in {other} (first at {first}: {other} "
                           f"{values[first]:.5g})")
    return out


def _finite_error(ref64: np.ndarray, got64: np.ndarray) -> float:
    """``max|d| / max(1, max|ref|)`` over the positions where both are finite."""
    both = np.isfinite(ref64) & np.isfinite(got64)
    if not both.any():
        return 0.0
    ref_f, got_f = ref64[both], got64[both]
    scale = max(1.0, float(np.max(np.abs(ref_f))))
    with np.errstate(over="ignore"):
        error = float(np.max(np.abs(ref_f - got_f))) / scale
    return error if math.isfinite(error) else LARGEST_ERROR
