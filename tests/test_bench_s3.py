"""Upload, fetch and resume-from-S3 against a real moto server over HTTP (fixture `aws`).

This is how the benchmark Job survives a pod restart: every file is uploaded as it is written,
and a new pod started with `--resume --upload <same prefix>` downloads them, re-validates them and
runs only what is missing.
"""

from __future__ import annotations

import json

import boto3
import pytest

from bench.analysis import report as REP
from bench.common import s3
from bench.run import fetch as F
from bench.run import sweep as S

BUCKET = "vllm-poc-results"
PREFIX = "runs/dev/gemma-fp8/20260805-1000"


def sweep_args(server, out, fake, *extra):
    return ["--base-url", server.url, "--model", "tiny", "--tokenizer", "/unused", "--out", str(out),
            "--vllm-bin", fake.bin, "--scenarios", "S1_chat,S3_moderation", "--concurrencies", "1,4",
            "--window-s", "5", "--health-interval", "0.2", *extra]


def keys(client, prefix=PREFIX):
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return sorted(o["Key"][len(prefix) + 1:] for p in pages for o in p.get("Contents", []))


@pytest.fixture
def bucket(aws):
    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "ap-northeast-2"})
    return client


def test_location_parsing():
    loc = s3.S3Location.parse("s3://b/runs/x/")
    assert (loc.bucket, loc.prefix, loc.key("a.json")) == ("b", "runs/x/", "runs/x/a.json")
    assert s3.S3Location.parse("s3://b").prefix == ""
    with pytest.raises(ValueError, match="--upload: expected s3://"):
        s3.S3Location.parse("/tmp/x", option="--upload")


def test_upload_as_written_then_resume_on_a_new_pod(bench_stub_server, fake_bench, bucket, tmp_path):
    uri = f"s3://{BUCKET}/{PREFIX}"
    fake_bench.plan({"S3_moderation_c4": ["fail_all", "fail_all", "ok"]})
    first = tmp_path / "pod1"
    assert S.main(sweep_args(bench_stub_server, first, fake_bench, "--upload", uri)) == 1
    stored = keys(bucket)
    assert {"manifest.json", "S1_chat_c1.json", "S1_chat_c4.json", "S3_moderation_c1.json",
            "S3_moderation_c4.attempt1.invalid.json", "S3_moderation_c4.attempt2.invalid.json",
            "logs/S1_chat_c1.attempt1.log"} <= set(stored)
    assert "S3_moderation_c4.json" not in stored
    remote = json.loads(bucket.get_object(Bucket=BUCKET, Key=f"{PREFIX}/manifest.json")["Body"].read())
    assert remote["finished_at"] and remote["counts"] == {"valid": 3, "suspect": 0, "invalid": 1, "pending": 0}

    # A second sweep into the same prefix without --resume would overwrite it: refused.
    assert S.main(sweep_args(bench_stub_server, tmp_path / "other", fake_bench, "--upload", uri)) == 2

    # New pod, empty disk: downloads, keeps the 3 valid results, runs the invalid one again.
    second = tmp_path / "pod2"
    before = len(fake_bench.keys())
    assert S.main(sweep_args(bench_stub_server, second, fake_bench, "--upload", uri, "--resume")) == 0
    assert fake_bench.keys()[before:] == ["S3_moderation_c4"]
    assert "S3_moderation_c4.json" in keys(bucket)
    remote = json.loads(bucket.get_object(Bucket=BUCKET, Key=f"{PREFIX}/manifest.json")["Body"].read())
    assert len(remote["sessions"]) == 2 and remote["counts"]["valid"] == 4
    assert remote["upload"] == {"uri": uri + "/", "failed": {}}

    # fetch + report from what S3 holds
    local = tmp_path / "fetched"
    assert F.main([uri, str(local)]) == 0
    assert sorted(p.name for p in local.glob("*_c*.json") if ".attempt" not in p.name) == [
        "S1_chat_c1.json", "S1_chat_c4.json", "S3_moderation_c1.json", "S3_moderation_c4.json"]
    assert (local / "logs").is_dir()
    assert REP.main([str(local), "--out", str(tmp_path / "report"), "--no-charts"]) == 0
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert all(r["valid"] for r in summary["runs"]) and len(summary["runs"]) == 4


def test_tokenizer_is_staged_from_s3_without_weights(bucket, tmp_path):
    model = "models/RedHatAI/gemma-4-31B-it-FP8-dynamic"
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "tokenizer.model",
                 "special_tokens_map.json", "model-00001-of-00002.safetensors", "original/params.json"):
        bucket.put_object(Bucket=BUCKET, Key=f"{model}/{name}", Body=b"{}")
    got = sorted(s3.download_tokenizer(s3.S3Location.parse(f"s3://{BUCKET}/{model}/"), tmp_path / "tok"))
    assert got == ["config.json", "special_tokens_map.json", "tokenizer.json", "tokenizer.model",
                   "tokenizer_config.json"]
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == got
    with pytest.raises(s3.S3Error, match="no tokenizer files"):
        s3.download_tokenizer(s3.S3Location.parse(f"s3://{BUCKET}/nothing/"), tmp_path / "none")


def test_fetch_reports_an_empty_prefix(bucket, tmp_path, capsys):
    assert F.main([f"s3://{BUCKET}/runs/none", str(tmp_path / "x")]) == 1
    assert "nothing under" in capsys.readouterr().err
    assert F.main(["not-s3", str(tmp_path / "x")]) == 2
