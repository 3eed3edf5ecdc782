"""Model families and the switches that make training bit-reproducible.

``networks`` and ``determinism`` import torch; the verifier never imports them.
"""
