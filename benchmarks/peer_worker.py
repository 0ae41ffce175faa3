"""One converter, one model, one process: convert, then time it against torch eager.

Run by ``peers.py`` with the python of the converter's venv (the project venv for crossport,
``peer_venvs.py``'s venvs for litert-torch and nobuco). It imports only torch, torchvision,
numpy and the converter named on the command line, so it runs in any of those venvs. The
torch module is rebuilt from the model name and loaded with the state_dict ``peers.py``
saved in the project venv, so every converter sees the same weights and the same input.

Every latency is timed in this process, interleaved with torch eager on the same module
and input (1 thread each), so the ratios to torch eager are comparable across processes
even when the machine's load differs between them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # sets TF/Keras/OpenMP env vars before those libraries load
import numpy as np
import torch

THREADS = 1

# name -> (torchvision constructor, constructor kwargs)
TORCHVISION = {
    "resnet18": ("resnet18", {}),
    "resnet50": ("resnet50", {}),
    "mobilenet_v2": ("mobilenet_v2", {}),
    "efficientnet_b0": ("efficientnet_b0", {}),
    "regnet_y_400mf": ("regnet_y_400mf", {}),
    "convnext_tiny": ("convnext_tiny", {}),
    "deeplabv3_mobilenet_v3_large": ("segmentation.deeplabv3_mobilenet_v3_large",
                                     {"weights_backbone": None, "aux_loss": False}),
    "vit_b_16": ("vit_b_16", {}),
    "swin_t": ("swin_t", {}),
}
# keras.applications twins: name -> (constructor, kwargs)
KERAS_TWINS = {
    "resnet50": ("ResNet50", {}),
    "mobilenet_v2": ("MobileNetV2", {}),
    "efficientnet_b0": ("EfficientNetB0", {}),
    "convnext_tiny": ("ConvNeXtTiny", {"include_preprocessing": False}),
}


class OutputOnly(torch.nn.Module):
    """torchvision segmentation models return ``{"out": ...}``; every converter gets a tensor."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)["out"]


def build_model(name: str) -> torch.nn.Module:
    """The torchvision module for ``name`` with random weights (overwritten by the state);
    a name not in ``TORCHVISION`` is a plain ``torchvision.models`` constructor."""
    path, kwargs = TORCHVISION.get(name, (name, {}))
    ctor = common.load_torchvision().models
    for part in path.split("."):
        ctor = getattr(ctor, part)
    module = ctor(weights=None, **kwargs)
    return OutputOnly(module) if name.startswith("deeplab") else module


def configure_threads() -> None:
    torch.set_num_threads(THREADS)
    try:
        torch.set_num_interop_threads(THREADS)
    except RuntimeError:
        pass


def configure_tf_threads() -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(THREADS)
    tf.config.threading.set_inter_op_parallelism_threads(THREADS)


def seeded_input(detail: dict) -> np.ndarray:
    """Seeded input for an interpreter input ``detail``: normal floats, or token ids below
    1000 for integer inputs (in the file's own integer type)."""
    rng = np.random.default_rng(0)
    if np.issubdtype(detail["dtype"], np.integer):
        return rng.integers(0, 1000, detail["shape"]).astype(detail["dtype"])
    return rng.standard_normal(detail["shape"]).astype(detail["dtype"])


def tflite_runner(path: Path, x_in: np.ndarray | None = None) -> Callable[[], np.ndarray]:
    """LiteRT interpreter (XNNPACK, 1 thread), allocated once; a call is invoke + fetch.

    ``x_in`` None: :func:`seeded_input` for the file's input.
    """
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path), num_threads=THREADS)
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    if x_in is None:
        x_in = seeded_input(inp)
    if tuple(inp["shape"]) != x_in.shape:
        raise ValueError(f"TFLite input shape {tuple(inp['shape'])}, expected {x_in.shape}")
    interpreter.set_tensor(inp["index"], x_in)

    def run():
        interpreter.invoke()
        return interpreter.get_tensor(out["index"])
    return run


def tf_graph_runner(model, x_in: np.ndarray) -> Callable[[], np.ndarray]:
    """``model(x, training=False)`` in a graph-mode tf.function with a fixed signature."""
    import tensorflow as tf

    fn = tf.function(lambda x: model(x, training=False), jit_compile=False,
                     input_signature=[tf.TensorSpec(x_in.shape, tf.float32)])
    x = tf.constant(x_in)
    return lambda: np.asarray(fn(x))


def tiny_model() -> torch.nn.Module:
    """Converted once, untimed, so one-time initialisation is not charged to the model."""
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                               torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(), torch.nn.Linear(4, 2)).eval()


# -- converters: each returns {variant: runner}, timings and notes -------------------------
def run_crossport(name, module, x, workdir: Path, out: dict) -> dict[str, Callable]:
    import crossport

    configure_tf_threads()
    small = torch.randn(1, 3, 16, 16)
    warm = crossport.convert_with_report(tiny_model(), (small,), channels_last_io=True)
    crossport.export(warm, workdir / "warm.tflite", format="tflite")
    out["versions"]["crossport"] = crossport.__version__
    start = time.perf_counter()
    conv = crossport.convert_with_report(module, (x,), check=True, channels_last_io=True)
    out["convert_s"] = time.perf_counter() - start
    out["convert_stages_s"] = conv.seconds
    x_nhwc = x.permute(0, 2, 3, 1).contiguous().numpy()
    runners = {"tf_graph": tf_graph_runner(conv.model, x_nhwc)}
    start = time.perf_counter()
    exported = crossport.export(conv, workdir / "crossport.tflite", format="tflite")
    out["export_s"] = time.perf_counter() - start
    out["tflite_bytes"] = exported.path.stat().st_size
    runners["tflite"] = tflite_runner(exported.path, x_nhwc)
    if name in KERAS_TWINS:
        runners["keras_app"] = _keras_twin(name, x_nhwc)
    return runners


