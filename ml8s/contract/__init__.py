"""The files a run writes (seed 001's artifact layout): where each lives and its schema.

The step that writes a file and the verifier that reads it use the same model from here.
"""
