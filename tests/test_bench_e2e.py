"""End to end with a real vLLM: `vllm serve` (CPU build) of a tiny random model, then
`python -m bench sweep` over all four scenarios at two concurrencies (lengths scaled by 1/16),
`report`, `--resume`, a wrong model name (refused before any run), and `startup` on the server's own log.

The sweep runs with the vLLM environment's python, as in the vllm/vllm-openai image (vLLM on the
path, no matplotlib, no boto3); the report runs with the project environment. The server is started
once per session (fixture `tiny_vllm_server`). Every run being valid also proves that each flag
the sweep passes exists in this vLLM's `vllm bench serve`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.analysis import results as R

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[1]
SCALE = "0.0625"  # S1 16/8, S2 64/16, S3 32/2, S4 256/16 tokens
CONCURRENCIES = [1, 4]
SCENARIOS = ["S1_chat", "S2_summary", "S3_moderation", "S4_rag"]


def bench(server, *args, timeout=600) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run([server.python, "-m", "bench", *args], env=server.bench_env(), cwd=REPO,
                          text=True, capture_output=True, timeout=timeout)
    return proc, time.monotonic() - t0


def sweep_args(server, out, *extra):
    return ["sweep", "--base-url", server.url, "--model", server.model, "--tokenizer", str(server.model_dir),
            "--out", str(out), "--length-scale", SCALE, "--concurrencies", ",".join(map(str, CONCURRENCIES)),
            # each run's burst sizes it (a run without one is sized blind and, on this CPU, mostly runs twice)
            "--window-s", "5", "--health-timeout-s", "60", *extra]


@pytest.fixture(scope="module")
def swept(tiny_vllm_server, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "run"
    proc, wall = bench(tiny_vllm_server, *sweep_args(tiny_vllm_server, out, "--instance-type", "cpu-test"))
    return out, proc, wall


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def test_sweep_every_combination_valid(swept, vllm_env):
    out, proc, _ = swept
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    m = manifest(out)
    assert m["server"]["vllm_version"] == vllm_env.version
    assert m["server"]["served_models"] == ["tiny"] and m["server"]["max_model_len"] == 1024
    assert m["instance_type"] == "cpu-test"
    assert len(m["runs"]) == 8 and all(r["status"] == "valid" for r in m["runs"])
    for rec in m["runs"]:
        data = json.loads((out / rec["file"]).read_text())
        result = R.load_result(out / rec["file"])
        assert result.valid, result.reason
        assert data["completed"] == data["num_prompts"] == rec["num_prompts"] and data["failed"] == 0
        assert data["output_throughput"] > 0 and data["request_throughput"] > 0
        # The random prompts kept their lengths and every request ran to its output length.
        assert data["total_input_tokens"] == data["completed"] * rec["input_len"]
        assert data["total_output_tokens"] == data["completed"] * rec["output_len"]
        assert data["scenario"] == rec["scenario"] and data["max_concurrency"] == rec["concurrency"]
        assert (out / rec["attempts"][0]["log"]).is_file()
    lengths = {r["scenario"]: (r["input_len"], r["output_len"]) for r in m["runs"]}
    assert lengths == {"S1_chat": (16, 8), "S2_summary": (64, 16), "S3_moderation": (32, 2), "S4_rag": (256, 16)}
    progress = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert len(progress) == 8 and all("valid" in line and "ETA" in line for line in progress)


def test_sweep_overhead(swept):
    """Orchestration overhead = wall time not spent inside `vllm bench serve` runs.

    Overhead, busy share and idle time move with the machine's load: they are printed figures.
    What cannot flake is asserted: the accounting adds up, one client served every run, no run
    was skipped."""
    out, _, external_wall = swept
    m = manifest(out)
    t = m["sessions"][-1]["timing"]
    runs = t["bench_processes_s"]
    internal_pct = 100 * t["orchestration_overhead_s"] / t["wall_s"]
    external_pct = 100 * (external_wall - runs) / external_wall
    window_pct = 100 * t["bench_windows_s"] / t["wall_s"]
    print(
        f"\nsweep overhead: 8 runs, wall {external_wall:.1f} s (orchestrator process), "
        f"{t['wall_s']:.1f} s (inside), vllm bench serve runs {runs:.1f} s "
        f"(mean {runs / 8:.1f} s per run), health wait {t['health_wait_s']:.2f} s; "
        f"orchestration overhead {t['orchestration_overhead_s']:.2f} s = {internal_pct:.2f}% "
        f"(including python start of the orchestrator: {external_pct:.2f}%, "
        f"{external_wall - runs:.1f} s); measured benchmark windows {t['bench_windows_s']:.2f} s = "
        f"{window_pct:.1f}% of wall ({t['bench_client']} client: vLLM imported once; the rest is its start-up, "
        f"tokenizer load and warm-ups); idle between two measured windows {t['idle_between_windows_s']:.2f} s "
        f"per run; busy share {t['busy_share_pct']:.1f}%"
    )
    # the accounting adds up: every second of the wall is health wait, a run, or orchestration
    accounted = t["health_wait_s"] + t["bench_processes_s"] + t["orchestration_overhead_s"]
    assert accounted == pytest.approx(t["wall_s"], abs=0.05)
    assert 0 < t["bench_windows_s"] <= t["bench_processes_s"] <= t["wall_s"] <= external_wall
    # one long-lived client ran every measurement: no run paid its own vLLM import
    assert t["bench_client"] == "library"
    for rec in m["runs"]:
        log = (out / rec["attempts"][0]["log"]).read_text()
        assert "(in the bench client)" in log.splitlines()[0], rec["file"]
    # no run was skipped: all eight were executed in this session and are valid
    assert sorted(m["sessions"][-1]["executed"]) == sorted(r["file"] for r in m["runs"])
    assert len(m["runs"]) == 8 and all(r["status"] == "valid" for r in m["runs"])


def test_report_from_the_sweep(swept, tmp_path):
    out, _, _ = swept
    rep = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "bench", "report", str(out), "--out", str(rep)],
                          cwd=REPO, text=True, capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((rep / "summary.json").read_text())
    assert len(summary["runs"]) == 8 and all(r["valid"] for r in summary["runs"])
    assert list(summary["scenarios"]) == SCENARIOS
    for name, sc in summary["scenarios"].items():
        assert sc["peak"]["output_tok_s"] > 0 and sc["peak"]["concurrency"] in CONCURRENCIES
    md = (rep / "report.md").read_text()
    assert "## S4_rag (256/16) concurrency curve" in md and "vLLM (server): " in md
    assert sorted(p.name for p in rep.glob("*.png")) == [f"chart_{s}.png" for s in SCENARIOS]


def test_resume_reruns_only_the_missing_result(swept, tiny_vllm_server, tmp_path):
    out, _, _ = swept
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    (copy / "S2_summary_c4.json").unlink()
    # the same hardware as the sweep: a run hash covers the instance type
    proc, _ = bench(tiny_vllm_server, *sweep_args(tiny_vllm_server, copy, "--resume", "--instance-type", "cpu-test"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    session = manifest(copy)["sessions"][-1]
    assert session["executed"] == ["S2_summary_c4.json"]
    assert len(session["skipped_valid"]) == 7
    # the logs this session wrote are the missing run's only (a run repeated for a short window keeps both)
    before = {p.name for p in (out / "logs").glob("*.log")}
    written = {p.name for p in (copy / "logs").glob("*.log")} - before
    assert written and all(name.startswith("S2_summary_c4.attempt") for name in written), written
    assert R.load_result(copy / "S2_summary_c4.json").valid


def test_wrong_model_name_stops_before_any_run(tiny_vllm_server, tmp_path):
    out = tmp_path / "wrong"
    proc, _ = bench(tiny_vllm_server, "sweep", "--base-url", tiny_vllm_server.url, "--model", "not-served",
                    "--tokenizer", str(tiny_vllm_server.model_dir), "--out", str(out), "--scenarios", "S1_chat",
                    "--length-scale", SCALE, "--concurrencies", "2", "--window-s", "5", "--attempts", "1")
    # vLLM's own client would exit 0 and write a file in which every request failed; the sweep
    # asks the server what it serves first and runs nothing.
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--model not-served: the server at" in proc.stderr and "it serves tiny (GET /v1/models)" in proc.stderr
    assert not list(out.glob("*.json")) and not (out / "logs").exists()


def test_startup_parses_the_real_server_log(tiny_vllm_server, vllm_env):
    proc, _ = bench(tiny_vllm_server, "startup", str(tiny_vllm_server.log), "--json")
    assert proc.returncode == 0, proc.stderr
    phases = json.loads(proc.stdout)
    print(f"\nreal server log: {json.dumps({k: v for k, v in phases.items() if v is not None})}")
    assert phases["vllm_version"] == vllm_env.version
    assert phases["ready"] is True and 0 < phases["time_to_ready_s"] < 600
    assert phases["weight_loader"] == "default" and phases["weight_load_s"] >= 0
    assert phases["engine_init_s"] > 0
    assert phases["kv_cache_tokens"] > 0 and phases["max_concurrency"] > 0
    assert phases["max_concurrency_tokens_per_request"] == 1024
    table, _ = bench(tiny_vllm_server, "startup", str(tiny_vllm_server.log))
    assert "KV cache tokens" in table.stdout and f"{phases['kv_cache_tokens']:,}" in table.stdout
