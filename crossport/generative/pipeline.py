"""``generative.export``: an HF causal LM to one TFLite/SavedModel with prefill and decode
signatures and an explicit KV cache, verified by greedy generation against HF."""

from __future__ import annotations

import gc
import os
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from crossport.api import convert_with_report
from crossport.errors import ExportError, InputError
from crossport.export.tagged import fill_weights
from crossport.export.tflite import run_converter
from crossport.generative import signatures, streamed
from crossport.generative.runner import LiteRTGenerator, SavedModelGenerator, one_prompt
from crossport.generative.step import KVCacheStep
from crossport.generative.verify import GenerationReport, check_prompt, default_prompts

FORMATS = ("tflite", "saved_model")


@dataclass
class GenerativeExport:
    """What :func:`export` wrote, its signatures and its greedy parity against HF."""

    path: Path
    format: str
    quantize: str | None
    signatures: dict[str, int]
    cache_shape: tuple[int, ...]
    bytes: int
    report: GenerationReport | None
    conversion_error: float | None
    seconds: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        stages = ", ".join(f"{k} {v:.1f}s" for k, v in self.seconds.items())
        lines = [f"{self.format}: {self.path} ({self.bytes / 1e6:.2f} MB, quantize="
                 f"{self.quantize}), signatures {', '.join(self.signatures)}, "
                 f"cache {self.cache_shape[0]} layers x k/v {list(self.cache_shape[1:])}"]
        if self.conversion_error is not None:
            lines.append(f"step model vs torch: normalized error {self.conversion_error:.2e}")
        lines.append(self.report.summary() if self.report else "generation: not checked")
        lines.append(f"time: {stages}")
        return "\n".join(lines)


def export(model: torch.nn.Module, path: str | Path, prefill_lengths=(8, 32),
           max_cache_len: int = 512, quantize: str | None = None, *, format: str | None = None,
           check: bool = True, prompts=None, max_new_tokens: int = 8, tolerance: float = 1e-4,
           on_stage: Callable[[str], None] | None = None) -> GenerativeExport:
    """Export an HF causal LM for on-device greedy generation.

    One file with a ``prefill_<N>`` signature per prefill length and a ``decode`` signature
    (see :mod:`crossport.generative.signatures` for their inputs and outputs), all sharing
    one copy of the weights. The artifact is re-loaded from disk and must generate exactly
    the tokens of ``model.generate(do_sample=False)`` with per-step logits within
    ``tolerance`` (float32; a first difference where HF's top two logits are within twice
    the tolerance is a rounding tie, reported); with ``quantize`` the logits error and token
    agreement are reported instead.

    Args:
        model: a transformers causal LM in eval mode (float32). Not modified.
        path: ``.tflite`` file, or a SavedModel directory (``format="saved_model"``).
        prefill_lengths: chunk lengths of the prefill signatures; shorter prompts are
            padded, longer ones prefilled in several chunks.
        max_cache_len: cache slots (prompt + generated tokens).
        quantize: ``None``, ``"int8-weights"`` (dynamic-range: int8 weights, float math) or
            ``"fp16"`` (fp16 weights); TFLite only.
        format: ``"tflite"`` or ``"saved_model"``; inferred from ``path`` when omitted.
        check: verify by greedy generation (``prompts`` or a default set).
        max_new_tokens: tokens generated per verification prompt.
        on_stage: called with ``"wrap"``, ``"capture"``, ``"convert"``, ``"verify"``,
            ``"write"``, ``"generate-check"`` as each stage starts.

    Raises:
        UnsupportedOpError: a model variant the export cannot reproduce (named).
        ExportError: the written artifact does not generate what HF generates; nothing is
            left at ``path``.

    Example:
        >>> import transformers
        >>> from crossport import generative
        >>> cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
        ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
        >>> lm = transformers.LlamaForCausalLM(cfg).eval()
        >>> result = generative.export(lm, "llm.tflite", prefill_lengths=(4,),
        ...                            max_cache_len=32)                   # doctest: +SKIP
        >>> runner = generative.LiteRTGenerator("llm.tflite")              # doctest: +SKIP
        >>> runner.generate([[1, 2, 3]], max_new_tokens=5).shape          # doctest: +SKIP
        (1, 8)
    """
    path = Path(path)
    format = format or ("tflite" if path.suffix == ".tflite" else "saved_model")
    _check_arguments(format, quantize, prefill_lengths, max_cache_len)
    if format == "tflite":
        _check_flatbuffer_size(model, quantize)
        _warn_if_onednn_keeps_memory(model)
    names = signatures.signature_names(prefill_lengths)
    seconds: dict[str, float] = {}
    stage = _stage_timer(seconds, on_stage)
    with stage("wrap"):
        step = KVCacheStep(model, max_cache_len).eval()
    conversion = _convert(step, min(prefill_lengths), on_stage, seconds)
    error = conversion.report.max_error if conversion.report else None
    tmp = path.with_name(f".{path.name}.partial")
    _remove(tmp)
    try:
        with stage("write"):
            _write(conversion, model, tmp, format, names, prefill_lengths, step.cache_names,
                   step.layer_cache_shape, quantize)
        report = None
        if check:
            with stage("generate-check"):
                report = _generation_check(model, tmp, format, quantize, step, prefill_lengths,
                                           prompts, max_new_tokens, tolerance)
            if not report.passed:
                raise ExportError(f"the exported {format} does not generate what "
                                  f"{type(model).__name__}.generate does; nothing was written to "
                                  f"{path}\n{report.summary()}")
        _remove(path)
        tmp.replace(path)
    finally:
        _remove(tmp)
    return GenerativeExport(path, format, quantize, names, step.cache_shape, _size(path), report,
                            error, seconds)


