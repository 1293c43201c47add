"""Folders in S3 for `bench report`, `bench plan` and `bench compare`.

Wherever those commands take a sweep folder, `s3://bucket/prefix/` works too, and so does
`--out s3://bucket/prefix/`. The layer sits around a command's `run(args)` (`remote_io`), so the
commands themselves keep working on local folders:

- an input given as `s3://...` is downloaded first into a temporary folder named after the
  prefix's last part (the name a local copy from `bench fetch` would have), through the same
  client, retries and progress as `bench fetch` (bench/common/s3.py);
- an `--out s3://...` is a temporary local folder whose files are uploaded one by one as the
  command writes them (`written(path)`, called right after each write), and once more at the end
  for anything written without that call; each object gets the content type of its file name
  (report.html opens in a browser, summary.json is readable as JSON by `pulumi up`);
- `display(path)` gives back the `s3://` address of a downloaded file or folder, for messages and
  for the places an output names its inputs.

Ctrl-C or SIGTERM stops the download or the command within seconds (exit 130 or 143) and says
which output files are already in S3. Local paths behave exactly as before.
"""

from __future__ import annotations

import contextlib
import functools
import mimetypes
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from bench.common import s3
from bench.common.interrupts import exit_code, signal_name, stop_on_signals

# What a browser and `pulumi up` (aws.s3.getObject returns the body of text types only) need.
CONTENT_TYPES = {".md": "text/markdown; charset=utf-8", ".json": "application/json",
                 ".html": "text/html; charset=utf-8", ".png": "image/png", ".txt": "text/plain; charset=utf-8",
                 ".log": "text/plain; charset=utf-8", ".csv": "text/csv; charset=utf-8"}