def _keras_twin(name: str, x_nhwc: np.ndarray) -> Callable:
    import keras

    ctor, kwargs = KERAS_TWINS[name]
    model = getattr(keras.applications, ctor)(weights=None, input_shape=x_nhwc.shape[1:],
                                              classifier_activation=None, **kwargs)
    return tf_graph_runner(model, x_nhwc)


def run_litert_torch(name, module, x, workdir: Path, out: dict) -> dict[str, Callable]:
    import litert_torch

    small = torch.randn(1, 3, 16, 16)
    nhwc = litert_torch.to_channel_last_io
    litert_torch.convert(nhwc(tiny_model(), args=[0]).eval(),
                         (small.permute(0, 2, 3, 1),)).export(str(workdir / "warm.tflite"))
    out["versions"]["litert-torch"] = _dist_version("litert-torch")
    x_nhwc = x.permute(0, 2, 3, 1).contiguous()
    wrapped = nhwc(module, args=[0], outputs=[0] if name.startswith("deeplab") else [])
    start = time.perf_counter()
    edge = litert_torch.convert(wrapped.eval(), (x_nhwc,))
    out["convert_s"] = time.perf_counter() - start
    path = workdir / "litert_torch.tflite"
    start = time.perf_counter()
    edge.export(str(path))
    out["export_s"] = time.perf_counter() - start
    out["tflite_bytes"] = path.stat().st_size
    return {"tflite": tflite_runner(path, x_nhwc.numpy())}


def run_nobuco(name, module, x, workdir: Path, out: dict) -> dict[str, Callable]:
    import nobuco
    from nobuco import ChannelOrder

    configure_tf_threads()
    order = {"inputs_channel_order": ChannelOrder.TENSORFLOW,
             "outputs_channel_order": ChannelOrder.TENSORFLOW}
    nobuco.pytorch_to_keras(tiny_model(), args=[torch.randn(1, 3, 16, 16)], **order)
    out["versions"]["nobuco"] = _dist_version("nobuco")
    start = time.perf_counter()
    model = nobuco.pytorch_to_keras(module, args=[x], **order)
    out["convert_s"] = time.perf_counter() - start
    return {"tf_graph": tf_graph_runner(model, x.permute(0, 2, 3, 1).contiguous().numpy())}


def _dist_version(dist: str) -> str:
    import importlib.metadata

    return importlib.metadata.version(dist)


CONVERTERS = {"crossport": run_crossport, "litert-torch": run_litert_torch,
              "nobuco": run_nobuco}


# -- measuring -----------------------------------------------------------------------------
def max_error(ref: np.ndarray, got: np.ndarray) -> float:
    """``max|d| / max(1, max|ref|)``, the output in NHWC turned back to torch's NCHW."""
    got = np.asarray(got)
    if got.ndim == 4 and got.shape != ref.shape:
        got = got.transpose(0, 3, 1, 2)
    return float(np.abs(ref - got).max() / max(1.0, float(np.abs(ref).max())))


def export_seconds(module, x) -> float:
    torch.export.export(tiny_model(), (torch.randn(1, 3, 16, 16),), strict=False)  # warm
    return common.time_once(lambda: torch.export.export(module, (x,), strict=False))


def measure(args: argparse.Namespace) -> dict[str, Any]:
    configure_threads()
    out: dict[str, Any] = {"converter": args.converter, "model": args.model,
                           "versions": {"torch": torch.__version__}, "errors": {}}
    module = build_model(args.model)
    module.load_state_dict(torch.load(args.state, weights_only=True))
    module.eval()
    x = torch.load(args.input, weights_only=True)
    with torch.no_grad():
        ref = module(x).numpy()
    out["torch_export_s"] = export_seconds(module, x)

    def torch_eager():
        with torch.no_grad():
            return module(x).numpy()

    runners = {"torch_eager": torch_eager}
    try:
        runners.update(CONVERTERS[args.converter](args.model, module, x, args.workdir, out))
    except Exception as exc:  # noqa: BLE001 (a failed conversion is a result)
        out["errors"]["convert"] = f"{type(exc).__name__}: {exc}"[:2000]
        traceback.print_exc()
    out["max_error"] = {}
    for key, run in list(runners.items())[1:]:
        try:
            out["max_error"][key] = max_error(ref, run())
        except Exception as exc:  # noqa: BLE001 (a variant that cannot run: recorded)
            out["errors"][key] = f"{type(exc).__name__}: {exc}"[:2000]
            runners.pop(key)
    samples = common.interleaved_latency(runners, args.runs, args.warmup)
    out["latency"] = {k: common.summarize(v) for k, v in samples.items()}
    out["ratio_to_torch"] = {k: float(np.median([a / b for a, b in zip(v, samples["torch_eager"])]))
                             for k, v in samples.items() if k != "torch_eager"}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--converter", choices=list(CONVERTERS), required=True)
    parser.add_argument("--model", choices=list(TORCHVISION), required=True)
    parser.add_argument("--state", type=Path, required=True, help="torch.save'd state_dict")
    parser.add_argument("--input", type=Path, required=True, help="torch.save'd input tensor")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="JSON result file")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    args.out.write_text(json.dumps(measure(args), indent=1))


if __name__ == "__main__":
    main()
