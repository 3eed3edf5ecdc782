"""Upload a local dataset to an S3 prefix, idempotently and byte-for-byte, for the Flyte sandbox.

Used by deploy/register.sh to put the demo data (demo_data/churn) at DATA_ROOT (s3://ml8s/data/churn)
in the sandbox's MinIO. Why it is more than `aws s3 sync`:

- The data fingerprint of an s3:// DATA_ROOT is built from the objects' ETags (SPEC §2). Every file is
  therefore uploaded with one PutObject, never multipart, so its ETag is the MD5 of its bytes and the
  same file always gets the same ETag, hence the same RUN_ID, however often it is uploaded.
- An object that already holds the same bytes (same size, ETag = MD5) is left alone: a second upload
  writes nothing, so the ETags, the fingerprint and the RUN_ID do not move.
- Objects under the prefix that are not in the local directory would silently enter the fingerprint
  (a different dataset); the upload refuses to run then, unless --allow-extra.

``--probe PREFIX_URI`` also checks whether the store honours conditional writes (PutObject with
``If-None-Match: *`` and ``If-Match``), which ml8s relies on for the success marker, the MLflow claims
and the chain head. Older MinIO releases ignore these headers; the probe says so (exit code 0 unless
--require-conditional-writes). It writes and deletes one small object under PREFIX_URI.

Credentials and region come from the usual AWS variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_DEFAULT_REGION); the endpoint from --endpoint.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import sys
import uuid
from pathlib import Path
from typing import Any

# Objects larger than this would need multipart uploads (S3's single PUT limit is 5 GiB); the demo
# data is a few MiB. Refuse rather than produce a multipart ETag that differs from a single PUT's.
MAX_SINGLE_PUT = 5 * 1024**3


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix/`` -> ``("bucket", "some/prefix")``."""
    if not uri.startswith("s3://"):
        raise ValueError(f"{uri!r} is not an s3:// URI")
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    if not bucket:
        raise ValueError(f"{uri!r} has no bucket")
    return bucket, prefix.strip("/")


def local_files(source: Path) -> list[tuple[str, Path]]:
    """Every regular file under ``source`` (recursively, hidden ones too), as (relative posix path, path)."""
    if not source.is_dir():
        raise ValueError(f"{source} is not a directory")
    found = sorted((p.relative_to(source).as_posix(), p) for p in source.rglob("*") if p.is_file())
    if not found:
        raise ValueError(f"{source} holds no files")
    return found


def make_client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 5, "mode": "standard"})
    return boto3.client("s3", endpoint_url=endpoint, config=config)


def existing_objects(client: Any, bucket: str, prefix: str) -> dict[str, tuple[int, str]]:
    """key -> (size, ETag without quotes) for every object under ``prefix/``."""
    out: dict[str, tuple[int, str]] = {}
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=f"{prefix}/" if prefix else ""):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = (int(obj["Size"]), str(obj["ETag"]).strip('"'))
    return out


def upload(client: Any, source: Path, dest: str, allow_extra: bool) -> tuple[int, int]:
    """Upload ``source`` to ``dest``; returns (uploaded, unchanged)."""
    bucket, prefix = split_s3_uri(dest)
    files = local_files(source)
    keys = {f"{prefix}/{rel}" if prefix else rel: path for rel, path in files}
    present = existing_objects(client, bucket, prefix)
    extra = sorted(k for k in present if k not in keys and not k.endswith("/"))
    if extra and not allow_extra:
        shown = ", ".join(extra[:5]) + (" ..." if len(extra) > 5 else "")
        raise SystemExit(
            f"upload_data: {dest} holds {len(extra)} object(s) that are not in {source}: {shown}. They would "
            "enter the data fingerprint (another dataset). Remove them or choose another DATA_ROOT "
            "(--allow-extra to upload anyway)."
        )
    uploaded = unchanged = 0
    for key, path in keys.items():
        data = path.read_bytes()
        if len(data) > MAX_SINGLE_PUT:
            raise SystemExit(f"upload_data: {path} is larger than one PutObject allows; split the dataset")
        md5 = hashlib.md5(data, usedforsecurity=False)
        if present.get(key) == (len(data), md5.hexdigest()):
            unchanged += 1
            continue
        response = client.put_object(
            Bucket=bucket, Key=key, Body=data, ContentMD5=base64.b64encode(md5.digest()).decode("ascii")
        )
        etag = str(response.get("ETag", "")).strip('"')
        if etag and etag != md5.hexdigest():
            raise SystemExit(f"upload_data: s3://{bucket}/{key} got ETag {etag}, expected the MD5 {md5.hexdigest()}")
        uploaded += 1
    return uploaded, unchanged


