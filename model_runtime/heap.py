"""A serving process's startup heap, set aside from Python's full collections.

A process that serves models builds most of its objects once: the modules
and their parameters' wrappers, the CUDA graphs, the compiled kernels, the
tokenizer, the gRPC and HTTP stacks; some 10^5 to 10^6 tracked objects. A
full (oldest-generation) collection walks every one of them, and a round
that meets one stalls: 0.1-0.2 s on the machines measured
(benchmarks/gc_pauses.py), against rounds of 7-20 ms on a GPU. Freezing what
is alive once startup is done moves it to the permanent generation, which
collections skip; what serving allocates is tracked and collected as before.
vLLM's workers and SGLang's servers do the same after their warm-up.

The price: cyclic garbage among frozen objects is not collected while they
are frozen (a model's weights are freed only by a full collection: its
modules hold cycles). A process that serves until it exits (a worker, the
router, the gateway, a rank) freezes for good. An in-process ``LLM``, which
a program may drop and build again, thaws the heap when it is freed
(``thaw_when_freed``), so that the next full collection frees its weights;
freezing is process-wide, so that also thaws the heap of any other ``LLM``
still alive, whose collections then walk it again.
"""

from __future__ import annotations

import gc
import logging
import weakref

logger = logging.getLogger(__name__)


def freeze_startup_heap(what: str) -> int:
    """Collect what is garbage now, then freeze every object still alive
    (gc.freeze); ``what`` names the process in the log line. Returns how many
    objects are frozen."""
    gc.collect()  # garbage frozen now would never be freed
    gc.freeze()
    frozen = gc.get_freeze_count()
    logger.info("%s: startup heap frozen (%d objects left out of full collections)", what, frozen)
    return frozen


def thaw_when_freed(owner: object) -> None:
    """Unfreeze the heap when ``owner`` is freed (or at exit), so that its
    cyclic garbage is collected again."""
    weakref.finalize(owner, gc.unfreeze)
