"""Generative export: greedy generation on LiteRT against HF ``generate(do_sample=False)``.

Tiny configs (hidden 64, 2 layers, 4 heads, vocab 256) with a large ``initializer_range`` so
next-token logits are far from ties (checked: a near-tie would make token identity luck).
Every export re-checks itself by generation; the tests also run the file themselves on a
prompt the export never saw.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from crossport.compat import import_torchvision
from crossport.errors import ExportError, InputError, UnsupportedOpError
from crossport.generative import KVCacheStep, LiteRTGenerator, SavedModelGenerator, export
from crossport.generative.verify import reference_generate

COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, initializer_range=0.2, max_position_embeddings=512)
PREFILL, CACHE, NEW = (4, 16), 64, 10


def _transformers():
    import_torchvision()  # transformers imports torchvision; make it importable on CPU torch
    import transformers

    return transformers


def llama(T, **kw):  # GQA: 4 query heads share 2 KV heads
    return T.LlamaForCausalLM(T.LlamaConfig(num_key_value_heads=2, **COMMON, **kw))


def qwen2(T, **kw):  # q/k/v biases
    return T.Qwen2ForCausalLM(T.Qwen2Config(num_key_value_heads=2, **COMMON, **kw))


def gemma(T, **kw):  # MQA, tied embeddings, scaled embeddings, GELU-tanh MLP
    return T.GemmaForCausalLM(T.GemmaConfig(num_key_value_heads=1, head_dim=16, **COMMON, **kw))


def mistral(T, **kw):
    return T.MistralForCausalLM(T.MistralConfig(num_key_value_heads=2, **COMMON, **kw))


def gemma2(T, **kw):  # alternating sliding/global layers, attention and final soft-capping
    return T.Gemma2ForCausalLM(T.Gemma2Config(num_key_value_heads=2, head_dim=16, **COMMON, **kw))


def gpt2(T, **kw):  # learned absolute positions, Conv1D projections, tied embeddings
    return T.GPT2LMHeadModel(T.GPT2Config(
        vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=512, initializer_range=0.2,
        bos_token_id=0, eos_token_id=255, **kw))


def falcon(T, **kw):  # new decoder architecture: parallel attention + MLP, two layer norms
    return T.FalconForCausalLM(T.FalconConfig(
        vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        initializer_range=0.2, max_position_embeddings=512, new_decoder_architecture=True,
        num_kv_heads=2, bos_token_id=0, eos_token_id=255, **{"alibi": False, **kw}))


def build(builder, **kw):
    torch.manual_seed(0)
    return builder(_transformers(), **kw).eval()


def fp32_weight_bytes(lm) -> int:
    return 4 * sum(p.numel() for p in lm.parameters())  # tied weights counted once


def builtin_ops(path) -> set[str]:
    """The op names in a .tflite file (TFLite's analyzer prints one ``Op#i NAME(...)`` a line)."""
    import contextlib
    import io

    import tensorflow as tf

    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        tf.lite.experimental.Analyzer.analyze(model_path=str(path))
    return {line.split("Op#")[1].split()[1].split("(")[0]
            for line in text.getvalue().splitlines() if "Op#" in line}


def min_margin(logits: np.ndarray) -> float:
    """Smallest gap between the best and second-best logit over the steps."""
    top2 = np.sort(logits, axis=-1)[:, -2:]
    return float(np.min(top2[:, 1] - top2[:, 0]))


def assert_generates_like_hf(lm, generator, length: int, seed: int):
    prompt = np.random.default_rng(seed).integers(0, lm.config.vocab_size, size=length)
    eos = lm.generation_config.eos_token_id
    ref_new, ref_logits = reference_generate(lm, prompt, NEW, eos)
    ids, logits = generator.generate(prompt[None], NEW, eos, return_logits=True)
    assert min_margin(ref_logits) > 1e-3, "near-tie logits: the token check would be luck"
    assert ids[0, :length].tolist() == prompt.tolist()
    assert ids[0, length:].tolist() == ref_new
    scale = max(1.0, float(np.abs(ref_logits).max()))
    assert np.abs(logits - ref_logits).max() / scale <= 1e-4


@pytest.mark.parametrize("builder", [llama, qwen2, gemma], ids=["llama", "qwen2", "gemma"])
def test_greedy_parity_on_litert(builder, tmp_path):
    lm = build(builder)
    path = tmp_path / "llm.tflite"
    result = export(lm, path, prefill_lengths=PREFILL, max_cache_len=CACHE, max_new_tokens=NEW)
    assert result.report.identical and result.report.max_logit_error <= 1e-4, result.summary()
    assert len(result.report.checks) == 3  # short (padded), exact prefill length, two chunks
    # weights written once although three signatures use them
    assert result.bytes < 1.5 * fp32_weight_bytes(lm), result.summary()
    runner = LiteRTGenerator(path)
    assert sorted(runner.signatures) == ["decode", "prefill_16", "prefill_4"]
    for length, seed in ((7, 1), (20, 2)):  # prompts the export's own check never saw
        assert_generates_like_hf(lm, runner, length, seed)


@pytest.mark.parametrize("builder", [gpt2, pytest.param(falcon, marks=pytest.mark.slow)],
                         ids=["gpt2", "falcon"])
def test_greedy_parity_more_position_schemes(builder, tmp_path):
    """GPT-2 (learned positions, Conv1D) and Falcon (parallel attention, RoPE)."""
    lm = build(builder)
    path = tmp_path / "llm.tflite"
    result = export(lm, path, prefill_lengths=PREFILL, max_cache_len=CACHE, max_new_tokens=NEW)
    assert result.report.identical and result.report.max_logit_error <= 1e-4, result.summary()
    assert_generates_like_hf(lm, LiteRTGenerator(path), 20, 8)


def test_alibi_and_state_space_models_are_clear_errors(tmp_path):
    T = _transformers()
    with pytest.raises(UnsupportedOpError, match="ALiBi"):
        export(build(falcon, alibi=True), tmp_path / "llm.tflite")
    torch.manual_seed(0)
    mamba = T.MambaForCausalLM(T.MambaConfig(vocab_size=256, hidden_size=32, num_hidden_layers=2,
                                             state_size=8)).eval()
    with pytest.raises(UnsupportedOpError, match=r"MambaForCausalLM \(mamba\) is a state-space"
                                                 r".*crossport.convert"):
        export(mamba, tmp_path / "llm.tflite")
    assert list(tmp_path.iterdir()) == []


def test_decoders_the_cache_cannot_carry_are_refused_by_name(tmp_path):
    """Bloom's ALiBi (built in its decoder stack, `transformer`, not `model`) and GPT-Neo's
    'local' layers (their window is placed by the key length) are refused before any work;
    a decoder that cannot run with the step's inputs is an UnsupportedOpError, not its own
    exception."""
    T = _transformers()
    torch.manual_seed(0)
    bloom = T.BloomForCausalLM(T.BloomConfig(vocab_size=256, hidden_size=64, n_layer=2,
                                             n_head=4)).eval()
    with pytest.raises(UnsupportedOpError, match="BloomForCausalLM: ALiBi"):
        export(bloom, tmp_path / "llm.tflite")
    neo = T.GPTNeoForCausalLM(T.GPTNeoConfig(
        vocab_size=256, hidden_size=64, num_layers=2, num_heads=4, window_size=8,
        attention_types=[[["global", "local"], 1]])).eval()
    with pytest.raises(UnsupportedOpError, match="'local' attention layers.*"
                                                 "max_cache_len <= 8"):
        export(neo, tmp_path / "llm.tflite")

    class NeedsCachePosition(T.LlamaForCausalLM):
        def forward(self, *args, cache_position=None, **kwargs):
            if cache_position is None:
                raise ValueError("this decoder needs cache_position")
            return super().forward(*args, cache_position=cache_position, **kwargs)

    lm = NeedsCachePosition(T.LlamaConfig(num_key_value_heads=2, **COMMON)).eval()
    with pytest.raises(UnsupportedOpError, match=r"NeedsCachePosition \(llama\) did not run "
                                                 r"with the generative export's cache and masks"
                                                 r".*needs cache_position"):
        export(lm, tmp_path / "llm.tflite")
    assert list(tmp_path.iterdir()) == []


def test_sliding_layers_with_a_window_longer_than_the_cache(tmp_path):
    """Gemma 2's default window (4096) hides no slot of a 64-slot cache: its sliding layers
    take the full mask (the mask dict lacked their key, a KeyError inside the model)."""
    lm = build(gemma2)
    assert lm.config.sliding_window > CACHE
    result = export(lm, tmp_path / "llm.tflite", prefill_lengths=PREFILL, max_cache_len=CACHE,
                    max_new_tokens=NEW)
    assert result.report.identical and result.report.max_logit_error <= 1e-4, result.summary()


def test_signature_contract(tmp_path):
    """The names, shapes and dtypes documented for app developers."""
    lm = build(llama)
    path = tmp_path / "llm.tflite"
    export(lm, path, prefill_lengths=(4,), max_cache_len=32, check=False)
    runner = LiteRTGenerator(path)
    cache = ([1, 2, 32, 16], np.float32)  # batch, kv heads, max_cache_len, head_dim
    caches = {name: cache for name in ("k_cache_0", "k_cache_1", "v_cache_0", "v_cache_1")}
    prefill = runner.signatures["prefill_4"]
    shapes = {k: (v["shape"].tolist(), v["dtype"]) for k, v in prefill.get_input_details().items()}
    assert shapes == {"tokens": ([1, 4], np.int32), "input_pos": ([4], np.int32),
                      "last_index": ([1], np.int32), **caches}
    decode = runner.signatures["decode"]
    shapes = {k: (v["shape"].tolist(), v["dtype"]) for k, v in decode.get_input_details().items()}
    assert shapes == {"tokens": ([1, 1], np.int32), "input_pos": ([1], np.int32), **caches}
    outputs = {k: (v["shape"].tolist(), v["dtype"]) for k, v in decode.get_output_details().items()}
    assert outputs == {"logits": ([1, 256], np.float32), **caches}
    ops = builtin_ops(path)  # the cache is written in place of the chunk, not blended
    assert "DYNAMIC_UPDATE_SLICE" in ops and not any(op.startswith("Flex") for op in ops), ops
    with pytest.raises(InputError, match="exceeds the cache length 32"):
        runner.generate([[1, 2, 3]], max_new_tokens=30)
    with pytest.raises(InputError, match=r"shape \[2, 3\]: the generative export has batch size 1"):
        runner.generate([[1, 2, 3], [4, 5, 6]], max_new_tokens=2)  # never flattened into one


def test_prompt_tail_near_the_cache_end(tmp_path):
    """A padded chunk may not run past the cache (the cache write is a dynamic-update-slice,
    which would clamp): the runner prefills such a tail through decode."""
    lm = build(llama)
    path = tmp_path / "llm.tflite"
    export(lm, path, prefill_lengths=(16,), max_cache_len=40, check=False)
    prompt = np.random.default_rng(7).integers(0, 256, size=35)  # chunks 0, 16; 32.. by decode
    ref_new, ref_logits = reference_generate(lm, prompt, 5)
    ids, logits = LiteRTGenerator(path).generate(prompt, 5, return_logits=True)
    assert min_margin(ref_logits) > 1e-3
    assert ids[0, 35:].tolist() == ref_new
    assert np.abs(logits - ref_logits).max() / max(1.0, np.abs(ref_logits).max()) <= 1e-4


def test_sliding_window_is_honoured(tmp_path):
    lm = build(mistral, sliding_window=6)
    full = build(mistral, sliding_window=None)
    prompt = np.arange(20) % 256
    # the window changes what HF generates here, so matching it proves the mask
    windowed, unwindowed = (reference_generate(m, prompt, 3)[1] for m in (lm, full))
    assert not np.allclose(windowed, unwindowed)
    path = tmp_path / "llm.tflite"
    result = export(lm, path, prefill_lengths=PREFILL, max_cache_len=CACHE, max_new_tokens=NEW)
    assert result.report.identical and result.report.max_logit_error <= 1e-4, result.summary()
    assert_generates_like_hf(lm, LiteRTGenerator(path), 20, 3)


@pytest.mark.slow
def test_alternating_local_global_and_softcapping(tmp_path):
    lm = build(gemma2, sliding_window=6)
    path = tmp_path / "llm.tflite"
    result = export(lm, path, prefill_lengths=PREFILL, max_cache_len=CACHE, max_new_tokens=NEW)
    assert result.report.identical and result.report.max_logit_error <= 1e-4, result.summary()
    assert_generates_like_hf(lm, LiteRTGenerator(path), 20, 4)


def test_int8_weights_report_error_and_agreement(tmp_path):
    lm = build(llama)
    path = tmp_path / "llm.tflite"
    result = export(lm, path, prefill_lengths=PREFILL, max_cache_len=CACHE,
                    quantize="int8-weights", max_new_tokens=NEW)
    report = result.report
    assert report.tolerance is None and report.passed  # reported, not enforced
    assert 0.0 < report.max_logit_error < 0.5, report.summary()  # changed, but not broken
    assert 0.0 <= report.agreement <= 1.0 and "agreement" in report.summary()
    assert result.bytes < 0.75 * fp32_weight_bytes(lm), result.summary()


def qwen3(T, **kw):  # q/k RMSNorm
    return T.Qwen3ForCausalLM(T.Qwen3Config(num_key_value_heads=2, head_dim=16, **COMMON, **kw))


def phi3(T, **kw):  # fused qkv and gate/up projections
    return T.Phi3ForCausalLM(T.Phi3Config(num_key_value_heads=2, pad_token_id=0, **COMMON, **kw))


def stablelm(T, **kw):  # partial rotary: RoPE on half of each head
    return T.StableLmForCausalLM(T.StableLmConfig(num_key_value_heads=2, partial_rotary_factor=0.5,
                                                  **COMMON, **kw))


def gemma3(T, **kw):  # alternating local/global with their own RoPE, q/k norms
    return T.Gemma3ForCausalLM(T.Gemma3TextConfig(num_key_value_heads=2, head_dim=16,
                                                  sliding_window=6, **COMMON, **kw))


def scaled_rope(kind, **params):
    def builder(T):
        config = T.LlamaConfig(num_key_value_heads=2, **COMMON)
        config.rope_parameters = {**config.rope_parameters, "rope_type": kind, **params}
        return T.LlamaForCausalLM(config)
    return builder


MORE_FAMILIES = {
    "qwen3": qwen3, "phi3": phi3, "stablelm-partial-rotary": stablelm, "gemma3": gemma3,
    "llama3-rope": scaled_rope("llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                               original_max_position_embeddings=128),
    "yarn-rope": scaled_rope("yarn", factor=4.0, original_max_position_embeddings=128),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MORE_FAMILIES))
def test_more_families_and_rope_variants(name, tmp_path):
    lm = build(MORE_FAMILIES[name])
    path = tmp_path / "llm.tflite"
    result = export(lm, path, prefill_lengths=PREFILL, max_cache_len=CACHE, max_new_tokens=NEW)
    assert result.report.identical and result.report.max_logit_error <= 1e-4, result.summary()
    assert_generates_like_hf(lm, LiteRTGenerator(path), 20, 6)


def mixtral(T, **kw):  # mixture of experts, top-2 of 4
    return T.MixtralForCausalLM(T.MixtralConfig(num_key_value_heads=2, num_local_experts=4,
                                                num_experts_per_tok=2, **COMMON, **kw))


@pytest.mark.slow
def test_default_experts_path_generates_from_tflite_and_a_saved_model(tmp_path):
    """transformers 5's default experts path (tokens sorted by expert, histc, an inverse
    permutation, grouped matmul) exports to TFLite builtins and generates like HF on LiteRT
    (decode gathers its 2 experts' matrices, prefill multiplies by all 4). Its int64 index
    arithmetic needed FLOOR_DIV and UNSORTED_SEGMENT_* at int64, which TFLite lacks (the
    export was refused): the step bounds the chunk by the cache, which proves the indices
    fit int32. The SavedModel and the batched_mm path generate too."""
    lm = build(mixtral)
    path = tmp_path / "llm.tflite"
    result = export(lm, path, prefill_lengths=PREFILL, max_cache_len=CACHE, max_new_tokens=NEW)
    assert result.report.identical, result.summary()
    assert_generates_like_hf(lm, LiteRTGenerator(path), 9, 5)
    result = export(lm, tmp_path / "llm_saved_model", prefill_lengths=PREFILL,
                    max_cache_len=CACHE, format="saved_model", max_new_tokens=NEW)
    assert result.report.identical, result.summary()
    assert_generates_like_hf(lm, SavedModelGenerator(result.path), 9, 5)
    lm = build(mixtral, experts_implementation="batched_mm")
    result = export(lm, tmp_path / "batched.tflite", prefill_lengths=PREFILL,
                    max_cache_len=CACHE, max_new_tokens=NEW)
    assert result.report.identical, result.summary()


@pytest.mark.slow
def test_gpt_neo_local_layers_export_when_their_window_covers_the_cache(tmp_path):
    """GPT-Neo's 'local' layers place their window by the key length; with a cache no longer
    than the window, it covers every slot and they attend as transformers' do (refused
    above the window, tested above)."""
    T = _transformers()
    torch.manual_seed(0)
    neo = T.GPTNeoForCausalLM(T.GPTNeoConfig(
        vocab_size=256, hidden_size=64, num_layers=2, num_heads=4, window_size=CACHE,
        attention_types=[[["global", "local"], 1]], initializer_range=0.2)).eval()
    path = tmp_path / "llm.tflite"
    result = export(neo, path, prefill_lengths=PREFILL, max_cache_len=CACHE, max_new_tokens=NEW)
    assert result.report.identical, result.summary()
    assert_generates_like_hf(neo, LiteRTGenerator(path), 9, 5)


@pytest.mark.slow
def test_saved_model_has_the_same_signatures(tmp_path):
    lm = build(qwen2)
    path = tmp_path / "llm_saved_model"
    result = export(lm, path, prefill_lengths=PREFILL, max_cache_len=CACHE, format="saved_model",
                    max_new_tokens=NEW)
    assert result.report.identical, result.summary()
    runner = SavedModelGenerator(path)
    assert sorted(runner.signatures) == ["decode", "prefill_16", "prefill_4"]
    assert_generates_like_hf(lm, runner, 9, 5)


@pytest.mark.slow
def test_failed_check_leaves_nothing(tmp_path):
    lm = build(llama)
    path = tmp_path / "llm.tflite"
    with pytest.raises(ExportError, match="does not generate what LlamaForCausalLM.generate does"):
        export(lm, path, prefill_lengths=(4,), max_cache_len=32, tolerance=0.0, max_new_tokens=4)
    assert list(tmp_path.iterdir()) == []


def test_step_module_matches_hf_forward():
    """The functional cache in torch: prefill (padded) then decode equal HF's full forward."""
    lm = build(qwen2)
    step = KVCacheStep(lm, max_cache_len=16).eval()
    ids = torch.randint(0, 256, (1, 7), generator=torch.Generator().manual_seed(0))
    tokens = torch.zeros(1, 8, dtype=torch.int32)
    tokens[0, :6] = ids[0, :6]  # 6 real tokens padded to 8
    caches = [torch.zeros(step.layer_cache_shape) for _ in step.cache_names]
    with torch.no_grad():
        ref = lm(ids).logits[0]
        logits, *caches = step(tokens, torch.arange(8, dtype=torch.int32),
                               torch.tensor([5], dtype=torch.int32), *caches)
        torch.testing.assert_close(logits[0], ref[5], rtol=1e-5, atol=1e-5)
        logits, *caches = step(ids[:, 6:].int(), torch.tensor([6], dtype=torch.int32),
                               torch.tensor([0], dtype=torch.int32), *caches)
        torch.testing.assert_close(logits[0], ref[6], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rope", [{"rope_type": "dynamic", "factor": 2.0},
                                  {"rope_type": "longrope", "short_factor": [1.0] * 8,
                                   "long_factor": [2.0] * 8,
                                   "original_max_position_embeddings": 256}],
                         ids=["dynamic", "longrope"])
