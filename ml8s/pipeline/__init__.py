"""The run contract's step sequence (seed 001), pure Python; ``tasks/`` wraps each step as a Flyte task.

Steps, in order: ``bootstrap`` (with ``preflight``), ``gate``, ``snapshot``, ``features``, ``train``,
``export``, ``register``, ``finalize``, ``chain_commit``; ``run`` chains them in one process (``ml8s run``)
and ``run_overview`` reports a run. Each step is thin: the systems it drives live in their own packages
(``ml8s.context``, ``ml8s.features``, ``ml8s.training``, ``ml8s.registry``, ``ml8s.chain``).
"""
