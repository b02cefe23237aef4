"""specserve: speculative decoding with a separate draft model.

The public face: the ``specserve`` command (``specserve.cli``); the offline
``LLM`` API and ``SamplingParams`` come with the engine.
"""

from model_runtime.resolve import resolve_model

__version__ = "0.1.0"
__all__ = ["resolve_model"]
