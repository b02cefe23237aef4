"""Where vLLM's scripts import their sampling parameters from
(``vllm.sampling_params``)."""

from router.params import SamplingParams
from router.structured import StructuredOutputsParams

__all__ = ["SamplingParams", "StructuredOutputsParams"]