def test_unsupported_rope_is_a_clear_error(rope, tmp_path):
    T = _transformers()
    config = T.LlamaConfig(num_key_value_heads=2, **COMMON)
    config.rope_parameters = {**config.rope_parameters, **rope}
    lm = T.LlamaForCausalLM(config).eval()
    with pytest.raises(UnsupportedOpError, match=f"RoPE type '{rope['rope_type']}'"):
        export(lm, tmp_path / "llm.tflite", prefill_lengths=(4,), max_cache_len=32)
    assert list(tmp_path.iterdir()) == []


def test_bad_arguments_are_input_errors(tmp_path):
    lm = build(llama)
    with pytest.raises(InputError, match="quantize='int4'"):
        export(lm, tmp_path / "a.tflite", quantize="int4")
    with pytest.raises(InputError, match="TFLite only"):
        export(lm, tmp_path / "a", quantize="fp16", format="saved_model")
    with pytest.raises(InputError, match="prefill_lengths"):
        export(lm, tmp_path / "a.tflite", prefill_lengths=(64,), max_cache_len=32)
    with pytest.raises(InputError, match="max_position_embeddings"):
        export(lm, tmp_path / "a.tflite", max_cache_len=1024)


def test_report_tells_a_rounding_tie_from_a_difference():
    from crossport.generative.verify import GenerationReport, PromptCheck

    same = PromptCheck(3, [5, 6, 7], [5, 6, 7], 1e-6)
    tie = PromptCheck(3, [5, 6, 7], [5, 9, 2], 1e-6, tie_margin=1e-5)
    wrong = PromptCheck(3, [5, 6, 7], [5, 9, 2], 1e-6, tie_margin=0.3)
    assert GenerationReport([same, tie], tolerance=1e-4).passed
    assert not GenerationReport([same, wrong], tolerance=1e-4).passed
    assert not GenerationReport([same], tolerance=1e-7).passed  # logits beyond tolerance
    quantized = GenerationReport([same, wrong], tolerance=None)
    assert quantized.passed and quantized.agreement == pytest.approx((1 + 1 / 3) / 2)
    assert "HF top-2 gap there 3.0e-01" in quantized.summary()


def test_beyond_the_flatbuffer_limit_suggests_quantizing(tmp_path):
    """A 1.1B-parameter (TinyLlama-sized) config on the meta device: sized, never allocated."""
    T = _transformers()
    config = T.LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                           num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4)
    with torch.device("meta"):
        lm = T.LlamaForCausalLM(config)
    with pytest.raises(ExportError, match=r"4\.40 GB .*2 GB FlatBuffer limit.*"
                                          r"quantize='int8-weights' \(~1\.10 GB\)"):
        export(lm, tmp_path / "llm.tflite")
    assert list(tmp_path.iterdir()) == []


def test_stacked_cache_output_needs_no_transpose():
    """Per-layer caches stacked in torch order come out canonical: no full-cache transpose."""
    import crossport

    class StackLayers(torch.nn.Module):
        def forward(self, cache):
            return torch.stack([cache[0] + 1, cache[1] * 2])

    cache = torch.randn(2, 1, 2, 16, 8)
    conversion = crossport.convert_with_report(StackLayers().eval(), (cache,))
    assert conversion.report.passed
    assert (conversion.transposes, conversion.boundary_transposes) == (0, 0)
