"""Greedy generation on the exported artifact against HF ``generate(do_sample=False)``."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from crossport.parity import normalized_error


@dataclass
class PromptCheck:
    """One prompt: the tokens both produced and how far the per-step logits are apart.

    ``agreement`` is the fraction of steps generated before the first differing token;
    ``logit_error`` is the normalized max error over the steps both ran on the same context
    (up to and including the first differing step).
    """

    prompt_length: int
    reference: list[int]
    exported: list[int]
    logit_error: float
    tie_margin: float | None = None  # top-2 gap of HF's logits where the tokens first differ

    @property
    def identical(self) -> bool:
        return self.reference == self.exported

    @property
    def agreement(self) -> float:
        steps = max(len(self.reference), len(self.exported), 1)
        return _first_difference(self.reference, self.exported) / steps


@dataclass
class GenerationReport:
    """Greedy parity of an exported generative model against HF ``generate``."""

    checks: list[PromptCheck] = field(default_factory=list)
    tolerance: float | None = None   # None: quantized, reported and not enforced

    @property
    def identical(self) -> bool:
        return all(c.identical for c in self.checks)

    @property
    def max_logit_error(self) -> float:
        return max((c.logit_error for c in self.checks), default=0.0)

    @property
    def agreement(self) -> float:
        return float(np.mean([c.agreement for c in self.checks])) if self.checks else 1.0

    @property
    def passed(self) -> bool:
        """Identical tokens, or a first difference at a tie within the logits tolerance (HF's
        top two logits closer than twice the allowed error: either choice is rounding)."""
        if self.tolerance is None:
            return True
        return (self.max_logit_error <= self.tolerance
                and all(c.identical or self._rounding_tie(c) for c in self.checks))

    def _rounding_tie(self, check: PromptCheck) -> bool:
        return check.tie_margin is not None and check.tie_margin <= 2 * self.tolerance

    def summary(self) -> str:
        lines = [f"prompt {c.prompt_length:>3} tokens: {len(c.exported)} new, "
                 f"{'identical' if c.identical else 'DIFFERENT'} tokens, agreement "
                 f"{c.agreement:.0%}, logits error {c.logit_error:.2e}"
                 + ("" if c.identical else f", HF top-2 gap there {c.tie_margin:.1e}")
                 for c in self.checks]
        bound = ("reported only (quantized weights)" if self.tolerance is None
                 else f"tolerance {self.tolerance:.0e}")
        verdict = "PASS" if self.passed else "FAIL"
        lines.append(f"greedy parity vs HF generate: {verdict}; max logits error "
                     f"{self.max_logit_error:.2e} ({bound}), token agreement {self.agreement:.0%}")
        return "\n".join(lines)


def reference_generate(lm, prompt: np.ndarray, max_new_tokens: int, eos_token_id=None):
    """HF greedy generation: the new tokens and the ``[steps, vocab]`` logits of each.

    ``eos_token_id=None`` generates all ``max_new_tokens`` (HF would fill ``None`` in from
    the model's generation config; an empty list disables stopping).
    """
    from transformers import GenerationConfig

    ids = torch.as_tensor(np.asarray(prompt).reshape(1, -1), dtype=torch.long)
    config = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=max_new_tokens,
                              eos_token_id=[] if eos_token_id is None else eos_token_id,
                              pad_token_id=_first(eos_token_id, 0),
                              output_logits=True, return_dict_in_generate=True)
    with torch.no_grad():
        out = lm.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)
    new = out.sequences[0, ids.shape[1]:].tolist()
    logits = torch.cat([step.float() for step in out.logits]).numpy()
    return new, logits


def check_prompt(lm, generator, prompt: np.ndarray, max_new_tokens: int,
                 eos_token_id=None) -> PromptCheck:
    ref_new, ref_logits = reference_generate(lm, prompt, max_new_tokens, eos_token_id)
    ids, got_logits = generator.generate(prompt, max_new_tokens, eos_token_id, return_logits=True)
    got_new = ids[0, prompt.size:].tolist()
    first = _first_difference(ref_new, got_new)
    common = min(first + 1, len(ref_new), len(got_new))
    error = max(normalized_error(ref_logits[i], got_logits[i]) for i in range(common))
    margin = None
    if first < common:  # normalized like the error, so it compares with the tolerance
        top2 = np.sort(ref_logits[first])[-2:]
        margin = float(top2[1] - top2[0]) / max(1.0, float(np.abs(ref_logits[first]).max()))
    return PromptCheck(int(prompt.size), ref_new, got_new, float(error), margin)


def default_prompts(vocab_size: int, prefill_lengths, max_cache_len: int, max_new_tokens: int,
                    seed: int = 0) -> list[np.ndarray]:
    """Random prompts: short, exactly the largest prefill length, and longer than it
    (prefilled in two chunks), each leaving room for ``max_new_tokens`` in the cache."""
    largest = max(prefill_lengths)
    room = max_cache_len - max_new_tokens
    lengths = sorted({min(n, room) for n in (3, largest, largest + min(prefill_lengths) + 1)})
    gen = np.random.default_rng(seed)
    return [gen.integers(0, vocab_size, size=n) for n in lengths if n > 0]


def _first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _first(ids, default):
    if ids is None:
        return default
    return int(np.atleast_1d(ids)[0])
