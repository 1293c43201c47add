"""Small operator-facing behaviours: dry-run wording, destinations without prefix, help texts, logs
that are not vLLM's, progress units."""

from __future__ import annotations

import io

import boto3
import pytest

from bench.startup import phases
from bench.common.progress import Progress, human_bytes
from stacks.__main__ import build_parser
from stacks.ops import staging


def test_render_help_lists_every_output(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["render", "--help"])
    text = capsys.readouterr().out
    for name in ("resources.json", "kubernetes.yaml", "helm.json", "outputs.json", "code/"):
        assert name in text


def test_destination_without_prefix_is_refused_unless_asked_for():
    with pytest.raises(staging.StagingError, match="has no prefix.*--bucket-root"):
        staging.parse_s3_uri("s3://bucket")
    with pytest.raises(staging.StagingError, match="has no prefix"):
        staging.parse_s3_uri("s3://bucket/")
    assert staging.parse_s3_uri("s3://bucket", bucket_root=True) == ("bucket", "")


def test_dry_run_says_what_it_would_do(aws, tmp_path, capsys):
    boto3.client("s3").create_bucket(Bucket="dry", CreateBucketConfiguration={"LocationConstraint": "ap-northeast-2"})
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"x" * 3000)
    assert staging.main([str(tmp_path), "s3://dry/models/m", "--dry-run", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "dry run: would upload 2 file(s), 2.9 KiB; would skip 0 file(s), 0 B" in out
    assert "nothing was sent" in out and "uploaded 0 file(s)" not in out


def test_bench_startup_refuses_a_log_that_is_not_vllms(tmp_path, capsys):
    log = tmp_path / "app.log"
    log.write_text("GET /healthz 200\nsomething else entirely\n")
    assert phases.main([str(log)]) == 2  # bad input, like a missing file
    err = capsys.readouterr().err
    assert "does not look like a vLLM server log" in err and "Traceback" not in err


def test_progress_units_are_binary_in_lines_and_bar():
    assert human_bytes(5 * 1024 * 1024) == "5.0 MiB" and human_bytes(3 * 1024**3) == "3.0 GiB"
    stream = io.StringIO()
    progress = Progress(10 * 1024 * 1024, "uploading", stream=stream, bar=False, interval=3600)
    progress.update(5 * 1024 * 1024)
    progress.close()
    assert stream.getvalue().startswith("uploading: 5.0 MiB of 10.0 MiB (50%), ")
    bar_stream = io.StringIO()
    bar = Progress(10 * 1024 * 1024, "uploading", stream=bar_stream, bar=True)
    bar.update(5 * 1024 * 1024)
    bar.close()
    assert "MiB" in bar_stream.getvalue() and "MB" not in bar_stream.getvalue().replace("MiB", "")


def test_stage_weights_reads_the_region_through_the_loader(tmp_path, capsys, monkeypatch):
    seen = {}
    monkeypatch.setattr(staging, "make_client", lambda config, region: seen.setdefault("region", region))
    monkeypatch.setattr(staging, "stage", lambda *a, **k: staging.Summary(dry_run=True))
    assert staging.main([str(tmp_path), "s3://b/models/m", "--stack", "g7e", "--no-progress"]) == 0
    assert seen["region"] == "ap-northeast-2"
    assert staging.main([str(tmp_path), "s3://b/models/m", "--stack", "nope", "--no-progress"]) == 2
    assert "Pulumi.nope.yaml" in capsys.readouterr().err
