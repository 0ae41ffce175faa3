"""torch's OpInfo database as conversion cases: one sample = one module, one verdict.

``SampleModule`` wraps an OpInfo sample (``SampleInput(input, args, kwargs)``) in an
``nn.Module``: the sample's input tensor and every floating tensor among its arguments
become model inputs, integer and bool argument tensors (indices, masks) become buffers,
everything else is a constant of the call. A sample refused because a weight is computed
in the graph (conv, linear, norms take parameters) is tried again with its floating
arguments as buffers. ``classify`` converts it with crossport (the
check on) and compares torch and the Keras model itself, on the sample and on a second
seeded random input of the same shapes and dtypes, with a comparison written here and not
crossport's: shapes, dtypes, NaN and ±inf positions, integers exactly, floats to the test
harness' tolerance (1e-5 normalized) unless torch in float64 says the difference is
float32 rounding. The verdicts:

- ``PASS``: converted, and both inputs match torch;
- ``REFUSED``: a ``CrossportError`` whose message names the op (``aten.<op>``, or the
  OpInfo's name), or a ``CaptureError`` (torch.export failed; it names the module and
  source line) -- acceptable;
- ``REFUSED-UNNAMED``: a ``CrossportError`` that names no op;
- ``CHECK-FAILED``: crossport's own parity check raised ``ParityError``;
- ``CRASH``: any other exception (a bug);
- ``SILENT``: converted and crossport's check passed, but the comparison here disagrees;
- ``SKIP``: not a conversion case (random, in-place only, sparse, unsupported dtypes,
  empty tensors refused cleanly, torch rejecting the fresh random input), with the reason.

Used by ``tests/ops/test_opinfo.py`` and ``benchmarks/opinfo_sweep.py``.
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass, field

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils import _pytree as pytree  # noqa: E402

import crossport  # noqa: E402
from crossport.errors import (  # noqa: E402
    CaptureError,
    CrossportError,
    InputError,
    ParityError,
)

DTYPES = (torch.float32, torch.int64, torch.int32, torch.bool)
ATOL = 1e-5  # tests/harness.assert_converts' default
RANDOM = ("dropout", "bernoulli", "multinomial", "normal", "rand", "uniform", "poisson",
          "exponential", "geometric", "cauchy", "log_normal", "empty", "rrelu")
SPARSE = ("sparse", "to_sparse")
UNSUPPORTED_DTYPES = (torch.complex32, torch.complex64, torch.complex128, torch.float16,
                      torch.bfloat16)


def op_id(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def op_skip_reason(op) -> str | None:
    """Why an OpInfo is not a conversion case at all, or ``None``."""
    name = op_id(op)
    if any(word in name for word in SPARSE):
        return "sparse"
    if any(word in name for word in RANDOM) and "normalize" not in name:
        return "random"
    if name.endswith("_") and not name.startswith("__"):
        return "in-place only"
    if ".in_place" in name or op.op is None:
        return "in-place only"
    if not dtypes_of(op):
        return "dtypes: none of float32/int64/int32/bool (complex, fp16/bf16 only)"
    return None


def dtypes_of(op) -> list:
    supported = op.supported_dtypes("cpu")
    return [d for d in DTYPES if d in supported]


def samples(op, dtype, limit: int | None = None) -> list:
    out = []
    try:
        it = op.sample_inputs("cpu", dtype, requires_grad=False)
        for s in it:
            out.append(s)
            if limit is not None and len(out) >= limit:
                break
    except Exception:  # noqa: BLE001  (a sample generator that fails for this dtype)
        return out
    return out


class SampleModule(torch.nn.Module):
    """``forward(*inputs) = op(input, *args, **kwargs)`` with the sample's tensors split into
    inputs (the op's input and floating arguments) and buffers (integer/bool arguments)."""

    def __init__(self, op, sample, weights_as_buffers: bool = False):
        super().__init__()
        self.fn = op.op
        leaves, self.spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
        self.slots, self.constants, inputs = [], [], []
        for i, leaf in enumerate(leaves):
            if isinstance(leaf, torch.Tensor):
                leaf = leaf.detach().clone()
                as_input = leaf.is_floating_point() and not weights_as_buffers
                if i == 0 or as_input or not inputs:
                    self.slots.append(("input", len(inputs)))
                    inputs.append(leaf)
                else:
                    name = f"arg{i}"
                    self.register_buffer(name, leaf)
                    self.slots.append(("buffer", name))
            else:
                self.slots.append(("const", len(self.constants)))
                self.constants.append(leaf)
        self.inputs = tuple(inputs)

    def forward(self, *xs):
        leaves = []
        for kind, key in self.slots:
            if kind == "input":
                leaves.append(xs[key])
            elif kind == "buffer":
                leaves.append(getattr(self, key))
            else:
                leaves.append(self.constants[key])
        inp, args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        return self.fn(inp, *args, **kwargs)


@dataclass
class Verdict:
    kind: str
    detail: str = ""
    error: float = 0.0
    notes: list = field(default_factory=list)


def random_like(inputs: tuple, seed: int) -> tuple:
    """Seeded random tensors shaped and typed like ``inputs``: normal floats, integers in
    the sample's range, random bools."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for t in inputs:
        if t.dtype.is_floating_point:
            out.append(torch.randn(t.shape, generator=gen, dtype=t.dtype))
        elif t.dtype == torch.bool:
            out.append(torch.rand(t.shape, generator=gen) > 0.5)
        else:
            low, high = (int(t.min()), int(t.max()) + 1) if t.numel() else (0, 1)
            top = torch.iinfo(t.dtype).max
            low, high = min(low, top - 1), min(max(high, low + 1), top)
            out.append(torch.randint(low, high, t.shape, generator=gen, dtype=t.dtype))
    return tuple(out)


def _np_dtype(t: torch.Tensor):
    return torch.empty((), dtype=t.dtype).numpy().dtype


def compare(ref: list, got: list, ref64: list | None) -> tuple[list[str], float]:
    """Mismatches (shape, dtype, NaN/inf positions, exact integers) and the worst normalized
    float error; with ``ref64`` (torch in float64) an error above ``ATOL`` counts only when
    Keras is clearly further from float64 than torch float32 is."""
    problems, worst = [], 0.0
    if len(ref) != len(got):
        return [f"{len(ref)} torch outputs, {len(got)} Keras outputs"], 0.0
    for i, (r, g) in enumerate(zip(ref, got)):
        g = np.asarray(g)
        rn = r.detach().numpy()
        if tuple(rn.shape) != tuple(g.shape):
            problems.append(f"output {i}: shape {tuple(g.shape)} != torch {tuple(rn.shape)}")
            continue
        if g.dtype != _np_dtype(r):
            problems.append(f"output {i}: dtype {g.dtype} != torch {r.dtype}")
            continue
        if rn.dtype.kind in "biu":
            if not np.array_equal(rn, g):
                problems.append(f"output {i}: {int((rn != g).sum())} integer value(s) differ")
            continue
        rf, gf = rn.astype(np.float64), g.astype(np.float64)
        for what, test in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
            if not np.array_equal(test(rf), test(gf)):
                problems.append(f"output {i}: {what} positions differ")
        finite = np.isfinite(rf) & np.isfinite(gf)
        if not finite.any():
            continue
        scale = max(1.0, float(np.abs(rf[finite]).max()))
        err = float(np.abs(rf[finite] - gf[finite]).max()) / scale
        if err > ATOL and ref64 is not None:
            r64 = ref64[i].detach().numpy().astype(np.float64)
            both = finite & np.isfinite(r64)
            if both.any():
                s64 = max(1.0, float(np.abs(r64[both]).max()))
                torch_d = float(np.abs(rf[both] - r64[both]).max()) / s64
                keras_d = float(np.abs(gf[both] - r64[both]).max()) / s64
                if keras_d <= max(10 * torch_d, ATOL):
                    err = min(err, ATOL)  # float32 rounding (Keras near the fp64 truth)
        worst = max(worst, err)
        if err > ATOL:
            problems.append(f"output {i}: normalized error {err:.3e} > {ATOL:.0e}")
    return problems, worst


def _tensors(out) -> list:
    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def _float64(module: SampleModule, inputs: tuple):
    """torch in float64 on ``inputs`` (floating inputs and buffers cast), or ``None``."""
    if not any(t.is_floating_point() for t in inputs):
        return None
    try:
        m64 = copy.deepcopy(module).double()
        with torch.no_grad():
            out = m64(*(t.double() if t.is_floating_point() else t for t in inputs))
        return _tensors(out)
    except Exception:  # noqa: BLE001  (the op has no float64 kernel for these arguments)
        return None


def names_op(message: str, op) -> bool:
    base = op.name.split(".")[-1].strip("_")
    return bool(re.search(r"aten\.\w+", message)) or (base and base in message)


def run_torch(module, inputs):
    with torch.no_grad():
        return module(*(t.clone() for t in inputs))


def classify(op, sample) -> Verdict:
    """Convert one OpInfo sample and give its verdict (see the module docstring)."""
    verdict = _classify(op, sample, False)
    if verdict.kind == "REFUSED" and "computed in the graph" in verdict.detail:
        verdict = _classify(op, sample, True)  # the weights as parameters-like buffers
    return verdict


def _classify(op, sample, weights_as_buffers: bool) -> Verdict:
    leaves = pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
    if any(t.dtype in UNSUPPORTED_DTYPES for t in tensors):
        return Verdict("SKIP", "dtypes: a complex/fp16/bf16 tensor in the sample")
    if any(t.is_sparse or t.layout != torch.strided for t in tensors):
        return Verdict("SKIP", "sparse")
    module = SampleModule(op, sample, weights_as_buffers).eval()
    if not module.inputs:
        return Verdict("SKIP", "no tensor input")
    empty = any(t.numel() == 0 for t in tensors)
    try:
        first = run_torch(module, module.inputs)
        again = run_torch(module, module.inputs)
    except Exception as exc:  # noqa: BLE001  (torch itself rejects the sample)
        return Verdict("SKIP", f"torch fails on the sample: {type(exc).__name__}")
    ref_leaves = _tensors(first)
    if not ref_leaves:
        return Verdict("SKIP", "no tensor output")
    if any(t.dtype in UNSUPPORTED_DTYPES or t.layout != torch.strided for t in ref_leaves):
        return Verdict("SKIP", "dtypes: a complex/fp16/bf16/sparse output")
    if not all(torch.equal(a, b) or (a.is_floating_point() and torch.allclose(
            a, b, equal_nan=True, rtol=0, atol=0)) for a, b in zip(ref_leaves, _tensors(again))):
        return Verdict("SKIP", "random (two torch runs differ)")
    try:
        conversion = crossport.convert_with_report(module, module.inputs)
    except ParityError as exc:
        return Verdict("CHECK-FAILED", _first_line(exc))
    except InputError as exc:
        if "fresh input set" in str(exc):
            return Verdict("SKIP", "torch rejects the fresh random input (domain)")
        return _refused(exc, op, empty)
    except CrossportError as exc:
        return _refused(exc, op, empty)
    except Exception as exc:  # noqa: BLE001  (the point: any other exception is a bug)
        return Verdict("CRASH", f"{type(exc).__name__}: {_first_line(exc)}")
    verdict = Verdict("PASS")
    from crossport.parity.verify import run_keras

    for k, inputs in enumerate([module.inputs, random_like(module.inputs, 987)]):
        try:
            ref = run_torch(module, inputs)
        except Exception:  # noqa: BLE001  (torch rejects the random input: sample only)
            verdict.notes.append("torch rejects the random input")
            continue
        try:
            got = run_keras(conversion.model, inputs, False, like=ref)
        except Exception as exc:  # noqa: BLE001
            return Verdict("CRASH", f"Keras model fails to run: {_first_line(exc)}")
        problems, err = compare(_tensors(ref), got, _float64(module, inputs))
        verdict.error = max(verdict.error, err)
        if problems:
            which = "sample" if k == 0 else "random input"
            return Verdict("SILENT", f"{which}: " + "; ".join(problems[:3]), err)
    return verdict


def _refused(exc, op, empty) -> Verdict:
    message = str(exc)
    if empty:
        return Verdict("SKIP", "0-element tensor, refused cleanly")
    if names_op(message, op) or isinstance(exc, CaptureError):  # capture: module and line
        return Verdict("REFUSED", f"{type(exc).__name__}: {_first_line(exc)}")
    return Verdict("REFUSED-UNNAMED", f"{type(exc).__name__}: {_first_line(exc)}")


def _first_line(exc) -> str:
    text = " ".join(str(exc).split())
    return text[:400]
