"""Server and GPU telemetry: parsing real /metrics text, window figures, restart and replay checks,
and the sweep reading a fake server /metrics and a fake DCGM exporter around each run.

`tests/fixtures/metrics/vllm-0.32.0-cpu.txt` is GET /metrics of the CPU build's tiny server after a
short sweep (captured by test_bench_telemetry_vllm.py with VLLM_POC_CAPTURE_METRICS_TO); the live
check of the same names runs there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.analysis import results as R
from bench.analysis import side as SIDE
from bench.common import prometheus
from bench.common import scenarios as SC
from bench.run import sweep as S
from bench.run import telemetry as T
from tests.fixtures.bench_fake_metrics import dcgm_text, vllm_text

CAPTURED = Path(__file__).parent / "fixtures" / "metrics" / "vllm-0.32.0-cpu.txt"


def test_real_vllm_metrics_text_has_every_name_the_bench_reads():
    samples = prometheus.parse(CAPTURED.read_text())
    values = T.server_values(samples)
    for key in ("prefix_cache_queries", "prefix_cache_hits", "preemptions", "prompt_tokens", "generation_tokens",
                "kv_cache_usage", "requests_waiting", "requests_running"):
        assert values[key] is not None, key
    assert values["prompt_tokens"] > 0 and values["generation_tokens"] > 0
    assert values["prefix_cache_queries"] >= values["prompt_tokens"] * 0.5
    assert 0.0 <= values["kv_cache_usage"] <= 1.0
    assert values["process_start"] and values["process_start"][0] > 1.7e9
    # histogram buckets and _created samples do not leak into counters
    assert "vllm:time_to_first_token_seconds_bucket" in samples
    assert values["prefix_cache_hits"] == sum(v for _, v in samples["vllm:prefix_cache_hits_total"])


def test_parse_handles_labels_with_commas_escapes_and_timestamps():
    text = ('# HELP x y\nm{a="1,2",b="q\\"x"} 3.5 1700000000000\nm{a="z"} NaN\nbad line\n'
            'process_start_time_seconds 1.7e9\n')
    samples = prometheus.parse(text)
    # label values unescaped, as the exposition format means them; the bad line costs only itself
    assert samples["m"][0] == ({"a": "1,2", "b": 'q"x'}, 3.5)
    assert samples["process_start_time_seconds"] == [({}, 1.7e9)]


def window(before: str, after: str, during: list[str] = ()) -> T.Window:
    w = T.Window(metrics_url="http://unused")
    w.before = T.server_values(prometheus.parse(before))
    w.after = T.server_values(prometheus.parse(after))
    w.samples = [{"t": i, **{k: v for k, v in T.server_values(prometheus.parse(t)).items()
                             if k in (*T.SERVER_GAUGES, "process_start")}} for i, t in enumerate(during)]
    return w


def test_window_figures_are_differences_and_maxima():
    w = window(vllm_text(queries=1000, hits=10, prompt=1000, generation=50, preemptions=2),
               vllm_text(queries=3000, hits=110, prompt=3000, generation=550, preemptions=5, kv=0.2),
               [vllm_text(kv=0.61, waiting=3, running=8), vllm_text(kv=0.4, waiting=1, running=8)])
    s = w.summary()
    assert s["prefix_cache_queries"] == 2000 and s["prefix_cache_hits"] == 100
    assert s["prefix_cache_hit_pct"] == 5.0 and s["preemptions"] == 3
    assert s["prompt_tokens"] == 2000 and s["generation_tokens"] == 500
    assert s["kv_cache_usage_max_pct"] == 61.0 and s["requests_waiting_max"] == 3 and s["requests_running_max"] == 8
    assert s["server_restarted"] is False and s["restart_evidence"] is None
    assert R.suspect_reason(s, checked=True) is None  # 5.0 % is not above 5 %


def test_spec_decode_acceptance_by_position():
    w = window(vllm_text(drafts=100, per_pos=[80, 60, 40, 20]), vllm_text(drafts=300, per_pos=[250, 180, 110, 60]))
    assert w.summary()["spec_acceptance_by_position"] == [85.0, 60.0, 35.0, 20.0]


def test_restart_is_seen_in_start_time_or_counters_going_backwards():
    moved = window(vllm_text(start=1000, queries=10), vllm_text(start=2000, queries=20),
                   [vllm_text(start=2000)])
    assert "start time changed" in moved.summary()["restart_evidence"]
    assert moved.summary()["prefix_cache_hit_pct"] is None  # differences across a restart mean nothing
    reset = window(vllm_text(queries=5000, prompt=5000), vllm_text(queries=200, prompt=200))
    assert "went backwards" in R.restart_problem(reset.summary())


def test_a_url_that_answers_for_several_servers_is_no_restart_and_no_difference():
    """Through a router /metrics comes from one replica or another: start times alternate."""
    mixed = window(vllm_text(start=1000, queries=10), vllm_text(start=2000, queries=5),
                   [vllm_text(start=2000), vllm_text(start=1000), vllm_text(start=2000)])
    s = mixed.summary()
    assert s["several_servers"] is True and s["server_restarted"] is False and s["restart_evidence"] is None
    assert s["prefix_cache_queries"] is None and s["prefix_cache_hit_pct"] is None
    assert R.restart_problem(s) is None
    # one server that started again, once, is still a restart
    once = window(vllm_text(start=1000), vllm_text(start=2000), [vllm_text(start=1000), vllm_text(start=2000)])
    assert once.summary()["several_servers"] is False and "start time changed" in once.summary()["restart_evidence"]


def test_suspect_needs_a_random_prompt_scenario():
    s = window(vllm_text(queries=100, hits=0), vllm_text(queries=1100, hits=600)).summary()
    assert s["prefix_cache_hit_pct"] == 60.0
    assert "prefix-cache hits 60.0%" in R.suspect_reason(s, checked=True)
    assert R.suspect_reason(s, checked=False) is None
    # the exemption is a property of the scenario definition, not of its name
    shared = SC.ScenarioDef(2048, 128, shared_prefix=True)
    assert shared.prefix_cache_check is False and SC.ScenarioDef(10, 2).prefix_cache_check is True
    assert SC.ScenarioDef(10, 2, dataset="custom").prefix_cache_check is False
    assert SC.prefix_cache_checked("S1_chat") is True
    assert SC.prefix_cache_checked("S1_chat", {"prefix_cache_check": False}) is False


def test_gpu_values_from_dcgm_text():
    text = dcgm_text([(90, 40000, 300.5), (70, 42000, 280.0)])
    w = T.Window(metrics_url=None, gpu_metrics_url="http://unused")
    w.gpu_samples = [{"t": 0, **T.gpu_values(prometheus.parse(text))},
                     {"t": 1, **T.gpu_values(prometheus.parse(dcgm_text([(50, 41000, 200.0), (30, 43008, 199.5)])))}]
    s = w.summary()
    assert s["gpus_seen"] == 2 and s["gpu_util_mean_pct"] == 60.0
    assert s["gpu_mem_used_max_gib"] == 42.0 and s["gpu_power_mean_w"] == 245.0


# --- the sweep reading fakes ----------------------------------------------------------------------


def sweep_args(server, out, fake, metrics, *extra):
    return ["--base-url", server.url, "--model", "tiny", "--tokenizer", "/unused", "--out", str(out),
            "--vllm-bin", fake.bin, "--scenarios", "S1_chat", "--concurrencies", "2",
            "--window-s", "5", "--health-interval", "0.2",
            "--metrics-url", metrics.url, "--telemetry-interval-s", "60", *extra]


def test_a_restart_during_the_run_makes_it_invalid_and_it_is_retried(bench_stub_server, fake_bench, fake_metrics,
                                                                   fake_dcgm, tmp_path):
    # reads: attempt 1 before / after (the server restarted in between), attempt 2 before / after
    fake_metrics.script(vllm_text(start=1000, queries=4000, prompt=4000, generation=900),
                        vllm_text(start=2000, queries=40, prompt=40, generation=8),
                        vllm_text(start=2000, queries=40, prompt=40, generation=8),
                        vllm_text(start=2000, queries=1064, prompt=1064, generation=520, kv=0.3))
    fake_dcgm.script(dcgm_text([(80, 30720, 250.0)]))
    out = tmp_path / "out"
    assert S.main(sweep_args(bench_stub_server, out, fake_bench, fake_metrics,
                             "--gpu-metrics-url", fake_dcgm.url)) == 0
    (rec,) = json.loads((out / "manifest.json").read_text())["runs"]
    first, second = rec["attempts"]
    assert first["valid"] is False and "server restarted during the run" in first["reason"]
    assert (out / first["file"]).name == "S1_chat_c2.attempt1.invalid.json"
    assert second["valid"] is True and rec["status"] == "valid"
    tele = rec["telemetry"]
    assert tele["prompt_tokens"] == 1024 and tele["prefix_cache_hit_pct"] == 0.0
    assert tele["gpu_util_mean_pct"] == 80.0 and tele["gpu_mem_used_max_gib"] == 30.0
    assert tele["gpu_power_mean_w"] == 250.0 and tele["kv_cache_usage_max_pct"] == 30.0
    samples = json.loads((out / second["telemetry_file"]).read_text())
    assert samples["before"]["prompt_tokens"] == 40 and samples["gpu_samples"]


def test_a_replayed_run_is_suspect_retried_then_kept_flagged(bench_stub_server, fake_bench, fake_metrics, tmp_path):
    replay = [vllm_text(queries=0), vllm_text(queries=1000, hits=900, prompt=1000)]
    fake_metrics.script(*replay, vllm_text(queries=1000, hits=900), vllm_text(queries=2000, hits=1800))
    out = tmp_path / "out"
    assert S.main(sweep_args(bench_stub_server, out, fake_bench, fake_metrics)) == 1
    (rec,) = json.loads((out / "manifest.json").read_text())["runs"]
    assert [a["suspect"] is not None for a in rec["attempts"]] == [True, True]
    assert rec["status"] == "suspect" and "90.0%" in rec["reason"]
    assert (out / "S1_chat_c2.attempt1.suspect.json").is_file() and (out / "S1_chat_c2.json").is_file()
    # --resume runs a suspect combination again
    fake_metrics.script(vllm_text(queries=0), vllm_text(queries=1000, hits=0, prompt=1000))
    assert S.main(sweep_args(bench_stub_server, out, fake_bench, fake_metrics, "--resume")) == 0
    (rec,) = json.loads((out / "manifest.json").read_text())["runs"]
    assert rec["status"] == "valid" and rec["attempts"][-1]["n"] == 3 and rec["suspect"] is None


def test_a_collapsed_speculative_draft_is_suspect_at_once_and_the_floor_is_recorded(bench_stub_server, fake_bench,
                                                                                    fake_metrics, tmp_path, capsys):
    # On the Korean prompts, 100 drafts of 4 tokens, 1 accepted: 0.25 % (vllm:spec_decode_num_*_tokens)
    korean = ("--scenarios", "K_korean", "--scenario-concurrencies", "K_korean=2", "--prompt-format", "chat")
    fake_metrics.script(vllm_text(drafts=0, per_pos=[0, 0, 0, 0]), vllm_text(drafts=100, per_pos=[1, 0, 0, 0]))
    out = tmp_path / "out"
    assert S.main(sweep_args(bench_stub_server, out, fake_bench, fake_metrics, *korean)) == 1
    m = json.loads((out / "manifest.json").read_text())
    (rec,) = m["runs"]
    assert len(rec["attempts"]) == 1  # not retried: a broken draft collapses again
    assert rec["status"] == "suspect" and rec["reason"].startswith(
        "speculative decoding accepted 0.2% of draft tokens (below the floor of 10%")
    assert m["config"]["telemetry"]["min_spec_acceptance_pct"] == 10.0
    assert "SUSPECT K_korean c=2: speculative decoding accepted 0.2%" in capsys.readouterr().err
    # a lower floor, given to the sweep, is what the report judges with too
    fake_metrics.script(vllm_text(drafts=0, per_pos=[0, 0, 0, 0]), vllm_text(drafts=100, per_pos=[1, 0, 0, 0]))
    out2 = tmp_path / "out2"
    assert S.main(sweep_args(bench_stub_server, out2, fake_bench, fake_metrics, *korean,
                             "--min-spec-acceptance-pct", "0.1")) == 0
    side = SIDE.load_side(out2)
    assert side.suspect(side.runs[0]) is None


def test_no_metrics_endpoint_leaves_figures_null_and_runs_valid(bench_stub_server, fake_bench, tmp_path):
    out = tmp_path / "out"
    args = ["--base-url", bench_stub_server.url, "--model", "tiny", "--tokenizer", "/unused", "--out", str(out),
            "--vllm-bin", fake_bench.bin, "--scenarios", "S1_chat", "--concurrencies", "1", "--window-s", "5",
            "--health-interval", "0.2"]
    assert S.main(args) == 0
    (rec,) = json.loads((out / "manifest.json").read_text())["runs"]
    tele = rec["telemetry"]
    assert tele["metrics_url"] == f"{bench_stub_server.url}/metrics" and tele["measured"] is False
    assert tele["prefix_cache_hit_pct"] is None and tele["server_restarted"] is None
    assert tele["errors"]["before"].endswith("HTTP 404")
    assert rec["status"] == "valid"


@pytest.mark.parametrize("argv, needle", [
    (["--prices", "spot=abc"], "--prices"),
    (["--prices", "reserved=1"], "--prices"),
    (["--capacity-type", "reserved"], "--capacity-type"),
    (["--telemetry-interval-s", "0"], "--telemetry-interval-s"),
])
def test_bad_telemetry_and_price_options_exit_2(argv, needle, tmp_path, capsys):
    args = ["--base-url", "http://127.0.0.1:9", "--model", "m", "--tokenizer", "t", "--out", str(tmp_path / "o"),
            "--vllm-bin", "/bin/true", *argv]
    assert S.main(args) == 2
    assert needle in capsys.readouterr().err
