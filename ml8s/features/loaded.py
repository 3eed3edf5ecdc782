"""The prepared rows of a run, parsed once per process.

``ml8s run`` validates the whole dataset in the snapshot step (before the first write) and then engineers
features from the same rows: the snapshot step leaves its :class:`Prepared` here and the features step takes
it, so the files are read, verified and parsed once. Taking removes it, so the rows are not kept alive while
the model trains. A process that runs only the features step (a Flyte task) finds nothing and parses.
"""

from __future__ import annotations

from ml8s.data.dataset import load_dataset
from ml8s.data.fingerprint import Fingerprint
from ml8s.features.prepared import Prepared, SplitAhead, prepare
from ml8s.identity.params import RunParams
from ml8s.memory import give_back

_held: dict[tuple[str, str], Prepared] = {}


def _key(fingerprint: Fingerprint, params: RunParams) -> tuple[str, str]:
    return fingerprint.model_dump_json(), params.model_dump_json()


def load_prepared(fingerprint: Fingerprint, params: RunParams, *, keep: bool) -> Prepared:
    """The rows of ``fingerprint`` prepared for ``params``: the ones left here if any, else parsed now.

    ``keep`` leaves them for the next call (the snapshot step); without it they are taken (the features step).
    """
    key = _key(fingerprint, params)
    prepared = _held.pop(key, None)
    _held.clear()  # at most one run's rows, and never a stale run's
    if prepared is None:
        with SplitAhead(params) as ahead:  # the split drawn from the target column while the others are typed
            prepared = prepare(load_dataset(fingerprint, lead=ahead), params, consume=True, ahead=ahead)
        give_back()  # the rows not kept and preparing's temporaries (ml8s.memory)
    if keep:
        _held[key] = prepared
    return prepared


def forget() -> None:
    """Drop rows left by a snapshot step whose run stopped before its features step."""
    _held.clear()
