"""Sweep every transformers model family with a base model (AutoModel) through crossport.

For each ``model_type`` of ``transformers.CONFIG_MAPPING`` with an ``AutoModel`` class, build a
tiny config (generic small overrides, applied only to attributes the config has), the base
model with seeded weights made live, and a wrapper taking tensors and returning
``last_hidden_state``; convert with ``crossport.convert_with_report`` (default check on), then
compare on a second seeded input, with float64 evidence past the tolerance. Nothing is
downloaded. Each model is classified:

    PASS          converted; the check and the independent compare pass (or are rounding)
    REFUSED       a CrossportError (unsupported op, capture error ...): its first line is kept
    CHECK-FAILED  ParityError (rounding or semantic, from the report's verdict)
    CRASH         any other exception inside crossport (ConversionError wraps a converter's)
    SILENT        the check passed but the independent compare fails (semantic)
    BUILD-FAILED  transformers itself could not build or run the tiny model (not crossport's)
    SKIPPED       the base model needs inputs the sweep does not make (multimodal ...)
    TIMEOUT       past the per-model time budget
    DIED          the process died on it (segfault, out of memory)
    DEAD          even made live, the tiny model's output is not O(1) or ignores the input

``--plain`` converts the base model itself, as a user calls it (config.use_cache off, its
default return_dict, the same tensors positionally; a keyword adapter returning the model's
output untouched where they are not forward's first parameters), and compares every tensor
leaf of its output, by key in a ModelOutput. ``--only-from`` sweeps the model types with a
``--status`` in an earlier results JSON:

    python -m benchmarks.hf_sweep --plain --only-from benchmarks/results_hf_sweep.json

Results are written after every model (JSON and markdown), so a partial run is useful;
``--resume`` skips the models already in the JSON and records the one a dead process was on
as DIED (so a shell loop can restart it):

    until HF_HUB_OFFLINE=1 python -m benchmarks.hf_sweep --resume; do :; done
"""

from __future__ import annotations

import argparse
import copy
import inspect
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np
import torch
from torch import nn
from torch.utils import _pytree as pytree

import crossport
from crossport.compat import import_torchvision
from crossport.errors import ConversionError, CrossportError, ParityError
from crossport.parity import normalized_error, rounding_verdict
from crossport.parity.live import DeadModelError, check_live, make_live
from crossport.parity.reference import torch_outputs
from crossport.parity.verify import to_keras_inputs

BATCH, VOCAB, SEQ, ATOL = 2, 128, 8, 1e-4
MAX_PARAMETERS = 30_000_000

# Families users bring most: run first so a partial sweep covers them.
FIRST = ["bert", "albert", "roberta", "xlm-roberta", "deberta", "deberta-v2", "electra",
         "mpnet", "distilbert", "camembert", "convbert", "funnel", "ernie", "mobilebert",
         "gpt2", "gpt_neo", "gpt_neox", "gptj", "bloom", "falcon", "opt", "llama", "mistral",
         "qwen2", "qwen3", "phi", "phi3", "gemma", "gemma2", "olmo", "stablelm", "starcoder2",
         "codegen", "mpt", "persimmon", "mamba", "mamba2", "rwkv", "t5", "bart", "mbart",
         "vit", "deit", "beit", "dinov2", "swin", "swinv2", "convnext", "convnextv2",
         "poolformer", "mobilevit", "mobilevitv2", "levit", "resnet", "regnet", "efficientnet",
         "mobilenet_v1", "mobilenet_v2", "segformer", "cvt", "pvt", "pvt_v2", "bit", "dinat",
         "focalnet", "data2vec-vision", "data2vec-text", "data2vec-audio", "hubert",
         "wav2vec2", "wavlm", "sew", "unispeech", "whisper", "speech_to_text", "yolos"]

