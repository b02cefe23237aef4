"""The model runtime shared by the draft and target workers: checkpoint
loading, Llama-family models, the paged KV cache, attention, the batched
forward over a ragged batch, tensor-parallel ranks and their executors.

``specs`` holds the plain configs (``RunnerSpec``, ``ParallelConfig``) and
``build`` the one function that turns a spec into a ``ModelRunner``; nothing is
imported here, so holding a config never loads the runtime.
"""