def content_type(name: str) -> str:
    suffix = PurePosixPath(name).suffix.lower()
    return CONTENT_TYPES.get(suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"


def folder_name(loc: s3.S3Location) -> str:
    """The last part of a prefix (`runs/g7e/nvfp4-g7e/ab12/` -> `ab12`), or the bucket at its root."""
    return PurePosixPath(loc.prefix.rstrip("/")).name or loc.bucket


@dataclass
class RemoteOutput:
    """A local staging folder whose files go to an S3 prefix as they are written."""

    loc: s3.S3Location
    root: Path
    client: Any
    sent: dict[str, tuple[int, int]] = field(default_factory=dict)  # relative path -> (size, mtime_ns)
    failed: dict[str, str] = field(default_factory=dict)

    def owns(self, path: Path) -> bool:
        try:
            path.resolve().relative_to(self.root.resolve())
        except ValueError:
            return False
        return True

    def upload(self, path: Path) -> bool:
        rel = path.resolve().relative_to(self.root.resolve()).as_posix()
        stat = path.stat()
        if self.sent.get(rel) == (stat.st_size, stat.st_mtime_ns):
            return True
        try:
            self.client.upload_file(str(path), self.loc.bucket, self.loc.key(rel),
                                    ExtraArgs={"ContentType": content_type(rel)})
        except Exception as exc:  # botocore raises many types; all mean "not stored"
            self.failed[rel] = str(exc)
            return False
        self.failed.pop(rel, None)
        self.sent[rel] = (stat.st_size, stat.st_mtime_ns)
        return True

    def flush(self) -> list[str]:
        """Upload every file not sent yet (or changed since); returns the ones that failed."""
        for path in sorted(p for p in self.root.rglob("*") if p.is_file()):
            self.upload(path)
        return sorted(self.failed)


class Session:
    """The S3 folders of one command run: downloaded inputs and at most one remote output."""

    def __init__(self, scratch: Path, *, progress: bool = True):
        self.scratch = scratch
        self.progress = progress
        self.inputs: dict[Path, s3.S3Location] = {}  # local copy -> where it came from
        self.output: RemoteOutput | None = None
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = s3.client()
        return self._client

    def fetch(self, value: str, option: str) -> str:
        """A folder argument as a local path: itself, or a fresh download of an `s3://` prefix."""
        if not s3.is_s3_uri(value):
            return value
        loc = s3.S3Location.parse(value, option=option)
        for local, known in self.inputs.items():
            if known == loc:
                return str(local)
        dest = self.scratch / f"in{len(self.inputs)}" / folder_name(loc)
        copied = s3.download_prefix(loc, dest, progress=self.progress)
        if not copied:
            raise s3.S3Error(f"{option}: nothing under {loc.uri} (a sweep's --upload prefix, e.g. the "
                             "stack output benchResults)")
        self.inputs[dest] = loc
        return str(dest)

    def stage_output(self, value: str, option: str = "--out") -> str:
        loc = s3.S3Location.parse(value, option=option)
        if not loc.prefix:
            raise ValueError(f"{option}: {loc.uri} has no prefix; write under one, e.g. s3://{loc.bucket}/report/")
        root = self.scratch / "out" / folder_name(loc)
        root.mkdir(parents=True, exist_ok=True)
        self.output = RemoteOutput(loc, root, self.client)
        return str(root)

    def display(self, path: Path) -> str | None:
        resolved = path.resolve()
        places = [(local, loc) for local, loc in self.inputs.items()]
        if self.output is not None:
            places.append((self.output.root, self.output.loc))
        for local, loc in places:
            try:
                rel = resolved.relative_to(local.resolve()).as_posix()
            except ValueError:
                continue
            return loc.uri if rel == "." else loc.uri + rel
        return None


_ACTIVE: list[Session] = []


def written(path: Path | str) -> None:
    """A command wrote `path`: upload it now if it lies in an `--out s3://...` staging folder."""
    path = Path(path)
    for session in _ACTIVE:
        if session.output is not None and session.output.owns(path) and path.is_file():
            session.output.upload(path)


def display(path: Path | str) -> str:
    """Where a file or folder really is: its `s3://` address when it is a download or an upload."""
    for session in reversed(_ACTIVE):
        shown = session.display(Path(path))
        if shown is not None:
            return shown
    return str(path)


def origin(path: Path | str, manifest: dict[str, Any] | None) -> str:
    """Where a sweep's results live: the S3 prefix the sweep recorded uploading to, else where they
    were read (a local copy fetched from that prefix names the prefix, as the prefix itself does)."""
    upload = (manifest or {}).get("upload")
    uri = upload.get("uri") if isinstance(upload, dict) else None
    return uri if isinstance(uri, str) and s3.is_s3_uri(uri) else display(path)


@contextlib.contextmanager
def session(scratch_prefix: str = "bench-s3-", *, progress: bool = True) -> Iterator[Session]:
    """An active Session with its own scratch folder (removed at the end, with the copies)."""
    with tempfile.TemporaryDirectory(prefix=scratch_prefix) as tmp:
        current = Session(Path(tmp), progress=progress)
        _ACTIVE.append(current)
        try:
            yield current
        finally:
            _ACTIVE.remove(current)


def _uses_s3(values: list[Any]) -> bool:
    return any(s3.is_s3_uri(v) for v in values if isinstance(v, str))


def botocore_errors() -> tuple[type[BaseException], ...]:
    try:
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:
        return ()
    return (BotoCoreError, ClientError)


def remote_io(run: Callable[[Any], int], *, command: str, inputs: tuple[str, ...],
              output: str = "out") -> Callable[[Any], int]:
    """Wrap `run(args)` so that the folder arguments named in `inputs` and `--out` may be `s3://`."""

    @functools.wraps(run)
    def wrapped(args: Any) -> int:
        values = []
        for name in (*inputs, output):
            value = getattr(args, name, None)
            values += value if isinstance(value, list) else [value]
        if not _uses_s3(values):
            return run(args)
        progress = not getattr(args, "no_progress", False)
        with session(f"bench-{command}-", progress=progress) as current:
            try:
                with stop_on_signals():
                    try:
                        _localise(args, current, inputs, output)
                    except (ValueError, s3.S3Error) as exc:
                        print(f"bench {command}: {exc}", file=sys.stderr)
                        return 2
                    except botocore_errors() as exc:  # credentials, endpoint, missing bucket
                        print(f"bench {command}: S3: {exc}", file=sys.stderr)
                        return 1
                    rc = run(args)
                    return _finish(command, current, rc)
            except KeyboardInterrupt as exc:
                kept = sorted(current.output.sent) if current.output is not None else []
                where = f" already in {current.output.loc.uri}: {', '.join(kept)}" if kept else " uploaded"
                print(f"bench {command}: stopped by {signal_name(exc)}; {len(kept)} output file(s){where}. "
                      "Run the same command again to write them all.", file=sys.stderr)
                return exit_code(exc)

    return wrapped


# How the commands' --help names their folder arguments.
_POSITIONAL = {"dir": "DIR", "dirs": "DIR", "candidates": "CANDIDATE_DIR"}


def _localise(args: Any, current: Session, inputs: tuple[str, ...], output: str) -> None:
    for name in inputs:
        value = getattr(args, name, None)
        option = _POSITIONAL.get(name) or f"--{name.replace('_', '-')}"
        if isinstance(value, list):
            setattr(args, name, [current.fetch(v, option) for v in value])
        elif isinstance(value, str):
            setattr(args, name, current.fetch(value, option))
    if s3.is_s3_uri(getattr(args, output, None)):
        setattr(args, output, current.stage_output(getattr(args, output)))


def _finish(command: str, current: Session, rc: int) -> int:
    if current.output is None:
        return rc
    failed = current.output.flush()
    if failed:
        print(f"bench {command}: not uploaded to {current.output.loc.uri}: {', '.join(failed)} "
              f"({current.output.failed[failed[0]]})", file=sys.stderr)
        return rc or 1
    print(f"bench {command}: {len(current.output.sent)} files in {current.output.loc.uri}")
    return rc
