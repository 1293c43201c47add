"""Startup-log parser on hand-written logs in the vLLM 0.26 and 0.32/0.33 formats.

The real log of a vLLM CPU server is parsed in test_bench_e2e.py. The lines below follow the
format strings vLLM 0.26 and 0.32 log; the numbers are the PoC's.
"""

from __future__ import annotations

import json

import pytest

from bench.startup import memory, phases

# vLLM 0.26: Run:ai streamer, two-line KV report, torch.compile cache miss, CUDA graphs.
LOG_026 = """\
INFO 08-05 10:00:00 [api_server.py:1890] vLLM server version 0.26.0, serving model s3://weights/models/RedHatAI/gemma-4-31B-it-FP8-dynamic
(APIServer pid=1) INFO 08-05 10:00:01 [api_utils.py:286] non-default args: {'load_format': 'runai_streamer'}
(EngineCore pid=178) INFO 08-05 10:00:20 [core.py:95] Initializing a V1 LLM engine (v0.26.0) with config: model='/root/.cache/vllm/assets/model_streamer/1a2b3c4d'
(EngineCore pid=178) INFO 08-05 10:00:22 [gpu_model_runner.py:3012] Starting to load model /root/.cache/vllm/assets/model_streamer/1a2b3c4d...
Loading safetensors using Runai Model Streamer: 100%|##########| 7/7 [00:29<00:00,  4.16s/it]
(EngineCore pid=178) INFO 08-05 10:00:52 [file_streamer.py:211] [RunAI Streamer] Overall time to stream 31.4 GiB of all files to cuda:0: 29.12s, 1.1 GiB/s
(EngineCore pid=178) INFO 08-05 10:00:55 [gpu_model_runner.py:3050] Model loading took 30.2 GiB memory and 31.456789 seconds
(EngineCore pid=178) INFO 08-05 10:01:00 [backends.py:602] Using cache directory: /root/.cache/vllm/torch_compile_cache/abc/rank_0_0/backbone for vLLM's torch.compile
(EngineCore pid=178) INFO 08-05 10:01:05 [backends.py:640] Dynamo bytecode transform time: 12.34 s
(EngineCore pid=178) INFO 08-05 10:01:40 [backends.py:241] Compiling a graph for compile range (1, 2048) takes 35.10 s
(EngineCore pid=178) INFO 08-05 10:02:00 [monitor.py:34] torch.compile took 64.02 s in total
(EngineCore pid=178) INFO 08-05 10:02:10 [gpu_worker.py:310] Available KV cache memory: 9.87 GiB
(EngineCore pid=178) INFO 08-05 10:02:10 [kv_cache_utils.py:1150] GPU KV cache size: 31,344 tokens
(EngineCore pid=178) INFO 08-05 10:02:10 [kv_cache_utils.py:1154] Maximum concurrency for 8,192 tokens per request: 3.83x
(EngineCore pid=178) INFO 08-05 10:02:30 [gpu_model_runner.py:3900] Graph capturing finished in 18 secs, took 0.91 GiB
(EngineCore pid=178) INFO 08-05 10:02:31 [core.py:210] init engine (profile, create kv cache, warmup model) took 93.40 s (compilation: 64.02 s)
(APIServer pid=1) INFO 08-05 10:02:35 [api_server.py:1950] Starting vLLM API server 0 on http://0.0.0.0:8000
(APIServer pid=1) INFO:     Started server process [1]
(APIServer pid=1) INFO:     Waiting for application phases.
(APIServer pid=1) INFO:     Application startup complete.
"""