def _write(conversion, model, path: Path, format: str, names, prefill_lengths, cache_names,
           layer_cache_shape, quantize) -> None:
    """Writes the artifact. For TFLite the converter sees the graph with tagged splat
    weights (:mod:`streamed`), and the Keras model is dropped before it runs: the real
    weights are filled in from the torch parameters."""
    keras_model, conversion.model = conversion.model, None
    if format != "tflite":
        signatures.write_saved_model(
            signatures.build_archive(keras_model, prefill_lengths, cache_names,
                                     layer_cache_shape), path)
        return
    keep: set[str] = set()
    while True:
        keras_model = keras_model or _rebuild(conversion)
        archive = signatures.build_archive(keras_model, prefill_lengths, cache_names,
                                           layer_cache_shape)
        tagged = streamed.prepare(keras_model, archive, names, model, keep)
        del archive
        keras_model = None
        gc.collect()
        try:
            # a need for Flex ops: an ExportError naming them (it was TF's ConverterError)
            data = run_converter(lambda: tagged.convert(quantize), conversion)
        finally:
            tagged.cleanup()
        folded = tagged.missing(data)
        if not folded:
            break
        keep |= folded  # converted again with their real values in the graph
        del data
    fill_weights(data, path, tagged.weights)


def _rebuild(conversion):
    """The Keras model again, from the captured program (the rare second conversion after
    the TFLite converter folded a tagged weight; the first copy is gone by then)."""
    from crossport.capture.export import input_names
    from crossport.to_keras.emit import Emitter

    names = input_names(conversion.module, len(conversion.example_args))
    return Emitter(conversion.exported, names, conversion.options).emit().model


def _check_arguments(format, quantize, prefill_lengths, max_cache_len) -> None:
    if format not in FORMATS:
        raise InputError(f"unknown format {format!r}; expected one of {FORMATS}")
    if quantize not in signatures.QUANTIZE:
        raise InputError(f"quantize={quantize!r}; expected one of {signatures.QUANTIZE}")
    if quantize is not None and format != "tflite":
        raise InputError(f"quantize={quantize!r} applies to TFLite only, not {format}")
    lengths = list(prefill_lengths)
    if not lengths or any(int(n) < 1 or int(n) > max_cache_len for n in lengths):
        raise InputError(f"prefill_lengths {lengths} must be non-empty, each in "
                         f"1..max_cache_len ({max_cache_len})")


FLATBUFFER_LIMIT = 2**31  # TFLite's FlatBuffer offsets are 32-bit signed
BYTES_PER_WEIGHT = {None: 4, "fp16": 2, "int8-weights": 1}


