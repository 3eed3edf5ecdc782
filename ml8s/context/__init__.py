"""The run object every step receives, and how a step's files become artifacts.

- ``run``: :class:`RunSpec` (what a compute step's bytes depend on), :class:`RunContext` (the spec plus the
  platform settings) and :class:`ArtifactWriter` (atomic writes under ARTIFACT_ROOT).
- ``publish``: the artifact sets each compute step produces and their upload into ARTIFACT_ROOT.

Below the steps (``ml8s.pipeline``) and the systems they call (``ml8s.features``, ``ml8s.training``,
``ml8s.registry``), so all of them can take a run without importing one another.
"""

from ml8s.context.run import ArtifactWriter, RunContext, RunSpec

__all__ = ["ArtifactWriter", "RunContext", "RunSpec"]
