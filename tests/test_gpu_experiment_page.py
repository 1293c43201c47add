"""gpu-check's experiment page as its records and sweeps give it: each capacity under the SLO and who
serves more worded as `bench compare` words them (the committed records' own pages read again), the search
runs a capacity names, a grid point every attempt of which failed, a server that died under load with its
cause, and repeats from fresh servers with how far apart they are. tests/test_gpu_experiment_record.py
holds the commands' lifecycle (cut off, stopped, kept, --again) and the record they leave."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from bench.analysis import answer
from bench.analysis import capacity_report as CR
from bench.analysis import compare as CMP
from bench.analysis import results as R
from bench.analysis import side as SIDE
from bench.demo import gpu_experiment, gpu_page
from bench.demo import gpu_steps as S
from tests.fixtures.compare_sweeps import BASE_FLAGS, sweep

REPO = Path(__file__).resolve().parents[1]


def test_the_experiment_page_states_each_capacity_as_bench_compare_does():
    """The prefix-caching record from the H200 (2026-12-05): its page said "caching-off not measured" where
    compare.md said "below 432.5 tok/s (never meets the SLO ...)" for the same runs, and "bench compare: bench
    compare: ... 1 cells". The page now words each capacity from bench compare's interval, with its words."""

    records = REPO / "docs" / "records" / "experiment-prefix-caching-2026-12-05-h200"
    record = json.loads((records / "experiment.json").read_text())
    compared = json.loads((records / "compare-S5_shared_prefix.json").read_text())
    entry = record["compare"]["S5_shared_prefix"]
    entry["slo_capacity_interval"] = compared["slo_capacity_interval"]["S5_shared_prefix"]
    entry["said"] = entry["said"].replace("1 cells", "1 cell")
    page = gpu_page.experiment_markdown(record)
    compare_md = (records / "compare-S5_shared_prefix.md").read_text()
    for label in ("caching-off", "caching-on"):
        words = answer.capacity_words(entry["slo_capacity_interval"][label])
        assert f"  - {label}: {words}" in page and words in compare_md, words
    assert "below 432.5 tok/s (never meets the SLO at the loads tested: misses it from c=8)" in page
    assert "- bench compare: 2 variants, 1 cell, 1 winner" in page and "not measured" not in page.split("**Comparison")[1]
    # a record from before the intervals were kept: a capacity none met reads as no figure, not "not measured"
    del entry["slo_capacity_interval"]
    old = gpu_page.experiment_markdown(record).split("**Comparison")[1]
    assert "caching-off no figure (see compare.md)" in old and "not measured" not in old


def test_the_experiment_page_says_who_serves_more_under_the_slo_as_bench_compare_does():
    """The precision record from the H100 (2026-12-06) listed both capacities and left the reader to divide
    them. bench compare's lead under the SLO (its ratio per GPU and interval: the entry bench compare wrote
    for the record's own sweeps, kept beside it) now reaches the page in the words compare.md uses."""

    records = REPO / "docs" / "records" / "experiment-precision-2026-12-06-h100"
    record = json.loads((records / "experiment.json").read_text())
    entry = record["compare"]["S1_chat"]
    page = gpu_page.experiment_markdown(record)
    assert "- under the SLO:" not in page  # recorded before compare ranked the capacities
    rerun = json.loads((records / "compare-S1_chat.rerun-cd2e74d.json").read_text())
    lead = rerun["slo_capacity_winner"]["S1_chat"]
    assert (lead["first"], lead["second"], lead["winner"]) == ("fp8", "bf16", "fp8")
    entry["slo_capacity_winner"] = lead
    page = gpu_page.experiment_markdown(record)
    line = f"- under the SLO: {answer.lead_words(lead)}"
    assert line == ("- under the SLO: fp8 over bf16, per GPU: 1.65x (95 % interval 1.06x to 2.78x): fp8 serves more "
                    "under the SLO, outside the noise")
    assert line in page and f"- S1_chat: {answer.lead_words(lead)}" in \
        (records / "compare-S1_chat.rerun-cd2e74d.md").read_text()
    entry["slo_capacity_winner"] = dict(lead, ratio_interval=[0.93, 2.1], winner=None)
    assert "no clear winner (the interval reaches down to 1x or below)" in gpu_page.experiment_markdown(record)
    entry["slo_capacity_winner"] = dict(lead, ratio_interval=[0.0, None], winner=None)
    assert "(95 % interval no bound either way (the capacities it is made of are open))" in \
        gpu_page.experiment_markdown(record)


