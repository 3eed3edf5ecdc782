"""Model families and the switches that make training bit-reproducible.

``families`` holds what a run records about its model and how it was made, without torch: the
verifier imports it. ``networks`` and ``determinism`` import torch; the verifier never imports them.
"""
