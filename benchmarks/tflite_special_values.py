"""Where a float32 ``.tflite`` file differs from torch on NaN, +-inf, +-0.0, subnormals and
huge values: one small model per op, run on LiteRT (XNNPACK, as the export's re-check runs
it) and compared element by element with torch and with the converted Keras model.

The export's re-check runs finite random inputs only, so these differences pass it. Each
case is one torch op (as a user writes it) on inputs where every element (elementwise ops)
or every row / batch entry (reductions, softmax, pools, norms) holds one special scenario;
a difference is reported by class and by the scenario it happened at, for the file and for
the Keras model (a difference of the file alone is the TFLite runtime's or converter's).

    .venv/bin/python benchmarks/tflite_special_values.py            # every case
    .venv/bin/python benchmarks/tflite_special_values.py exp neg    # cases named so
    .venv/bin/python benchmarks/tflite_special_values.py --no-xnnpack

Writes ``benchmarks/results_tflite_special.md`` (with ``--out``) and prints each row.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # this checkout's crossport

import common  # noqa: F401  (env vars before TF/torch load)
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

NAN, INF = float("nan"), float("inf")
TINY = 1e-40  # subnormal in float32
# unary elementwise ops: every value once
UNARY = [NAN, -NAN, INF, -INF, 0.0, -0.0, TINY, -TINY, 1e-30, -1e-30, 3e38, -3e38, 1e20,
         -1e20, 88.5, 89.0, -88.0, -104.0, 0.5, -0.5, 1.0, -1.0, 2.0, -3.0, 10.0, -20.0]
# binary ops: every value against every value
BINARY = [NAN, INF, -INF, 0.0, -0.0, TINY, 3e38, -3e38, 1e-30, 1.5, -2.5, 100.0]


def _fmt(v) -> str:
    v = float(v)
    if np.isnan(v):
        return "-nan" if np.signbit(v) else "nan"
    if v == 0:
        return "-0" if np.signbit(v) else "0"
    if abs(v) < np.finfo(np.float32).tiny:
        return "-sub" if v < 0 else "sub"
    return f"{v:g}"


@dataclass
class Case:
    name: str
    module: nn.Module
    args: tuple
    label: Callable[[tuple], str]  # output index -> the scenario that produced it


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn
        self.eval()

    def forward(self, *xs):
        return self.fn(*xs)


def unary(name, fn) -> Case:
    x = torch.tensor(UNARY, dtype=torch.float32)
    return Case(name, Fn(fn), (x,), lambda i: _fmt(x[i[-1]]))


def binary(name, fn) -> Case:
    s = torch.tensor(BINARY, dtype=torch.float32)
    n = len(BINARY)
    a, b = s.repeat_interleave(n).reshape(n, n), s.repeat(n).reshape(n, n)
    return Case(name, Fn(fn), (a, b), lambda i: f"({_fmt(a[i[:2]])}, {_fmt(b[i[:2]])})")


# rows for reductions and softmax: finite values with the scenario's specials
ROWS = {
    "finite": [], "nan": [NAN], "inf": [INF], "-inf": [-INF], "inf,-inf": [INF, -INF],
    "nan,inf": [NAN, INF], "all -inf": [-INF] * 6, "-0": [-0.0], "huge": [3e38, 3e38],
    "-huge": [-3e38, -3e38], "subnormal": [TINY, -TINY], "all 0": [0.0] * 6, "all -0": [-0.0] * 6,
}


def rows(width: int = 6, seed: int = 0) -> tuple[torch.Tensor, list[str]]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(len(ROWS), width, generator=gen)
    for r, values in enumerate(ROWS.values()):
        x[r, width - len(values):] = torch.tensor(values) if values else x[r, width:]
    return x, list(ROWS)


def row_case(name, fn, width: int = 6) -> Case:
    x, labels = rows(width)
    return Case(name, Fn(fn), (x,), lambda i: labels[i[0]] if len(i) else "all rows")


# images for pools and norms: batch entry n holds scenario n at a few positions
IMAGES = {"finite": [], "nan": [NAN], "inf": [INF], "-inf": [-INF], "nan,inf": [NAN, INF],
          "inf,-inf": [INF, -INF], "-0": [-0.0], "huge": [3e38, -3e38], "subnormal": [TINY, -TINY],
          "all -inf": "fill"}


def images(shape=(2, 6, 6), seed: int = 0) -> tuple[torch.Tensor, list[str]]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(len(IMAGES), *shape, generator=gen)
    for n, values in enumerate(IMAGES.values()):
        if values == "fill":
            x[n, 0] = -INF  # channel 0 all -inf
            continue
        flat = x[n].reshape(-1)
        for k, v in enumerate(values):
            flat[7 + 11 * k] = v
    return x, list(IMAGES)


def image_case(name, fn, shape=(2, 6, 6)) -> Case:
    x, labels = images(shape)
    return Case(name, Fn(fn), (x,), lambda i: labels[i[0]])


def cases() -> list[Case]:
    ew = [
        unary("exp", torch.exp), unary("expm1", torch.expm1), unary("exp2", torch.exp2),
        unary("log", torch.log), unary("log1p", torch.log1p), unary("log2", torch.log2),
        unary("log10", torch.log10), unary("sqrt", torch.sqrt), unary("rsqrt", torch.rsqrt),
        unary("reciprocal", torch.reciprocal), unary("neg", torch.neg),
        unary("abs", torch.abs), unary("square", torch.square), unary("sign", torch.sign),
        unary("sgn", torch.sgn), unary("floor", torch.floor), unary("ceil", torch.ceil),
        unary("round", torch.round), unary("trunc", torch.trunc), unary("frac", torch.frac),
        unary("sin", torch.sin), unary("cos", torch.cos), unary("tan", torch.tan),
        unary("atan", torch.atan), unary("asin", torch.asin), unary("acos", torch.acos),
        unary("sinh", torch.sinh), unary("cosh", torch.cosh), unary("tanh", torch.tanh),
        unary("asinh", torch.asinh), unary("acosh", torch.acosh), unary("atanh", torch.atanh),
        unary("erf", torch.erf), unary("erfinv", torch.erfinv),
        unary("sigmoid", torch.sigmoid), unary("logit", torch.logit),
        unary("relu", F.relu), unary("relu6", F.relu6), unary("leaky_relu", F.leaky_relu),
        unary("hardtanh", F.hardtanh), unary("elu", F.elu), unary("celu", F.celu),
        unary("selu", F.selu), unary("gelu", F.gelu),
        unary("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")), unary("silu", F.silu),
        unary("mish", F.mish), unary("hardswish", F.hardswish),
        unary("hardsigmoid", F.hardsigmoid), unary("softplus", F.softplus),
        unary("logsigmoid", F.logsigmoid), unary("softsign", F.softsign),
        unary("tanhshrink", F.tanhshrink), unary("hardshrink", F.hardshrink),
        unary("softshrink", F.softshrink), unary("threshold", lambda x: F.threshold(x, 0.5, -2.0)),
        unary("clamp", lambda x: x.clamp(-1.0, 1.0)), unary("clamp_min", lambda x: x.clamp(min=0.0)),
        unary("clamp_inf", lambda x: x.clamp(-INF, 5.0)),
        unary("nan_to_num", torch.nan_to_num), unary("isnan", torch.isnan),
        unary("isinf", torch.isinf), unary("isfinite", torch.isfinite),
        unary("isposinf", torch.isposinf), unary("isneginf", torch.isneginf),
        unary("signbit", torch.signbit),
        unary("eq_inf", lambda x: x == INF), unary("lt_-inf", lambda x: x > -INF),
        unary("add_inf", lambda x: x + INF), unary("mul_2", lambda x: x * 2.0),
        unary("div_3", lambda x: x / 3.0), unary("sub_from_0", lambda x: 0.0 - x),
        unary("pow_2", lambda x: x ** 2), unary("pow_0.5", lambda x: x ** 0.5),
        unary("pow_-1", lambda x: x ** -1), unary("pow_3", lambda x: x ** 3),
        unary("rpow_2", lambda x: 2.0 ** x),
        unary("masked_fill_-inf", lambda x: x.masked_fill(x > 1.0, -INF)),
        unary("masked_fill_nan", lambda x: x.masked_fill(x > 1.0, NAN)),
        unary("where_inf", lambda x: torch.where(x > 1.0, x, INF)),
        unary("full_like_inf", lambda x: x * 0 + torch.full_like(x, -INF)),
        unary("to_int", lambda x: x.clamp(-100, 100).to(torch.int32)),
        unary("round_dec", lambda x: torch.round(x, decimals=0)),
    ]
    bi = [
        binary("add", torch.add), binary("sub", torch.sub), binary("mul", torch.mul),
        binary("div", torch.div), binary("floor_divide", torch.floor_divide),
        binary("div_trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc")),
        binary("remainder", torch.remainder), binary("fmod", torch.fmod),
        binary("pow", torch.pow), binary("atan2", torch.atan2),
        binary("maximum", torch.maximum), binary("minimum", torch.minimum),
        binary("fmax", torch.fmax), binary("fmin", torch.fmin), binary("hypot", torch.hypot),
        binary("copysign", torch.copysign), binary("xlogy", torch.xlogy),
        binary("eq", torch.eq), binary("lt", torch.lt), binary("ge", torch.ge),
        binary("ne", torch.ne),
        binary("where", lambda a, b: torch.where(a > b, a, b)),
        binary("lerp", lambda a, b: torch.lerp(a, b, 0.25)),
        binary("addcmul", lambda a, b: torch.addcmul(a, a, b, value=0.5)),
        binary("prelu_like", lambda a, b: torch.where(a > 0, a, a * 0.25) + 0 * b),
    ]
    red = [
        row_case(n, f) for n, f in {
            "sum": lambda x: x.sum(-1), "mean": lambda x: x.mean(-1),
            "prod": lambda x: x.prod(-1), "amax": lambda x: x.amax(-1),
            "amin": lambda x: x.amin(-1), "max_dim": lambda x: tuple(x.max(-1)),
            "argmax": lambda x: x.argmax(-1), "argmin": lambda x: x.argmin(-1),
            "var": lambda x: x.var(-1), "std": lambda x: x.std(-1),
            "var_mean": lambda x: torch.var_mean(x, -1),
            "logsumexp": lambda x: torch.logsumexp(x, -1),
            "norm2": lambda x: torch.linalg.vector_norm(x, dim=-1),
            "norm1": lambda x: torch.linalg.vector_norm(x, 1, dim=-1),
            "norm_inf": lambda x: torch.linalg.vector_norm(x, INF, dim=-1),
            "normalize": lambda x: F.normalize(x, dim=-1),
            "cumsum": lambda x: x.cumsum(-1), "cumprod": lambda x: x.cumprod(-1),
            "cummax": lambda x: tuple(torch.cummax(x, -1)),
            "any_isnan": lambda x: torch.isnan(x).any(-1), "all": lambda x: (x > 0).all(-1),
            "sort": lambda x: tuple(torch.sort(x, dim=-1, stable=True)),
            "topk": lambda x: torch.topk(x, 2, -1).values,
            "median": lambda x: torch.median(x, -1).values,
            "softmax": lambda x: F.softmax(x, -1), "log_softmax": lambda x: F.log_softmax(x, -1),
            "softmax_dim0": lambda x: F.softmax(x, 0).T,
            "softmin": lambda x: F.softmin(x, -1),
            "layer_norm": lambda x: F.layer_norm(x, (6,)),
            "rms_norm": lambda x: F.rms_norm(x, (6,)),
            "glu": lambda x: F.glu(x, -1),
            "masked_softmax": lambda x: F.softmax(x.masked_fill(x < -1.0, -INF), -1),
            "sdpa": lambda x: F.scaled_dot_product_attention(
                x[:, None, :, None], x[:, None, :, None], x[:, None, :, None]).flatten(1),
            "sdpa_causal": lambda x: F.scaled_dot_product_attention(
                x[:, None, :, None], x[:, None, :, None], x[:, None, :, None],
                is_causal=True).flatten(1),
        }.items()
    ]
    conv = nn.Conv2d(2, 3, 3, padding=1)
    bn = nn.BatchNorm2d(2)
    gn, inorm, ln = nn.GroupNorm(1, 2), nn.InstanceNorm2d(2), nn.LayerNorm([6, 6])
    pools = [
        image_case(n, f) for n, f in {
            "max_pool2d": lambda x: F.max_pool2d(x, 2), "max_pool2d_pad":
            lambda x: F.max_pool2d(x, 3, 2, 1), "max_pool1d": lambda x: F.max_pool1d(x[:, 0], 2),
            "avg_pool2d": lambda x: F.avg_pool2d(x, 2),
            "adaptive_avg": lambda x: F.adaptive_avg_pool2d(x, 1),
            "adaptive_max": lambda x: F.adaptive_max_pool2d(x, 2),
            "global_max": lambda x: F.adaptive_max_pool2d(x, 1),
            "conv2d": conv, "batch_norm": bn, "group_norm": gn, "instance_norm": inorm,
            "layer_norm_2d": ln, "upsample_bilinear": lambda x: F.interpolate(
                x, scale_factor=2, mode="bilinear"),
            "channel_softmax": lambda x: F.softmax(x, 1), "pixel_shuffle":
            lambda x: F.pixel_shuffle(x[:, :1].repeat(1, 4, 1, 1), 2),
        }.items()
    ]
    return ew + bi + red + pools


def classify(want: np.ndarray, got: np.ndarray) -> np.ndarray:
    """One class name per element ('' where they agree)."""
    want, got = np.asarray(want), np.asarray(got)
    out = np.full(want.shape, "", dtype=object)
    if want.shape != got.shape:
        out[...] = f"shape {got.shape}"
        return out
    if want.dtype.kind != "f":
        out[want != got] = "value"
        return out
    got = got.astype(want.dtype)
    wn, gn = np.isnan(want), np.isnan(got)
    wi, gi = np.isinf(want), np.isinf(got)
    out[wn & ~gn] = "NaN lost"
    out[~wn & gn] = "NaN made"
    fmax = np.finfo(np.float32).max
    sat = wi & ~gi & ~gn & (np.abs(got) == fmax)
    out[sat] = "inf saturated"
    out[wi & ~gi & ~gn & ~sat] = "inf lost"
    out[~wi & ~wn & gi] = "inf made"
    out[wi & gi & (np.sign(want) != np.sign(got))] = "inf sign"
    finite = np.isfinite(want) & np.isfinite(got)
    zero = finite & (want == 0) & (got == 0) & (np.signbit(want) != np.signbit(got))
    out[zero] = "zero sign"
    with np.errstate(all="ignore"):
        diff = np.abs(want.astype(np.float64) - got.astype(np.float64))
        scale = np.maximum(np.abs(want.astype(np.float64)), 1e-30)
        bad = finite & (diff > 1e-4 * scale) & (diff > 1e-6)
        tiny = finite & (np.abs(want) < 1.2e-38) & (diff > 0) & (want != 0)
    out[bad & ~zero] = "value"
    out[tiny & (out == "")] = "subnormal"
    return out


def differences(case: Case, wants, gots) -> dict[str, list[str]]:
    """``{class: [scenarios]}`` over every output of the case."""
    found: dict[str, list[str]] = {}
    for k, (want, got) in enumerate(zip(wants, gots)):
        classes = classify(want, got)
        for index in zip(*np.nonzero(classes != "")):
            cls = classes[index]
            where = case.label(tuple(int(i) for i in index))
            if "sub" in where or cls == "subnormal":
                cls = "subnormal (flushed)"  # TF's and XNNPACK's kernels flush them
            if len(wants) > 1:
                where = f"out{k}:{where}"
            detail = f"{where}->{_fmt(np.asarray(got)[index])} (torch {_fmt(want[index])})" \
                if np.asarray(want).dtype.kind == "f" and want.ndim else where
            items = found.setdefault(cls, [])
            if detail not in items:
                items.append(detail)
    return found


def run_case(case: Case, workdir: Path, xnnpack: bool) -> dict:
    import crossport
    from crossport.export import formats
    from crossport.parity.verify import leaves, run_keras

    case.module.eval()
    with torch.no_grad():
        ref = case.module(*case.args)
    wants = [np.asarray(a) for a in leaves(ref)]
    conversion = crossport.convert_with_report(case.module, case.args, check=False)
    keras_out = [np.asarray(a) for a in run_keras(conversion.model, case.args, False, like=ref)]
    path = workdir / f"{case.name}.tflite"
    formats.write_tflite(conversion.model, path, "float32", conversion)
    ops = sorted(set(formats.tflite_op_names(path)))
    names = [t.name.split(":")[0] for t in conversion.model.inputs]
    run = _tflite_runner(path, names, xnnpack)
    from crossport.parity.verify import from_keras_outputs, torch_order

    flat = run([a.numpy() for a in case.args])
    order = torch_order(conversion.model, ref)
    file_out = [np.asarray(a) for a in from_keras_outputs([flat[j] for j in order], False)]
    return {"case": case.name, "ops": ops,
            "file": differences(case, wants, file_out),
            "keras": differences(case, wants, keras_out)}


def _tflite_runner(path: Path, names, xnnpack: bool):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from crossport.export.formats import _output_index

    kwargs = {} if xnnpack else {"experimental_op_resolver_type":
                                 OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}
    runner = Interpreter(model_path=str(path), num_threads=1, **kwargs
                         ).get_signature_runner("serving_default")

    def run(arrays):
        got = runner(**dict(zip(names, arrays)))
        return [got[k] for k in sorted(got, key=_output_index)]
    return run


def _summary(found: dict[str, list[str]], limit: int = 6) -> str:
    if not found:
        return "same"
    parts = []
    for cls, where in sorted(found.items()):
        more = f" +{len(where) - limit}" if len(where) > limit else ""
        parts.append(f"**{cls}**: {'; '.join(where[:limit])}{more}")
    return "<br>".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="cases to run (default: all)")
    parser.add_argument("--no-xnnpack", action="store_true",
                        help="run LiteRT's builtin kernels without the XNNPACK delegate")
    parser.add_argument("--out", type=Path, help="write the Markdown table here")
    parser.add_argument("--json", type=Path, help="write the raw rows here")
    args = parser.parse_args()
    common.configure_runtime(1)
    chosen = [c for c in cases() if not args.names or c.name in args.names]
    rows_out, lines = [], ["| op | TFLite ops | file vs torch | Keras model vs torch |",
                           "|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for case in chosen:
            start = time.perf_counter()
            try:
                row = run_case(case, Path(tmp), not args.no_xnnpack)
            except Exception as exc:  # a refused or failing case is a row too
                row = {"case": case.name, "error": f"{type(exc).__name__}: {exc}"[:300]}
            row["seconds"] = round(time.perf_counter() - start, 2)
            rows_out.append(row)
            if "error" in row:
                line = f"| {case.name} | | error: {row['error']} | |"
            else:
                line = (f"| {case.name} | {' '.join(row['ops'])} | {_summary(row['file'])} "
                        f"| {_summary(row['keras'])} |")
            lines.append(line)
            print(line, flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    if args.json:
        args.json.write_text(json.dumps(rows_out, indent=1))


if __name__ == "__main__":
    main()