def test_the_max_num_seqs_page_says_who_trails_from_the_records_own_compare():
    """Issue 36's max-num-seqs record (one H100): no cell had a winner, the caps at or above the load serving
    within the noise of each other. bench compare at 7ad6c5b over the same sweeps names who trails; the
    experiment page, given its cells as gpu-check copies them, says so after "no clear winner"."""

    records = REPO / "docs" / "records" / "experiment-max-num-seqs-2026-12-06-h100"
    record = json.loads((records / "experiment.json").read_text())
    page = gpu_page.experiment_markdown(record)
    assert "- c=32: no clear winner (noise 5.0 %)\n" in page  # recorded before compare ranked the variants
    rerun = json.loads((records / "compare-S1_chat.rerun-7ad6c5b.json").read_text())
    entry = record["compare"]["S1_chat"]
    assert [c["output_tok_s"] for c in rerun["cells"]] == [c["output_tok_s"] for c in entry["cells"]]
    entry["cells"] = [{k: c.get(k) for k in ("concurrency", "output_tok_s", "winner", "winner_margin_pct",
                                             "noise_pct", "leaders", "behind")} for c in rerun["cells"]]
    page = gpu_page.experiment_markdown(record)
    assert ("- c=32: no clear winner (noise 5.0 %); seqs-64, seqs-32 and seqs-128 lead, within the noise of each "
            "other; beyond the noise, seqs-16 serves 38.4 % less than seqs-64") in page
    assert ("- c=64: no clear winner (noise 5.0 %); seqs-64 and seqs-128 lead, within the noise of each other; "
            "beyond the noise, seqs-32 serves 34.7 % less than seqs-64 and seqs-16 60.1 % less") in page
    said = (records / "compare-S1_chat.rerun-7ad6c5b.log").read_text()
    assert all(f"S1_chat c={c['concurrency']}: {answer.standing_words(c)}" in said for c in rerun["cells"])


def test_a_sweeps_capacity_counts_a_ttft_miss_without_a_decode_figure_as_compare_does(tmp_path):
    """A run whose tokens came in one chunk (no decode latency to measure) is still a miss where its TTFT
    misses alone: the experiment's record counts it as bench compare does (one function judges both)."""

    folder = sweep(tmp_path / "fp8" / "S1_chat", {("S1_chat", 1): 100.0, ("S1_chat", 4): 300.0},
                   server_flags=BASE_FLAGS)
    bunched = folder / R.result_filename("S1_chat", 4)
    data = json.loads(bunched.read_text())
    data.update(p99_ttft_ms=900.0, p50_ttft_ms=800.0, p99_itl_ms=0.0, p50_itl_ms=0.0)
    bunched.write_text(json.dumps(data))
    mine = gpu_experiment.sweep_capacity(folder, "S1_chat")["closed"]
    assert mine["load_pass"] == 1 and mine["load_fail"] == 4
    data, _ = CMP.build([SIDE.load_side(folder, label="fp8")], ttft_ms=500, itl_ms=50, decode_metric="itl")
    assert data["slo_capacity_interval"]["S1_chat"]["fp8"] == mine


def test_the_page_lists_the_search_runs_its_capacity_names(tmp_path):
    """A capacity found by the search names a search run: the sweep's table lists that run (and every other
    the search and the open loop made) after the grid's, with its kind and load."""

    folder = sweep(tmp_path / "fp8" / "S1_chat", {("S1_chat", 1): 100.0, ("S1_chat", 4): 300.0},
                   server_flags=BASE_FLAGS)
    data = json.loads((folder / R.result_filename("S1_chat", 4)).read_text())
    (folder / CR.SEARCH_DIR).mkdir()
    (folder / CR.SEARCH_DIR / "S1_chat_c8.run1.json").write_text(json.dumps(
        {**data, "concurrency": "8", "max_concurrency": 8, "output_throughput": 480.0}))
    runs = gpu_experiment.runs_of(folder)
    assert [(r["kind"], r["concurrency"]) for r in runs] == [("grid", 1), ("grid", 4), ("search", 8)]
    assert runs[-1]["file"] == "search/S1_chat_c8.run1.json" and runs[-1]["output_tok_s"] == 480.0
    cap = gpu_experiment.sweep_capacity(folder, "S1_chat")
    assert cap["closed"]["source_run"] == runs[-1]["file"]  # the run the capacity names is on the page
    record = {"experiment": "scenarios", "device": {"name": "H200"}, "question": "q", "seeds": "s",
              "variants": {"fp8": {"status": "ok", "starts": [{"healthy_s": 60.0}],
                                   "sweeps": {"S1_chat": {"rc": 0, "runs": runs, "capacity": cap, "gpus": 1}}}}}
    page = gpu_page.experiment_markdown(record)
    assert "| run | load | output tok/s |" in page and "| search | c=8 | 480.0 |" in page and "| grid | c=1 |" in page


