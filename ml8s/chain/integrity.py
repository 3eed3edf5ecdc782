"""Chain verification: every rule of SPEC §7, each violation named (``Finding.check``).

verify_chain reads everything afresh (no cache): every version directory, every block, the head. It
rebuilds the chain from the head by *recorded* parent hashes, so one tampered block is reported once
and the versions around it are still checked, then reports what does not hold. Checks:

``head``             chain.json missing, invalid, or naming a version that is not there or not that block
``invalid_block``    block.pb is no valid Block
``header_hash``      the header does not hash to the recorded block hash (a header field was edited)
``content_hash``     the file list does not hash to the header's content hash
``dir_name``         the directory name does not match its block's counter, semver and hash
``parent_link``      a block names a parent hash that the version below it does not have
``missing_parent``   the parent named is nowhere (a deleted version, truncated history)
``counter_sequence`` counter is not the parent's + 1 (skipped or duplicated counter)
``global_step``      global_step went back
``semver``           semver is not the bump of the parent's
``genesis``          the first block is not a genesis block (counter 0, no parent, 0.0.0, no files)
``duplicate_run``    one FULL_CONFIG_HASH in two blocks
``payload_missing`` / ``payload_size`` / ``payload_hash``  a payload file differs from its block
``extra_file``       a file in a version directory that its block does not list
``metadata_json`` / ``content_hash_txt``  the derived files disagree with block.pb
``fork``             an unreachable branch of two or more versions (history rewritten or rolled back);
                     with ``strict_orphans``, any complete version off the chain
``known_head``       a head seen before is not on the chain (rolled back or forked); it may be given as
                     any unique prefix of at least 12 hex digits, in either case
``committed_off_chain`` a version that a run record or a winning audit event names is not on the chain
                     (evidence.py): the head was rolled back or history rewritten
``run_index`` / ``audit_event``  a run record or audit event that is no valid JSON of its model
``unsigned`` / ``untrusted_key`` / ``bad_signature`` / ``trust_policy*`` / ``retired_policy`` /
``chain_name`` / ``trust_root*``  signatures, policies and bindings (revocation.py, the rules every reader
                     applies); with ``require_signed``, also no pinned root, no policy, or versions before it
``anchor_*``         disagreement with an anchor (anchor.py)
``unsafe_object``    something under the chain that is no regular file or directory (a symbolic link, FIFO,
                     device), or an object larger than its bound (limits.py): never followed, never read
``weights_hash`` / ``delta_base``  a version's weights, rebuilt FULL -> DELTAs, are not what it records
``weights_nan``      a version's rebuilt weights hold a NaN (infinities pass: a mask holds -inf)

Complete versions off the chain with no child (a commit's loser not yet deleted, an in-flight upload)
are reported as ``orphans``, not as findings: they are the normal residue that GC removes. A head
rolled back by one version looks the same, which is why followers pass ``known_head``.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Iterator

from ml8s.chain import _checks, evidence, limits, paths, revocation, trust
from ml8s.chain._util import utc_now
from ml8s.chain.anchor import Anchor, anchor_problems
from ml8s.chain.findings import (
    WEIGHTS_UNCHECKED,
    Finding,
    VerifyReport,
    known_head_problems,
    normalize_known_head,
    unchecked_limits,
)
from ml8s.chain.models import ChainHead, ChainVersion
from ml8s.chain.promotion_gap import promotion_problems
from ml8s.chain.root import TrustRoot
from ml8s.chain.versions import ChainVersions
from ml8s.chain.wire import decode_block
from ml8s.errors import (
    ChainCorruptionError,
    ChainError,
    ChecksumError,
    NotFoundError,
    ObjectTooLargeError,
    RetryableStoreError,
    StoreError,
    UnsafeObjectError,
)

# What ``verify_chain(weights=...)`` calls to rebuild and check every version's weights (ml8s.weights, which
# needs torch): the chain and the versions on it, head first -> (check, reason, version) per problem.
WeightsCheck = Callable[[ChainVersions, list[ChainVersion]], list[tuple[str, str, ChainVersion]]]


def verify_chain(
    chain: ChainVersions,
    *,
    known_head: str | None = None,
    payloads: bool = True,
    strict_orphans: bool = False,
    anchor: Anchor | None = None,
    now: dt.datetime | None = None,
    require_signed: bool = False,
    weights: WeightsCheck | None = None,
    root: TrustRoot | None = None,
) -> VerifyReport:
    """Check the whole chain (module docstring). ``payloads=False`` skips reading payload bytes
    (sizes are still checked); ``known_head`` is a block hash that must be on the chain; ``anchor`` a
    signed checkpoint (anchor.py), checked as of ``now`` (default: the current time); ``require_signed``
    (CHAIN_REQUIRE_SIGNED) makes a chain without a trust policy, or versions before its first, ``unsigned``;
    ``weights`` (``ml8s.weights.weights_problems``, which needs torch) also rebuilds every version's weights
    and checks them against the hash its block records (``weights_hash``, ``delta_base``); ``root`` the pinned
    trust root (CHAIN_TRUST_ROOT) the policies must chain to (None: taken on first use, said in ``unchecked``)."""
    verifier = _Verifier(chain, payloads, strict_orphans)
    verifier.root = root
    verifier.weights = weights
    verifier.anchor, verifier.now, verifier.require_signed = anchor, now or utc_now(), require_signed
    return verifier.run(normalize_known_head(known_head))[0]


def find_corruption(chain: ChainVersions, *, known_head: str | None = None) -> ChainVersion | None:
    """The lowest corrupted version, None when the chain is intact; ChainCorruptionError when the
    first finding names no readable version."""
    report, parsed = _Verifier(chain, True, False).run(normalize_known_head(known_head))
    for finding in report.findings:
        if (version := parsed.get(finding.version_dir)) is not None:
            return version
    if report.chain and report.findings:
        return parsed[report.chain[-1]]  # chain-wide findings (head, known_head): the head is what is wrong
    report.raise_for_findings()
    return None


class _Verifier:
    def __init__(self, chain: ChainVersions, payloads: bool, strict_orphans: bool) -> None:
        self.chain, self.payloads, self.strict = chain, payloads, strict_orphans
        self.weights: WeightsCheck | None = None
        self.findings: list[Finding] = []
        self.anchor: Anchor | None = None
        self.now = utc_now()
        self.require_signed = False
        self.root: TrustRoot | None = None
        self.parsed: dict[str, ChainVersion] = {}  # every readable block, tampered or not, by directory

    def add(self, check: str, reason: str, version: ChainVersion | None = None, *, counter: int | None = None) -> None:
        where = {"counter": version.counter, "version_dir": version.version_dir} if version else {"counter": counter}
        self.findings.append(Finding.model_validate({"check": check, "reason": reason, **where}))

    def add_all(self, problems: _checks.Problems, version: ChainVersion) -> None:
        for check, reason in problems:
            self.add(check, reason, version)

    def run(self, known_head: str | None) -> tuple[VerifyReport, dict[str, ChainVersion]]:
        # The head first, then the listing: every version on the chain at that moment is complete and
        # immutable, so it is in the listing; what commits land meanwhile shows up as descending from it.
        pointer = self._read_head()
        for key in self.chain.store.irregular(self.chain.prefix):
            self.add("unsafe_object", f"{self.chain.store.uri(key)} is no regular file or directory (not followed)")
        dirs = self.chain.version_dirs()
        block = self.chain.version_key
        incomplete = [n for n, objects in sorted(dirs.items()) if all(o.key != block(n, paths.BLOCK) for o in objects)]
        for name in sorted(set(dirs) - set(incomplete)):
            self._read_block(name)
        head = self._head(pointer)
        start = head if head is not None else self._best_guess()
        walked = list(self._walk(start)) if start is not None else []
        policies, policy_problems = trust.load_policies(self.chain, self.root)
        for check, reason in policy_problems:
            self.add(check, reason)
        for version, parent in zip(walked, [*walked[1:], None][: len(walked)], strict=True):  # genesis: no parent
            base = self.chain.version_key(version.version_dir) + "/"
            self.add_all(
                _checks.files(self.chain.store, base, version, dirs[version.version_dir], self.payloads), version
            )
            self.add_all(revocation.block_problems(version, policies, self.chain.name, parent), version)
        not_checked: list[str] = []
        for check, reason, version in self.weights(self.chain, walked) if self.payloads and self.weights else []:
            if check == WEIGHTS_UNCHECKED:
                not_checked.append(f"v{version.counter}: {reason}")
            else:
                self.add(check, reason, version)
        on_chain = {v.version_dir for v in walked}
        off = sorted(set(self.parsed) - on_chain)
        ahead = self._ahead(head) if head is not None else set()
        orphans = [name for name in off if name not in ahead]
        parents = {self.parsed[name].header.parent_block_hash for name in orphans}
        for name in orphans:
            orphan = self.parsed[name]
            if self.strict or orphan.block_hash in parents:
                what = "has a child: a rewritten or rolled-back branch" if not self.strict else "is off the chain"
                self.add("fork", f"{name} {what} (head: {head.version_dir if head else '<none>'})", orphan)
        if known_head is not None and not any(v.block_hash.startswith(known_head) for v in walked):
            for check, reason, seen in known_head_problems(known_head, list(self.parsed.values()), head):
                self.add(check, reason, seen)
        for check, reason, counter, version_dir in evidence.findings(self.chain, on_chain | ahead, walked, self.parsed):
            self.findings.append(Finding(check=check, reason=reason, counter=counter, version_dir=version_dir))
        anchored = anchor_problems(self.chain, self.anchor, walked, self.now, self.root) if self.anchor else []
        for check, reason, counter in anchored:
            self.add(check, reason, counter=counter)
        for check, reason in promotion_problems(self.chain, self.root) if head is not None else []:
            self.add(check, reason)
        required = revocation.required_findings(walked, policies, self.root) if self.require_signed else []
        for check, reason, counter in required:
            self.add(check, reason, next((v for v in walked if v.counter == counter), None), counter=counter)
        findings = sorted(self.findings, key=lambda f: (f.counter is None, f.counter or 0, f.check, f.version_dir))
        report = VerifyReport(
            chain_name=self.chain.name,
            head_counter=head.counter if head else None,
            chain=tuple(v.version_dir for v in reversed(walked)),
            findings=tuple(findings),
            orphans=tuple(orphans),
            ahead=tuple(sorted(ahead)),
            incomplete=tuple(incomplete),
            unchecked=unchecked_limits(
                policies[0].signed_from if policies else None, known_head is not None or self.anchor is not None
            )
            + (() if self.root is not None or not policies else (revocation.TOFU,))
            + tuple(not_checked),
        )
        return report, self.parsed

    def _ahead(self, head: ChainVersion) -> set[str]:
        """Versions committed on top of the head read while we listed: those the head, read again, reaches.

        Only a second head read tells them from a rolled-back branch, which descends from the head too.
        """
        try:
            pointer = self.chain.read_head()
        except ChainCorruptionError:
            return set()
        if pointer is None or pointer[0].block_hash == head.block_hash:
            return set()
        reader, ahead = ChainVersions(self.chain.store, self.chain.name), set[str]()
        try:
            for version in reader.walk(reader.at(pointer[0])):
                if version.counter <= head.counter:
                    return ahead if version.block_hash == head.block_hash else set()
                ahead.add(version.version_dir)
        except ChainError:
            pass  # the new head is no descendant we can prove: nothing counts as ahead
        return set()

    def _read_block(self, name: str) -> None:
        parsed_name = paths.parse_version_dir(name)
        if parsed_name is None:
            self.add("dir_name", f"{name} under {self.chain.uri(paths.VERSIONS)} is no version directory name")
            return
        where = self.chain.store.uri(self.chain.version_key(name, paths.BLOCK))
        try:
            data = self.chain.store.get(self.chain.version_key(name, paths.BLOCK), max_bytes=limits.BLOCK_MAX_BYTES)
        except NotFoundError:
            return  # listed, then deleted: a loser's rollback (or GC) since; it was no part of the chain
        except (ObjectTooLargeError, UnsafeObjectError) as exc:
            self.add("unsafe_object", exc.message, counter=parsed_name[0])
            return
        try:
            version = ChainVersion(block=decode_block(data, where=where, verify=False), version_dir=name)
        except ChainCorruptionError as exc:
            self.add(exc.check, exc.reason, counter=parsed_name[0])
            return
        self.parsed[name] = version
        try:
            decode_block(data, where=where)
        except ChecksumError as exc:
            self.add(exc.check, exc.message, version)
        header = version.header
        if paths.version_dir(header.counter, header.semver, version.block_hash) != name:
            self.add("dir_name", f"{name} holds block {version.block_hash} at counter {header.counter}", version)

    def _read_head(self) -> ChainHead | None:
        try:
            pointer = self.chain.read_head()
        except ChainCorruptionError as exc:
            self.add("head", exc.reason)
            return None
        except RetryableStoreError:
            raise
        except StoreError as exc:  # e.g. a directory where chain.json should be: a finding, and a report
            self.add("head", f"{self.chain.uri(paths.HEAD)} is unreadable: {exc.message}")
            return None
        if pointer is None:
            self.add("head", f"{self.chain.uri(paths.HEAD)} does not exist")
            return None
        return pointer[0]

    def _head(self, head: ChainHead | None) -> ChainVersion | None:
        if head is None:
            return None
        version = self.parsed.get(head.version_dir)
        if version is None:
            self.add("head", f"the head names {head.version_dir}, which is missing or unreadable", counter=head.counter)
        elif (version.counter, version.block_hash) != (head.counter, head.block_hash):
            self.add("head", f"the head names block {head.block_hash} at {head.counter}, not this block", version)
        return version

    def _best_guess(self) -> ChainVersion | None:
        """Without a usable head, the highest version (if unique): the rest is still checked from there."""
        top = max((v.counter for v in self.parsed.values()), default=None)
        highest = [v for v in self.parsed.values() if v.counter == top]
        return highest[0] if len(highest) == 1 else None

    def _walk(self, head: ChainVersion) -> Iterator[ChainVersion]:
        by_hash: dict[str, list[ChainVersion]] = defaultdict(list)
        by_counter: dict[int, list[ChainVersion]] = defaultdict(list)
        for version in self.parsed.values():
            by_hash[version.block_hash].append(version)
            by_counter[version.counter].append(version)
        seen: set[str] = set()
        runs: dict[str, int] = {}
        child: ChainVersion | None = head
        while child is not None:
            seen.add(child.version_dir)
            yield child
            run = child.header.full_config_hash
            if run and runs.setdefault(run, child.counter) != child.counter:
                self.add("duplicate_run", f"run {run} is also in version {runs[run]}", child)
            if not child.header.parent_block_hash:
                self.add_all(_checks.genesis(child), child)
                return
            want = child.header.parent_block_hash
            found = [v for v in by_hash.get(want, []) if v.version_dir not in seen]
            below = [v for v in by_counter.get(child.counter - 1, []) if v.version_dir not in seen]
            parent = found[0] if found else below[0] if len(below) == 1 else None
            if found:
                self.add_all(_checks.link(child, found[0]), child)
            elif below:
                self.add("parent_link", f"names parent {want}, the version below holds {below[0].block_hash}", child)
            else:
                self.add("missing_parent", f"names parent {want} (counter {child.counter - 1}): not found", child)
                older = [v for v in self.parsed.values() if v.counter < child.counter and v.version_dir not in seen]
                top = max((v.counter for v in older), default=None)
                resume = [v for v in older if v.counter == top]
                parent = resume[0] if len(resume) == 1 else None
            child = parent
