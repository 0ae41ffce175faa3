"""On-device generation: HF causal LMs to one TFLite (or SavedModel) with prefill and decode
signatures and an explicit KV cache, proven token for token against HF ``generate``.

Example (``model`` an HF causal LM, ``prompt_ids`` its token ids; ``export``'s own
docstring has a runnable one):
    >>> from crossport import generative
    >>> generative.export(model, "llm.tflite", prefill_lengths=(8, 32),
    ...                   max_cache_len=512)  # doctest: +SKIP
    >>> generative.LiteRTGenerator("llm.tflite").generate(
    ...     prompt_ids, max_new_tokens=64)  # doctest: +SKIP
"""

from crossport.generative.pipeline import GenerativeExport, export
from crossport.generative.runner import LiteRTGenerator, SavedModelGenerator, SignatureGenerator
from crossport.generative.step import KVCacheStep
from crossport.generative.verify import GenerationReport, PromptCheck

__all__ = ["GenerationReport", "GenerativeExport", "KVCacheStep", "LiteRTGenerator",
           "PromptCheck", "SavedModelGenerator", "SignatureGenerator", "export"]
