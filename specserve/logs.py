"""Logging for the offline API, configured as vLLM configures its own: the
project's loggers print INFO and above to stderr with a short prefix, so the
speculation summary of ``LLM.generate`` shows without any setup. Set
SPECSERVE_CONFIGURE_LOGGING=0 to leave logging to the application (as
VLLM_CONFIGURE_LOGGING=0 does); a logger already given a handler is left alone.
"""

from __future__ import annotations

import logging
import os

# The packages whose loggers the offline API shows.
PACKAGES = ("specserve", "router", "model_runtime", "worker_base", "draft_worker", "target_worker")
FORMAT = "%(levelname)s %(asctime)s [%(name)s] %(message)s"


def configure_logging() -> None:
    """Give each package logger a stderr handler at INFO, once."""
    if os.environ.get("SPECSERVE_CONFIGURE_LOGGING", "1") == "0":
        return
    for name in PACKAGES:
        logger = logging.getLogger(name)
        if logger.handlers:
            continue
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(FORMAT, "%m-%d %H:%M:%S"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False  # no second copy through a root handler
