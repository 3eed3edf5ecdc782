"""Flyte workflows and launch plans: wiring only, the steps live in ``tasks/`` and ``ml8s``."""