def test_the_page_lists_a_grid_point_every_attempt_of_which_failed(tmp_path):
    """A point whose attempts all failed leaves no result file, only `.attemptN.invalid.json` copies (the H100
    box, 2026-12-05: S2_summary at c=16, the server gone): the record's table lists it, invalid, with the
    sweep's reason, as `bench report` does, and no figure of its own."""

    folder = sweep(tmp_path / "fp8" / "S2_summary", {("S2_summary", 4): 234.0, ("S2_summary", 16): 0.0},
                   server_flags=BASE_FLAGS, invalid=("S2_summary", 16))
    (folder / R.result_filename("S2_summary", 16)).rename(folder / R.invalid_filename("S2_summary", 16, 2))
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["runs"][1]["reason"] = "100 failed requests; request errors: Cannot connect to host 127.0.0.1"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    runs = gpu_experiment.runs_of(folder)
    assert [(r["concurrency"], r["valid"]) for r in runs] == [(4, True), (16, False)]
    assert runs[1]["file"] == "S2_summary_c16.attempt2.invalid.json" and runs[1]["output_tok_s"] is None
    assert runs[1]["reason"].startswith("100 failed requests; request errors: Cannot connect")
    row = gpu_page._runs_table(runs, 1)[-1]
    assert row.startswith("| grid | c=16 | not measured |") and "| no: 100 failed requests; request errors" in row
    assert "None" not in row


def test_a_server_that_died_under_load_is_named_with_its_cause(tmp_path):
    """vLLM 0.26's engine ran out of GPU memory under S2_summary at c=16 on the H100 box (2026-12-05): its one
    OutOfMemoryError lies far above the EngineDeadError every open request then logged. The variant's reason
    names the cause, the server's log and the sweep's; a server still running is no death."""
    dead = ["(EngineCore pid=3844) ERROR 12-05 18:25:24 [core.py:1332] EngineCore encountered a fatal error.",
            "(EngineCore pid=3844) ERROR 12-05 18:25:24 [core.py:1332] Traceback (most recent call last):",
            "(EngineCore pid=3844) ERROR 12-05 18:25:24 [core.py:1332] torch.OutOfMemoryError: CUDA out of memory. "
            "Tried to allocate 672.00 MiB. GPU 0 has a total capacity of 79.18 GiB of which 364.19 MiB is free."]
    follow = ["(APIServer pid=3779) ERROR 12-05 18:25:24 [serving.py:495] Error in completion stream generator.",
              "(APIServer pid=3779) ERROR 12-05 18:25:24 [serving.py:495] vllm.v1.engine.exceptions.EngineDeadError: "
              "EngineCore encountered an issue. See stack trace (above) for the root cause."] * 400
    log = tmp_path / "server.log"
    log.write_text("\n".join(dead + follow) + "\n")
    assert "OutOfMemoryError" not in S.tail(log, 20000)  # outside the tail a start failure is read from
    exited = SimpleNamespace(proc=SimpleNamespace(poll=lambda: 1, returncode=1), log=log)
    why = gpu_experiment.server_death(exited, "S2_summary", 4)
    assert why == ("the vLLM server exited (1) during the S2_summary sweep: torch.OutOfMemoryError: CUDA out of "
                   "memory. Tried to allocate 672.00 MiB. GPU 0 has a total capacity of 79.18 GiB of which 364.19 MiB "
                   "is free. (server-4.log; the runs after it failed to connect, sweep-S2_summary.log)")
    running = SimpleNamespace(proc=SimpleNamespace(poll=lambda: None, returncode=None), log=log)
    assert gpu_experiment.server_death(running, "S2_summary", 4) is None


