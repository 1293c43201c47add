"""Weight-load throughput against the instance's network, on the PoC's own numbers.

The FP8-dynamic checkpoint is 31.6 GiB (stacks/serving/profiles.py) and loaded in 29-32 s on g6e.2xlarge
(5 Gbps baseline, up to 20 Gbps burst); NVFP4 (31.0 GiB) loaded in 18 s on g7e.2xlarge (50 Gbps).
"""

from __future__ import annotations

import json

import pytest

from bench.common import instances
from bench.startup import netlimits, phases
from stacks import catalog
from stacks.serving import MODELS


def _log(size: str, seconds: float) -> str:
    return ("(EngineCore pid=9) INFO 08-05 10:00:52 [file_streamer.py:211] [RunAI Streamer] Overall time to "
            f"stream {size} of all files to cuda:0: {seconds}s, 1.0 GiB/s\n")


def test_catalog_and_bench_network_columns_agree():
    # one table, read by the Pulumi program and the bench alike (no copy to keep in step)
    assert catalog.GPU_INSTANCE_TYPES is instances.GPU_INSTANCE_TYPES
    assert set(netlimits.NETWORK) == set(catalog.GPU_INSTANCE_TYPES)
    for name, it in catalog.GPU_INSTANCE_TYPES.items():
        assert (it.network_gbps, it.network_burst_gbps) == (
            netlimits.NETWORK[name].baseline_gbps, netlimits.NETWORK[name].burst_gbps)
        assert it.network_burst_gbps >= it.network_gbps
    assert catalog.GPU_INSTANCE_TYPES["g6e.2xlarge"].network_burst_gbps == 20
    assert "Karpenter" in instances.NETWORK_SOURCE and "up to 20 Gbps" in instances.NETWORK_SOURCE


@pytest.mark.parametrize("text,expected", [
    ("31.6 GiB", round(31.6 * 2**30)), ("590.1 MiB", round(590.1 * 2**20)), ("512 B", 512),
    ("1.5 GB", 1_500_000_000), ("12,345 Bytes", 12345), ("fast", None), (None, None), ("3 parsecs", None),
])
def test_parse_size(text, expected):
    assert netlimits.parse_size(text) == expected


@pytest.mark.parametrize("seconds,gbps,baseline,burst", [
    (29, 9.36, 187.2, 46.8),
    (32, 8.48, 169.7, 42.4),
])
def test_fp8_on_g6e_2xlarge_exceeds_the_baseline_and_uses_under_half_the_burst(seconds, gbps, baseline, burst):
    size = MODELS["fp8-dynamic"].weights_gib
    out = netlimits.weight_load(round(size * 2**30), seconds, "g6e.2xlarge")
    assert out["weight_load_gbps"] == gbps
    assert out["weight_load_share_of_baseline_pct"] == baseline
    assert out["weight_load_share_of_burst_pct"] == burst
    assert (out["network_baseline_gbps"], out["network_burst_gbps"]) == (5, 20)


def test_poc_effective_8_2_gbps_counts_the_size_in_decimal_gb():
    # The report's "effective 8.2 Gbps" for 29-32 s is 31.6 GB (not GiB) over ~31 s.
    assert round(netlimits.gbps(31.6e9, 30.8), 1) == 8.2


def test_nvfp4_on_g7e_2xlarge_uses_under_a_third_of_its_nic():
    out = netlimits.weight_load(round(MODELS["nvfp4"].weights_gib * 2**30), 18, "g7e.2xlarge")
    assert out["weight_load_gbps"] == 14.79
    assert out["weight_load_share_of_baseline_pct"] == out["weight_load_share_of_burst_pct"] == 29.6


def test_unknown_instance_or_bytes_give_null_shares():
    assert netlimits.weight_load(None, 30, "g6e.2xlarge")["weight_load_gbps"] is None
    unknown = netlimits.weight_load(10**9, 1, None)
    assert unknown["weight_load_gbps"] == 8.0
    assert unknown["weight_load_share_of_baseline_pct"] is None and unknown["weight_load_share_of_burst_pct"] is None


def test_startup_json_adds_the_contract_keys(tmp_path, capsys):
    log = tmp_path / "server.log"
    log.write_text(_log("31.6 GiB", 29.0))
    assert phases.main([str(log), "--json", "--instance-type", "g6e.2xlarge"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["weight_load_gbps"] == 9.36
    assert out["weight_load_share_of_baseline_pct"] == 187.2
    assert out["weight_load_share_of_burst_pct"] == 46.8
    assert out["weight_bytes"] == round(31.6 * 2**30) and out["instance_type"] == "g6e.2xlarge"

    assert phases.main([str(log), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["weight_load_gbps"] == 9.36
    assert out["weight_load_share_of_baseline_pct"] is None and out["weight_load_share_of_burst_pct"] is None

    assert phases.main([str(log), "--instance-type", "g7e.2xlarge"]) == 0
    table = capsys.readouterr().out
    assert "Weight load rate" in table and "18.70 %" in table


def test_default_loader_has_no_bytes(tmp_path, capsys):
    log = tmp_path / "server.log"
    log.write_text("(EngineCore pid=9) INFO 08-05 10:00:52 [default_loader.py:501] Loading weights took 149.00 seconds\n")
    assert phases.main([str(log), "--json", "--instance-type", "g6e.2xlarge"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["weight_load_s"] == 149.0
    for key in ("weight_load_gbps", "weight_load_share_of_baseline_pct", "weight_load_share_of_burst_pct"):
        assert out[key] is None


def test_unknown_instance_type_is_a_clear_error(tmp_path, capsys):
    log = tmp_path / "server.log"
    log.write_text(_log("1 GiB", 1.0))
    assert phases.main([str(log), "--json", "--instance-type", "g6e.3xlarge"]) == 2
    assert "g6e.2xlarge" in capsys.readouterr().err
