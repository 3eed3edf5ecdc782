"""One logging setup for the CLI, the Flyte tasks and the tests: the ``ml8s`` logger to stderr."""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO


class _Ml8sHandler(logging.StreamHandler[TextIO]):
    """Marks the handler configure() adds, so calling it twice adds one handler."""


def configure(level: str | None = None) -> None:
    """Send the ``ml8s`` logger to stderr once (idempotent); ML8S_LOG_LEVEL overrides the level."""
    logger = logging.getLogger("ml8s")
    logger.setLevel((level or os.environ.get("ML8S_LOG_LEVEL", "INFO")).upper())
    if not any(isinstance(h, _Ml8sHandler) for h in logger.handlers):
        handler = _Ml8sHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s ml8s %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
