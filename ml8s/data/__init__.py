"""The data side of a run: DATA_ROOT as a source, its fingerprint (SPEC §2), the verified loader and the
deterministic demo dataset (``python -m ml8s.data.demo``)."""
