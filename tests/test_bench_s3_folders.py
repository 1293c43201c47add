"""`bench report|plan|compare` on s3:// folders (bench/common/locations.py), against a real moto server.

The S3 run must write the same files, byte for byte, as the local run on the same sweeps: nothing in
an output may depend on where the inputs were read or the outputs staged.
"""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest

from bench.analysis import compare as CMP
from bench.analysis import plan as P
from bench.analysis import report as REP
from bench.common import locations
from bench.common import s3
from tests.test_bench_plan import G7E, L40S, sweep_dir

BUCKET = "vllm-poc-g7e-results-123456789012-ap-northeast-2"


def upload_sweep(client, folder: Path, prefix: str) -> str:
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        client.upload_file(str(path), BUCKET, prefix + path.relative_to(folder).as_posix())
    return f"s3://{BUCKET}/{prefix}"


def recorded_sweep(root: Path, label: str, peaks: dict[str, float], prefix: str, **kw) -> Path:
    """A sweep folder as the bench Job leaves it: results, a log, a manifest naming its S3 home."""
    folder = sweep_dir(root, label, peaks, **kw)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["upload"] = {"uri": f"s3://{BUCKET}/{prefix}", "failed": {}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "logs").mkdir()
    (folder / "logs" / "S1_chat_c1.attempt1.log").write_text("fake vllm bench serve S1_chat_c1\n")
    return folder


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def s3_files(client, prefix: str) -> dict[str, bytes]:
    out = {}
    for rel, _size in s3.iter_objects(s3.S3Location(BUCKET, prefix), client):
        out[rel] = client.get_object(Bucket=BUCKET, Key=prefix + rel)["Body"].read()
    return out


@pytest.fixture
def two_sweeps(aws, tmp_path):
    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "ap-northeast-2"})
    local = tmp_path / "local"
    local.mkdir()
    cand_prefix, base_prefix = "runs/g7e/nvfp4-g7e/0123456789/", "runs/g7e/nvfp4-l40s/9876543210/"
    cand = recorded_sweep(local, "nvfp4-g7e", G7E, cand_prefix, instance_type="g7e.2xlarge", price=1.5,
                          capacity_type="spot")
    base = recorded_sweep(local, "nvfp4-l40s", {s: v for s, (v, _) in L40S.items()}, base_prefix,
                          instance_type="g6e.2xlarge", price=2.76, capacity_type="on-demand")
    return client, (cand, upload_sweep(client, cand, cand_prefix)), (base, upload_sweep(client, base, base_prefix))


