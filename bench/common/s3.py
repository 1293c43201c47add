"""S3 transfers for the bench: result upload, resume download, tokenizer staging, `fetch`.

boto3 is imported only here and only when an S3 location is used, so the sweep runs without it
when everything is local. Clients are built the ordinary way (credential chain, AWS_REGION,
AWS_ENDPOINT_URL), which covers EKS Pod Identity in the cluster and a local S3 server in tests.
"""

from __future__ import annotations

import fnmatch
import json
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Iterator

from bench.common.progress import Progress

# What a tokenizer needs from a Hugging Face style model folder; weights are never downloaded.
TOKENIZER_PATTERNS = ("*.json", "*.model", "tokenizer*", "*.tiktoken", "*.txt", "*.jinja")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".tensors", ".msgpack", ".h5")


class S3Error(RuntimeError):
    pass


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # no leading slash; empty or ending with "/"

    @classmethod
    def parse(cls, uri: str, *, option: str = "s3 uri") -> "S3Location":
        if not uri.startswith("s3://"):
            raise ValueError(f"{option}: expected s3://<bucket>/<prefix>, got {uri!r}")
        bucket, _, prefix = uri[len("s3://"):].partition("/")
        if not bucket:
            raise ValueError(f"{option}: no bucket in {uri!r}; expected s3://<bucket>/<prefix>")
        prefix = prefix.strip("/")
        return cls(bucket=bucket, prefix=f"{prefix}/" if prefix else "")

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def key(self, relative: str) -> str:
        return self.prefix + relative.lstrip("/")


def is_s3_uri(value: str | None) -> bool:
    return bool(value) and str(value).startswith("s3://")


def client() -> Any:
    try:
        import boto3
    except ImportError as exc:  # the vLLM image ships boto3; a bare laptop venv may not
        raise S3Error("boto3 is required for s3:// locations: pip install boto3") from exc
    return boto3.client("s3")


def iter_objects(loc: S3Location, s3: Any | None = None) -> Iterator[tuple[str, int]]:
    """(key relative to the prefix, size) for every object under the location."""
    s3 = s3 or client()
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=loc.bucket, Prefix=loc.prefix):
        for obj in page.get("Contents", []):
            rel = obj["Key"][len(loc.prefix):]
            if rel and not rel.endswith("/"):
                yield rel, obj["Size"]


def _safe_local(dest: Path, relative: str) -> Path:
    path = (dest / PurePosixPath(relative)).resolve()
    if dest.resolve() not in path.parents:
        raise S3Error(f"refusing to write outside {dest}: {relative}")
    return path


def download_prefix(loc: S3Location, dest: Path, *, only_missing: bool = False, copied: list[str] | None = None,
                    progress: bool = False) -> list[str]:
    """Copy every object under `loc` into `dest`, keeping relative paths. Returns what was copied.

    `copied` (if given) is filled as files complete, so that a caller interrupted midway knows what is
    there; boto3 writes each file under a temporary name first, so no half-written file is left.
    """
    s3 = client()
    dest.mkdir(parents=True, exist_ok=True)
    copied = [] if copied is None else copied
    objects = list(iter_objects(loc, s3))
    todo = [(rel, size) for rel, size in objects if not (only_missing and _safe_local(dest, rel).exists())]
    bar = Progress(sum(size for _, size in todo), "fetching", enabled=progress)
    try:
        for rel, _size in todo:
            target = _safe_local(dest, rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(loc.bucket, loc.key(rel), str(target), Callback=bar.update)
            copied.append(rel)
    finally:
        bar.close()
    return copied


def download_tokenizer(loc: S3Location, dest: Path) -> list[str]:
    """Stage the tokenizer files of a model folder (top level only, no weights) into `dest`."""
    s3 = client()
    dest.mkdir(parents=True, exist_ok=True)
    copied = []
    for rel, _size in iter_objects(loc, s3):
        if "/" in rel or rel.endswith(_WEIGHT_SUFFIXES):
            continue
        if any(fnmatch.fnmatch(rel, pattern) for pattern in TOKENIZER_PATTERNS):
            s3.download_file(loc.bucket, loc.key(rel), str(dest / rel))
            copied.append(rel)
    if not copied:
        raise S3Error(f"no tokenizer files (*.json, *.model, tokenizer*) under {loc.uri}")
    return copied


class Uploader:
    """Uploads files of an output folder to the same relative keys under an S3 location.

    Failures are remembered, not raised: a sweep keeps measuring and retries them at the end.
    """

    def __init__(self, loc: S3Location, root: Path):
        self.loc = loc
        self.root = root
        self._s3 = client()
        self.failed: dict[str, str] = {}
        self.uploaded: list[str] = []

    def upload(self, path: Path) -> bool:
        rel = path.relative_to(self.root).as_posix()
        try:
            self._s3.upload_file(str(path), self.loc.bucket, self.loc.key(rel))
        except Exception as exc:  # botocore raises many types; all mean "not stored"
            self.failed[rel] = f"{type(exc).__name__}: {exc}"
            print(f"bench: upload of {rel} to {self.loc.uri} failed: {exc}", file=sys.stderr)
            return False
        self.failed.pop(rel, None)
        self.uploaded.append(rel)
        return True

    def retry_failed(self) -> bool:
        for rel in list(self.failed):
            path = self.root / rel
            if path.exists():
                self.upload(path)
            else:
                self.failed.pop(rel)
        return not self.failed


def put_json(client: Any, out: S3Location, name: str, data: dict[str, Any]) -> None:
    """`name` under the prefix `out`, as indented JSON."""
    client.put_object(Bucket=out.bucket, Key=out.key(name), ContentType="application/json",
                      Body=(json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode())


def get_json(client: Any, out: S3Location, name: str) -> dict[str, Any] | None:
    """The JSON object `name` under the prefix `out`; None when there is none (or it is not an object)."""
    try:
        body = client.get_object(Bucket=out.bucket, Key=out.key(name))["Body"].read()
    except Exception as exc:
        code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
        if code in ("NoSuchKey", "404", "NotFound"):
            return None
        raise
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
