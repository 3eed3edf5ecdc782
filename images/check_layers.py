"""Check that no build-time secret reached an image: every layer, the config and the history.

What the builds get as secrets must be in none of them: the certificates of the CA bundle that are not
public roots (a TLS-intercepting proxy's CA), the index settings passed in ``index-env`` and this
machine's own pip index locations. Also flagged: pip/uv/netrc configuration files in any layer, and in
the config and history any URL, index option, certificate variable or token-like variable.

Every layer is read as stored (``save``), so a file added by one layer and deleted by a later one counts.

Usage: python3 images/check_layers.py [--container CMD] [--ca-bundle PEM] [--public-roots DIR]
           [--index-env FILE] IMAGE...
Exit status 0 when every image is clean, 1 with one line per finding otherwise, 2 when it could not check.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----\s*(.+?)\s*-----END CERTIFICATE-----", re.DOTALL)
CONFIG_FILES = frozenset({"pip.conf", "pip.ini", "uv.toml", ".netrc", ".pypirc", "index-env", "ca-bundle"})
# In config/history text: an index option or variable, a certificate variable, a URL of any scheme.
# (find-links is not one: a folder of wheels mounted for the build, e.g. /mnt/wheels, is no setting of
# this machine; a find-links URL is a URL.)
CONFIG_PATTERNS = (
    re.compile(r"(?i)index[-_]url|default[-_]index|UV_INDEX|trusted[-_]host"),
    re.compile(r"SSL_CERT_FILE|SSL_CERT_DIR|PIP_CERT|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE|UV_NATIVE_TLS"),
    re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"']+"),
)
TOKEN_ENV = re.compile(r"(?i)token|secret|passw|api[-_]?key|credential|auth")


class CheckError(Exception):
    """The check could not run (no image, an unreadable archive): neither clean nor dirty."""


@dataclass(frozen=True)
class Needle:
    """Bytes that must appear in no layer, with a description that does not repeat them."""

    what: str
    data: bytes


@dataclass
class Report:
    image: str
    layers: int = 0
    files: int = 0
    bytes_read: int = 0
    findings: list[str] = field(default_factory=list)


def pem_certs(data: bytes) -> list[bytes]:
    """The DER of every PEM certificate in ``data``; blocks that are not base64 (a placeholder in source
    code, a template) are skipped."""
    ders = []
    for match in PEM_CERT.finditer(data):
        try:
            ders.append(base64.b64decode(b"".join(match.group(1).split()), validate=True))
        except binascii.Error:
            continue
    return ders


def public_roots(directory: Path) -> set[bytes]:
    """The DER of the public roots (Debian's ca-certificates: /usr/share/ca-certificates/mozilla)."""
    return {der for path in sorted(directory.rglob("*.crt")) for der in pem_certs(path.read_bytes())}


def cert_needles(bundle: bytes, public: set[bytes]) -> list[Needle]:
    """The certificates of ``bundle`` that are not public roots: their DER and two lines of their PEM.

    Two base64 lines (bytes 48-144 of the DER: serial, issuer) find the PEM whatever the file's line ends.
    """
    needles = []
    for i, der in enumerate(pem_certs(bundle)):
        if der in public:
            continue
        text = base64.b64encode(der)
        needles.append(Needle(f"certificate #{i} of the CA bundle (not a public root), DER", der))
        for start in (64, 128):
            if len(text) >= start + 64:
                needles.append(Needle(f"certificate #{i} of the CA bundle, PEM line", text[start : start + 64]))
    return needles


def setting_needles(index_env: str, pip_locations: Iterable[str]) -> list[Needle]:
    """The values passed in index-env, and this machine's own index locations (not PyPI's public one)."""
    needles = []
    for line in index_env.splitlines():
        key, sep, value = line.partition("=")
        if sep and len(value.strip()) >= 8 and not value.strip().isdigit():
            needles.extend(Needle(f"index-env value of {key}", v.encode()) for v in value.split())
    for location in pip_locations:
        if location.rstrip("/") not in ("https://pypi.org/simple", "https://pypi.python.org/simple"):
            needles.append(Needle(f"this machine's pip index location {location}", location.encode()))
    unique: dict[bytes, Needle] = {}
    for needle in needles:
        unique.setdefault(needle.data, needle)
    return list(unique.values())


def config_findings(config: dict[str, object]) -> list[str]:
    """Findings in an image config: history, environment, labels, entrypoint."""
    found = []
    inner = config.get("config")
    env = inner.get("Env") if isinstance(inner, dict) else None
    for item in env if isinstance(env, list) else []:
        name = str(item).split("=", 1)[0]
        if TOKEN_ENV.search(name):
            found.append(f"config: environment variable {name} looks like a credential")
    history = config.get("history")
    texts = (
        [
            ("history", str(h.get("created_by", "")) + " " + str(h.get("comment", "")))
            for h in history
            if isinstance(h, dict)
        ]
        if isinstance(history, list)
        else []
    )
    texts.append(("config", json.dumps(inner, sort_keys=True)))
    for where, text in texts:
        for pattern in CONFIG_PATTERNS:
            for match in pattern.finditer(text):
                found.append(f"{where}: {match.group(0)!r} in {text.strip()[:160]!r}")
    return found


def _tar_members(fileobj: object) -> Iterator[tuple[tarfile.TarInfo, tarfile.TarFile]]:
    with tarfile.open(fileobj=fileobj, mode="r|*") as layer:  # type: ignore[call-overload]
        for member in layer:
            yield member, layer


def scan_layer(report: Report, label: str, fileobj: object, needles: list[Needle]) -> None:
    """Scan one layer tar (a stream): file names and every regular file's bytes."""
    report.layers += 1
    for member, layer in _tar_members(fileobj):
        name = os.path.basename(member.name)
        if name in CONFIG_FILES:
            report.findings.append(f"{label}: {member.name}: a pip/uv/netrc configuration or secret file")
        if not member.isfile():
            continue
        handle = layer.extractfile(member)
        data = handle.read() if handle else b""
        report.files += 1
        report.bytes_read += len(data)
        # A PEM block is decoded too: the same certificate wrapped at another width has other lines.
        decoded = b"".join(pem_certs(data)) if b"-----BEGIN CERTIFICATE-----" in data else b""
        for needle in needles:
            if needle.data in data or (decoded and needle.data in decoded):
                report.findings.append(f"{label}: {member.name}: {needle.what}")


def scan_archive(report: Report, archive: Path, needles: list[Needle]) -> None:
    """A ``save`` archive (docker-archive, or docker's OCI-with-manifest.json): its config and layers."""
    with tarfile.open(archive) as outer:
        try:
            manifest = json.load(outer.extractfile("manifest.json"))  # type: ignore[arg-type]
        except KeyError as exc:
            raise CheckError(f"{archive}: no manifest.json: not a docker-archive") from exc
        entry = manifest[0]
        config = json.load(outer.extractfile(entry["Config"]))  # type: ignore[arg-type]
        report.findings.extend(config_findings(config))
        config_text = json.dumps(config).encode()
        report.findings.extend(f"config: {n.what}" for n in needles if n.data in config_text)
        for i, layer in enumerate(entry["Layers"]):
            scan_layer(report, f"layer {i + 1}/{len(entry['Layers'])}", outer.extractfile(layer), needles)


def check_image(container: list[str], image: str, needles: list[Needle], workdir: Path) -> Report:
    report = Report(image)
    archive = workdir / "image.tar"
    saved = subprocess.run([*container, "save", "-o", str(archive), image], capture_output=True, text=True, check=False)
    if saved.returncode != 0:
        raise CheckError(f"{' '.join(container)} save {image} failed: {saved.stderr.strip()}")
    try:
        scan_archive(report, archive, needles)
    finally:
        archive.unlink(missing_ok=True)
    return report


def pip_locations() -> list[str]:
    """This machine's index URLs (index-url, extra-index-url), from ``pip config list``.

    Not find-links: a plain folder name (/opt/wheels) is also documentation's, and no build reads it."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    )
    values = []
    for line in listed.stdout.splitlines():
        name, _, value = line.partition("=")
        if name.rsplit(".", 1)[-1] in ("index-url", "extra-index-url"):
            values.extend(v for v in value.strip("'\"").split() if "://" in v)
    return sorted(set(values))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("images", nargs="+")
    parser.add_argument("--container", default=os.environ.get("CONTAINER", "docker"), help="e.g. 'podman'")
    parser.add_argument("--ca-bundle", type=Path, help="the CA bundle the builds got as a secret")
    parser.add_argument("--public-roots", type=Path, default=Path("/usr/share/ca-certificates/mozilla"))
    parser.add_argument("--index-env", type=Path, help="the index-env secret the builds got")
    args = parser.parse_args(argv)
    try:
        needles: list[Needle] = []
        if args.ca_bundle:
            if not args.public_roots.is_dir():
                raise CheckError(f"no public roots at {args.public_roots}: cannot tell the bundle's own CAs apart")
            bundle = args.ca_bundle.read_bytes()
            needles += cert_needles(bundle, public_roots(args.public_roots))
            needles.append(Needle("the CA bundle file itself", bundle))
        index_env = args.index_env.read_text() if args.index_env and args.index_env.exists() else ""
        needles += setting_needles(index_env, pip_locations())
        print(f"check_layers: {len(needles)} needle(s) (certificates not public, index settings)")
        failed = False
        container = shlex.split(args.container)
        # One process per image: each saves its image and scans its own archive, on its own core (the
        # scan is Python, and the two images of `make images-smoke` took 47 s one after the other).
        with (
            tempfile.TemporaryDirectory(prefix="ml8s-layers-", dir=os.environ.get("TMPDIR", "/var/tmp")) as tmp,
            # fork: the workers need no import of this file (run as a script, or loaded by path in the tests).
            ProcessPoolExecutor(
                max_workers=max(1, min(len(args.images), os.cpu_count() or 1)), mp_context=get_context("fork")
            ) as pool,
        ):
            futures = []
            for i, image in enumerate(args.images):
                workdir = Path(tmp) / str(i)
                workdir.mkdir()
                futures.append(pool.submit(check_image, container, image, needles, workdir))
            for image, future in zip(args.images, futures, strict=True):
                report = future.result()
                print(
                    f"check_layers: {image}: {report.layers} layers, {report.files} files, "
                    f"{report.bytes_read / 2**20:.0f} MiB read, {len(report.findings)} finding(s)"
                )
                for finding in report.findings:
                    print(f"check_layers: {image}: {finding}")
                failed = failed or bool(report.findings)
    except (CheckError, OSError, tarfile.TarError, ValueError) as exc:
        print(f"check_layers: ERROR: {exc}", file=sys.stderr)
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
