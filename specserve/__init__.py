"""specserve: speculative decoding with a separate draft model.

The public face: ``LLM`` and ``SamplingParams`` for offline use, the
``specserve`` command (``specserve.cli``) and ``resolve_model``.
"""

from model_runtime.resolve import resolve_model
from router.outputs import CompletionOutput, RequestOutput
from router.params import SamplingParams
from specserve.llm import LLM

__version__ = "0.1.0"
__all__ = ["LLM", "CompletionOutput", "RequestOutput", "SamplingParams", "resolve_model"]
