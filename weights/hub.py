"""Copy one model revision from the Hugging Face Hub to its S3 prefix, file by file.

Runs in the weight-sync Job on a system node (and anywhere else with Hub and S3 access):

* The revision is resolved to its commit once; every file is then read at that commit.
* Skip test without downloading: for a Git LFS file (every weight shard) the Hub reports its SHA-256
  and size, which are compared with the object's `x-amz-meta-sha256` and size in S3 (the same rule
  `stage-weights` uses, so either path recognises the other's uploads). Small non-LFS files (config,
  tokenizer) are downloaded and hashed. A fully staged model costs one API call, one HEAD per file and
  a few KB: seconds.
* Bounded scratch: one file at a time is downloaded into the scratch directory, checked against the
  Hub's SHA-256, uploaded (multipart, resumable) and deleted before the next. A file larger than the
  scratch budget is refused up front, naming the file and the setting.
* Every shard named by a `*.safetensors.index.json` must be a file of the revision, checked before
  anything is copied.
* Resume: files already in S3 are skipped; a file whose multipart upload was interrupted keeps the
  parts already sent (weights.store.open_upload).
* Final failures are told apart from passing ones, whichever Hub call meets them: a gated repository
  the token has no access to, a missing repository, revision or file become StagingError (exit 2, the
  Job fails at once with the fix); the listing of a gated repository works without access, so the
  first download is often where this shows. Network and server errors stay as they are (exit 1).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import fnmatch
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from weights.store import (
    INDEX_SUFFIX,
    Action,
    LocalFile,
    StageConfig,
    StagingError,
    Summary,
    _Counter,
    check_bucket,
    head_object,
    index_shards,
    object_key,
    parse_s3_uri,
    remote_matches,
    sha256_file,
    upload_multipart,
    upload_single,
)

GiB = 1024**3
# Repository files that are not part of the model.
DEFAULT_EXCLUDES = (".gitattributes",)


@dataclass(frozen=True)
class HubFile:
    name: str  # path in the repository; also the object key's suffix
    size: int | None
    sha256: str | None  # Git LFS files only: the Hub's SHA-256 of the content


def _endpoint() -> str | None:
    # Read at call time: HF_ENDPOINT points the sync at a mirror (or, in tests, a local fake Hub).
    return os.environ.get("HF_ENDPOINT") or None


TOKEN_FIX = "pulumi config set --secret vllm-poc:hfToken hf_... (a token of the account that accepted it)"


@contextlib.contextmanager
def final_hub_errors(repo_id: str, revision: str, token: str | None, file: str | None = None) -> Iterator[None]:
    """Turn the Hub's answers that no retry changes into StagingError, with the fix; others pass through."""
    from huggingface_hub.errors import (
        DisabledRepoError,
        EntryNotFoundError,
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"{repo_id}@{revision}" + (f": {file}" if file else "")
    token_state = "the token in vllm-poc:hfToken" if token else "no token (vllm-poc:hfToken is not set)"
    try:
        yield
    except LocalEntryNotFoundError:
        raise  # the Hub could not be reached: a network problem, retried
    except GatedRepoError:
        raise StagingError(
            f"{where}: {repo_id} is gated and the sync has {token_state} with access to it. Accept its license "
            f"at https://huggingface.co/{repo_id} with your account, then give the sync that account's token: "
            f"{TOKEN_FIX}; then rerun `pulumi up`"
        ) from None
    except RevisionNotFoundError:
        raise StagingError(
            f"{where}: {repo_id} has no revision {revision!r}; pin an existing commit in vllm-poc:weights.revisions "
            f"(https://huggingface.co/{repo_id}/commits/main)"
        ) from None
    except EntryNotFoundError:
        raise StagingError(
            f"{where}: the Hub lists {file or 'a file'} but has no such file at this revision; pin another commit "
            "in vllm-poc:weights.revisions"
        ) from None
    except DisabledRepoError:
        raise StagingError(f"{where}: the Hub has disabled {repo_id}; pick another model or a mirror") from None
    except RepositoryNotFoundError:
        raise StagingError(
            f"{where}: {repo_id} was not found on the Hub, or is private or gated and the sync has {token_state}; "
            f"check the id, and for a gated or private model: {TOKEN_FIX}"
        ) from None


def list_revision(repo_id: str, revision: str, token: str | None) -> tuple[str, list[HubFile]]:
    """The commit a revision resolves to and its files, with sizes and LFS hashes."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=_endpoint(), token=token)
    with final_hub_errors(repo_id, revision, token):
        info = api.model_info(repo_id, revision=revision, files_metadata=True)
    files = [
        HubFile(s.rfilename, s.lfs.size if s.lfs else s.size, s.lfs.sha256 if s.lfs else None)
        for s in info.siblings or []
    ]
    if not info.sha or not files:
        raise StagingError(f"the Hub returned no commit or no files for {repo_id}@{revision}")
    return info.sha, sorted(files, key=lambda f: f.name)


def download(repo_id: str, name: str, commit: str, scratch: Path, token: str | None) -> Path:
    from huggingface_hub import hf_hub_download

    with final_hub_errors(repo_id, commit, token, name):
        return Path(hf_hub_download(repo_id, name, revision=commit, local_dir=scratch, token=token,
                                    endpoint=_endpoint()))


def _clear(scratch: Path) -> None:
    for child in scratch.iterdir():
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def check_index(repo_id: str, commit: str, files: list[HubFile], scratch: Path, token: str | None) -> None:
    """Every shard each safetensors index names must be a file of the revision."""
    names = {f.name for f in files}
    for index in (f for f in files if f.name.endswith(INDEX_SUFFIX)):
        shards = index_shards(download(repo_id, index.name, commit, scratch, token).read_text(), index.name)
        base = index.name.rsplit("/", 1)[0] + "/" if "/" in index.name else ""
        missing = sorted(s for s in shards if base + s not in names)
        if missing:
            raise StagingError(
                f"{repo_id}@{commit[:12]}: {index.name} names {len(missing)} shard(s) the revision does not "
                f"have: {', '.join(missing)}; vLLM could not load it. Pin another revision."
            )


def sync(
    client,
    repo_id: str,
    revision: str,
    destination: str,
    scratch: Path,
    *,
    token: str | None = None,
    scratch_limit_bytes: int = 20 * GiB,
    config: StageConfig = StageConfig(),
    excludes: tuple[str, ...] = DEFAULT_EXCLUDES,
    log: Callable[[str], None] = print,
) -> Summary:
    """Make s3://<bucket>/<prefix>/ hold exactly the files of repo_id@revision (extra objects are left alone)."""
    config.validate()
    bucket, prefix = parse_s3_uri(destination)
    scratch.mkdir(parents=True, exist_ok=True)
    check_bucket(client, bucket)
    commit, files = list_revision(repo_id, revision, token)
    files = [f for f in files if not any(fnmatch.fnmatch(f.name, pattern) for pattern in excludes)]
    log(f"{repo_id}@{revision} is commit {commit}: {len(files)} file(s), "
        f"{sum(f.size or 0 for f in files) / GiB:.2f} GiB")
    too_big = [f for f in files if (f.size or 0) > scratch_limit_bytes]
    if too_big:
        raise StagingError(
            f"{', '.join(f'{f.name} ({f.size / GiB:.1f} GiB)' for f in too_big)} exceed the scratch space of "
            f"{scratch_limit_bytes / GiB:.0f} GiB; raise vllm-poc:weights.scratchGib"
        )
    check_index(repo_id, commit, files, scratch, token)

    summary = Summary()
    counter = _Counter(None)
    started = time.monotonic()
    with cf.ThreadPoolExecutor(config.concurrency, thread_name_prefix="part") as part_pool:
        for f in files:
            key = object_key(prefix, f.name)
            head = head_object(client, bucket, key)
            if f.sha256 and f.size is not None:
                same, reason = remote_matches(head, LocalFile(f.name, Path(f.name), f.size), f.sha256)
                if same:
                    summary.skipped_files += 1
                    summary.skipped_bytes += f.size
                    continue
            path = download(repo_id, f.name, commit, scratch, token)
            local = LocalFile(f.name, path, path.stat().st_size)
            digest = sha256_file(path)
            if f.sha256 and digest != f.sha256:
                raise StagingError(f"{f.name}: downloaded SHA-256 {digest} differs from the Hub's {f.sha256}")
            same, reason = remote_matches(head, local, digest)
            if same:
                summary.skipped_files += 1
                summary.skipped_bytes += local.size
            else:
                log(f"upload {f.name} ({local.size:,d} bytes, {reason})")
                action = Action(local, key, digest, upload=True, reason=reason)
                if local.size >= config.multipart_threshold:
                    upload_multipart(client, bucket, action, config, part_pool, counter, log)
                else:
                    upload_single(client, bucket, action, counter)
                summary.uploaded_files += 1
            _clear(scratch)  # one file on disk at a time
    summary.seconds = time.monotonic() - started
    summary.uploaded_bytes = counter.sent
    summary.resumed_bytes = counter.resumed
    return summary


def check_staged(client, destination: str) -> list[str]:
    """Problems that keep vLLM from loading the model at `destination`; empty when it is staged.

    What `stage-weights` leaves behind: config.json, and every shard the index names, each with the
    sha256 the skip test records.
    """
    bucket, prefix = parse_s3_uri(destination)
    check_bucket(client, bucket)
    objects: dict[str, dict] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        for obj in page.get("Contents", []):
            objects[obj["Key"][len(prefix) + 1:]] = obj
    if "config.json" not in objects:
        return [f"s3://{bucket}/{prefix}/ has no config.json: the model is not staged"]
    problems = []
    for name in sorted(n for n in objects if n.endswith(INDEX_SUFFIX)):
        body = client.get_object(Bucket=bucket, Key=f"{prefix}/{name}")["Body"].read().decode()
        base = name.rsplit("/", 1)[0] + "/" if "/" in name else ""
        missing = sorted(s for s in index_shards(body, name) if base + s not in objects)
        if missing:
            problems.append(f"{name} names {len(missing)} shard(s) not in S3: {', '.join(missing)}")
    if not any(n.endswith(".safetensors") for n in objects):
        problems.append(f"s3://{bucket}/{prefix}/ holds no .safetensors weights")
    return problems