def test_each_sweep_states_its_capacity_and_repeats_say_how_far_apart_they_are(tmp_path):
    """Each experiment sweep's capacity under the SLO is computed once, by bench compare's function, and kept in
    the record; a scenario measured again (--again) lists each sweep's point and how far apart the points lie
    (issue 34: two from fresh servers within 5 %)."""

    first = sweep(tmp_path / "fp8" / "S1_chat.earlier-1", {("S1_chat", 1): 100.0, ("S1_chat", 4): 300.0},
                  server_flags=BASE_FLAGS)
    second = sweep(tmp_path / "fp8" / "S1_chat", {("S1_chat", 1): 101.0, ("S1_chat", 4): 310.0},
                   server_flags=BASE_FLAGS)
    caps = [gpu_experiment.sweep_capacity(f, "S1_chat") for f in (first, second)]
    assert [c["closed"]["point_tok_s"] for c in caps] == [300.0, 310.0] and "open" not in caps[0]
    assert gpu_experiment.sweep_capacity(second, "S4_rag") is None  # nothing swept: no capacity, not a zero
    now = {"rc": 0, "runs": gpu_experiment.runs_of(second), "capacity": caps[1], "seconds": 60.0, "gpus": 1}
    earlier = [{"scenario": "S1_chat", "dir": str(first), "rc": 0, "runs": [], "capacity": caps[0]}]
    record = {"experiment": "scenarios", "device": {"name": "H200"}, "question": "q", "seeds": "s",
              "variants": {"fp8": {"status": "ok", "starts": [{"healthy_s": 60.0}], "sweeps": {"S1_chat": now},
                                   "earlier": earlier}}}
    page = gpu_page.experiment_markdown(record)
    assert f"Capacity under the SLO (closed loop): {answer.capacity_words(caps[1]['closed'])}" in page
    assert "Repeats of S1_chat, each from a fresh server:" in page
    assert "- this sweep (closed loop): 310.0 tok/s" in page and "- S1_chat.earlier-1 (closed loop): 300.0 tok/s" in page
    assert "- closed loop: the points lie within 3.3 % of each other (2 sweeps)" in page
    assert "None" not in page
    del record["variants"]["fp8"]["earlier"]
    assert "Repeats of" not in gpu_page.experiment_markdown(record)


def test_a_variants_line_words_what_the_server_did_not_report():
    """The CPU build reports no attention backend: its line said "attention None"."""
    assert gpu_experiment.start_words({"healthy_s": 54.1, "kv_cache_tokens": 233816,
                                       "attention_backend": "TRITON_ATTN"}) == \
        "/health 54.1 s, KV cache 233,816 tokens, attention TRITON_ATTN"
    assert gpu_experiment.start_words({"healthy_s": 25.1, "kv_cache_tokens": 32768, "attention_backend": None}) == \
        "/health 25.1 s, KV cache 32,768 tokens, attention not reported"


def test_the_page_says_what_each_variant_changes_beside_the_models_settings():
    """The model line gives the settings before a variant's change (utilization 0.9 on a kv-sizing page); the
    next line names each variant's value of every setting `bench compare` tells apart, from the flags each
    recorded, and "not set" where a variant lacks the flag."""
    def page(name: str) -> str:
        return gpu_page.experiment_markdown(json.loads((REPO / "docs" / "records" / name / "experiment.json").read_text()))

    kv = page("experiment-kv-sizing-2026-12-08-h100")
    assert "GPU memory utilization 0.9." in kv
    assert ("What each variant changes in `vllm serve`, the rest as above: util-0.95: gpuMemoryUtilization 0.95; "
            "util-0.90: gpuMemoryUtilization 0.9; util-0.85: gpuMemoryUtilization 0.85.") in kv
    assert "bf16: --quantization not set; fp8: --quantization fp8." in page("experiment-precision-2026-12-06-h100")
    # --no-X is X turned off: caching off changes one setting, it does not also lack a flag
    assert ("caching-off: prefixCaching off; caching-on: prefixCaching on."
            in page("experiment-prefix-caching-2026-12-05-h200"))
    # one variant with flags (the other never started) has nothing to set them beside
    one = {"util-0.85": {"status": "ok", "flags": ["--gpu-memory-utilization", "0.85"]},
           "util-0.95": {"status": "broken", "reason": "vllm serve exited 1"}}
    assert gpu_page.changes_line(one) is None
    assert "What each variant changes" not in gpu_page.experiment_markdown({"experiment": "kv-sizing", "variants": one})
