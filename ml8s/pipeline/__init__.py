"""The pipeline steps of seed 001, pure Python; ``tasks/`` wraps each as a Flyte task."""