def test_report_from_s3_to_s3_matches_the_local_run_byte_for_byte(two_sweeps, tmp_path, capsys):
    client, (cand, cand_uri), (base, base_uri) = two_sweeps
    local_out = tmp_path / "report-local"
    assert REP.main([str(cand), "--baseline", str(base), "--out", str(local_out)]) == 0
    out_uri = f"s3://{BUCKET}/runs/g7e/report/abc/"
    assert REP.main([cand_uri, "--baseline", base_uri, "--out", out_uri, "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert f"-> {out_uri}report.md" in printed and f"files in {out_uri}" in printed

    want = files(local_out)
    got = s3_files(client, "runs/g7e/report/abc/")
    # report.md, summary.json, a chart per scenario, and the replica plan beside them
    assert {"report.md", "summary.json", "chart_S1_chat.png", "plan/plan.md", "plan/plan.json"} <= set(want)
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name] == want[name], f"{name} differs between the local and the S3 run"
    # Provenance names the sweeps' S3 homes in both runs, never a temporary folder.
    text = want["report.md"].decode()
    assert f"Results: `{cand_uri}`" in text and f"Results: `{base_uri}`" in text
    assert "/tmp" not in text
    summary = json.loads(got["summary.json"])
    # The PoC's S1 peaks: 1871 / 536 tok/s per GPU.
    assert summary["comparison"]["S1_chat"]["throughput_ratio"] == pytest.approx(3.49, abs=0.01)
    head = client.head_object(Bucket=BUCKET, Key="runs/g7e/report/abc/summary.json")
    assert head["ContentType"] == "application/json"


def test_repeats_may_be_s3_prefixes_too(two_sweeps, tmp_path, capsys):
    """--repeat and --baseline-repeat are fetched like DIR: the pooled figures name each run after its prefix's
    last part, summary.json's sweeps name the S3 homes, and the plan beside the report is written."""
    client, (cand, cand_uri), (base, base_uri) = two_sweeps
    again = tmp_path / "again"
    again.mkdir()
    uris = []
    for folder, peaks, prefix, kw in (
            (cand, G7E, "runs/g7e/nvfp4-g7e/1111111111/", {"instance_type": "g7e.2xlarge", "price": 1.5,
                                                         "capacity_type": "spot"}),
            (base, {s: v for s, (v, _) in L40S.items()}, "runs/g7e/nvfp4-l40s/2222222222/",
             {"instance_type": "g6e.2xlarge", "price": 2.76, "capacity_type": "on-demand"})):
        uris.append(upload_sweep(client, recorded_sweep(again, folder.name, peaks, prefix, **kw), prefix))
    out = f"s3://{BUCKET}/runs/g7e/report/pooled/"
    assert REP.main([cand_uri, "--repeat", uris[0], "--baseline", base_uri, "--baseline-repeat", uris[1],
                     "--out", out, "--no-charts", "--no-progress"]) == 0
    got = s3_files(client, "runs/g7e/report/pooled/")
    summary = json.loads(got["summary.json"])
    assert summary["sweeps"] == {"candidate": [cand_uri, uris[0]], "baseline": [base_uri, uris[1]]}
    assert summary["scenarios"]["S1_chat"]["peak"]["source_runs"] == ["0123456789/S1_chat_c64.json",
                                                                      "1111111111/S1_chat_c64.json"]
    assert "plan/plan.json" in got and "from 2 sweeps" in capsys.readouterr().out


def test_plan_and_compare_read_and_write_s3(two_sweeps, tmp_path):
    client, (cand, cand_uri), (base, base_uri) = two_sweeps
    assert P.main([cand_uri, "--baseline", base_uri, "--current-replicas", "12", "--basis", "peak",
                   "--out", f"s3://{BUCKET}/runs/g7e/report/p/", "--no-progress"]) == 0
    plan = json.loads(s3_files(client, "runs/g7e/report/p/")["plan.json"])
    assert plan["configurations"][0]["replicas"] == 4  # the PoC's 12 L40S -> 4 g7e on the peak basis

    local = tmp_path / "cmp"
    assert CMP.main([cand_uri, base_uri, "--out", str(local), "--no-progress"]) == 0
    data = json.loads((local / "compare.json").read_text())
    # Each variant names where it was read, its S3 address, not the temporary copy.
    assert [v["dir"] for v in data["variants"]] == [cand_uri, base_uri]


def test_missing_prefix_and_bad_uri_exit_2_naming_the_argument(two_sweeps, tmp_path, capsys):
    _client, (_cand, cand_uri), _ = two_sweeps
    missing = f"s3://{BUCKET}/runs/g7e/nothing/"
    assert REP.main([cand_uri, "--baseline", missing, "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"--baseline: nothing under {missing}" in err and "Traceback" not in err
    assert REP.main([cand_uri, "--out", f"s3://{BUCKET}", "--no-progress"]) == 2
    assert "--out: s3://" in capsys.readouterr().err
    assert P.main(["s3://", "--load", "S1_chat=1", "--out", str(tmp_path / "p"), "--no-progress"]) == 2
    assert "no bucket" in capsys.readouterr().err


def test_files_are_uploaded_as_written_so_an_interrupted_report_keeps_them(two_sweeps, monkeypatch, capsys):
    client, (_cand, cand_uri), (_base, base_uri) = two_sweeps
    real_markdown = REP.render_markdown

    def stopped_while_writing_markdown(*args, **kwargs):
        # summary.json and the charts are written by now; report.md is not
        raise KeyboardInterrupt

    monkeypatch.setattr(REP, "render_markdown", stopped_while_writing_markdown)
    prefix = "runs/g7e/report/stopped/"
    assert REP.main([cand_uri, "--baseline", base_uri, "--out", f"s3://{BUCKET}/{prefix}", "--no-progress"]) == 130
    kept = s3_files(client, prefix)
    assert "summary.json" in kept and "chart_S1_chat.png" in kept and "report.md" not in kept
    err = capsys.readouterr().err
    assert "stopped by Ctrl-C" in err and "summary.json" in err and "Run the same command again" in err
    monkeypatch.setattr(REP, "render_markdown", real_markdown)


def test_local_folders_are_left_alone(tmp_path):
    # No S3 anywhere: the command runs as before, and no client is built (boto3 not needed).
    called = []
    wrapped = locations.remote_io(lambda args: called.append(args.dir) or 0, command="x", inputs=("dir",))

    class Args:
        dir = str(tmp_path)
        out = str(tmp_path / "out")

    assert wrapped(Args()) == 0 and called == [str(tmp_path)]
    assert locations.display(tmp_path) == str(tmp_path)
    assert locations.content_type("report.html").startswith("text/html")