# Generic small overrides: applied to the attributes a config has, never added.
SMALL = dict(
    hidden_size=32, d_model=32, n_embd=32, dim=32, embed_dim=32, n_embed=32, width=32,
    num_hidden_layers=2, num_layers=2, n_layer=2, n_layers=2, num_decoder_layers=2,
    encoder_layers=2, decoder_layers=2,
    num_attention_heads=2, num_heads=2, n_head=2, n_heads=2, encoder_attention_heads=2,
    decoder_attention_heads=2, num_key_value_heads=2, num_kv_heads=2, multi_query_group_num=2,
    intermediate_size=64, ffn_dim=64, d_ff=64, n_inner=64, hidden_dim=64, encoder_ffn_dim=64,
    decoder_ffn_dim=64, d_kv=16, head_dim=16, kv_channels=16,
    vocab_size=VOCAB, max_position_embeddings=64, n_positions=64, n_ctx=64,
    max_source_positions=16, max_target_positions=64, max_length=32,
    image_size=32, patch_size=8, num_channels=3,
    embedding_size=32, projection_dim=16, use_cache=False,
    conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
    num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
    num_mel_bins=16, input_feat_per_channel=16,
    num_experts=4, num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2,
    moe_intermediate_size=32, shared_expert_intermediate_size=32,
    state_size=8, expand=2, conv_kernel_size=4,
    width_coefficient=0.25, depth_coefficient=0.25,  # EfficientNet (B7 by default)
    mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8, mamba_expand=2, mamba_n_groups=1,
    qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, kv_lora_rank=16, q_lora_rank=16,
)
LISTS = ("depths", "hidden_sizes", "embed_dims", "num_heads", "num_attention_heads",
         "neck_hidden_sizes")


