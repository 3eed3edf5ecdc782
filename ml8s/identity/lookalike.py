"""Environment variables that look like ml8s's but are not: ``EPOCH=30`` is a typo that would be ignored.

``ml8s run`` warns about each one (it never refuses: the environment is shared with other programs).
A name looks like ours when it starts with ``ML8S_`` and is not one of ours, or when it is a close
spelling of one of ours (difflib's ratio: ``EPOCH`` for ``EPOCHS`` is 0.91, ``CONTAINER_NAME`` for
``CHAIN_NAME`` 0.75).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from ml8s.identity.settings import PLATFORM_VARIABLES
from ml8s.identity.variables import USER_VARIABLES

# Variables ml8s reads besides the user and platform ones (logging, signing, provenance, MLflow's experiment,
# the empty MLflow schema new local registries are copied from, the S3 request deadline: read by the store with
# the other S3 client settings, AWS_*, since the store cannot depend on ml8s.identity).
OTHER_VARIABLES = (
    "ML8S_GIT_COMMIT",
    "ML8S_LOG_LEVEL",
    "ML8S_MLFLOW_SCHEMA_TEMPLATE",
    "ML8S_S3_REQUEST_DEADLINE",
    "ML8S_SIGNING_KEY",
    "ML8S_SIGNING_KEY_FILE",
    "MLFLOW_EXPERIMENT_NAME",
)
_CUTOFF = 0.85
# MLflow reads many MLFLOW_* variables of its own (MLFLOW_EXPERIMENT_ID is 0.86 from MLFLOW_EXPERIMENT_PREFIX):
# only a nearer spelling of one of ours is a typo there.
_MLFLOW_CUTOFF = 0.9


def known_variables() -> tuple[str, ...]:
    """Every environment variable ml8s reads, sorted."""
    return tuple(sorted({*USER_VARIABLES, *PLATFORM_VARIABLES, *OTHER_VARIABLES}))


def lookalikes(names: Iterable[str]) -> list[tuple[str, str | None]]:
    """``(name, the variable it probably means or None)`` for each name that looks like ours but is not, sorted.

    Example:
        >>> lookalikes(["EPOCH", "HOME", "EPOCHS", "ML8S_FOO"])
        [('EPOCH', 'EPOCHS'), ('ML8S_FOO', None)]
    """
    known = known_variables()
    found: list[tuple[str, str | None]] = []
    for name in sorted(set(names) - set(known)):
        cutoff = _MLFLOW_CUTOFF if name.upper().startswith("MLFLOW_") else _CUTOFF
        close = difflib.get_close_matches(name.upper(), known, n=1, cutoff=cutoff)
        if close:
            found.append((name, close[0]))
        elif name.upper().startswith("ML8S_"):
            found.append((name, None))
    return found
