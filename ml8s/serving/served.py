"""One served model: a chain version's verified weights, its other payload files and, when the payload
holds them, a raw-row predictor. Immutable once built: a client swaps whole ``Served`` objects, never
edits one, so a reader always sees one version's weights, files and predictor together.
"""

from __future__ import annotations

import posixpath

from pydantic import BaseModel, ConfigDict

from ml8s.chain import ChainVersion, ChainVersions
from ml8s.contract import layout
from ml8s.errors import NoModelGraphError, ServingError
from ml8s.inference import ModelFiles, Predictions, Predictor
from ml8s.inference.cells import Rows
from ml8s.inference.model_files import parse_metadata
from ml8s.weights import WEIGHTS_FULL, VersionWeights, first_nan, weights_file

# The payload files ``predict`` needs (a pipeline version's exported model, model.onnx or, with
# MODEL_FORMAT=safetensors, model.safetensors; its feature rules; the metadata naming the format and recording
# both files' sha256).
MODEL_GRAPH = layout.payload_export("onnx")
FEATURE_SCHEMA = posixpath.basename(layout.FEATURE_SCHEMA)
TRAINING_METADATA = posixpath.basename(layout.TRAINING_METADATA)
PREDICT_FILES = (FEATURE_SCHEMA, MODEL_GRAPH, TRAINING_METADATA)


class ServedVersion(BaseModel):
    """What a client serves, in words: the version and the hash its weights were verified against."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chain_name: str
    counter: int
    block_hash: str
    version_dir: str
    semver: str
    payload_kind: str
    weights_hash: str


class Served(BaseModel):
    """A version ready to serve (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    info: ServedVersion
    weights: VersionWeights
    files: dict[str, bytes]
    predictor: Predictor | None

    def predict(self, rows: Rows) -> Predictions:
        """Predict raw rows with this version's model graph (see ml8s.inference).

        Raises:
            NoModelGraphError: the payload holds no model graph, feature schema and training metadata.
            PredictionInputError: a row is not what the feature rules expect.
        """
        if self.predictor is None:
            missing = [name for name in PREDICT_FILES if name not in self.files]
            raise NoModelGraphError(
                f"version {self.info.counter} of chain {self.info.chain_name!r} ({self.info.version_dir}) holds "
                f"weights but no model graph: its payload lacks {missing}; expected {list(PREDICT_FILES)} to predict "
                f"({layout.payload_export('safetensors')} in place of {MODEL_GRAPH} when the metadata names it)"
            )
        return self.predictor.predict(rows)


def build_served(chain: ChainVersions, weights: VersionWeights) -> Served:
    """The served form of verified ``weights``: the version's payload files (but a DELTA), each sha256-checked,
    and a predictor when the payload holds the model graph.

    Raises:
        ServingError: a weight is NaN (a chain written by an older ml8s, or by hand: a commit refuses one).
        ChecksumError: a payload file differs from its block.
        InferenceError, IntegrityError: the model files are present but inconsistent.
    """
    version = weights.version
    nan = first_nan(weights.tensors)
    if nan is not None:  # the hashes verify: they prove the bits are the committed ones, not that those predict
        raise ServingError(
            f"chain {chain.name!r} v{version.counter} ({version.version_dir}): tensor {nan[0]!r} holds NaN (element "
            f"{nan[1]}) in the rebuilt weights; expected no NaN weight (a model with one predicts NaN): not served"
        )
    skip = weights_file(version)
    # A FULL's weights file is kept as committed (checked against its block's sha256): a follower serves
    # those very bytes. A DELTA's file is no model: the follower writes the rebuilt weights instead.
    files = {
        f.name: chain.fetch_payload(version, f.name)
        for f in version.header.files
        if f.name != skip or skip == WEIGHTS_FULL
    }
    predictor = None
    source = f"{chain.uri()} v{version.counter}"
    if FEATURE_SCHEMA in files and TRAINING_METADATA in files:
        # the model file the metadata names, as ``ml8s predict --chain`` reads it (read_chain_files)
        export = parse_metadata(files[TRAINING_METADATA], f"{source}/{TRAINING_METADATA}").export
        model = files.get(layout.payload_export(export.format))
        if model is not None:
            predictor = Predictor(
                ModelFiles(
                    source=source,
                    feature_schema=files[FEATURE_SCHEMA],
                    training_metadata=files[TRAINING_METADATA],
                    model=model,
                )
            )
    return Served(
        info=served_version(chain, version, weights.weights_hash), weights=weights, files=files, predictor=predictor
    )


def served_version(chain: ChainVersions, version: ChainVersion, weights_hash: str) -> ServedVersion:
    return ServedVersion(
        chain_name=chain.name,
        counter=version.counter,
        block_hash=version.block_hash,
        version_dir=version.version_dir,
        semver=version.semver,
        payload_kind=str(version.header.payload_kind),
        weights_hash=weights_hash,
    )