# vLLM 0.32/0.33: tensor parallel 2 with a draft model loaded by worker 0, tagged compile messages,
# AOT cache hit, one-line KV report, MRv2 "Model loading took X GiB and", across New Year.
LOG_033 = """\
(APIServer pid=7) INFO 12-31 23:59:50 [api_utils.py:347]  \u2584\u2584 \u2584\u2588 \u2588     \u2588  version 0.33.0
(APIServer pid=7) INFO 12-31 23:59:50 [api_utils.py:347]   \u2588\u2584\u2588\u2580 \u2588     \u2588  model   nvidia/Gemma-4-31B-IT-NVFP4
(Worker_TP0 pid=300) INFO 12-31 23:59:58 [base_loader.py:82] Initializing model took 1.500000 seconds
(Worker_TP1 pid=301) INFO 12-31 23:59:58 [base_loader.py:82] Initializing model took 1.700000 seconds
(Worker_TP0 pid=300) INFO 01-01 00:00:10 [default_loader.py:501] Loading weights took 10.00 seconds
(Worker_TP1 pid=301) INFO 01-01 00:00:12 [default_loader.py:501] Loading weights took 12.00 seconds
(Worker_TP0 pid=300) INFO 01-01 00:00:13 [default_loader.py:501] Loading weights took 1.50 seconds
(Worker_TP0 pid=300) INFO 01-01 00:00:14 [model_runner.py:425] Model loading took 15.5 GiB and 14.250000 seconds
(Worker_TP1 pid=301) INFO 01-01 00:00:14 [model_runner.py:425] Model loading took 15.5 GiB and 13.000000 seconds
(Worker_TP0 pid=300) INFO 01-01 00:00:15 [decorators.py:320] [backbone] Directly load AOT compilation from path /root/.cache/vllm/torch_compile_cache/torch_aot_compile/ff/rank_0_0/model
(Worker_TP0 pid=300) INFO 01-01 00:00:17 [backends.py:296] [backbone] Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 2.345 s
(Worker_TP0 pid=300) INFO 01-01 00:00:23 [monitor.py:20] [backbone] torch.compile took 8.50 s in total
(Worker_TP1 pid=301) INFO 01-01 00:00:23 [monitor.py:20] [backbone] torch.compile took 8.40 s in total
(EngineCore pid=200) INFO 01-01 00:00:28 [kv_cache_utils.py:2327] GPU KV cache size: 125,023 tokens, Maximum concurrency for 8,192 tokens per request: 15.26x
(Worker_TP0 pid=300) INFO 01-01 00:00:35 [model_runner.py:1128] Graph capturing finished in 6 secs, took 0.50 GiB
(EngineCore pid=200) INFO 01-01 00:00:36 [core.py:402] init engine (profile, create kv cache, warmup model) took 25.10 s (compilation: 8.50 s)
(APIServer pid=7) INFO 01-01 00:00:40 [entry.py:140] Starting vLLM server on http://0.0.0.0:8000
INFO:     Started server process [7]
INFO:     Waiting for application phases.
INFO:     Application startup complete.
"""


def test_v026_format():
    p = phases.parse_log(LOG_026.splitlines())
    assert p["vllm_version"] == "0.26.0"
    assert p["model"] == "s3://weights/models/RedHatAI/gemma-4-31B-it-FP8-dynamic"
    assert (p["weight_load_s"], p["weight_loader"]) == (29.12, "runai_streamer")
    assert p["runai_stream_size"] == "31.4 GiB" and p["runai_stream_rate"] == "1.1 GiB/s"
    assert p["default_loader_s"] is None
    assert (p["model_load_s"], p["model_load_gib"]) == (31.456789, 30.2)
    assert (p["dynamo_s"], p["compile_graphs_s"], p["compile_total_s"]) == (12.34, 35.10, 64.02)
    assert p["compile_cache"] == "miss"
    assert (p["kv_cache_gib"], p["kv_cache_tokens"]) == (9.87, 31344)
    assert (p["max_concurrency"], p["max_concurrency_tokens_per_request"]) == (3.83, 8192)
    assert (p["cuda_graph_s"], p["cuda_graph_gib"]) == (18, 0.91)
    assert (p["engine_init_s"], p["engine_init_compilation_s"]) == (93.40, 64.02)
    assert p["ready"] is True and p["time_to_ready_s"] == 155.0


def test_v033_format_tensor_parallel_and_new_year():
    p = phases.parse_log(LOG_033.splitlines())
    assert p["vllm_version"] == "0.33.0" and p["model"] == "nvidia/Gemma-4-31B-IT-NVFP4"
    # per worker: TP0 loads target 10.0 s + draft 1.5 s = 11.5 s, TP1 12.0 s; workers run in parallel
    assert (p["weight_load_s"], p["weight_loader"]) == (12.0, "default")
    assert p["model_init_s"] == 1.7
    assert (p["model_load_s"], p["model_load_gib"]) == (14.25, 15.5)
    assert p["compile_cache"] == "hit" and p["compile_cache_load_s"] == 2.345
    assert p["compile_total_s"] == 8.5 and p["dynamo_s"] is None
    assert (p["kv_cache_tokens"], p["max_concurrency"]) == (125023, 15.26)
    assert (p["engine_init_s"], p["engine_init_compilation_s"]) == (25.1, 8.5)
    assert p["cuda_graph_s"] == 6
    assert p["time_to_ready_s"] == 50.0  # 23:59:50 -> 00:00:40 across the year boundary