def _shrink_lists(config) -> None:
    """Hierarchical (per-stage) configs: one block per stage, widths / 8, heads at most 2."""
    if isinstance(getattr(config, "depths", None), (list, tuple)):
        config.depths = [1] * len(config.depths)
    heads = getattr(config, "num_heads", None) or getattr(config, "num_attention_heads", None)
    for name in ("hidden_sizes", "embed_dims", "neck_hidden_sizes"):
        value = getattr(config, name, None)
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) for v in value):
            setattr(config, name, [max(8, v // 8 // 8 * 8) for v in value])
    for name in ("num_heads", "num_attention_heads"):
        value = getattr(config, name, None)
        if isinstance(value, (list, tuple)):
            setattr(config, name, [min(v, 2) for v in value])
    embed = getattr(config, "embed_dim", None)
    if isinstance(heads, (list, tuple)) and isinstance(embed, int):
        config.embed_dim = 16


def tiny_config(T, model_type: str, level: int):
    """level 0: every small override; 1: no per-stage lists; 2: layer counts only."""
    config = T.AutoConfig.for_model(model_type)
    for sub in ("text_config", "vision_config", "audio_config", "encoder_config"):
        if isinstance(getattr(config, sub, None), T.PretrainedConfig):
            _apply(getattr(config, sub), level)
    before = config.to_dict()
    _apply(config, level)
    changed = {k: v for k, v in config.to_dict().items() if before.get(k) != v
               and not isinstance(v, dict)}
    try:  # again through __init__, so the fields it derives (qk_head_dim ...) follow
        rebuilt = T.AutoConfig.for_model(model_type, **changed)
        for sub in ("text_config", "vision_config", "audio_config", "encoder_config"):
            if isinstance(getattr(config, sub, None), T.PretrainedConfig):
                setattr(rebuilt, sub, getattr(config, sub))
        if all(getattr(rebuilt, k, None) == v for k, v in changed.items()
               if k != "layer_types"):
            config = rebuilt
    except Exception:  # noqa: BLE001  (an override __init__ rejects: keep the set attributes)
        pass
    _architecture(config)
    return config


def _apply(config, level: int) -> None:
    hierarchical = isinstance(getattr(config, "depths", None), (list, tuple))
    for name, value in SMALL.items():
        if not hasattr(config, name) or getattr(config, name) is None and name != "head_dim":
            continue
        current = getattr(config, name)
        if level >= 2 and name not in ("num_hidden_layers", "num_layers", "n_layer",
                                       "n_layers", "encoder_layers", "decoder_layers",
                                       "vocab_size", "use_cache"):
            continue
        if isinstance(current, (list, tuple)) and not isinstance(value, tuple):
            continue  # a per-stage list: _shrink_lists
        if hierarchical and name in ("embed_dim", "hidden_size", "num_heads",
                                     "num_attention_heads", "image_size", "patch_size",
                                     "num_hidden_layers", "num_layers"):
            continue  # per-stage lists; num_hidden_layers may alias num_stages
        if name == "hidden_dim" and hasattr(config, "width_coefficient"):
            config.hidden_dim = 320  # EfficientNet's: the last conv, 1280 * width 0.25
            continue
        if name == "head_dim" and hasattr(config, "qk_rope_head_dim"):
            continue  # multi-head latent attention: its rope head dim
        if name == "head_dim" and current is None and getattr(config, "hidden_size", 0) != 32:
            continue
        try:
            setattr(config, name, value)
        except Exception:  # noqa: BLE001  (a read-only property)
            pass
    if hierarchical and level == 0:
        _shrink_lists(config)
    if hierarchical and isinstance(getattr(config, "image_size", None), int) and level < 2:
        config.image_size = 64
    if isinstance(getattr(config, "block_sizes", None), (list, tuple)) and level < 2:
        config.block_sizes = [1] * len(config.block_sizes)  # funnel: layers per block
    if level < 2 and isinstance(getattr(config, "conv_dim", None), (list, tuple)) \
            and hasattr(config, "num_feat_extract_layers"):
        config.num_feat_extract_layers = len(config.conv_dim)  # derived in __init__
    if hasattr(config, "layer_types") and isinstance(config.layer_types, list):
        n = getattr(config, "num_hidden_layers", len(config.layer_types))
        try:
            config.layer_types = config.layer_types[:n]
        except AttributeError:  # derived from other fields
            pass
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id",
                 "sep_token_id", "cls_token_id"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value >= VOCAB and level < 2:
            setattr(config, name, VOCAB - 1)
    if hasattr(config, "dtype"):
        config.dtype = torch.float32


def _architecture(config) -> None:
    """AutoModel picks among several base classes (funnel) by ``config.architectures``."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    names = MODEL_MAPPING_NAMES.get(config.model_type)
    if isinstance(names, (list, tuple)) and not getattr(config, "architectures", None):
        config.architectures = [names[0]]


class Wrapped(nn.Module):
    """``forward(*tensors) -> last_hidden_state`` (else the first tensor output); ``plain``:
    the model's output untouched (its keyword inputs as positional tensors)."""

    def __init__(self, model, names, plain=False):
        super().__init__()
        self.model, self.names, self.plain = model, tuple(names), plain

    def forward(self, *args):
        out = self.model(**dict(zip(self.names, args)))
        if self.plain:
            return out
        if hasattr(out, "last_hidden_state") and out.last_hidden_state is not None:
            return out.last_hidden_state
        if isinstance(out, (tuple, list)):
            return out[0]
        for value in (out.values() if hasattr(out, "values") else []):
            if isinstance(value, torch.Tensor):
                return value
        return out


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def make_inputs(model, config, seed: int):
    """(names, tensors) for the base model's main input, or raise Skip."""
    params = inspect.signature(model.forward).parameters
    main = getattr(model, "main_input_name", "input_ids")
    required = [n for n, p in params.items() if p.default is inspect.Parameter.empty
                and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and n != main]
    if required:
        raise Skip(f"forward needs {required}")
    if main == "input_ids":
        vocab = min(getattr(config, "vocab_size", VOCAB) or VOCAB, VOCAB)
        ids = torch.randint(0, vocab, (BATCH, SEQ), generator=_gen(seed))
        names, tensors = ["input_ids"], [ids]
        if "attention_mask" in params:
            mask = torch.ones(BATCH, SEQ, dtype=torch.long)
            mask[1, SEQ - 2:] = 0
            names.append("attention_mask")
            tensors.append(mask)
        if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in params:
            names.append("decoder_input_ids")
            tensors.append(torch.randint(0, vocab, (BATCH, 5), generator=_gen(seed + 10)))
        return names, tensors
    names, tensors = [main], [_main_input(main, config, seed)]
    if getattr(config, "is_encoder_decoder", False):
        if "decoder_input_ids" not in params:
            raise Skip(f"encoder-decoder with {main}")
        vocab = min(getattr(config, "vocab_size", VOCAB) or VOCAB, VOCAB)
        names.append("decoder_input_ids")
        tensors.append(torch.randint(0, vocab, (BATCH, 5), generator=_gen(seed + 10)))
    return names, tensors


def _main_input(main: str, config, seed: int) -> torch.Tensor:
    if main == "pixel_values":
        size = getattr(config, "image_size", None)
        size = size if isinstance(size, int) else (size[0] if isinstance(size, (list, tuple))
                                                   else 64)
        channels = getattr(config, "num_channels", 3) or 3
        return torch.randn(BATCH, channels, size, size, generator=_gen(seed))
    if main == "input_values":
        if isinstance(getattr(config, "max_length", None), int) and hasattr(config,
                                                                             "num_mel_bins"):
            shape = (BATCH, config.max_length, config.num_mel_bins)  # a spectrogram (AST)
            return torch.randn(shape, generator=_gen(seed))
        return torch.randn(BATCH, 800, generator=_gen(seed))
    if main == "input_features":
        mels = (getattr(config, "num_mel_bins", None) or getattr(config, "feature_size", None)
                or getattr(config, "input_feat_per_channel", 80))
        if "whisper" in config.model_type:
            frames = 2 * getattr(config, "max_source_positions", 16)
            return torch.randn(BATCH, mels, frames, generator=_gen(seed))
        return torch.randn(BATCH, 64, mels, generator=_gen(seed))
    raise Skip(f"main input {main!r}")


class Skip(Exception):
    pass


class Timeout(BaseException):
    """Past the budget (a BaseException: crossport wraps a converter's Exception)."""


def _alarm(_signum, _frame):
    raise Timeout()


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300] if text else ''}"


def build(T, model_type: str):
    """(wrapper, example, names, config) with seeded live weights; raises Build/Skip."""
    config = T.AutoConfig.for_model(model_type)
    subs = [n for n in ("text_config", "vision_config", "audio_config", "speech_config")
            if getattr(config, n, None) is not None]
    if len(subs) > 1:
        raise Skip(f"multimodal ({', '.join(subs)})")
    errors = []
    for level in (0, 1, 2):
        try:
            config = tiny_config(T, model_type, level)
            with torch.device("meta"):  # size first: a config the overrides missed can OOM
                size = sum(p.numel() for p in T.AutoModel.from_config(config).parameters())
            if size > MAX_PARAMETERS:
                raise ValueError(f"{size / 1e6:.0f}M parameters after the overrides")
            torch.manual_seed(0)
            model = T.AutoModel.from_config(config).float().eval()
            names, example = make_inputs(model, config, 0)
            wrapper = Wrapped(model, names).eval()
            make_live(wrapper, tuple(example))
            with torch.no_grad():
                out = wrapper(*example)
            if not isinstance(out, torch.Tensor):
                raise Skip(f"output is {type(out).__name__}")
            try:
                check_live(wrapper, tuple(example))
            except DeadModelError as exc:  # a comparison would prove nothing
                raise Dead(str(exc)) from None
            return wrapper, tuple(example), names, config, level
        except (Skip, Dead, Timeout):
            raise
        except Exception as exc:  # noqa: BLE001  (transformers' own failure: next level)
            errors.append(f"level {level}: {first_line(exc)}")
    raise BuildFailed("; ".join(errors))


class BuildFailed(Exception):
    pass


class Dead(Exception):
    """The tiny model's output is not O(1) or ignores its input, even made live."""


def plain_module(wrapper):
    """(the module a user converts, how it is called): the base model itself when the inputs
    are forward's first parameters (crossport takes positional tensors), else a keyword
    adapter returning its output untouched."""
    model, names = wrapper.model, wrapper.names
    if hasattr(model.config, "use_cache"):
        model.config.use_cache = False  # a returned KV cache is refused on purpose
    params = list(inspect.signature(model.forward).parameters)
    if params[:len(names)] == list(names):
        return model, "positional"
    return Wrapped(model, names, plain=True).eval(), "keywords"


def paired(ref, got, path="") -> list:
    """(path, torch leaf, Keras leaf) for each tensor leaf of torch's output: by key in a dict
    (a ModelOutput; Keras returns a plain dict), by position in a tuple or list."""
    if isinstance(ref, torch.Tensor):
        return [(path or "output", ref, got)]
    if isinstance(ref, dict):
        return [pair for key, value in ref.items() if value is not None
                for pair in paired(value, got[key], f"{path}.{key}".lstrip("."))]
    if isinstance(ref, (tuple, list)):
        got = [got] if len(ref) == 1 and not isinstance(got, (tuple, list)) else got
        return [pair for i, value in enumerate(ref) for pair in paired(value, got[i],
                                                                      f"{path}[{i}]")]
    return []


def _errors(ref, got) -> dict:
    pairs = paired(ref, got)
    tensors = [t for t in pytree.tree_leaves(ref) if isinstance(t, torch.Tensor)]
    if len(pairs) != len(tensors):
        raise ValueError(f"{len(pairs)} of torch's {len(tensors)} output tensors matched")
    return {path: normalized_error(r.detach().numpy(), np.asarray(g)) for path, r, g in pairs}


def independent(module, model, conversion, config) -> dict:
    """Compare every output tensor on a second seeded input; float64 evidence past the
    tolerance."""
    _, inputs = make_inputs(model, config, 7)
    inputs = tuple(inputs)
    ref = torch_outputs(module, inputs)
    arrays = to_keras_inputs(inputs, False)
    got = conversion.model(arrays if len(arrays) > 1 else arrays[0], training=False)
    errors = _errors(ref, got)
    worst = max(errors, key=errors.get)
    result = {"error": errors[worst], "outputs": len(errors)}
    if len(errors) > 1:
        result["worst"] = worst
    if result["error"] > ATOL:
        module64 = copy.deepcopy(module).double()
        ref64 = torch_outputs(module64, tuple(a.double() if a.is_floating_point() else a
                                              for a in inputs))
        k64 = max(_errors(ref64, got).values())
        t64 = max(_errors(ref64, ref).values())
        result.update(keras_vs64=k64, torch_vs64=t64, verdict=rounding_verdict(k64, t64))
    return result


def run_one(T, model_type: str, plain: bool = False) -> dict:
    start = time.perf_counter()
    row = _run_one(T, model_type, plain)
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def _run_one(T, model_type: str, plain: bool) -> dict:
    row = {"model_type": model_type}
    try:
        try:
            wrapper, example, names, config, level = build(T, model_type)
            module, call = plain_module(wrapper) if plain else (wrapper, None)
        except Skip as exc:
            return {**row, "status": "SKIPPED", "detail": str(exc)}
        except BuildFailed as exc:
            return {**row, "status": "BUILD-FAILED", "detail": str(exc)[:600]}
        except Dead as exc:
            return {**row, "status": "DEAD", "detail": str(exc)[:300]}
        row.update(inputs=names, config_level=level, model=type(wrapper.model).__name__)
        if call:
            row["call"] = call
        try:
            conversion = crossport.convert_with_report(module, example)
        except ParityError as exc:
            report = exc.report
            verdict = getattr(report, "verdict", None) or "unknown"
            return {**row, "status": "CHECK-FAILED", "verdict": verdict,
                    "detail": str(exc).splitlines()[-1][:300] if str(exc) else "",
                    "summary": report.summary() if report else ""}
        except ConversionError as exc:
            return {**row, "status": "CRASH", "detail": first_line(exc),
                    "where": "converter"}
        except CrossportError as exc:
            return {**row, "status": "REFUSED", "detail": first_line(exc),
                    "message": str(exc)[:1500]}
        except Timeout:
            raise
        except Exception as exc:  # noqa: BLE001
            return {**row, "status": "CRASH", "detail": first_line(exc),
                    "traceback": traceback.format_exc()[-2500:]}
        row["transposes"] = conversion.transposes
        try:
            result = independent(module, wrapper.model, conversion, config)
        except Timeout:
            raise
        except Exception as exc:  # noqa: BLE001
            return {**row, "status": "CRASH", "detail": "independent compare: " + first_line(exc)}
        row.update(result)
        if result["error"] <= ATOL or result.get("verdict") == "rounding":
            row["status"] = "PASS"
        else:
            row["status"] = "SILENT"
        return row
    except Timeout:
        return {**row, "status": "TIMEOUT"}


def write(results: dict, out: Path, plain: bool = False) -> None:
    out.with_suffix(".json").write_text(json.dumps(results, indent=1, default=str))
    counts: dict[str, int] = {}
    for row in results.values():
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    lines = ["# transformers sweep" + (": plain base models" if plain else ""), "",
             "Generated by `HF_HUB_OFFLINE=1 python -m benchmarks.hf_sweep"
             + (" --plain --only-from benchmarks/results_hf_sweep.json" if plain else "")
             + "`.", "",
             "| status | count |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(counts.items())]
    lines += ["", "| model_type | status | error | s | detail |", "|---|---|---|---|---|"]
    for name, row in results.items():
        err = row.get("error")
        err = f"{err:.1e}" if isinstance(err, float) else ""
        detail = str(row.get("detail", "")).replace("|", "\\|").replace("\n", " ")[:200]
        lines.append(f"| {name} | {row['status']} | {err} | {row.get('seconds', '')} "
                     f"| {detail} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def model_types(T) -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    names = [k for k in T.CONFIG_MAPPING.keys() if k in MODEL_MAPPING_NAMES]
    return [n for n in FIRST if n in names] + sorted(n for n in names if n not in FIRST)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="")
    parser.add_argument("--budget", type=int, default=120)
    parser.add_argument("--out", default=None)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--plain", action="store_true",
                        help="convert the base model itself, with its own output")
    parser.add_argument("--only-from", default="",
                        help="sweep the model types with --status in this results JSON")
    parser.add_argument("--status", default="PASS")
    args = parser.parse_args(argv)
    import_torchvision()
    import transformers as T

    T.logging.set_verbosity_error()
    out = Path(args.out or "benchmarks/results_hf_" + ("plain" if args.plain else "sweep"))
    results = {}
    if args.resume and out.with_suffix(".json").exists():
        results = json.loads(out.with_suffix(".json").read_text())
    names = args.only.split(",") if args.only else model_types(T)
    if args.only_from:
        earlier = json.loads(Path(args.only_from).read_text())
        names = [n for n in names if earlier.get(n, {}).get("status") == args.status]
    current = out.with_suffix(".current")
    if args.resume and current.exists() and current.read_text() not in results:
        # the previous process died on this model (segfault, out of memory): record it
        results[current.read_text()] = {"model_type": current.read_text(), "status": "DIED",
                                        "detail": "the sweep process died on this model"}
    signal.signal(signal.SIGALRM, _alarm)
    for name in names:
        if name in results and args.resume:
            continue
        current.write_text(name)
        signal.alarm(args.budget)
        try:
            row = run_one(T, name, args.plain)
        except Timeout:
            row = {"model_type": name, "status": "TIMEOUT"}
        finally:
            signal.alarm(0)
        results[name] = row
        print(f"{name}: {row['status']} {row.get('seconds', '')}s "
              f"{str(row.get('detail', ''))[:150]}", flush=True)
        write(results, out, args.plain)
    current.unlink(missing_ok=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
