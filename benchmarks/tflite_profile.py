"""TFLite op counts, XNNPACK partitions and latency of converted torchvision models.

For each model: convert (random seeded weights, BN calibrated), export with
``crossport.export(..., format="tflite")``, count the file's ops per type, count the
partitions LiteRT's default XNNPACK delegate makes of it (each op XNNPACK does not take, such
as GATHER or a strided STRIDED_SLICE, splits the graph), and time ``invoke()`` against torch
eager in the same process (1 thread, batch 1, runs interleaved). ``--tflite`` adds
previously exported files of the same model (e.g. from an older commit) to the timing.

    .venv/bin/python benchmarks/tflite_profile.py swin_t vit_b_16 --runs 20
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # sets env vars before TF/torch load
import numpy as np
import torch

SHAPE = (1, 3, 224, 224)


def op_counts(path: Path) -> dict[str, int]:
    """Ops per type of a ``.tflite`` file (no delegate applied)."""
    from crossport.export.formats import tflite_op_names

    return dict(sorted(Counter(tflite_op_names(path)).items()))


def interpreter(path: Path, x: np.ndarray):
    """A 1-thread LiteRT interpreter (default XNNPACK delegate) fed ``x``, and its call."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(path), num_threads=1)
    it.allocate_tensors()
    (inp,), (out,) = it.get_input_details(), it.get_output_details()
    it.set_tensor(inp["index"], x)

    def run():
        it.invoke()
        return it.get_tensor(out["index"])
    partitions = sum(op["op_name"] == "DELEGATE" for op in it._get_ops_details())
    return run, partitions


def profile(name: str, runs: int, extra: list[Path], out: Path) -> dict:
    import crossport

    tv = common.load_torchvision()
    torch.manual_seed(0)
    module = common.calibrate_batchnorm(getattr(tv.models, name)(weights=None), SHAPE)
    x = torch.randn(SHAPE)
    conversion = crossport.convert_with_report(module, (x,), check=False)
    path = out / f"{name}.tflite"
    path.unlink(missing_ok=True)
    crossport.export(conversion, path, format="tflite")
    with torch.no_grad():
        ref = module(x).numpy()

    def eager():
        with torch.no_grad():
            return module(x).numpy()
    fns, rows = {"torch": eager}, {}
    for file in [path, *extra]:
        run, partitions = interpreter(file, x.numpy())
        error = float(np.abs(run() - ref).max() / max(1.0, np.abs(ref).max()))
        fns[str(file)] = run
        rows[str(file)] = {"ops": op_counts(file), "partitions": partitions, "error": error}
    samples = common.interleaved_latency(fns, runs, warmup=3)
    torch_ms = common.summarize(samples["torch"])["median_ms"]
    for key, row in rows.items():
        row["median_ms"] = common.summarize(samples[key])["median_ms"]
        row["ratio_to_torch"] = row["median_ms"] / torch_ms
    return {"model": name, "torch_ms": torch_ms, "tflite": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--tflite", nargs="*", type=Path, default=[],
                        help="older .tflite files of the (single) model to time alongside")
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp()))
    args = parser.parse_args()
    common.configure_runtime(1)
    for name in args.models:
        print(json.dumps(profile(name, args.runs, args.tflite, args.out), indent=1), flush=True)


if __name__ == "__main__":
    main()
