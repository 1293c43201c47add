"""`bench compare` on hand-made sweeps (tests/fixtures/compare_sweeps.py): variants side by side, what
differs, the like-for-like refusal, the acceptance gate, SLO capacity, and the command's contract (files
and exact keys). tests/test_bench_compare_lead.py holds who leads: winners beyond the noise, repeats, the
lead under the SLO and who trails.

The numbers are the PoC's KV-cache comparison (FP8-dynamic with BF16 KV vs with fp8 KV on one
g6e.12xlarge): fp8 KV wins S2_summary/32 (201.8 vs 112.1) and S4_rag/32 (104.5 vs 52.2).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.analysis import answer
from bench.analysis import compare as C
from tests.fixtures.compare_sweeps import compare, flags, search_run, sweep

REPO = Path(__file__).resolve().parents[1]
MTP = '{"method":"mtp","model":"s3://b/models/google/gemma-4-31B-it-assistant/","num_speculative_tokens":4}'

TABLE6 = {  # (scenario, concurrency): (FP8 BF16 KV, FP8 fp8 KV)
    ("S2_summary", 32): (112.1, 201.8),
    ("S4_rag", 32): (52.2, 104.5),
}


def table6(tmp_path):
    bf16 = sweep(tmp_path / "bf16kv", {k: v[0] for k, v in TABLE6.items()}, server_flags=flags(kv_cache_dtype="auto"))
    fp8 = sweep(tmp_path / "fp8kv", {k: v[1] for k, v in TABLE6.items()}, server_flags=flags())
    return bf16, fp8


def test_table6_winner_per_cell_and_what_differs(tmp_path):
    data, _, md = compare(tmp_path, *table6(tmp_path), labels=["FP8 (BF16 KV)", "FP8 (fp8 KV)"])
    assert data["incomplete"] == []
    assert data["variants"] == [
        {"label": "FP8 (BF16 KV)", "dir": str(tmp_path / "bf16kv"), "sweeps": [str(tmp_path / "bf16kv")],
         "differs": {"kvCacheDtype": "auto"}},
        {"label": "FP8 (fp8 KV)", "dir": str(tmp_path / "fp8kv"), "sweeps": [str(tmp_path / "fp8kv")],
         "differs": {"kvCacheDtype": "fp8"}},
    ]
    assert [(c["scenario"], c["concurrency"], c["output_tok_s"], c["winner"]) for c in data["cells"]] == [
        ("S2_summary", 32, {"FP8 (BF16 KV)": 112.1, "FP8 (fp8 KV)": 201.8}, "FP8 (fp8 KV)"),
        ("S4_rag", 32, {"FP8 (BF16 KV)": 52.2, "FP8 (fp8 KV)": 104.5}, "FP8 (fp8 KV)"),
    ]
    assert "| S2_summary / 32 | 112.1 | **201.8** | FP8 (fp8 KV) | 80.0 % (11 % default) |" in md
    assert data["cells"][0]["winner_margin_pct"] == 80.02 and data["cells"][0]["noise_pct"] == 11.0
    assert "| FP8 (BF16 KV) | `" in md and "`auto`" in md


def test_the_lower_number_wins_nothing_and_a_tie_names_no_winner(tmp_path):
    a = sweep(tmp_path / "a", {("S1_chat", 8): 146.4, ("S1_chat", 32): 300.0}, server_flags=flags(kv_cache_dtype="auto"))
    b = sweep(tmp_path / "b", {("S1_chat", 8): 129.8, ("S1_chat", 32): 300.0}, server_flags=flags())
    data, _, _ = compare(tmp_path, a, b)
    assert [c["winner"] for c in data["cells"]] == ["a", None]


def test_a_second_differing_setting_makes_it_incomplete_and_names_no_winner(tmp_path):
    bf16, _ = table6(tmp_path)
    both = sweep(tmp_path / "both", {k: v[1] for k, v in TABLE6.items()},
                 server_flags=flags(speculative_config=MTP))  # fp8 KV AND MTP: two changes
    data, _, md = compare(tmp_path, bf16, both)
    assert data["variants"][1]["differs"] == {"kvCacheDtype": "fp8", "speculative": "mtp google/gemma-4-31B-it-assistant k=4"}
    assert len(data["incomplete"]) == 1 and "differ in 2 settings (kvCacheDtype, speculative)" in data["incomplete"][0]
    assert all(c["winner"] is None for c in data["cells"])
    assert "## Incomplete: no winner is named" in md
    # A cross product declared by the sweeps themselves is compared as such.
    for folder in (bf16, both):
        m = json.loads((folder / "manifest.json").read_text())
        m["variant"] = {"cross": True}
        (folder / "manifest.json").write_text(json.dumps(m))
    data, _, _ = compare(tmp_path, bf16, both)
    assert data["incomplete"] == [] and [c["winner"] for c in data["cells"]] == ["both", "both"]


@pytest.mark.parametrize("change, reason", [
    ({"seed": 1}, "benchmark setting seed differs"),
    ({"vllm": "0.32.0"}, "benchmark setting vllm_version differs"),
    ({"invalid": ("S4_rag", 32)}, "1 invalid or missing runs: S4_rag c=32"),
])
def test_differences_in_the_benchmark_itself_are_refused(tmp_path, change, reason):
    bf16 = sweep(tmp_path / "bf16", {k: v[0] for k, v in TABLE6.items()}, server_flags=flags(kv_cache_dtype="auto"))
    fp8 = sweep(tmp_path / "fp8", {k: v[1] for k, v in TABLE6.items()}, server_flags=flags(), **change)
    data, _, _ = compare(tmp_path, bf16, fp8)
    assert any(reason in r for r in data["incomplete"]), data["incomplete"]
    assert all(c["winner"] is None for c in data["cells"])


def test_different_concurrencies_and_missing_manifests_are_refused(tmp_path):
    a = sweep(tmp_path / "a", {("S2_summary", 32): 1.0, ("S2_summary", 64): 2.0}, server_flags=flags())
    b = sweep(tmp_path / "b", {("S2_summary", 32): 3.0}, server_flags=flags(kv_cache_dtype="auto"))
    data, _, _ = compare(tmp_path, a, b)
    assert any("scenario S2_summary: concurrencies differ" in r for r in data["incomplete"])
    cell64 = [c for c in data["cells"] if c["concurrency"] == 64][0]
    assert cell64["output_tok_s"] == {"a": 2.0, "b": None} and cell64["winner"] is None
    (b / "manifest.json").unlink()
    data, _, _ = compare(tmp_path, a, b)
    assert any("b: no manifest.json" in r for r in data["incomplete"])


def test_tensor_parallel_variants_bring_their_gpu_count_with_them(tmp_path):
    tp1 = sweep(tmp_path / "tp1", {("S4_rag", 32): 100.0}, server_flags=flags(), gpus=1)
    tp2 = sweep(tmp_path / "tp2", {("S4_rag", 32): 180.0}, server_flags=flags(tensor_parallel_size="2"), gpus=2)
    data, extra, md = compare(tmp_path, tp1, tp2)
    assert data["incomplete"] == [] and extra["settings"] == ["tensorParallelSize"]
    assert data["variants"][1]["differs"] == {"gpus": "2", "tensorParallelSize": "2"}
    assert data["cells"][0]["winner"] == "tp2"
    assert "Follows from the setting above: gpus" in md


def test_acceptance_gate_flags_a_collapsed_draft_and_it_never_wins(tmp_path):
    cells = {("K_korean", 1): 48.5, ("K_korean", 8): 281.5, ("S1_chat", 8): 300.0}
    off = sweep(tmp_path / "mtp-off", {("K_korean", 1): 18.4, ("K_korean", 8): 122.9, ("S1_chat", 8): 150.0},
                server_flags=flags())
    # Faster everywhere, but its MTP draft accepts 3 % of Korean drafts: a broken configuration.
    broken = sweep(tmp_path / "mtp-k4", cells, server_flags=flags(speculative_config=MTP),
                   spec={("K_korean", 1): 3.0, ("K_korean", 8): 2.5, ("S1_chat", 8): 1.0})
    data, extra, md = compare(tmp_path, off, broken)
    assert data["incomplete"] == []
    assert [c["winner"] for c in data["cells"]] == ["mtp-off", "mtp-off", "mtp-off"]
    assert list(extra["gated"]) == ["mtp-k4"] and len(extra["gated"]["mtp-k4"]) == 2  # K_korean only
    assert "## Configuration problems (never a winner)" in md and "accepted 3.0 %" in md
    # A healthy draft (the PoC's 54.7-56.0 %) passes the gate and wins.
    healthy = sweep(tmp_path / "mtp-ok", cells, server_flags=flags(speculative_config=MTP),
                    spec={("K_korean", 1): 56.0, ("K_korean", 8): 54.7})
    data, extra, md = compare(tmp_path, off, healthy)
    assert [c["winner"] for c in data["cells"]] == ["mtp-ok"] * 3 and extra["gated"] == {}
    assert "| mtp-ok | 54.7-56.0% | 0.80 / 0.60 / 0.45 / 0.35 | 48.5 | 2.69 s | 281.5 |" in md


def test_low_acceptance_on_random_tokens_is_not_a_configuration_problem(tmp_path):
    a = sweep(tmp_path / "a", {("S1_chat", 8): 150.0}, server_flags=flags())
    b = sweep(tmp_path / "b", {("S1_chat", 8): 180.0}, server_flags=flags(speculative_config=MTP),
              spec={("S1_chat", 8): 2.0})
    data, extra, _ = compare(tmp_path, a, b)
    assert extra["gated"] == {} and data["cells"][0]["winner"] == "b"


def test_slo_capacity_from_the_runs_or_the_capacity_search(tmp_path):
    a = sweep(tmp_path / "a", {("S2_summary", 8): 80.0, ("S2_summary", 32): 200.0}, server_flags=flags())
    b = sweep(tmp_path / "b", {("S2_summary", 8): 90.0, ("S2_summary", 32): 210.0},
              server_flags=flags(kv_cache_dtype="auto"), ttft99=900.0)  # misses the 500 ms TTFT p99 SLO
    data, _, md = compare(tmp_path, a, b)
    assert data["slo_capacity"] == {"S2_summary": {"a": 200.0, "b": None}}
    assert "never meets the SLO at the loads tested" in md
    # The capacity search's runs below the grid's failing point: b meets the SLO at c=4.
    search_run(b, "S2_summary", 4, 1, 75.5, 300.0)
    data, _, _ = compare(tmp_path, a, b)
    assert data["slo_capacity"]["S2_summary"]["b"] == 75.5


def test_server_settings_from_flags():
    s = C.server_settings(flags(speculative_config=MTP, kv_cache_dtype="auto") + ["--enable-sleep-mode"])
    assert s["model"] == "RedHatAI/gemma-4-31B-it-FP8-dynamic" and s["kvCacheDtype"] == "auto"
    assert s["speculative"] == "mtp google/gemma-4-31B-it-assistant k=4" and s["sleepMode"] == "on"
    assert "--host" not in s and "--model-loader-extra-config" not in s
    assert C.server_settings(["m", "--max-num-seqs=32"])["maxNumSeqs"] == "32"
    assert C.server_settings(["m"])["speculative"] == "off"


def test_command_writes_the_contract_files(tmp_path):
    bf16, fp8 = table6(tmp_path)
    out = tmp_path / "cmp"
    proc = subprocess.run([sys.executable, "-m", "bench", "compare", str(bf16), str(fp8), "--labels", "bf16-kv,fp8-kv",
                           "--out", str(out)], cwd=REPO, text=True, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((out / "compare.json").read_text())
    assert set(data) == {"variants", "cells", "slo_capacity", "slo_capacity_interval", "slo_capacity_winner",
                         "incomplete", "slo"}
    assert all(set(v) == {"label", "dir", "sweeps", "differs"} for v in data["variants"])
    assert all(set(c) == {"scenario", "concurrency", "output_tok_s", "output_tok_s_sweeps", "winner",
                          "winner_margin_pct", "noise_pct", "noise_source", "leaders", "behind"} for c in data["cells"])
    assert [c["winner"] for c in data["cells"]] == ["fp8-kv", "fp8-kv"]
    assert (out / "compare.md").read_text().startswith("# Variant comparison: bf16-kv vs fp8-kv")
    assert "2 variants, 2 cells, 2 winners, 0 cells without a clear winner" in proc.stdout.splitlines()[-1]
    for scenario, lead in data["slo_capacity_winner"].items():  # the terminal says the lead under the SLO too
        assert f"bench compare: under the SLO, {scenario}: {answer.lead_words(lead)}" in proc.stdout


def test_one_cell_is_counted_as_one(tmp_path, capsys):
    """The H200 prefix-caching comparison said "1 cells"."""
    one = {("S2_summary", 32): TABLE6[("S2_summary", 32)]}
    bf16 = sweep(tmp_path / "bf16kv", {k: v[0] for k, v in one.items()}, server_flags=flags(kv_cache_dtype="auto"))
    fp8 = sweep(tmp_path / "fp8kv", {k: v[1] for k, v in one.items()}, server_flags=flags())
    assert C.main([str(bf16), str(fp8), "--out", str(tmp_path / "cmp"), "--no-html"]) == 0
    assert "2 variants, 1 cell, 1 winner, 0 cells without a clear winner" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["ONE"], "at least two sweep folders"),
    (["ONE", "TWO", "--labels", "a"], "1 labels for 2 folders"),
    (["ONE", "TWO", "--labels", "x,x"], "every folder is x; a comparison needs two variants"),
    (["ONE", "/nonexistent/sweep"], "no such folder"),
])
def test_bad_arguments_exit_2(tmp_path, argv, message, capsys):
    bf16, fp8 = table6(tmp_path)
    argv = [str(bf16) if a == "ONE" else str(fp8) if a == "TWO" else a for a in argv]
    assert C.main([*argv, "--out", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err


def test_a_suspect_run_makes_the_comparison_incomplete(tmp_path):
    bf16, fp8 = table6(tmp_path)
    m = json.loads((fp8 / "manifest.json").read_text())
    for rec in m["runs"]:
        if rec["scenario"] == "S4_rag":
            rec.update(status="suspect", suspect="prefix-cache hits 40.0% of prompt tokens")
    (fp8 / "manifest.json").write_text(json.dumps(m))
    data, _, _ = compare(tmp_path, bf16, fp8)
    assert any("fp8kv: 1 suspect runs: S4_rag c=32" in r for r in data["incomplete"]), data["incomplete"]
    assert [c["output_tok_s"]["fp8kv"] for c in data["cells"]] == [201.8, None]
    assert all(c["winner"] is None for c in data["cells"])
