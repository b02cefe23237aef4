"""The kernels a forward runs, chosen once per runner: the PyTorch path (the
CPU forward and the reference) or the Triton path (GPUs). Layers call them
through the forward context, so a model is the same module on every device."""

from __future__ import annotations

import torch

from model_runtime.ops.protocol import Ops
from model_runtime.ops.torch_ops import TorchOps


def ops_for(device: torch.device, num_kv_heads: int, group: int) -> Ops:
    """Triton kernels on CUDA devices, PyTorch elsewhere (``group``: query
    heads per KV head)."""
    if device.type == "cuda":
        from model_runtime.ops.triton_ops import TritonOps

        return TritonOps(num_kv_heads, group)
    return TorchOps()
