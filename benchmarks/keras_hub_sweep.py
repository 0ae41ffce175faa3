"""Sweep every keras_hub ``*Backbone`` through crossport's Keras -> PyTorch direction.

For each ``*Backbone`` class ``keras_hub.models`` exports, build a tiny model from its
constructor (generic small arguments, kept only where the constructor takes them, plus small
per-family hints; nothing is downloaded: no presets), seeded, with every constant weight made
live (norm gains, biases, BN statistics randomised, so no norm is an identity); feed seeded
inputs (token ids with a padding mask for text, images for vision, features for audio);
convert with ``crossport.to_torch_with_report`` (its own check on), then compare the torch
module independently against Keras on a second seeded input, with float64 evidence (the
module run in float64) past the tolerance. Each model is classified:

    PASS          converted; the check and the independent compare pass (or are rounding)
    REFUSED       a CrossportError (unsupported layer/op, input error ...): first line kept
    CHECK-FAILED  ParityError (rounding or semantic, from the report's verdict)
    CRASH         any other exception inside crossport (ConversionError wraps a converter's)
    SILENT        the check passed but the independent compare fails (semantic)
    BUILD-FAILED  keras_hub itself could not build or run the tiny model (not crossport's)
    SKIPPED       the backbone needs sub-model instances or inputs the sweep does not make
    TIMEOUT       past the per-model time budget
    DIED          the process died on it (segfault, out of memory)
    DEAD          even made live, the tiny model's output is not O(1) or ignores the input

Results are written after every model (JSON and markdown), so a partial run is useful;
``--resume`` skips the models already in the JSON and records the one a dead process was on
as DIED (so a shell loop can restart it). From the repository root:

    until python -m benchmarks.keras_hub_sweep --resume; do :; done
    python -m benchmarks.keras_hub_sweep --only BertBackbone,ResNetBackbone
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np
import torch

import crossport
from crossport.errors import ConversionError, CrossportError, ParityError
from crossport.parity import normalized_error, rounding_verdict

BATCH, VOCAB, SEQ, IMAGE, ATOL = 2, 64, 8, 32, 1e-4
MAX_PARAMETERS = 30_000_000

# Families users bring most: run first so a partial sweep covers them.
FIRST = ["BertBackbone", "RobertaBackbone", "DistilBertBackbone", "AlbertBackbone",
         "GPT2Backbone", "LlamaBackbone", "Llama3Backbone", "MistralBackbone", "GemmaBackbone",
         "Qwen2Backbone", "Phi3Backbone", "ViTBackbone", "DeiTBackbone", "ResNetBackbone",
         "EfficientNetBackbone", "MobileNetBackbone", "DenseNetBackbone", "VGGBackbone",
         "XceptionBackbone", "CSPNetBackbone", "WhisperBackbone", "SAMBackbone"]

# Generic small arguments: passed only to constructors that take them.
SMALL = dict(
    vocabulary_size=VOCAB, vocab_size=VOCAB, num_layers=2, num_heads=2, num_query_heads=2,
    num_key_value_heads=1, num_attention_heads=2, hidden_dim=16, hidden_size=16,
    intermediate_dim=32, intermediate_size=32, embedding_dim=16, head_dim=8, head_size=8,
    max_sequence_length=32, max_position_embeddings=32, num_experts=2, top_k=1,
    moe_intermediate_dim=16, shared_expert_intermediate_dim=16,
    shared_expert_intermediate_size=16, mlp_dim=32, patch_size=4,
    image_shape=(IMAGE, IMAGE, 3), dropout=0.0, dropout_rate=0.0,
)

# Per-family constructor arguments on top of SMALL (stackwise lists, shapes ...).
HINTS: dict[str, dict] = {
    "ResNetBackbone": dict(input_conv_filters=[16], input_conv_kernel_sizes=[7],
                           stackwise_num_filters=[64, 16], stackwise_num_blocks=[1, 1],
                           stackwise_num_strides=[1, 2], block_type="bottleneck_block"),
    "VGGBackbone": dict(stackwise_num_repeats=[1, 1], stackwise_num_filters=[8, 16]),
    "DenseNetBackbone": dict(stackwise_num_repeats=[1, 2], growth_rate=4),
    "XceptionBackbone": dict(stackwise_conv_filters=[[8, 16], [16, 16], [32, 32]],
                             stackwise_pooling=[True, True, False]),
    "CSPNetBackbone": dict(stem_filters=8, stem_kernel_size=3, stem_strides=1,
                           stackwise_strides=2, stackwise_depth=[1, 1],
                           stackwise_num_filters=[8, 16], block_type="dark_block",
                           stage_type="csp", stem_padding="same", down_growth=True,
                           bottle_ratio=(0.5, 1.0), block_ratio=(1.0, 0.5),
                           expand_ratio=(2.0, 1.0)),
    "EfficientNetBackbone": dict(
        stackwise_kernel_sizes=[3, 3, 3], stackwise_num_repeats=[1, 1, 1],
        stackwise_input_filters=[8, 8, 16], stackwise_output_filters=[8, 16, 16],
        stackwise_expansion_ratios=[1, 4, 4], stackwise_squeeze_and_excite_ratios=[0, 0, 0.25],
        stackwise_strides=[1, 2, 2], stackwise_block_types=["fused", "fused", "unfused"],
        stackwise_force_input_filters=[0] * 3, stackwise_nores_option=[False] * 3,
        width_coefficient=1.0, depth_coefficient=1.0),
    "MobileNetBackbone": dict(
        stackwise_expansion=[[16, 24], [32]], stackwise_num_blocks=[2, 1],
        stackwise_num_filters=[[8, 8], [16]], stackwise_kernel_size=[[3, 3], [5]],
        stackwise_num_strides=[[2, 1], [2]], stackwise_se_ratio=[[None, None], [0.25]],
        stackwise_activation=[["relu", "relu"], ["hard_swish"], ["hard_swish"]],
        stackwise_padding=[[1, 1], [2]], output_num_filters=32, input_activation="hard_swish",
        output_activation="hard_swish", input_num_filters=8, depthwise_filters=8,
        depthwise_stride=2, depthwise_residual=False, squeeze_and_excite=0.5,
        last_layer_filter=32),
    "MiTBackbone": dict(layerwise_depths=[1, 1], hidden_dims=[8, 16], num_layers=2,
                        layerwise_num_heads=[1, 2], layerwise_sr_ratios=[4, 2],
                        max_drop_path_rate=0.0, layerwise_patch_sizes=[7, 3],
                        layerwise_strides=[4, 2]),
    "HGNetV2Backbone": dict(embedding_size=16, stem_channels=[3, 8, 16], hidden_act="relu",
                            use_learnable_affine_block=False, depths=[1, 1],
                            hidden_sizes=[32, 64],
                            stackwise_stage_filters=[[16, 8, 32, 1, 1, 3],
                                                     [32, 16, 64, 1, 1, 3]],
                            apply_downsample=[False, True],
                            use_lightweight_conv_block=[False, False]),
    "SwinTransformerBackbone": dict(embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                                    window_size=4, patch_size=2),
    "ViTDetBackbone": dict(num_layers=2, global_attention_layer_indices=[1], patch_size=8,
                           num_output_channels=8, window_size=2),
    "DINOV2Backbone": dict(patch_size=14, image_shape=(28, 28, 3), layer_scale_init_value=1.0,
                           num_register_tokens=0),
    "DINOV3Backbone": dict(patch_size=8, layer_scale_init_value=1.0, num_register_tokens=2),
    "DeiTBackbone": dict(use_mha_bias=True),
    "MobileNetV5Backbone": dict(
        stackwise_block_types=[["er"], ["uir"]], stackwise_num_blocks=[1, 1],
        stackwise_num_filters=[[8], [16]], stackwise_strides=[[2], [2]],
        stackwise_act_layers=[["relu"], ["relu"]], stackwise_exp_ratios=[[4.0], [4.0]],
        stackwise_se_ratios=[[0.0], [0.0]], stackwise_dw_kernel_sizes=[[0], [5]],
        stackwise_dw_start_kernel_sizes=[[0], [0]], stackwise_dw_end_kernel_sizes=[[0], [0]],
        stackwise_exp_kernel_sizes=[[3], [0]], stackwise_pw_kernel_sizes=[[1], [0]],
        stackwise_num_heads=[[0], [0]], stackwise_key_dims=[[0], [0]],
        stackwise_value_dims=[[0], [0]], stackwise_kv_strides=[[0], [0]],
        stackwise_use_cpe=[[False], [False]], stem_size=8, use_msfa=False),
    "GemmaBackbone": dict(num_query_heads=2, num_key_value_heads=1, head_dim=8),
    "Gemma3Backbone": dict(image_size=16, vision_encoder=None),
    "GptOssBackbone": dict(num_query_heads=4, num_key_value_heads=2, sliding_window=4),
    "ESMBackbone": dict(num_heads=2), "ESM2Backbone": dict(num_heads=2),
    "RoformerV2Backbone": dict(head_size=8),
    "RWKV7Backbone": dict(head_size=4, gate_lora=8, mv_lora=8, aaa_lora=8, decay_lora=8),
    "WhisperBackbone": dict(num_mels=16, max_encoder_sequence_length=16,
                            max_decoder_sequence_length=16),
    "MoonshineBackbone": dict(filter_dim=16, encoder_num_layers=1, decoder_num_layers=1,
                              encoder_num_heads=2, decoder_num_heads=2,
                              feedforward_expansion_factor=2, max_position_embeddings=64,
                              partial_rotary_factor=0.5, pad_head_dim_to_multiple_of=None),
    "SmolLMBackbone": dict(num_attention_heads=2, num_key_value_heads=1, attention_bias=False,
                           attention_dropout=0.0, rope_layer_enabled_list=[True, False],
                           layer_types=["attention", "attention"], mlp_bias=False,
                           layer_norm_epsilon=1e-6, rope_theta=10000.0,
                           partial_rotary_factor=1.0),
    "Qwen3_5Backbone": dict(num_layers=2, layer_types=["linear_attention", "full_attention"],
                            partial_rotary_factor=0.25, linear_num_key_heads=2,
                            linear_num_value_heads=2, linear_key_head_dim=4,
                            linear_value_head_dim=4),
    "T5GemmaBackbone": dict(
        encoder_hidden_dim=16, encoder_intermediate_dim=32, encoder_num_layers=1,
        encoder_num_attention_heads=2, encoder_num_key_value_heads=1, encoder_head_dim=8,
        encoder_layer_types=["full_attention"], decoder_hidden_dim=16,
        decoder_intermediate_dim=32, decoder_num_layers=1, decoder_num_attention_heads=2,
        decoder_num_key_value_heads=1, decoder_head_dim=8,
        decoder_layer_types=["full_attention"]),
    "EdRecBackbone": dict(num_layers_enc=1, num_layers_dec=1, hidden_dim=16),
}
HINTS["SmolLM3Backbone"] = HINTS["SmolLMBackbone"]
HINTS["Qwen3_5MoeBackbone"] = {**HINTS["Qwen3_5Backbone"], "top_k": 1}
HINTS["T5Gemma2Backbone"] = HINTS["T5GemmaBackbone"]


def _resnet(**kw):
    import keras_hub

    return keras_hub.models.ResNetBackbone(**{**_kwargs("ResNetBackbone"), **kw})


# Backbones built around other backbones: the sub-model from its own hints.
COMPOSITE = {
    "DeepLabV3Backbone": lambda: dict(
        image_encoder=_resnet(stackwise_num_filters=[64, 8, 8], stackwise_num_blocks=[1, 1, 1],
                              stackwise_num_strides=[1, 2, 2]),
        low_level_feature_key="P2", spatial_pyramid_pooling_key="P4",
        dilation_rates=[1, 2], upsampling_size=4, projection_filters=8,
        image_shape=(IMAGE, IMAGE, 3)),
    "RetinaNetBackbone": lambda: dict(
        image_encoder=_resnet(stackwise_num_filters=[64, 8, 8, 8],
                              stackwise_num_blocks=[1, 1, 1, 1],
                              stackwise_num_strides=[1, 2, 2, 2], image_shape=(None, None, 3)),
        min_level=3, max_level=5, use_p5=True, image_shape=(64, 64, 3)),
    "BASNetBackbone": lambda: dict(
        image_encoder=_resnet(stackwise_num_filters=[64, 64, 64, 64],
                              stackwise_num_blocks=[1, 1, 1, 1],
                              stackwise_num_strides=[1, 2, 2, 2], block_type="basic_block"),
        num_classes=1, image_shape=(IMAGE, IMAGE, 3)),
}

# Families whose inputs this sweep does not make (or that are abstract bases).
SKIP = {
    "FeaturePyramidBackbone": "an abstract base class",
    "BLIP2Backbone": "multimodal (vision_encoder, qformer, language_model instances)",
    "CLIPBackbone": "multimodal (vision and text encoder instances)",
    "MetaCLIP2Backbone": "multimodal (vision and text encoder instances)",
    "SigLIPBackbone": "multimodal (vision and text encoder instances)",
    "PaliGemmaBackbone": "multimodal (images and token ids with a response mask)",
    "Gemma3nBackbone": "multimodal (vision/audio encoder configs)",
    "Gemma4Backbone": "multimodal (vision/audio encoders)",
    "SAMBackbone": "prompt encoder and mask decoder instances (points, boxes, masks inputs)",
    "SAM3PromptableConceptBackbone": "six sub-model instances",
    "StableDiffusion3Backbone": "VAE and CLIP/T5 text encoder instances",
    "FluxBackbone": "diffusion inputs (ids, timesteps, guidance)",
    "DFineBackbone": "an HGNetV2 instance and detection labels",
    "DepthAnythingBackbone": "a DINOV2 instance",
    "SegFormerBackbone": "a MiT instance",
    "PARSeqBackbone": "an image encoder instance",
    "VideoPrismBackbone": "video inputs",
}


def _kwargs(name: str) -> dict:
    import keras_hub

    cls = getattr(keras_hub.models, name)
    params = inspect.signature(cls.__init__).parameters
    kwargs = {k: v for k, v in SMALL.items() if k in params}
    kwargs.update(HINTS.get(name, {}))
    return kwargs


class Skip(Exception):
    pass


class BuildFailed(Exception):
    pass


class Dead(Exception):
    """The tiny model's output is not O(1) or ignores its input, even made live."""


