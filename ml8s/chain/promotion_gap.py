"""The promotion log's cut check: a record after a missing one means a decision was deleted (the log is
append-only). verify reports it (``promotion``); a follower's first start refuses such a log (promotion_pin.py)."""

from __future__ import annotations

import re

from ml8s.chain.promotion import PROMOTIONS, PromotionLog
from ml8s.chain.root import TrustRoot
from ml8s.chain.versions import ChainVersions
from ml8s.errors import ChainError

_RECORD = re.compile(r"^([0-9]{10})\.json$")


def log_gap(log: PromotionLog) -> str | None:
    """The first cut in ``log`` the walk of its decisions did not see, or None."""
    missing = len(log.decisions()) + 1
    chain = log.chain
    listed = {
        int(m.group(1))
        for info in chain.objects(chain.key(PROMOTIONS))
        if (m := _RECORD.fullmatch(info.key.rsplit("/", 1)[-1])) is not None
    }
    # decisions appended between that read and the listing (each written after the one before it) are no gap
    while missing in listed:
        missing += 1
    later = [number for number in listed if number > missing]
    if not later:
        return None
    return f"promotion decision {missing} is missing but {min(later)} exists: the log was cut"


def promotion_problems(chain: ChainVersions, root: TrustRoot | None = None) -> list[tuple[str, str]]:
    """verify's findings of the promotion log: a decision that does not check, or a cut log (check
    ``promotion``); none for a chain without a gate."""
    try:
        gap = log_gap(PromotionLog(chain, root))
    except ChainError as exc:
        return [("promotion", exc.message)]
    return [("promotion", gap)] if gap is not None else []