def estimated_weight_bytes(model: torch.nn.Module, quantize: str | None) -> int:
    """Bytes the weights take in the flatbuffer (tied weights once; int8 quantizes only
    tensors of at least 1024 elements, the converter's dynamic-range threshold)."""
    total = 0
    for p in model.parameters():  # parameters() yields a tied tensor once
        small = quantize == "int8-weights" and p.numel() < 1024
        total += p.numel() * (4 if small else BYTES_PER_WEIGHT[quantize])
    return total


def _check_flatbuffer_size(model: torch.nn.Module, quantize: str | None) -> None:
    need = estimated_weight_bytes(model, quantize)
    if need < FLATBUFFER_LIMIT:
        return
    options = [f"quantize={q!r} (~{estimated_weight_bytes(model, q) / 1e9:.2f} GB)"
               for q in ("fp16", "int8-weights")
               if estimated_weight_bytes(model, q) < FLATBUFFER_LIMIT]
    raise ExportError(
        f"{type(model).__name__}: its weights take ~{need / 1e9:.2f} GB with quantize="
        f"{quantize!r}, beyond TFLite's 2 GB FlatBuffer limit; use "
        f"{' or '.join(options) if options else 'a smaller model'}, or format='saved_model'")


ONEDNN_WARN_BYTES = 1e9  # fp32 weights from which the retained copy matters


def _warn_if_onednn_keeps_memory(model: torch.nn.Module) -> None:
    """TF's oneDNN allocator (on by default on x86) keeps the dropped Keras copy of the
    weights resident: about one more fp32 copy at the peak (docs/generative.md)."""
    fp32_bytes = estimated_weight_bytes(model, None)
    if fp32_bytes >= ONEDNN_WARN_BYTES and os.environ.get("TF_ENABLE_ONEDNN_OPTS") != "0":
        warnings.warn(
            f"{type(model).__name__}: ~{fp32_bytes / 1e9:.1f} GB of fp32 weights; with "
            "TensorFlow's oneDNN allocator on, the peak memory holds about one more copy. "
            "Set TF_ENABLE_ONEDNN_OPTS=0 before TensorFlow is imported (before importing "
            "crossport) to give it back.", ResourceWarning, stacklevel=3)


def _convert(step: KVCacheStep, length: int, on_stage, seconds: dict):
    """Converts the step once with a dynamic chunk length (every signature reuses it)."""
    length = max(length, 2)  # torch.export specialises sizes 0 and 1
    gen = torch.Generator().manual_seed(0)
    vocab = step.config.vocab_size
    example = (torch.randint(0, vocab, (1, length), generator=gen, dtype=torch.int32),
               torch.arange(length, dtype=torch.int32),
               torch.tensor([length - 1], dtype=torch.int32),
               *(torch.randn(step.layer_cache_shape, generator=gen) for _ in step.cache_names))
    dims = {"tokens": {1: "chunk"}, "input_pos": {0: "chunk"}}
    conversion = convert_with_report(step, example, on_stage=on_stage, dynamic_dims=dims)
    seconds.update(conversion.seconds)
    return conversion


def _generation_check(model, path: Path, format: str, quantize, step: KVCacheStep,
                      prefill_lengths, prompts, max_new_tokens: int, tolerance: float):
    generator = LiteRTGenerator(path) if format == "tflite" else SavedModelGenerator(path)
    if prompts is None:
        prompts = default_prompts(step.config.vocab_size, prefill_lengths, step.max_cache_len,
                                  max_new_tokens)
    report = GenerationReport(tolerance=None if quantize else tolerance)
    for prompt in prompts:
        prompt = one_prompt(torch.as_tensor(prompt).numpy())
        # no EOS stop: every verification prompt runs all max_new_tokens steps
        report.checks.append(check_prompt(model, generator, prompt, max_new_tokens))
    return report


def _stage_timer(seconds: dict, on_stage):
    from contextlib import contextmanager

    @contextmanager
    def stage(name):
        if on_stage is not None:
            on_stage(name)
        start = time.perf_counter()
        try:
            yield
        finally:
            seconds[name] = time.perf_counter() - start

    return stage


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
