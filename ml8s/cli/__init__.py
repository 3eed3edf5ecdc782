"""The ``ml8s`` command line (``ml8s --help``): :func:`console` is the console script, :func:`main` its work."""

from __future__ import annotations

from ml8s.cli.main import build_parser, console, main

__all__ = ["build_parser", "console", "main"]
