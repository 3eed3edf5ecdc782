"""``ml8s chain reproduce --from K``: one line per re-trained version, exit 0 only when every one matches."""

from __future__ import annotations

import json
import sys

from ml8s.chain import Anchor, ReadTrust
from ml8s.errors import ConfigError
from ml8s.ops.reproduce import Reproduction, reproduce_chain
from ml8s.text import shown, terminal_text


def reproduce(
    root_uri: str,
    chain_name: str,
    start: int,
    *,
    as_json: bool,
    trust: ReadTrust | None = None,
    anchor: Anchor | None = None,
) -> int:
    if start < 0:
        raise ConfigError(f"--from {start}: expected a version counter >= 0 (0: from the genesis block)")
    print(
        f"re-training chain {chain_name!r} from v{start} in scratch roots (the chain and the runs at {shown(root_uri)} "
        "are not written)",
        file=sys.stderr,
    )
    line = None if as_json else _line
    results = reproduce_chain(root_uri, chain_name, start, report=line, progress=_progress, trust=trust, anchor=anchor)
    if as_json:
        print(json.dumps([{**r.model_dump(), "matches": r.matches} for r in results], indent=2, sort_keys=True))
    matched = sum(r.matches for r in results)
    print(f"{matched}/{len(results)} versions reproduced byte for byte", file=sys.stderr)
    return 0 if results and matched == len(results) else 1


def _line(result: Reproduction) -> None:
    head = f"v{result.counter:<6} run {result.run_id}  content {result.content_hash[:12]}"
    if result.matches:
        print(f"{head}  MATCH")
    elif result.reason:
        # a reason quotes the re-run's error, which names data files and store keys as they are: shown, so a
        # newline cannot forge a version's line, nor an escape sequence reach the terminal
        print(f"{head}  NOT REPRODUCED: {shown(result.reason)}")
    else:
        files = ", ".join(shown(name) for name in result.differing)
        print(f"{head}  DIFFERS: re-trained {result.reproduced_hash[:12]}; files {files}")
    sys.stdout.flush()


def _progress(line: str) -> None:
    print(f"ml8s: reproduce: {terminal_text(line)}", file=sys.stderr, flush=True)
