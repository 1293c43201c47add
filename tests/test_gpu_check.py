"""`python -m bench gpu-check`: its settings against the stack's, its input checks, its parsing of
recorded CUDA logs and /metrics texts from the H200 box, and its page section. The whole check on
vLLM's CPU build was tests/test_gpu_check_vllm.py, taken out until its cold start passes in CI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.__main__ import main as bench_main
from bench.demo import gpu_page, gpu_settings
from bench.demo import gpu_steps as S
from bench.demo import tiny_model
from components import compile_cache as component_cache
from stacks import catalog, serving
from stacks.serving import spec as serve_spec

REPO = Path(__file__).resolve().parents[1]


def _stack_spec(sleep_mode: bool):
    srv = serving.ServerSettings(name="gemma", pool="l40s", model="fp8-dynamic", sleep_mode=sleep_mode)
    return serving.build_serve_spec(srv, catalog.gpu_instance("g6e.2xlarge"), serving.ModelUris.for_bucket("b", srv),
                                    region="ap-northeast-2")


def test_the_check_serves_with_the_stacks_model_independent_settings():
    spec = _stack_spec(sleep_mode=True)
    mine = gpu_settings.server_env(serve_spec.CACHE_MOUNT)
    # every env key the stack sets is either set here, with the stack's value, or named as left out
    assert set(spec.env) == set(mine) | set(gpu_settings.NOT_SET)
    assert {k: spec.env[k] for k in mine} == mine
    assert all(flag in spec.args for flag in gpu_settings.SERVE_FLAGS)
    assert gpu_settings.PUSH_EXCLUDES == component_cache.PUSH_EXCLUDES
    assert spec.args[spec.args.index("--max-num-seqs") + 1] == str(gpu_settings.MAX_NUM_SEQS)  # the stack's default


def test_the_settings_check_can_fail(monkeypatch):
    monkeypatch.setitem(gpu_settings.CACHE_ENV, "TRITON_CACHE_DIR", "elsewhere")
    mine = gpu_settings.server_env(serve_spec.CACHE_MOUNT)
    assert {k: _stack_spec(True).env[k] for k in mine} != mine


@pytest.mark.parametrize("argv, words", [
    (["--out", "README.md"], "is a file; this takes a folder"),
    (["--vocab-words", "2000"], "give 32000 or more"),
    (["--steps", "cold_start,warp"], "--steps"),
    (["--concurrencies", "1,x"], "--concurrencies"),
    (["--window-s", "0"], "--window-s 0"),
    (["--s3-uri", "bucket/x"], "--s3-uri"),
])
def test_bad_input_exits_2_naming_the_flag(argv, words, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    try:
        rc = bench_main(["gpu-check", *argv])
    except SystemExit as stop:  # refused while the arguments are parsed (an --out that is a file)
        rc = stop.code
    assert rc == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_the_tiny_model_takes_a_vocabulary_size():
    vocab = tiny_model.vocabulary(32000)
    assert len(vocab) == 32003 and vocab["w31999"] == 32002 and vocab["<s>"] == 1
    assert tiny_model.SIZES["gpu"]["hidden_size"] == 1024
    with pytest.raises(SystemExit):
        tiny_model.main(["out", "--vocab-words", "0"])


def test_milestones_are_stamped_as_their_lines_appear():
    server = S.Server(proc=None, url="http://x", log=Path("x"), launched=0.0)
    S._scan(server, "INFO 12-03 08:00:01 [api_server.py:1] vLLM API server version 0.26.0\n")
    first = dict(server.milestones)
    S._scan(server, "(EngineCore pid=1) INFO 12-03 08:00:40 [gpu_worker.py:1] Graph capturing finished in 5 secs\n"
                    "INFO 12-03 08:00:02 [api_server.py:1] vLLM API server version 0.26.0\n")
    assert set(first) == {"api_banner"}
    assert set(server.milestones) == {"api_banner", "graphs_captured"}
    assert server.milestones["api_banner"] == first["api_banner"]  # the first sighting counts


def test_cross_check_windows_and_agreement():
    # 40 requests/s for a 10 s window: 400 prompts; no rate measured: the floor
    assert S.cli_prompts(40.0, 16, 10.0) == 400
    assert S.cli_prompts(None, 16, 10.0) == 64
    assert S.cli_prompts(1000.0, 64, 10.0) == 4000
    assert S.agreement(110.0, 100.0) == 10.0
    assert S.agreement(None, 100.0) is None
    argv = S.cli_argv(url="http://h", tokenizer=Path("/m"), concurrency=4, prompts=80, input_len=256, output_len=128,
                      out=Path("/o"), seed=9004)
    assert argv[:2] == ["bench", "serve"] and argv[argv.index("--num-prompts") + 1] == "80"
    assert argv[argv.index("--result-filename") + 1] == "S1_chat_c4.json"


def test_each_point_is_sized_for_the_window():
    from bench.demo import gpu_sweep

    # H200 rates (req/s) from the burst: every point's window at least 15 s x the margin
    for c, rate in {1: 4.3, 4: 14.7, 16: 43.0, 64: 132.0}.items():
        prompts = gpu_sweep.point_prompts(rate, c, 15.0)
        assert 15.0 * gpu_sweep.MARGIN <= prompts / rate < 15.0 * gpu_sweep.MARGIN + 1
    assert gpu_sweep.point_prompts(None, 4, 3.0) == 63  # no rate: 4 per second per slot
    assert gpu_sweep.point_prompts(0.5, 8, 3.0) == 32  # at least 4 per slot
    assert gpu_sweep.point_prompts(5000.0, 64, 20.0) == 6000  # capped


def test_prefix_cache_hits_between_two_metrics_reads():
    from bench.demo import gpu_sweep

    assert gpu_sweep.hit_pct((1000.0, 100.0), (11000.0, 320.0)) == 2.2
    assert gpu_sweep.hit_pct(None, (1.0, 1.0)) is None and gpu_sweep.hit_pct((5.0, 0.0), (5.0, 0.0)) is None


def test_the_comparison_reports_its_spread():
    from bench.demo import gpu_sweep

    assert gpu_sweep.signed_gap(110.0, 100.0) == 10.0 and gpu_sweep.signed_gap(90.0, 100.0) == -10.0
    side = lambda d, t: {"duration_s": d, "output_tok_s": t}  # noqa: E731
    points = [{"concurrency": 1, "bench": {**side(18.0, 500), "prefix_cache_hit_pct": 0.4},
               "vllm_bench_serve": side(16.5, 450), "bench_minus_cli_pct": 11.1},
              {"concurrency": 4, "bench": side(14.0, 1500), "vllm_bench_serve": side(16.0, 1600), "bench_minus_cli_pct": -6.2}]
    spread = gpu_sweep.summary(points, 15.0)
    assert spread["gap_range_pct"] == [-6.2, 11.1] and spread["gaps_one_sign"] is False
    assert spread["largest_apart_pct"] == 11.1 and spread["short_windows"] == ["c=4 bench 14.0 s"]
    assert spread["shortest_window_s"] == {"bench": 14.0, "vllm_bench_serve": 16.0}
    md = gpu_page.markdown({"date": "d", "device": {"name": "GPU"}, "versions": {}, "broken": [], "checks": {
        "sweep": {"status": "ok", "window_s": 15.0, "points": points, "spread": spread}}})
    assert "| 1 | 500 (18.0 s, -, 0.4 % cached) | 450 (16.5 s, -) | +11.1 % |" in md and "| -6.2 % |" in md
    assert "gaps from -6.2 to +11.1 %, of both signs" in md and "short: c=4 bench 14.0 s" in md
    assert "None" not in md


def test_a_start_that_exits_names_its_last_error():
    log = "INFO starting\nTraceback (most recent call last):\nzmq.error.ZMQError: ipc path is too long\n  \n"
    assert S.last_error(log) == "zmq.error.ZMQError: ipc path is too long"
    assert S.last_error("INFO a\nINFO b\n") == "INFO b" and S.last_error("") == "an empty log"


def test_a_start_that_failed_in_its_engine_names_the_cause_not_the_follow_on():
    """The H200 box, 2026-12-05: a server an earlier command left running held the GPU; vLLM's engine core named
    the cause and the API server then said only "See root cause above" (lines as vLLM 0.26 wrote them)."""
    log = "\n".join([
        "(EngineCore pid=2775) ERROR 12-05 02:15:27 [core.py:1330] Traceback (most recent call last):",
        "(EngineCore pid=2775) ERROR 12-05 02:15:27 [core.py:1330]     raise ValueError(",
        "(EngineCore pid=2775) ERROR 12-05 02:15:27 [core.py:1330] ValueError: Free memory on device cuda:0 "
        "(5.49/139.8 GiB) on startup is less than desired GPU memory utilization (0.9, 125.82 GiB).",
        "(APIServer pid=2710)     raise RuntimeError(",
        "(APIServer pid=2710) RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}", ""])
    assert S.last_error(log) == ("ValueError: Free memory on device cuda:0 (5.49/139.8 GiB) on startup is less "
                                 "than desired GPU memory utilization (0.9, 125.82 GiB).")
    # with only the follow-on in the log's tail, it is still named, prefix left off
    assert S.last_error(log.splitlines()[-1]).startswith("RuntimeError: Engine core initialization failed")


def _fake_nvidia_smi(tmp_path, monkeypatch, rows: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nprintf '{rows}'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_a_gpu_held_by_a_left_over_server_is_named_before_a_start(tmp_path, monkeypatch):
    """The H200 box, 2026-12-05: a command cut off by its time limit left its server holding 133.8 GiB, and the
    next command's server stopped in vLLM's memory check. A start now names the holder and the fix first."""
    _fake_nvidia_smi(tmp_path, monkeypatch, "2050, /usr/bin/python3, 137002\\n77, Xorg, 40\\n")
    assert S.gpu_processes() == [(2050, "/usr/bin/python3", 137002.0), (77, "Xorg", 40.0)]
    with pytest.raises(S.Broken) as err:
        S.ensure_gpu_free(1, grace_s=0)
    text = str(err.value)
    assert "the GPU already holds 133.8 GiB in another process (pid 2050: python3 with 133.8 GiB)" in text
    assert "kill 2050" in text and "Xorg" not in text  # a small holder leaves room and is not named


def test_a_gpu_with_only_small_holders_lets_a_server_start(tmp_path, monkeypatch):
    _fake_nvidia_smi(tmp_path, monkeypatch, "77, Xorg, 40\\n")
    S.ensure_gpu_free(1, grace_s=0)  # no exception
    assert S.gpu_processes() == [(77, "Xorg", 40.0)]


def test_a_pods_engine_sockets_fit_a_unix_socket_path(tmp_path):
    """vLLM's API server and engine talk over ZMQ sockets named `<VLLM_RPC_BASE_PATH>/<uuid4>` (TMPDIR by
    default): under a deep folder (pytest's own temporary folders in CI) the name passes 107 characters,
    the engine cannot bind, and `vllm serve` exits 1 before it logs a reason."""
    deep = tmp_path / ("d" * 60) / "gpu-check" / "work" / "pod"
    env = S.Pod("cold", deep, tmp_path / "cache").env({})
    assert env["TMPDIR"] == str(deep / "tmp")
    assert len(env["VLLM_RPC_BASE_PATH"]) + 1 + 36 <= S.IPC_PATH_MAX
    shallow = Path("/tmp/gc/work/pod")
    assert S.rpc_dir(shallow / "tmp") == "/tmp/gc/work/pod/tmp"


def test_page_section_from_a_record():
    record = {"date": "2026-12-03", "device": {"name": "NVIDIA H200", "driver": "580"},
              "versions": {"vllm": "0.26.0", "torch": "2.11.0"}, "broken": ["speculative"],
              "checks": {"cold_start": {"status": "ok", "healthy_s": 113.8, "engine_init_s": 41.3,
                                        "compile_total_s": 13.4, "compile_cache": "miss"},
                         "sleep_wake": {"status": "not available", "reason": "not available on this device: x"},
                         "speculative": {"status": "broken", "reason": "no | counters"}}}
    md = gpu_page.markdown(record)
    assert "## GPU check, 2026-12-03: NVIDIA H200" in md and "Broken: speculative." in md
    assert "/health after 113.8 s; engine init 41.3 s, torch.compile 13.4 s" in md
    assert "| Sleep and wake | not available: not available on this device: x |" in md
    assert "no / counters" in md  # a pipe in a reason does not break the table
    page = gpu_page.to_html(md)
    assert page.count("<table>") == 1 and "<th>Check</th>" in page and "None" not in page


FIXTURES = REPO / "tests" / "fixtures" / "gpu_check"
_CACHE_DIR = r"Using cache directory: \S+/torch_compile_cache/(\w+)/"


def test_recorded_cuda_logs_parse_into_the_start_up_phases():
    # trimmed from the H200 box's logs (vLLM 0.26.0 CUDA build, 2026-12-03)
    from bench.startup import phases

    cold = phases.parse_file(FIXTURES / "h200-cold.log")
    assert cold["vllm_version"] == "0.26.0" and cold["compile_cache"] == "miss"
    assert (cold["engine_init_s"], cold["compile_total_s"], cold["cuda_graph_s"]) == (36.83, 11.12, 2.0)
    assert cold["kv_cache_tokens"] == 16404480 and cold["ready"]
    spec = phases.parse_file(FIXTURES / "h200-speculative.log")
    assert spec["ready"] and "speculative_config=SpeculativeConfig" in (FIXTURES / "h200-speculative.log").read_text()


def test_a_pod_with_another_home_missed_the_restored_compile_cache():
    """The finding the check's own pods first ran into: vLLM's compile hash takes VLLM_CONFIG_ROOT and
    VLLM_XLA_CACHE_PATH, which follow HOME, so a pod with another HOME looks in another folder and compiles."""
    import re

    from bench.startup import phases

    cold = re.search(_CACHE_DIR, (FIXTURES / "h200-cold.log").read_text())[1]
    other = re.search(_CACHE_DIR, (FIXTURES / "h200-restored-other-home.log").read_text())[1]
    assert cold != other
    assert phases.parse_file(FIXTURES / "h200-restored-other-home.log")["compile_cache"] == "miss"


def test_every_pod_starts_at_the_same_paths(tmp_path):
    import argparse

    from bench.demo.gpu_check import Check

    check = Check(argparse.Namespace(out=str(tmp_path), s3_uri=None))
    first = check.pod("cold")
    (first.folder / "home" / "marker").parent.mkdir(parents=True)
    (first.folder / "home" / "marker").write_text("cold")
    second = check.pod("restored")
    assert second.folder == first.folder and not (second.folder / "home" / "marker").exists()
    assert (tmp_path / "work" / "pods" / "cold" / "home" / "marker").read_text() == "cold"
    env = second.env({})
    assert env["HOME"] == str(second.folder / "home") and env["TRITON_CACHE_DIR"].endswith("/cache/triton")


def test_the_page_renders_a_recorded_h200_run():
    record = json.loads((FIXTURES / "record-run2.json").read_text())
    md = gpu_page.markdown(record)
    assert "NVIDIA H200" in md and "vLLM 0.26.0" in md and "Broken: sweep." in md
    assert "| 1 | 555 (7.4 s, 32) | 438 (12.8 s, 44) | 26.5 % apart |" in md  # recorded before signed gaps
    assert "sleep 0.54 s, wake 0.62 s" in md and "None" not in md


def test_the_start_up_models_measured_floor_is_the_records():
    """bench/startup/model.py's floor inside init comes from the full-size boots on the H200 (the Gemma-4-31B
    architecture): launch -> /health less vLLM's engine init and its model load, one figure per boot (a
    resumed experiment repeats its first boot: counted once)."""
    import statistics

    from bench.startup import model

    records = REPO / "docs" / "records"
    h200 = [json.loads(p.read_text()) for p in sorted(records.glob("*/gpu-check.json")) + sorted(records.glob("*/experiment.json"))]
    h200 = [r for r in h200 if "H200" in r["device"]["name"]]  # the H100 box's boots are docs/startup.md's cross-check
    boots = [r["checks"]["cold_start"] for r in h200 if r.get("kind") == "vllm-poc/gpu-check" and r["model"]["shape"] != "tiny"]
    for record in h200:
        for variant in (record.get("variants") or {}).values():
            boots += [s for s in variant.get("starts", []) if s.get("healthy_s") is not None]
    seen, floors = set(), []
    for b in boots:
        key = (b["healthy_s"], b["engine_init_s"], b["model_load_s"])
        if key not in seen:
            seen.add(key)
            floors.append(round(b["healthy_s"] - b["engine_init_s"] - b["model_load_s"], 1))
    assert sorted(floors) == sorted(model.FULL_SIZE_FLOORS_S)
    assert model.START_FLOOR_S == pytest.approx(statistics.median(floors), abs=0.05)
    # the engine init holds the compile: the records' own lines say so, and the PoC's read that way agrees
    for b in boots:
        assert b["engine_init_compilation_s"] < b["engine_init_s"]
    hits = [b["engine_init_s"] - b["engine_init_compilation_s"] for b in boots if b["compile_cache"] == "hit"]
    assert abs(statistics.median(hits) - model.POC_ENGINE_BESIDES_COMPILE["hit"]) < 2.0
    target = model.model("g6e.2xlarge", [], model.TARGET)
    assert target["init"].seconds == 117.5 and f"{model.START_FLOOR_S:g} s measured" in target["init"].note
    assert model.unattributed_s(True) == pytest.approx(117.5 - 16.5 - model.START_FLOOR_S, abs=0.05)
    assert model.floor_total(target, hit=True) == pytest.approx(208.0 - model.unattributed_s(True))
    assert f"still needs {208.0 - model.unattributed_s(True):.1f} s" in model.target_line(target, None)

def test_the_probes_are_kept_for_the_next_command_while_nothing_they_depend_on_changes(tmp_path, monkeypatch):
    """The version probe and the transformers trap (about 45 s a command on the H200 box) are asked once per
    python, machine, visible GPUs and installed packages: a later command with the same --out reads them."""
    import argparse
    import sys

    from bench.demo.gpu_runtime import Runtime

    asked: list[int] = []
    ask = Runtime._ask
    monkeypatch.setattr(Runtime, "_ask", lambda self: asked.append(1) or ask(self))
    monkeypatch.setattr(Runtime, "trap", lambda self: {"status": "ok", "summary": "reads Gemma 4 configs right"})
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    kept = tmp_path / "probes.json"

    def probes():
        return Runtime(argparse.Namespace(python=sys.executable), tmp_path).probes(kept)

    info, trap, at = probes()
    assert at is None and asked == [1] and info["python"] and kept.is_file()
    again, trap_again, at = probes()
    assert asked == [1] and at and again == info and trap_again == trap
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # other GPUs to see: asked again
    assert probes()[2] is None and asked == [1, 1]
    monkeypatch.setattr(Runtime, "trap", lambda self: {"status": "not checked", "summary": "no answer"})
    kept.unlink()
    assert probes()[2] is None and not kept.exists()  # a trap not checked is asked again next time
    monkeypatch.setattr(Runtime, "trap", lambda self: {"status": "ok", "summary": "reads Gemma 4 configs right"})
    kept.mkdir()  # a place the answers cannot be written: this command still has them
    assert probes()[0]["python"] and kept.is_dir()


def test_sleep_and_wake_alone_under_resume_start_a_server_of_their_own(tmp_path, monkeypatch):
    """`gpu-check --resume --steps sleep_wake` on the H100 box, 2026-12-06: the cold start's server had gone with the
    command that started it, and the step read the url of no server (AttributeError). It now starts a pod of its
    own on the cache root and says which server it timed."""
    import argparse
    from types import SimpleNamespace

    from bench.demo import gpu_check
    from bench.startup import sleepwake

    check = gpu_check.Check(argparse.Namespace(out=str(tmp_path), s3_uri=None))
    check.runtime = SimpleNamespace(gpu=True, env={}, python="python3")
    started = []

    def start(pod, *extra, **flags):
        started.append(pod.name)
        return SimpleNamespace(url="http://127.0.0.1:1", name="m", stop=lambda: None)

    sleeping = iter([True, False])
    memory = iter([60_000, 2_000, 59_000])
    monkeypatch.setattr(check, "start", start)
    monkeypatch.setattr(S, "greedy_text", lambda base, model: "the same answer")
    monkeypatch.setattr(S, "post", lambda url: None)
    monkeypatch.setattr(S, "gpu_memory_mib", lambda gpus: next(memory))
    monkeypatch.setattr(sleepwake, "_sleeping", lambda base: next(sleeping))
    out = check.sleep_wake()
    assert started == ["sleep"] and out["server"] == "sleep" and check.server_name == "sleep"
    assert out["is_sleeping_confirmed"] and out["freed_mib"] == 58_000 and out["same_greedy_answer"]
    # a server this command already started is the one timed: no second start
    sleeping, memory = iter([True, False]), iter([60_000, 2_000, 59_000])
    assert check.sleep_wake()["server"] == "sleep" and started == ["sleep"]
    assert "timed on the sleep pod's server, started for it" in gpu_page._details("sleep_wake", out)[0]
    assert "timed on" not in gpu_page._details("sleep_wake", out | {"server": "cold"})[0]