def test_kubectl_timestamps_give_the_ready_line_its_own_time():
    lines = [
        "2026-08-05T10:00:00.250000000Z Triton is installed, but doesn't include CPU backend.",
        "2026-08-05T10:00:20.000000000Z (APIServer pid=1) INFO 08-05 10:00:20 [api_utils.py:286] non-default args: {}",
        "2026-08-05T10:00:52.000000000Z (EngineCore pid=9) INFO 08-05 10:00:52 [default_loader.py:501] Loading weights took 7.44 seconds",
        "2026-08-05T10:02:27.750000000Z (APIServer pid=1) INFO:     Application startup complete.",
    ]
    p = phases.parse_log(lines)
    assert p["time_to_ready_s"] == 147.5
    assert p["weight_load_s"] == 7.44


def test_incomplete_log_is_not_ready(capsys, tmp_path):
    cut = "\n".join(LOG_026.splitlines()[:8]) + "\n"
    log = tmp_path / "server.log"
    log.write_text(cut)
    p = phases.parse_file(log)
    assert p["ready"] is False and p["time_to_ready_s"] is None
    assert phases.main([str(log)]) == 0
    table = capsys.readouterr().out
    assert "did not finish starting" in table
    assert phases.main([str(log), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["weight_load_s"] == 29.12


@pytest.mark.parametrize("log", [LOG_026, LOG_033])
def test_table_lists_every_phase(log):
    table = phases.format_table(phases.parse_log(log.splitlines()))
    for label in ("Weight load", "torch.compile total", "CUDA graph capture", "Engine init", "KV cache tokens",
                  "Max concurrency", "First log line to startup complete"):
        assert label in table
    assert "155.00 s" in table or "50.00 s" in table


# vLLM 0.26's memory profile, one line a worker (the first is the H100 box's cold start of 2026-12-05, as logged)
PROFILE = ("({proc} pid={pid}) INFO 12-05 18:06:13 [gpu_worker.py:857] Free memory on device (78.66/79.18 GiB) on "
           "startup. Desired GPU memory utilization is (0.9, 71.26 GiB). Actual usage is 30.64 GiB for weight, 2.83 GiB "
           "for peak activation, {non_torch} GiB for non-torch memory, and 0.82 GiB for CUDAGraph memory. Replace "
           "gpu_memory_utilization config with `--kv-cache-memory=44262550426` (41.22 GiB) to fit into requested memory")


def test_the_memory_profile_is_read_and_negative_non_torch_memory_is_warned_under_the_table(tmp_path, capsys):
    """-4.4 GiB of non-torch memory hands the KV cache 4.4 GiB past the utilization's share (on the H100 box a
    long-prompt load then ran the GPU out of memory): the start-up table shows the profile and warns."""
    one = PROFILE.format(proc="EngineCore", pid=992, non_torch="-4.4")
    p = phases.parse_log([*LOG_026.splitlines()[:3], one, *LOG_026.splitlines()[3:]])
    assert [p[memory.phase_key(k)] for k in memory.KEYS] == [71.26, 30.64, 2.83, -4.4, 0.82]
    assert memory.from_phases(p) == memory.parse(one) == {"budget": 71.26, "weights": 30.64, "peak_activation": 2.83,
                                                          "non_torch": -4.4, "cuda_graphs": 0.82}
    table = phases.format_table(p)
    assert "  non-torch" in table and "-4.40 GiB" in table
    assert table.splitlines()[-1] == (
        "Warning: vLLM counted -4.4 GiB of non-torch memory, so its KV cache takes 4.4 GiB past the utilization's "
        "71.26 GiB: under long prompts at high concurrency the GPU may run out of memory (lower "
        "--gpu-memory-utilization, or check it with a long-prompt scenario)")
    log = tmp_path / "server.log"
    log.write_text("\n".join([*LOG_026.splitlines(), one]))
    assert phases.main([str(log), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory_non_torch_gib"] == -4.4

    # tensor-parallel workers: the lowest non-torch figure counts; none negative, no warning; none logged, no rows
    workers = [PROFILE.format(proc="Worker_TP0", pid=300, non_torch="1.1"),
               PROFILE.format(proc="Worker_TP1", pid=301, non_torch="-0.5")]
    assert phases.parse_log(workers)["memory_non_torch_gib"] == -0.5
    assert "Warning" not in phases.format_table(phases.parse_log(workers[:1]))
    plain = phases.parse_log(LOG_026.splitlines())
    assert memory.from_phases(plain) is None and memory.warning(None) is None
    assert "Warning" not in phases.format_table(plain)