class Timeout(BaseException):
    """Past the budget (a BaseException: crossport wraps a converter's Exception)."""


def _alarm(_signum, _frame):
    raise Timeout()


def first_line(exc: BaseException) -> str:
    """The error's first line; a header ending in ':' keeps the line it introduces."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    head = " ".join(lines[:2]) if lines and lines[0].endswith(":") else (lines or [""])[0]
    return f"{type(exc).__name__}: {head[:300]}"


def make_live(model, seed: int = 0) -> None:
    """Randomise constant weights (biases, BN statistics, norm gains, layer scales): the
    random-weights pitfalls of docs/parity.md. Kernels already random stay."""
    rng = np.random.default_rng(seed)
    for var in model.weights:
        value = np.asarray(var.numpy())
        if not np.issubdtype(value.dtype, np.floating) or value.size == 0:
            continue
        if value.size > 1 and np.ptp(value) > 0:
            continue
        name = var.path.lower()
        if any(k in name for k in ("variance", "gamma", "scale")):
            new = rng.uniform(0.5, 1.5, value.shape)
        else:
            new = rng.normal(0.0, 0.5, value.shape)
        var.assign(new.astype(value.dtype))


def make_inputs(model, seed: int, batch: int = BATCH, seq: int = SEQ,
                image: int = IMAGE) -> tuple[list[str], tuple]:
    """Seeded torch tensors for ``model.inputs`` (Keras' flatten order), by input name;
    ``batch``, ``seq`` and ``image`` fill the sizes the model leaves None."""
    rng = np.random.default_rng(seed)
    names, out = [], []
    for tensor in model.inputs:
        name = tensor.name
        dtype = str(tensor.dtype)
        shape = list(tensor.shape[1:])
        if "mask" in name:
            shape = [seq if d is None else d for d in shape]
            a = np.ones((batch, *shape), dtype="int64")
            a[1, ..., -2:] = 0  # the second row padded
            a = a.astype(bool) if dtype == "bool" else a
        elif "int" in dtype:
            shape = [seq if d is None else d for d in shape]
            high = 2 if "segment" in name else VOCAB
            a = rng.integers(0, high, (batch, *shape)).astype("int64")
        elif "float" in dtype:
            if len(shape) == 3:  # an image: None spatial dims get image
                shape = [image if d is None else d for d in shape]
            else:  # features / raw audio: None time steps
                shape = [4 * seq if d is None else d for d in shape]
            a = rng.standard_normal((batch, *shape)).astype("float32")
        else:
            raise Skip(f"input {name!r} of dtype {dtype}")
        names.append(name)
        out.append(torch.from_numpy(a))
    return names, tuple(out)


def build(name: str):
    """(model, example, names) with seeded live weights; raises Skip/BuildFailed/Dead."""
    import keras
    import keras_hub

    if name in SKIP:
        raise Skip(SKIP[name])
    try:
        keras.utils.set_random_seed(0)
        cls = getattr(keras_hub.models, name)
        kwargs = COMPOSITE[name]() if name in COMPOSITE else _kwargs(name)
        model = cls(**kwargs)
        size = model.count_params()
        if size > MAX_PARAMETERS:
            raise ValueError(f"{size / 1e6:.0f}M parameters after the small arguments")
        make_live(model)
        names, example = make_inputs(model, 0)
        out = run_keras(model, example)
    except (Skip, Timeout):
        raise
    except Exception as exc:  # noqa: BLE001  (keras_hub's own failure)
        raise BuildFailed(first_line(exc)) from exc
    floats = [o for o in out if np.issubdtype(o.dtype, np.floating)]
    if not floats:
        raise Dead("no float output")
    _, other = make_inputs(model, 1)
    moved = run_keras(model, other)
    big = max(float(np.abs(o).max()) for o in floats)
    spread = max(float(o.std()) for o in floats)
    if not np.isfinite(big) or big > 1e4 or spread < 1e-3:
        raise Dead(f"output max |x| {big:.1e}, std {spread:.1e}")
    if all(np.array_equal(a, b) for a, b in zip(out, moved)):
        raise Dead("the output ignores the input")
    return model, example, names


def run_keras(model, args: tuple) -> list[np.ndarray]:
    from crossport.to_torch.verify import run_keras as run

    return run(model, args, False)


# a second size of every size the model leaves None (batch, sequence, image)
OTHER = {"batch": BATCH + 1, "seq": SEQ + 5, "image": 2 * IMAGE}


def independent(model, conversion) -> dict:
    """Compare on a second seeded input at the example's sizes and on one at other sizes
    (``OTHER``, when Keras runs there); the module in float64 past the tolerance."""
    result = compare_at(model, conversion, make_inputs(model, 7)[1])
    try:
        other = make_inputs(model, 8, **OTHER)[1]
        run_keras(model, other)
    except Exception:  # noqa: BLE001  (the model fixes those sizes, or refuses them)
        result["other_size"] = "not run: Keras does not run at the other sizes"
        return result
    if [tuple(a.shape) for a in other] == [tuple(a.shape) for a in conversion.example_args]:
        return result
    at_other = compare_at(model, conversion, other)
    at_other["other_size"] = ", ".join("x".join(map(str, a.shape)) for a in other)
    return at_other if at_other["error"] > result["error"] else {
        **result, "other_size": at_other["other_size"]}


def compare_at(model, conversion, inputs: tuple) -> dict:
    """Keras vs the module on ``inputs``: the error, float64 evidence past the tolerance."""
    from crossport.to_torch.verify import as_float64, run_torch

    ref = run_keras(model, inputs)
    got = run_torch(conversion.module, inputs, False)
    if len(ref) != len(got):
        return {"error": float("inf"), "mismatch": f"{len(ref)} Keras outputs, {len(got)}"}
    for r, g in zip(ref, got):
        if r.shape != g.shape or r.dtype != g.dtype:
            return {"error": float("inf"),
                    "mismatch": f"Keras {r.shape} {r.dtype}, torch {g.shape} {g.dtype}"}
    error = max(normalized_error(r, g) for r, g in zip(ref, got))
    result = {"error": error}
    if error > ATOL:
        module64 = as_float64(conversion.module)
        got64 = run_torch(module64, tuple(a.double() if a.is_floating_point() else a
                                          for a in inputs), False)
        k64 = max(normalized_error(g, r) for g, r in zip(got64, ref))
        t64 = max(normalized_error(g, t) for g, t in zip(got64, got))
        result.update(keras_vs64=k64, torch_vs64=t64, verdict=rounding_verdict(k64, t64))
    return result


def run_one(name: str) -> dict:
    start = time.perf_counter()
    row = _run_one(name)
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def _run_one(name: str) -> dict:
    row = {"backbone": name}
    try:
        try:
            model, example, names = build(name)
        except Skip as exc:
            return {**row, "status": "SKIPPED", "detail": str(exc)}
        except BuildFailed as exc:
            return {**row, "status": "BUILD-FAILED", "detail": str(exc)[:600]}
        except Dead as exc:
            return {**row, "status": "DEAD", "detail": str(exc)[:300]}
        row.update(inputs=names, parameters=model.count_params())
        try:
            conversion = crossport.to_torch_with_report(model, example)
        except ParityError as exc:
            report = exc.report
            verdict = getattr(report, "verdict", None) or "unknown"
            return {**row, "status": "CHECK-FAILED", "verdict": verdict,
                    "detail": str(exc).splitlines()[-1][:300] if str(exc) else "",
                    "summary": report.summary() if report else ""}
        except ConversionError as exc:
            return {**row, "status": "CRASH", "detail": first_line(exc), "where": "converter",
                    "message": str(exc)[:1500]}
        except CrossportError as exc:
            return {**row, "status": "REFUSED", "detail": first_line(exc),
                    "message": str(exc)[:3000]}
        except Timeout:
            raise
        except Exception as exc:  # noqa: BLE001
            return {**row, "status": "CRASH", "detail": first_line(exc),
                    "traceback": traceback.format_exc()[-2500:]}
        row["permutes"] = conversion.permutes
        try:
            result = independent(model, conversion)
        except Timeout:
            raise
        except Exception as exc:  # noqa: BLE001
            return {**row, "status": "CRASH", "detail": "independent compare: " + first_line(exc),
                    "traceback": traceback.format_exc()[-2500:]}
        row.update(result)
        ok = result["error"] <= ATOL or result.get("verdict") == "rounding"
        row["status"] = "PASS" if ok else "SILENT"
        return row
    except Timeout:
        return {**row, "status": "TIMEOUT"}


def refused_layers(results: dict) -> dict[str, list[str]]:
    """Missing converter -> the backbones it blocks, from the REFUSED messages."""
    blocked: dict[str, list[str]] = {}
    for name, row in results.items():
        if row["status"] != "REFUSED":
            continue
        for line in row.get("message", "").splitlines():
            line = line.strip()
            if line.startswith("- ") and "(" in line:
                what = line[line.index("(") + 1:line.index(")")] + ":" + line.split("):", 1)[-1]
                what = what.strip()
                if name not in blocked.setdefault(what, []):
                    blocked[what].append(name)
    return dict(sorted(blocked.items(), key=lambda kv: -len(kv[1])))


def write(results: dict, out: Path) -> None:
    out.with_suffix(".json").write_text(json.dumps(results, indent=1, default=str))
    counts: dict[str, int] = {}
    for row in results.values():
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    lines = ["# keras_hub sweep (Keras -> PyTorch)", "",
             "Generated by `python -m benchmarks.keras_hub_sweep` (keras-hub "
             f"{_version()}, tiny seeded backbones, no presets).", "",
             "| status | count |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(counts.items())]
    lines += ["", "| backbone | status | error | s | detail |", "|---|---|---|---|---|"]
    for name, row in results.items():
        err = row.get("error")
        err = f"{err:.1e}" if isinstance(err, float) else ""
        detail = str(row.get("detail", "")).replace("|", "\\|").replace("\n", " ")[:200]
        lines.append(f"| {name} | {row['status']} | {err} | {row.get('seconds', '')} "
                     f"| {detail} |")
    blocked = refused_layers(results)
    if blocked:
        lines += ["", "## Refusals by missing layer/op", "",
                  "| layer/op: reason | backbones |", "|---|---|"]
        lines += [f"| {what.replace('|', '/')} | {len(names)}: {', '.join(names)} |"
                  for what, names in blocked.items()]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def _version() -> str:
    import keras_hub

    return keras_hub.__version__


def backbones() -> list[str]:
    import keras_hub

    names = sorted(n for n in dir(keras_hub.models) if n.endswith("Backbone") and n != "Backbone")
    return [n for n in FIRST if n in names] + [n for n in names if n not in FIRST]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="")
    parser.add_argument("--budget", type=int, default=180)
    parser.add_argument("--out", default="benchmarks/results_keras_hub")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    out = Path(args.out)
    results = {}
    if args.resume and out.with_suffix(".json").exists():
        results = json.loads(out.with_suffix(".json").read_text())
    names = args.only.split(",") if args.only else backbones()
    current = out.with_suffix(".current")
    if args.resume and current.exists() and current.read_text() not in results:
        # the previous process died on this model (segfault, out of memory): record it
        results[current.read_text()] = {"backbone": current.read_text(), "status": "DIED",
                                        "detail": "the sweep process died on this model"}
    signal.signal(signal.SIGALRM, _alarm)
    for name in names:
        if name in results and args.resume:
            continue
        current.write_text(name)
        signal.alarm(args.budget)
        try:
            row = run_one(name)
        except Timeout:
            row = {"backbone": name, "status": "TIMEOUT"}
        finally:
            signal.alarm(0)
        results[name] = row
        print(f"{name}: {row['status']} {row.get('seconds', '')}s "
              f"{str(row.get('detail', ''))[:150]}", flush=True)
        write(results, out)
    current.unlink(missing_ok=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
