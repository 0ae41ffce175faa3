"""On-device generation: HF causal LMs to one TFLite (or SavedModel) with prefill and decode
signatures and an explicit KV cache, proven token for token against HF ``generate``.

Example:
    >>> from crossport import generative                              # doctest: +SKIP
    >>> generative.export(model, "llm.tflite", prefill_lengths=(8, 32), max_cache_len=512)
    >>> generative.LiteRTGenerator("llm.tflite").generate(prompt_ids, max_new_tokens=64)
"""

from crossport.generative.pipeline import GenerativeExport, export
from crossport.generative.runner import LiteRTGenerator, SavedModelGenerator, SignatureGenerator
from crossport.generative.step import KVCacheStep
from crossport.generative.verify import GenerationReport, PromptCheck

__all__ = ["GenerationReport", "GenerativeExport", "KVCacheStep", "LiteRTGenerator",
           "PromptCheck", "SavedModelGenerator", "SignatureGenerator", "export"]
