"""A serving process's heap, set aside from Python's full collections.

A process that serves models builds most of its objects once: the modules
and their parameters' wrappers, the CUDA graphs, the compiled kernels, the
tokenizer, the gRPC and HTTP stacks; some 10^5 to 10^6 tracked objects. A
full (oldest-generation) collection walks every one of them, and a round
that meets one stalls: 0.19 s on this project's CPU, 0.27 s on an H100 host
(benchmarks/gc_pauses.py), against rounds of 7-20 ms on a GPU. Frozen
objects (gc.freeze) sit in the permanent generation, which collections
skip; what is allocated after is tracked and collected as before.

Frozen cyclic garbage is not collected while frozen, so what is frozen, and
for how long, depends on who owns the process:

- A process that serves until it exits (a worker, the router, the HTTP
  server, a rank) freezes what startup built, for good
  (``freeze_startup_heap``), as vLLM's workers and SGLang's servers do
  after their warm-up.
- The in-process ``LLM`` shares its process with the program that made it,
  whose objects it must not keep: ``LLM.generate`` freezes the heap for the
  length of the call only (``frozen_heap``), and thaws it after, so
  nothing dropped meanwhile (an ``LLM`` and its weights, held in cycles,
  included) outlives the call. A heap something else froze (the program
  itself, before it forks, say) is left as it is.

Either way ``LLM.generate`` holds off Python's automatic full collections
in its process for the call's length (young ones go on; tensor-parallel
ranks are processes of their own, frozen for good): the freeze alone did
not keep rounds clear. In one run on an H200, 375 objects were frozen before the
first call (by what, the run does not say), so no call froze the heap,
and five full collections of 0.23-0.31 s met rounds at batch 64, or the
queuing of a call's requests (benchmarks/stalls.py says when and where).
Cyclic garbage that outlives two young collections in a call waits for the
call's end, so a long call's memory grows by what of it the engine makes;
an explicit ``gc.collect()`` inside still runs, over what is not frozen.
The collection held off comes after the call, over the thawed heap, in the
program's time rather than a round's. Pythons whose collector is
incremental (3.14) ignore the oldest threshold: there the freeze alone
applies, and the old generation is collected in increments, not at once.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from contextlib import contextmanager

logger = logging.getLogger(__name__)


def freeze_startup_heap(what: str) -> int:
    """Collect what is garbage now, then freeze every object still alive,
    for the rest of the process; ``what`` names the process in the log line.
    Returns how many objects are frozen."""
    gc.collect()  # garbage frozen now would never be freed
    gc.freeze()
    frozen = gc.get_freeze_count()
    logger.info("%s: startup heap frozen (%d objects left out of full collections)", what, frozen)
    return frozen


# The oldest generation's threshold while a call runs. It counts the middle
# generation's collections, of which a call makes far fewer: the collector
# never starts a full collection by itself.
NO_FULL_COLLECTIONS = 1 << 30


@contextmanager
def frozen_heap() -> Iterator[None]:
    """For the block's length: hold off automatic full collections, and
    freeze every object alive now unless something froze the heap already
    (a serving process, the program itself), whose freeze is left as it is;
    then restore the oldest threshold (unless the block set it otherwise),
    and thaw what this froze. Freezing and thawing move lists, not objects:
    both are cheap, and garbage frozen with the rest is collected after."""
    young, middle, oldest = gc.get_threshold()
    freezing = not gc.get_freeze_count()
    if freezing:
        gc.freeze()
    gc.set_threshold(young, middle, NO_FULL_COLLECTIONS)
    try:
        yield
    finally:
        young, middle, now = gc.get_threshold()
        if now == NO_FULL_COLLECTIONS:
            gc.set_threshold(young, middle, oldest)
        if freezing:
            gc.unfreeze()
