"""ml8s: deterministic, idempotent, auditable model training."""

from __future__ import annotations

__version__ = "0.1.0"
