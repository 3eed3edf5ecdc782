"""Where a chain's objects live, relative to its directory ``ml8s_chain/{chain_name}/``.

```
chain.json                                  the head: the only object ever replaced (compare-and-swap)
versions/v{counter:010d}_{semver}_{hash12}/ immutable, created once:
    payload/<name>  metadata.json  content_hash.txt  block.pb (written last: its presence = complete)
runs/{full_config_hash}.claim.json          run index: first committer's claim (create-only)
runs/{full_config_hash}.json                run index: the version that holds the run (create-only)
audit/{yyyymmddThhmmssffffff}Z-{worker}-{seq}.json   append-only events, sorted = chronological
tensorboard/v{counter:010d}/...             per-version TensorBoard logs, uploaded after the commit won
trust/policy-{version:010d}.json            trust policies: which keys may sign (create-only, each signed)
.tmp/                                       in-flight multipart uploads (removed by GC when stale)
```
"""

from __future__ import annotations

import re

from ml8s.identity.names import CHAIN_NAME_PATTERN

ROOT = "ml8s_chain"
HEAD = "chain.json"
VERSIONS = "versions"
RUNS = "runs"
AUDIT = "audit"
TENSORBOARD = "tensorboard"
TRUST = "trust"
TMP = ".tmp"
BLOCK = "block.pb"
METADATA = "metadata.json"
CONTENT_HASH = "content_hash.txt"
PAYLOAD = "payload"

# Patterns are applied with fullmatch: ``$`` alone would let a trailing newline through.
CHAIN_NAME = CHAIN_NAME_PATTERN  # one rule for the settings (checked at bootstrap) and the store
SEMVER = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")
_VERSION_DIR = re.compile(r"^v([0-9]{10})_((?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*))_([0-9a-f]{12})$")
# Payload names: relative paths of safe segments; ':' and '|' never appear, so content-hash tokens parse.
PAYLOAD_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$")


def version_dir(counter: int, semver: str, block_hash: str) -> str:
    return f"v{counter:010d}_{semver}_{block_hash[:12]}"


def parse_version_dir(name: str) -> tuple[int, str, str] | None:
    """(counter, semver, hash12) of a version directory name, or None when it is not one."""
    match = _VERSION_DIR.fullmatch(name)
    return (int(match.group(1)), match.group(2), match.group(3)) if match else None


def tensorboard_dir(counter: int) -> str:
    return f"{TENSORBOARD}/v{counter:010d}"
