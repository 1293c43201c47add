"""stage-weights against a real moto S3 over HTTP: multipart, skip by sha256, resume, shard check."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import boto3
import pytest

from stacks.ops import staging
from stacks.ops.staging import MiB, StageConfig, StagingError

BUCKET = "weights-test"
PREFIX = "models/RedHatAI/gemma-4-31B-it-FP8-dynamic"
DEST = f"s3://{BUCKET}/{PREFIX}"
# 5 MiB parts (S3's minimum) over 11 MiB shards: three parts each, the last one short.
CONFIG = StageConfig(concurrency=4, part_size=5 * MiB, multipart_threshold=5 * MiB)
SHARDS = [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]


def _write_blob(repo: Path, data: bytes) -> Path:
    blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
    blob.write_bytes(data)
    return blob


def _link(snapshot: Path, rel: str, blob: Path) -> None:
    path = snapshot / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()
    path.symlink_to(os.path.relpath(blob, path.parent))


@pytest.fixture
def hf_repo(tmp_path) -> Path:
    """A Hugging Face cache layout: snapshot files are symlinks into blobs/."""
    repo = tmp_path / "models--RedHatAI--gemma-4-31B-it-FP8-dynamic"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123\n")
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    weight_map = {f"layer.{i}.weight": SHARDS[i % 3] for i in range(6)}
    small = {
        "config.json": b'{"model_type": "gemma4"}',
        "tokenizer.json": b'{"version": "1.0"}' * 100,
        "model.safetensors.index.json": json.dumps({"metadata": {}, "weight_map": weight_map}).encode(),
    }
    for rel, data in small.items():
        _link(snap, rel, _write_blob(repo, data))
    for shard in SHARDS:
        _link(snap, shard, _write_blob(repo, os.urandom(11 * MiB)))
    # Download-tool state that must never reach the bucket.
    (snap / ".cache" / "huggingface").mkdir(parents=True)
    (snap / ".cache" / "huggingface" / "download.lock").write_text("x")
    (snap / ".gitattributes").write_text("*.safetensors filter=lfs\n")
    (snap / "model.lock").write_text("x")
    return repo


@pytest.fixture
def s3(aws):
    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "ap-northeast-2"})
    return client


def _keys(s3) -> set[str]:
    return {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])}


def _snapshot(repo: Path) -> Path:
    return repo / "snapshots" / "abc123"


def _stage(client, repo: Path, **kw):
    return staging.stage(client, repo, DEST, CONFIG, log=lambda msg: None, **kw)


class CountingClient:
    """The real moto client, counting upload calls and optionally failing after N parts."""

    def __init__(self, client, fail_after_parts: int | None = None) -> None:
        self._client = client
        self._fail_after = fail_after_parts
        self._lock = threading.Lock()
        self.parts = 0
        self.puts = 0

    def __getattr__(self, name):
        return getattr(self._client, name)

    def upload_part(self, **kwargs):
        with self._lock:
            if self._fail_after is not None and self.parts >= self._fail_after:
                raise ConnectionError("simulated network drop")
            self.parts += 1
        return self._client.upload_part(**kwargs)

    def put_object(self, **kwargs):
        with self._lock:
            self.puts += 1
        return self._client.put_object(**kwargs)


def test_uploads_snapshot_multipart_then_rerun_skips_everything(s3, hf_repo):
    client = CountingClient(s3)
    first = _stage(client, hf_repo)

    expected = {f"{PREFIX}/{name}" for name in ["config.json", "tokenizer.json", "model.safetensors.index.json", *SHARDS]}
    assert _keys(s3) == expected  # .cache/, .gitattributes and lock files stayed home
    assert first.uploaded_files == 6 and not first.failed
    assert client.parts == 9 and client.puts == 3  # shards went multipart, 3 parts each
    assert first.uploaded_bytes == sum(p.stat().st_size for p in (hf_repo / "blobs").iterdir())
    for shard in SHARDS:
        local = (_snapshot(hf_repo) / shard).read_bytes()
        obj = s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}/{shard}")
        assert obj["Body"].read() == local
        assert obj["Metadata"]["sha256"] == hashlib.sha256(local).hexdigest()

    rerun_client = CountingClient(s3)
    second = _stage(rerun_client, hf_repo)
    assert (second.uploaded_files, second.uploaded_bytes, second.skipped_files) == (0, 0, 6)
    assert rerun_client.parts == rerun_client.puts == 0


def test_changed_shard_is_the_only_upload(s3, hf_repo):
    _stage(s3, hf_repo)
    changed = _write_blob(hf_repo, os.urandom(11 * MiB))  # same size, new content
    _link(_snapshot(hf_repo), SHARDS[1], changed)

    client = CountingClient(s3)
    summary = _stage(client, hf_repo)
    assert (summary.uploaded_files, summary.skipped_files) == (1, 5)
    assert client.parts == 3 and client.puts == 0
    body = s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}/{SHARDS[1]}")["Body"].read()
    assert body == changed.read_bytes()


def test_missing_shard_is_named_and_nothing_is_uploaded(s3, hf_repo, capsys):
    (_snapshot(hf_repo) / SHARDS[2]).unlink()
    with pytest.raises(StagingError, match=SHARDS[2]) as err:
        _stage(s3, hf_repo)
    assert SHARDS[0] not in str(err.value) and "model.safetensors.index.json" in str(err.value)
    assert _keys(s3) == set()

    rc = staging.main([str(hf_repo), DEST, "--no-progress"])
    assert rc == 2
    assert f"1 missing: {SHARDS[2]}" in capsys.readouterr().err


def test_interrupted_upload_resumes_with_only_the_missing_parts(s3, hf_repo):
    failing = CountingClient(s3, fail_after_parts=4)
    summary = _stage(failing, hf_repo)
    assert summary.failed, "the simulated drop should fail at least one shard"
    pending = s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
    assert pending, "the interrupted upload must stay in S3 to be resumed"

    client = CountingClient(s3)
    resumed = _stage(client, hf_repo)
    assert not resumed.failed
    assert resumed.resumed_bytes > 0
    assert client.parts == 9 - 4  # the four parts that made it are kept
    assert not s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads")
    for shard in SHARDS:
        obj = s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}/{shard}")
        local = (_snapshot(hf_repo) / shard).read_bytes()
        assert obj["Body"].read() == local
        assert obj["Metadata"]["sha256"] == hashlib.sha256(local).hexdigest()


ONE_AT_A_TIME = StageConfig(concurrency=1, part_size=5 * MiB, multipart_threshold=5 * MiB)


def _interrupt_after_two_parts(s3, repo: Path) -> str:
    """Leave one shard with parts 1-2 of 3 in S3 (and empty uploads for the others); return its name."""
    staging.stage(CountingClient(s3, fail_after_parts=2), repo, DEST, ONE_AT_A_TIME, log=lambda m: None)
    uploads = s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
    with_parts = [u["Key"] for u in uploads if s3.list_parts(Bucket=BUCKET, Key=u["Key"], UploadId=u["UploadId"]).get("Parts")]
    assert len(with_parts) == 1
    return with_parts[0].rsplit("/", 1)[1]


def _rewrite(repo: Path, shard: str, offset: int) -> bytes:
    data = bytearray((_snapshot(repo) / shard).read_bytes())
    data[offset : offset + 16] = bytes(16)
    _link(_snapshot(repo), shard, _write_blob(repo, bytes(data)))
    return bytes(data)


def _assert_staged(s3, shard: str, data: bytes) -> None:
    obj = s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}/{shard}")
    assert obj["Body"].read() == data
    assert obj["Metadata"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert not s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads")


def test_resume_refuses_parts_that_no_longer_match_the_file(s3, hf_repo):
    shard = _interrupt_after_two_parts(s3, hf_repo)
    data = _rewrite(hf_repo, shard, offset=0)  # inside part 1, already in S3

    client = CountingClient(s3)
    summary = staging.stage(client, hf_repo, DEST, ONE_AT_A_TIME, log=lambda m: None)
    assert not summary.failed and summary.resumed_bytes == 0
    assert client.parts == 9  # the stale upload was aborted, every shard sent whole
    _assert_staged(s3, shard, data)


def test_resume_fixes_a_stale_hash_when_the_unsent_tail_changed(s3, hf_repo):
    shard = _interrupt_after_two_parts(s3, hf_repo)
    data = _rewrite(hf_repo, shard, offset=10 * MiB + 1)  # inside part 3, never sent

    client = CountingClient(s3)
    summary = staging.stage(client, hf_repo, DEST, ONE_AT_A_TIME, log=lambda m: None)
    assert not summary.failed and summary.resumed_bytes == 10 * MiB
    # part 3 of the resumed upload, then that shard again from scratch (its recorded hash was stale),
    # plus the two shards whose uploads never got a part.
    assert client.parts == 1 + 3 + 6
    _assert_staged(s3, shard, data)


def test_upload_from_another_tool_is_aborted_and_restarted(s3, hf_repo):
    key = f"{PREFIX}/{SHARDS[0]}"
    foreign = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]  # no SHA-256 checksums
    s3.upload_part(Bucket=BUCKET, Key=key, UploadId=foreign, PartNumber=1, Body=b"x" * 5 * MiB)

    summary = _stage(s3, hf_repo)
    assert not summary.failed and summary.resumed_bytes == 0
    assert not s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads")
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == (_snapshot(hf_repo) / SHARDS[0]).read_bytes()


def test_cli_reports_summary_and_missing_bucket(aws, hf_repo, capsys):
    assert staging.main([str(hf_repo), "s3://no-such-bucket/x", "--no-progress"]) == 2
    assert "does not exist" in capsys.readouterr().err

    boto3.client("s3").create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "ap-northeast-2"})
    args = [str(_snapshot(hf_repo)), DEST, "--no-progress", "--part-size-mib", "5", "--multipart-threshold-mib", "5"]
    assert staging.main(args) == 0
    out = capsys.readouterr().out
    assert "uploaded 6 file(s)" in out and "MiB/s" in out
    assert staging.main(args) == 0
    assert "skipped 6 file(s)" in capsys.readouterr().out


def test_rejects_bad_input(tmp_path, hf_repo):
    with pytest.raises(StagingError, match="s3://"):
        staging.parse_s3_uri("weights-test/models")
    with pytest.raises(StagingError, match="--part-size-mib"):
        StageConfig(part_size=1 * MiB).validate()
    blob_of_shard = (_snapshot(hf_repo) / SHARDS[0]).resolve()
    blob_of_shard.unlink()
    with pytest.raises(StagingError, match=f"missing blobs.*{SHARDS[0]}"):
        staging.collect_files(_snapshot(hf_repo))


def test_remote_match_rules():
    f = staging.LocalFile("a", Path("a"), 10)
    sha = hashlib.sha256(b"0123456789").hexdigest()
    assert staging.remote_matches(None, f, sha) == (False, "new")
    assert not staging.remote_matches({"ContentLength": 11, "Metadata": {"sha256": sha}}, f, sha)[0]
    assert staging.remote_matches({"ContentLength": 10, "Metadata": {"sha256": sha}}, f, sha)[0]
    assert not staging.remote_matches({"ContentLength": 10, "Metadata": {"sha256": "0" * 64}}, f, sha)[0]
    full = staging.b64_sha256(b"0123456789")
    assert staging.remote_matches({"ContentLength": 10, "ChecksumSHA256": full}, f, sha)[0]
    # A composite (multipart) checksum cannot be compared with a whole-file hash.
    assert not staging.remote_matches({"ContentLength": 10, "ChecksumSHA256": full + "-2"}, f, sha)[0]
    assert not staging.remote_matches({"ContentLength": 10, "Metadata": {}}, f, sha)[0]
