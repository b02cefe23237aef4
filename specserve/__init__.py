"""specserve: speculative decoding with a separate draft model.

The public face: ``LLM`` and ``SamplingParams`` for offline use, the
``specserve`` command and its subcommands (``specserve.cli``), launching
services as processes (``specserve.launch``), and assembling an in-process
engine's workers (``specserve.local_workers``).
"""

from model_runtime.resolve import resolve_model
from router.params import SamplingParams
from router.structured import StructuredOutputsParams
from specserve.inputs import TextPrompt, TokensPrompt
from specserve.llm import LLM
from specserve.outputs import CompletionOutput, RequestOutput

__version__ = "0.1.0"
__all__ = [
    "LLM",
    "CompletionOutput",
    "RequestOutput",
    "SamplingParams",
    "StructuredOutputsParams",
    "TextPrompt",
    "TokensPrompt",
    "resolve_model",
]
