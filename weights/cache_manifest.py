"""A compile cache as it lies in S3 and on disk: the manifest, and the checks that make it trustworthy.

Under a cache's prefix (`compile-cache/<key>/`, components/compile_cache.py) each distinct file
content is one object, `files/<sha256>`, and `manifest.json` lists what a complete cache holds:
every file's path, size and SHA-256. A manifest is read only if every path stays inside the cache
folder and every entry has a size and a SHA-256 (`parse_manifest`); the pull keeps its staging
folder and its state file inside DIR, names no manifest may use. The pull and the push
(weights/compile_cache.py) build on these.
"""

from __future__ import annotations

import json
import os
import re
import socket
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from weights.store import LocalFile, StagingError, parse_s3_uri

KIND = "vllm-poc/compile-cache"
VERSION = 1
MANIFEST = "manifest.json"
FILES = "files/"
# Kept inside DIR (same filesystem, so a restored file is moved into place, never copied) and never pushed.
STAGING = ".compile-cache-incoming"
STATE = ".compile-cache-pull.json"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class CacheInputError(StagingError):
    """Bad arguments: exit 2 with the fix."""


@dataclass(frozen=True)
class Entry:
    path: str  # posix, relative to DIR
    size: int
    sha256: str
    executable: bool = False



def check_uri(uri: str) -> tuple[str, str]:
    """Bucket and prefix (without trailing slash) of a cache URI; a bucket root is refused."""
    try:
        bucket, prefix = parse_s3_uri(uri)
    except StagingError as exc:
        raise CacheInputError(f"--uri: {exc}") from None
    if not prefix:
        raise CacheInputError(f"--uri {uri!r} names no prefix; give the cache's own, e.g. "
                              f"s3://{bucket}/compile-cache/<key>/")
    return bucket, prefix


def path_problem(path: str) -> str | None:
    """Why a manifest path cannot be written inside DIR (None when it can)."""
    if not path or "\\" in path or "\x00" in path:
        return "empty or not a plain relative path"
    pure = PurePosixPath(path)
    if pure.is_absolute() or any(part in ("", ".", "..") for part in path.split("/")):
        return "absolute, or climbs out of the cache folder"
    if pure.parts[0] in (STAGING, STATE):
        return "names the pull's own bookkeeping"
    return None


def scan(directory: Path, excludes: tuple[str, ...] = ()) -> list[LocalFile]:
    """Regular files under DIR (symbolic links are not followed), less the top-level names in excludes."""
    skip = {STAGING, STATE, *excludes}
    found: list[LocalFile] = []
    for root, dirs, names in os.walk(directory):
        rel_root = Path(root).relative_to(directory)
        if rel_root == Path("."):
            dirs[:] = [d for d in dirs if d not in skip]
            names = [n for n in names if n not in skip]
        dirs.sort()
        for name in sorted(names):
            path = Path(root) / name
            if path.is_symlink() or not path.is_file():
                continue
            found.append(LocalFile((rel_root / name).as_posix(), path, path.stat().st_size))
    return found


def entries_of(files: list[LocalFile], hashes: dict[str, str]) -> dict[str, Entry]:
    return {f.rel: Entry(f.rel, f.size, hashes[f.rel], bool(f.path.stat().st_mode & 0o111)) for f in files}


def manifest_bytes(entries: dict[str, Entry]) -> bytes:
    files = [asdict(entries[p]) for p in sorted(entries)]
    doc = {"kind": KIND, "version": VERSION,
           "created": datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
           "host": socket.gethostname(), "total_bytes": sum(e.size for e in entries.values()), "files": files}
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def parse_manifest(data: bytes) -> dict[str, Entry]:
    """The manifest's entries; ValueError naming what is wrong with it."""
    try:
        doc = json.loads(data)
    except ValueError:
        raise ValueError("the manifest is not JSON") from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise ValueError(f"the manifest is not a {KIND} manifest")
    if doc.get("version") != VERSION:
        raise ValueError(f"manifest version {doc.get('version')}, this tool reads version {VERSION}")
    entries: dict[str, Entry] = {}
    for item in doc.get("files") if isinstance(doc.get("files"), list) else [None]:
        if not isinstance(item, dict):
            raise ValueError("the manifest's file list is malformed")
        path, size, sha = item.get("path"), item.get("size"), item.get("sha256")
        if not isinstance(path, str) or (problem := path_problem(path)):
            raise ValueError(f"the manifest names an unsafe path {path!r} ({problem or 'not text'})")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0 or not isinstance(sha, str) \
                or not _SHA256.match(sha):
            raise ValueError(f"the manifest's entry for {path} has no valid size and SHA-256")
        if path in entries:
            raise ValueError(f"the manifest names {path} twice")
        entries[path] = Entry(path, size, sha, bool(item.get("executable")))
    for path in entries:  # a file may not also be a folder of another
        parent = PurePosixPath(path).parent
        while str(parent) != ".":
            if str(parent) in entries:
                raise ValueError(f"the manifest names {parent} as a file and as a folder")
            parent = parent.parent
    return entries


def read_state(directory: Path) -> dict[str, Any]:
    try:
        data = json.loads((directory / STATE).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}
