"""Greedy generation over the exported signatures (LiteRT interpreter or a SavedModel).

The loop is what an app does on a device: prefill the prompt in chunks of the prefill
lengths (the last chunk padded to the smallest length that holds it and still ends inside
the cache; a tail no prefill length fits goes through ``decode`` token by token), then one
``decode`` call per new token, feeding the cache outputs back as inputs.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from crossport.errors import InputError


def one_prompt(prompt_ids) -> np.ndarray:
    """``[n]`` int64 ids from ``[n]`` or ``[1, n]``; a batch of several prompts is refused
    (the signatures have batch 1), never flattened into one."""
    prompt = np.asarray(prompt_ids, dtype=np.int64)
    if prompt.ndim > 2 or (prompt.ndim == 2 and prompt.shape[0] != 1):
        raise InputError(f"prompt_ids of shape {list(prompt.shape)}: the generative export has "
                         "batch size 1 (the signatures take tokens [1, N]); generate each prompt "
                         "on its own, e.g. [runner.generate(p) for p in prompts]")
    return prompt.reshape(-1)


class SignatureGenerator:
    """Greedy generation over ``{name: callable(**inputs) -> {name: array}}`` signatures.

    Subclasses only load the signatures; see :class:`LiteRTGenerator`.
    """

    def __init__(self, signatures: dict, cache_shapes: dict[str, tuple[int, ...]]):
        self.signatures = signatures
        # the decode signature's cache inputs (k_cache_<i>, v_cache_<i>) and their shapes
        self.cache_shapes = {name: tuple(int(d) for d in shape)
                             for name, shape in sorted(cache_shapes.items())
                             if re.fullmatch(r"[kv]_cache_\d+", name)}
        self.prefill_lengths = sorted(int(m.group(1)) for name in signatures
                                      if (m := re.fullmatch(r"prefill_(\d+)", name)))
        if "decode" not in signatures or not self.prefill_lengths:
            raise InputError(f"expected prefill_<N> and decode signatures, found "
                             f"{sorted(signatures)}")

    @property
    def max_cache_len(self) -> int:
        return next(iter(self.cache_shapes.values()))[2]  # [1, kv_heads, L, head_dim]

    def empty_caches(self) -> dict[str, np.ndarray]:
        """Zero caches: the inputs of the first call."""
        return {name: np.zeros(shape, np.float32) for name, shape in self.cache_shapes.items()}

    def _call(self, name: str, caches: dict, **inputs):
        """One signature call: the logits of its last real token and the written caches."""
        out = self.signatures[name](**inputs, **caches)
        return out["logits"][0], {n: out[n] for n in caches}

    def generate(self, prompt_ids, max_new_tokens: int = 64, eos_token_id=None,
                 return_logits: bool = False):
        """Greedy decoding: returns ``[1, prompt + new]`` int64 ids like HF ``generate``.

        Args:
            prompt_ids: ``[1, n]`` or ``[n]`` token ids (numpy, torch or a list); batch 1
                only (``InputError`` otherwise).
            max_new_tokens: at most this many new tokens.
            eos_token_id: an id or list of ids that end generation (kept in the output).
            return_logits: also return the ``[steps, vocab]`` logits of each new token.
        """
        prompt = one_prompt(prompt_ids)
        if prompt.size == 0:
            raise InputError("the prompt is empty")
        if prompt.size + max_new_tokens > self.max_cache_len:
            raise InputError(f"prompt ({prompt.size}) + max_new_tokens ({max_new_tokens}) exceeds "
                             f"the cache length {self.max_cache_len} the model was exported with")
        stops = set(np.atleast_1d(eos_token_id).tolist()) if eos_token_id is not None else set()
        logits, caches = self.prefill(prompt, self.empty_caches())
        tokens, steps = list(prompt), []
        for _ in range(max_new_tokens):
            steps.append(logits)
            token = int(np.argmax(logits))
            tokens.append(token)
            if token in stops or len(steps) == max_new_tokens:
                break
            logits, caches = self._call("decode", caches, tokens=np.array([[token]], np.int32),
                                        input_pos=np.array([len(tokens) - 1], np.int32))
        ids = np.array([tokens], dtype=np.int64)
        return (ids, np.stack(steps)) if return_logits else ids

    def prefill(self, prompt: np.ndarray, caches: dict):
        """Writes ``prompt`` into the cache chunk by chunk; the logits after its last token."""
        start = 0
        while start < prompt.size:
            # a padded chunk must end inside the cache; near its end, shorter signatures
            # (or decode, one token at a time) take the rest
            fitting = [n for n in self.prefill_lengths if start + n <= self.max_cache_len]
            if not fitting:
                return self._decode_rest(prompt, start, caches)
            chunk = prompt[start:start + fitting[-1]]
            length = next(n for n in fitting if n >= chunk.size)
            tokens = np.zeros((1, length), np.int32)
            tokens[0, :chunk.size] = chunk
            logits, caches = self._call(
                f"prefill_{length}", caches, tokens=tokens,
                input_pos=np.arange(start, start + length, dtype=np.int32),
                last_index=np.array([chunk.size - 1], np.int32))
            start += chunk.size
        return logits, caches

    def _decode_rest(self, prompt: np.ndarray, start: int, caches: dict):
        for position in range(start, prompt.size):
            logits, caches = self._call("decode", caches,
                                        tokens=np.array([[prompt[position]]], np.int32),
                                        input_pos=np.array([position], np.int32))
        return logits, caches


class LiteRTGenerator(SignatureGenerator):
    """Greedy generation on the LiteRT interpreter from a generative ``.tflite``.

    Example:
        >>> runner = LiteRTGenerator("llm.tflite")                   # doctest: +SKIP
        >>> runner.generate([[1, 5, 7]], max_new_tokens=8).shape    # doctest: +SKIP
        (1, 11)
    """

    def __init__(self, path: str | Path, num_threads: int = 2):
        from ai_edge_litert.interpreter import Interpreter

        self.interpreter = Interpreter(model_path=str(path), num_threads=num_threads)
        names = self.interpreter.get_signature_list()
        runners = {name: self.interpreter.get_signature_runner(name) for name in names}
        decode = runners.get("decode")
        shapes = ({n: d["shape"] for n, d in decode.get_input_details().items()} if decode
                  else {})
        super().__init__(runners, shapes)


class SavedModelGenerator(SignatureGenerator):
    """The same loop over a generative SavedModel's signatures (TF runtime)."""

    def __init__(self, path: str | Path):
        import tensorflow as tf

        self.loaded = tf.saved_model.load(str(path))
        funcs = {name: fn for name, fn in self.loaded.signatures.items()
                 if name == "decode" or name.startswith("prefill_")}  # not serving_default
        decode = funcs.get("decode")
        shapes = ({n: tuple(spec.shape) for n, spec in decode.structured_input_signature[1].items()}
                  if decode else {})

        def wrap(fn):
            return lambda **kw: {k: t.numpy() for k, t in fn(**kw).items()}

        super().__init__({name: wrap(fn) for name, fn in funcs.items()}, shapes)
