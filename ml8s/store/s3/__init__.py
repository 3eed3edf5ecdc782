"""S3 backend (boto3; AWS, MinIO, radosgw): tmp upload, validate, copy, delete; conditional writes on ETags.

Uploads carry our sha256 (``x-amz-checksum-sha256``) and md5 (``Content-MD5``), so a server checking either
rejects corrupted bytes (AWS checks both, radosgw 16 the md5, moto neither). The stored object is then checked:
its size, and its ETag against our md5 (the server computes it from the bytes it got) or, where the ETag is no
md5 (SSE-KMS, SSE-C), the sha256 the server verified. Every sha256 the server reports must match too.

Modules along the seams: ``client`` (settings, the boto3 clients, error mapping), ``digest`` (what we sent),
``reads``, ``writes`` (atomic and multipart), ``conditional`` (If-Match / If-None-Match), ``uploads`` (multipart
uploads in progress, listed and aborted).
"""

from __future__ import annotations

from ml8s.store.s3.conditional import S3ConditionalWrites
from ml8s.store.s3.uploads import S3Uploads


class S3Store(S3ConditionalWrites, S3Uploads):
    """A store rooted at ``s3://bucket/prefix``; keys are relative to the prefix.

    Read once from ``env`` (default ``os.environ``): ``AWS_ENDPOINT_URL`` (else ``FLYTE_AWS_ENDPOINT``; when
    set, path-style addressing), ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` (else ``FLYTE_AWS_*``; else
    boto3's credential chain), ``AWS_SESSION_TOKEN``, ``AWS_REGION``/``AWS_DEFAULT_REGION`` (default
    us-east-1), ``AWS_MAX_ATTEMPTS`` (default 4, for idempotent requests).
    """


__all__ = ["S3Store"]