def _status(error: Exception) -> int:
    response = getattr(error, "response", None) or {}
    return int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def probe_conditional_writes(client: Any, where: str) -> list[str]:
    """Problems found with conditional PutObject under ``where`` (an empty list: both headers honoured)."""
    bucket, prefix = split_s3_uri(where)
    key = f"{prefix}/.ml8s-probe/conditional-write-{uuid.uuid4().hex}" if prefix else f".ml8s-probe/{uuid.uuid4().hex}"
    problems: list[str] = []
    client.put_object(Bucket=bucket, Key=key, Body=b"1", IfNoneMatch="*")
    try:
        try:
            client.put_object(Bucket=bucket, Key=key, Body=b"2", IfNoneMatch="*")
            problems.append("PutObject with If-None-Match: * overwrote an existing object (expected 412)")
        except Exception as error:
            if _status(error) != 412:
                raise
        try:
            client.put_object(Bucket=bucket, Key=key, Body=b"3", IfMatch='"0123456789abcdef0123456789abcdef"')
            problems.append("PutObject with a stale If-Match ETag overwrote the object (expected 412)")
        except Exception as error:
            if _status(error) != 412:
                raise
        current = client.head_object(Bucket=bucket, Key=key)["ETag"]
        try:
            client.put_object(Bucket=bucket, Key=key, Body=b"4", IfMatch=current)
        except Exception as error:
            if _status(error) != 412:
                raise
            problems.append("PutObject with the current ETag in If-Match was refused (expected success)")
    finally:
        client.delete_object(Bucket=bucket, Key=key)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--endpoint", required=True, help="S3 endpoint URL as seen from here, e.g. http://localhost:30002"
    )
    parser.add_argument("--source", type=Path, help="local dataset directory, e.g. demo_data/churn")
    parser.add_argument("--dest", help="destination prefix, e.g. s3://ml8s/data/churn")
    parser.add_argument("--allow-extra", action="store_true", help="upload even if the prefix holds other objects")
    parser.add_argument("--probe", metavar="PREFIX_URI", help="check conditional-write support under this s3:// prefix")
    parser.add_argument(
        "--require-conditional-writes", action="store_true", help="exit 3 when the probe finds a problem"
    )
    args = parser.parse_args(argv)
    if (args.source is None) != (args.dest is None):
        parser.error("--source and --dest go together")
    if args.source is None and args.probe is None:
        parser.error("nothing to do: give --source/--dest, --probe, or both")
    client = make_client(args.endpoint)
    if args.source is not None:
        uploaded, unchanged = upload(client, args.source, args.dest, args.allow_extra)
        print(f"upload_data: {args.source} -> {args.dest}: {uploaded} uploaded, {unchanged} already identical")
    if args.probe is not None:
        problems = probe_conditional_writes(client, args.probe)
        if not problems:
            print(f"upload_data: conditional writes (If-None-Match, If-Match) are honoured under {args.probe}")
        else:
            for problem in problems:
                print(f"upload_data: WARNING: {problem}", file=sys.stderr)
            print(
                "upload_data: WARNING: this object store ignores conditional writes, so ml8s's create-if-absent "
                "marker, MLflow claims and chain compare-and-swap are not race-safe on it. Run one pipeline at "
                "a time, or use a MinIO release that supports conditional writes.",
                file=sys.stderr,
            )
            if args.require_conditional_writes:
                return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
