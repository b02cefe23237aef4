"""Host values onto the device without waiting for the device.

``torch.tensor(values, device="cuda")`` copies from pageable memory and then
waits for every kernel launched before it: between two forwards that is a
host synchronisation. A copy from pinned memory (``non_blocking``) is queued
behind them instead; the caching host allocator keeps the pinned block until
the copy is done.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def device_tensor(
    values: Sequence[int] | Sequence[float] | Sequence[Sequence[float]],
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    """``values`` as a tensor on ``device``, queued without a host synchronisation."""
    host = torch.tensor(values, dtype=dtype)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)
