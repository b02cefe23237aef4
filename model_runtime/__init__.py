"""The model runtime shared by the draft and target workers: checkpoint
loading, Llama-family models, the paged KV cache, attention and the batched
forward over a ragged batch."""

from model_runtime.config import ModelConfig, resolve_dtype
from model_runtime.errors import CheckpointError, UnsupportedModelError
from model_runtime.kv_cache import KVCacheIntegrityError, OutOfBlocksError, PagedKVCache
from model_runtime.loader import load_model
from model_runtime.parallel import SINGLE_DEVICE, TensorParallelGroup
from model_runtime.runner import ModelRunner, SequenceChunk

__all__ = [
    "SINGLE_DEVICE",
    "CheckpointError",
    "KVCacheIntegrityError",
    "ModelConfig",
    "ModelRunner",
    "OutOfBlocksError",
    "PagedKVCache",
    "SequenceChunk",
    "TensorParallelGroup",
    "UnsupportedModelError",
    "load_model",
    "resolve_dtype",
]
