"""The ``ml8s`` command line (``ml8s --help``): :func:`main` is the console script."""

from __future__ import annotations

from ml8s.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
