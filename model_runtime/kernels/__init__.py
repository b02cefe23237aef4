"""Triton kernels of the GPU forward (``model_runtime.ops.triton_ops`` uses them).

Each is checked against the PyTorch path (``model_runtime.ops.torch_ops``) on
the CPU under ``TRITON_INTERPRET=1``.
"""
