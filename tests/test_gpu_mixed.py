"""The priority experiment's mixed load (bench/demo/gpu_mixed.py): rates from the sweeps' saturation, fixed by
the first variant and kept for the others, `bench mix-check --rates --priority` run as a process (with the fake
`vllm bench serve`), and the page's table and change line."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.demo import experiments, gpu_experiment, gpu_mixed, gpu_page
from tests.fixtures.bench_fake_metrics import vllm_text
from tests.test_bench_plan import sweep_dir

REPO = Path(__file__).resolve().parents[1]
PEAKS = {"S1_chat": 1280.0, "S4_rag": 256.0, "S2_summary": 512.0}  # output tok/s at c=64


def _check(fake_bench):
    return SimpleNamespace(runtime=SimpleNamespace(python=sys.executable, env={**os.environ, "PYTHONPATH": str(REPO)}),
                           server=SimpleNamespace(url="http://127.0.0.1:9", name="tiny"), model_dir=Path("/nonexistent-tokenizer"),
                           vllm_wrapper=lambda: fake_bench.bin, args=SimpleNamespace(length_scale=0.5))


def test_the_priority_experiment_is_one_flag_and_a_mixed_load():
    experiment = experiments.EXPERIMENTS["priority"]
    assert [v.label for v in experiment.variants] == ["fcfs", "priority"]
    # the stack's cap on running sequences on both, so that a mixed load past it queues as the stack's servers would
    assert experiment.variant("fcfs").extra == ("--max-num-seqs", "64")
    assert experiment.variant("priority").extra == ("--max-num-seqs", "64", "--scheduling-policy", "priority")
    assert experiment.mixed.batch == ("S2_summary",) and experiment.mixed.utilization == 0.81
    assert set(experiment.scenarios) == {"S1_chat", "S4_rag", "S2_summary"}


def test_rates_are_the_utilization_shared_equally_over_saturation():
    load = gpu_mixed.MixedLoad(batch=("S2_summary",))
    got = gpu_mixed.rates(load, {"S1_chat": 9.0, "S2_summary": 3.0, "S4_rag": 1.5})
    assert got == {"S1_chat": 2.43, "S2_summary": 0.81, "S4_rag": 0.405}
    assert sum(r / s for r, s in zip(got.values(), (9.0, 3.0, 1.5))) == pytest.approx(0.81)
    assert gpu_mixed.priorities(load, ["S1_chat", "S2_summary"]) == {"S2_summary": 1}


def test_the_mixed_load_runs_the_same_traffic_on_each_variant(fake_bench, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_MODEL", json.dumps({"ttft_ms_per_c": 20.0, "itl_ms": 10.0}))
    load = gpu_mixed.MixedLoad(batch=("S2_summary",), duration_s=2.0)
    scenarios = list(PEAKS)
    fcfs = tmp_path / "fcfs"
    fcfs.mkdir()
    for scenario, peak in PEAKS.items():
        sweep_dir(fcfs, scenario, {scenario: peak})
    record: dict = {}
    first = gpu_mixed.run(_check(fake_bench), load, "fcfs", fcfs, record, scenarios)
    assert first["status"] == "ok" and first["rc"] == 0, first
    assert record["mixed"]["saturation"]["S1_chat"] == {"concurrency": 64, "req_s": pytest.approx(10.0),
                                                        "measured_by": "fcfs"}
    rates = record["mixed"]["rates"]
    assert rates["S1_chat"] == pytest.approx(0.27 * 10.0, rel=1e-3) and record["mixed"]["priority"] == {"S2_summary": 1}
    row = first["scenarios"]["S2_summary"]
    assert row["priority"] == 1 and row["valid"] and row["e2e_p99_ms"] >= row["ttft_p99_ms"] > 0
    assert first["scenarios"]["S1_chat"]["priority"] is None

    # the second variant has no sweeps of its own here: it gets the record's rates, the same traffic
    other = tmp_path / "priority"
    other.mkdir()
    second = gpu_mixed.run(_check(fake_bench), load, "priority", other, record, scenarios)
    assert second["status"] == "ok"
    assert {s: r["offered_req_s"] for s, r in second["scenarios"].items()} == rates
    argvs = [c["argv"] for c in fake_bench.calls_made()]
    assert len(argvs) == 6 and sum("--extra-body" in a for a in argvs) == 2
    # the sweeps' lengths, scaled as theirs were (a CPU rehearsal at 0.125 sent S4_rag's 4,096 tokens to a model
    # that takes fewer, and every request failed)
    lengths = {a[a.index("--metadata") + 1].split("=")[1]: (a[a.index("--random-input-len") + 1],
                                                             a[a.index("--random-output-len") + 1]) for a in argvs}
    assert lengths == {"S1_chat": ("128", "64"), "S2_summary": ("512", "128"), "S4_rag": ("2048", "128")}, lengths

    # each p99's interval within its run, from the per-request detail mix-check asks vLLM for
    for got in (first, second):
        for scenario, row in got["scenarios"].items():
            assert row["requests"] >= 100, (scenario, row)
            for key in ("ttft_p99_ms", "e2e_p99_ms"):
                low, high = row[key.replace("_ms", "_ci_ms")]
                assert low <= row[key] <= high and low < high, (scenario, key, row)

    record["variants"] = {"fcfs": {"status": "ok", "mixed": first}, "priority": {"status": "ok", "mixed": second}}
    record["mixed"]["utilization"] = 0.81
    record["mixed"]["changes"] = gpu_mixed.changes(record)
    # the same fake server for both: no change is clear of the noise
    assert {(r["scenario"], r["figure"]) for r in record["mixed"]["changes"]["rows"]} == \
        {(s, f) for s in PEAKS for f in ("e2e_p99_ms", "ttft_p99_ms")}
    assert not any(r["clear"] for r in record["mixed"]["changes"]["rows"]), record["mixed"]["changes"]
    md = "\n".join(gpu_mixed.markdown(record))
    assert "**Mixed load at 81 % of saturation**" in md and "S2_summary at priority 1, the rest at 0" in md
    assert "| fcfs | S2_summary |" in md and "| priority | S4_rag |" in md
    assert "- priority against fcfs: S1_chat e2e p99 " in md and "(within the noise)" in md
    assert "widened by the run-to-run band of 11 %" in md
    page = gpu_page.experiment_markdown({"experiment": "priority", "question": "Q", "seeds": "the blog",
                                         "device": {"name": "H200"}, **record})
    assert "Mixed load at 81 %" in page and "None" not in page


def test_the_servers_queue_comes_from_mix_checks_reads_of_its_metrics(fake_bench, fake_metrics, tmp_path, monkeypatch):
    """Priority scheduling orders waiting requests: whether any waited during the mix decides whether the variants
    can differ at all. mix-check reads the server's /metrics around and during the mix (the sweep's telemetry)."""
    monkeypatch.setenv("FAKE_VLLM_MODEL", json.dumps({"ttft_ms_per_c": 20.0, "itl_ms": 10.0}))
    for scenario, peak in PEAKS.items():
        sweep_dir(tmp_path, scenario, {scenario: peak})
    fake_metrics.script(vllm_text(running=0, preemptions=3), vllm_text(running=31, kv=0.41, preemptions=3))
    check = _check(fake_bench)
    check.server.url = fake_metrics.url.removesuffix("/metrics")
    record: dict = {}
    got = gpu_mixed.run(check, gpu_mixed.MixedLoad(batch=("S2_summary",), duration_s=2.0), "fcfs", tmp_path, record,
                        list(PEAKS))
    assert got["status"] == "ok"
    assert {k: got["queue"][k] for k in ("running_max", "waiting_max", "kv_cache_usage_max_pct", "preemptions")} == \
        {"running_max": 31, "waiting_max": 0, "kv_cache_usage_max_pct": 41.0, "preemptions": 0}
    assert got["window_s"] == json.loads((tmp_path / "mixed" / "mixed_traffic.json").read_text())["window_s"] > 2.0
    queued = {**got["queue"], "waiting_max": 18}
    preempted = {**got["queue"], "preemptions": 2}  # nothing waited at the reads, yet the KV cache ran out between
    record["variants"] = {"fcfs": {"mixed": got}, "priority": {"mixed": {**got, "queue": queued}},
                          "third": {"mixed": {**got, "queue": None}}, "fourth": {"mixed": {**got, "queue": preempted}}}
    md = "\n".join(gpu_mixed.markdown(record))
    assert (f"- fcfs: the server's queue during the mix (its /metrics read before, after and {got['queue']['samples']} "
            "times between, about every 1 s): at most 31 requests running, 0 waiting, the KV cache at most 41 % "
            "full, 0 preempted: no read showed a request waiting and none was preempted") in md
    assert "- priority: the server's queue during the mix" in md and re.search(
        r"18 waiting, the KV cache at most 41 % full, 0 preempted$", md, re.M)
    assert "- third: the server's queue during the mix: not read (its /metrics did not answer)" in md
    assert re.search(r"full, 2 preempted$", md, re.M) and md.count("had nothing to order") == 1
    unread = gpu_mixed._queue_line({"samples": 3, "interval_s": 1.0, "running_max": 5, "waiting_max": 0,
                                    "kv_cache_usage_max_pct": None, "preemptions": None})
    assert unread.endswith("at most 5 requests running, 0 waiting, the KV cache's use not read, preemptions not read")
    assert f"every scenario sending for about {got['window_s']:,.0f} s" in md and "None" not in md


def test_the_h100s_mixed_loads_queued_nothing():
    """The record of 2026-12-07 (before mix-check read /metrics) keeps every stats line of the two servers' logs
    (one about every 10 s). Requests waited only in a sweep at c=64 (18 at once, S2_summary's prefills); from each
    mixed load's start on (its S1_chat run: 67.7 s, ended 13:14:38 and 13:20:43), none waited."""
    text = (REPO / "docs" / "records" / "experiment-priority-2026-12-07-h100" / "servers.excerpt.log").read_text()
    fcfs, priority = text.split("-- fcfs/server-2.log")[1].split("-- priority/server-1.log")

    def most(lines: str, start: str = "00:00:00") -> tuple[int, int, int, float]:
        rows = [(int(r), int(w), float(k)) for t, r, w, k in re.findall(
            r"INFO 12-07 (\S+) .*Running: (\d+) reqs, Waiting: (\d+) reqs, GPU KV cache usage: ([\d.]+)%", lines)
            if t >= start]
        return len(rows), max(r[0] for r in rows), max(r[1] for r in rows), max(r[2] for r in rows)

    assert most(fcfs)[2] == 18
    assert most(fcfs, "13:13:30") == (23, 99, 0, 73.5)
    assert most(priority, "13:19:35") == (23, 101, 0, 78.4)


def test_without_a_saturation_rate_the_mixed_load_is_not_run(fake_bench, tmp_path):
    record: dict = {}
    (tmp_path / "S2_summary").mkdir()
    (tmp_path / "S2_summary" / "manifest.json").write_text("{}")  # swept, but no valid run
    got = gpu_mixed.run(_check(fake_bench), gpu_mixed.MixedLoad(batch=("S2_summary",)), "fcfs", tmp_path, record,
                        ["S1_chat", "S2_summary", "S4_rag"])
    assert got == {"status": "not run", "reason": "no saturation rate for S2_summary: its sweep has no valid run; "
                                                  "S1_chat, S4_rag: not swept by fcfs yet (the same command with "
                                                  "--scenarios S1_chat,S4_rag sweeps it, then runs the mixed load)"}
    assert "rates" not in record["mixed"] and "saturation" not in record["mixed"] and fake_bench.calls_made() == []
    record["variants"] = {"fcfs": {"mixed": got}}
    assert "- fcfs: not run: no saturation rate" in "\n".join(gpu_mixed.markdown(record))


def test_a_command_for_some_scenarios_mixes_every_scenario_of_the_experiment(fake_bench, tmp_path, monkeypatch):
    """The H200's ten-minute commands split the priority experiment's first variant (three sweeps, then a mixed
    load of about four minutes): a command asked for S1_chat alone, after an earlier one swept S4_rag and
    S2_summary, still offers all three, their rates from both commands' sweeps. It had mixed only the command's
    own --scenarios: a load of S1_chat alone, with no batch requests at all."""
    experiment = experiments.EXPERIMENTS["priority"]
    folder = tmp_path / "priority" / "fcfs"
    folder.mkdir(parents=True)
    for scenario in ("S4_rag", "S2_summary"):  # the earlier command's
        sweep_dir(folder, scenario, {scenario: PEAKS[scenario]})
    swept, mixed_over = [], []

    def sweep(check, argv, into, scenario, entry, save, gpus):
        sweep_dir(into, scenario, {scenario: PEAKS[scenario]})
        swept.append(scenario)
        entry["sweeps"][scenario] = {"rc": 0}

    def mix(check, load, label, into, record, scenarios):
        mixed_over.append(list(scenarios))
        return real_run(check, load, label, into, record, scenarios)

    real_run = gpu_mixed.run
    monkeypatch.setattr(gpu_experiment, "sweep_argv", lambda *args, **kwargs: [])
    monkeypatch.setattr(gpu_experiment, "sweep_scenario", sweep)
    monkeypatch.setattr(gpu_experiment, "server_death", lambda server, scenario, start: None)
    monkeypatch.setattr(gpu_experiment.gpu_mixed, "run", mix)
    monkeypatch.setenv("FAKE_VLLM_MODEL", json.dumps({"ttft_ms_per_c": 20.0, "itl_ms": 10.0}))
    check = _check(fake_bench)
    check.__dict__.update(flags=lambda **override: ["--max-num-seqs", "64"], stop_server=lambda: None,
                          start=lambda pod, flags: check.server, pod=lambda name: name, full=False,
                          start_figures=lambda server, label: {"healthy_s": 1.0}, logs=tmp_path / "logs")
    check.runtime.gpus = 1
    check.args.__dict__.update(again=False, scenario_list=["S1_chat"])
    entry: dict = {}
    record: dict = {"variants": {"fcfs": entry}}
    gpu_experiment.run_variant(check, experiment, experiment.variant("fcfs"), tmp_path / "priority", entry,
                               lambda: None, record)
    assert swept == ["S1_chat"] and mixed_over == [list(experiment.scenarios)]
    assert set(record["mixed"]["rates"]) == {"S1_chat", "S4_rag", "S2_summary"}, record["mixed"]
    assert entry["mixed"]["status"] == "ok" and set(entry["mixed"]["scenarios"]) == set(experiment.scenarios)
    assert entry["mixed"]["scenarios"]["S2_summary"]["priority"] == 1


def _row(p99: float, ci: tuple[float, float] | None, valid: bool = True) -> dict:
    return {"valid": valid, "ttft_p99_ms": p99, "ttft_p99_ci_ms": list(ci) if ci else None,
            "e2e_p99_ms": 10 * p99, "e2e_p99_ci_ms": [10 * c for c in ci] if ci else None}


def test_a_change_is_clear_only_where_the_widened_intervals_part():
    """One run per variant: a change counts only where the two runs' p99 intervals, each widened by the run-to-run
    band (11 %), do not overlap; a run without an interval or an invalid one is said so, never compared as if."""
    fcfs = {"S1_chat": _row(5000, (4800, 5200)), "S2_summary": _row(5000, (4800, 5200)),
            "S4_rag": _row(5000, None), "S5": _row(5000, (4800, 5200), valid=False)}
    priority = {"S1_chat": _row(3000, (2900, 3100)),  # 3,100 x 1.11 = 3,441 < 4,800 / 1.11 = 4,324: clear
                "S2_summary": _row(4200, (4000, 4400)),  # 4,400 x 1.11 = 4,884 > 4,324: within the noise
                "S4_rag": _row(3000, (2900, 3100)), "S5": _row(3000, (2900, 3100))}
    record = {"variants": {"fcfs": {"mixed": {"status": "ok", "scenarios": fcfs}},
                           "priority": {"mixed": {"status": "ok", "scenarios": priority}},
                           "broken": {"mixed": {"status": "broken"}}}}
    got = gpu_mixed.changes(record)
    clear = {(r["scenario"], r["figure"]): r["clear"] for r in got["rows"]}
    assert clear == {("S1_chat", "e2e_p99_ms"): True, ("S1_chat", "ttft_p99_ms"): True,
                     ("S2_summary", "e2e_p99_ms"): False, ("S2_summary", "ttft_p99_ms"): False,
                     ("S4_rag", "e2e_p99_ms"): None, ("S4_rag", "ttft_p99_ms"): None}
    s1 = next(r for r in got["rows"] if r["scenario"] == "S1_chat" and r["figure"] == "ttft_p99_ms")
    assert s1["change_pct"] == -40.0 and s1["intervals_ms"][0] == [pytest.approx(4800 / 1.11, abs=1e-3),
                                                                  pytest.approx(5200 * 1.11, abs=1e-3)]
    assert got["not_compared"] == [{"variant": "priority", "against": "fcfs", "scenario": "S5",
                                    "reason": "fcfs's run was invalid"}]
    lines = "\n".join(gpu_mixed._change_lines(got))
    assert "S1_chat TTFT p99 -40.0 % (clear)" in lines and "S2_summary e2e p99 -16.0 % (within the noise)" in lines
    assert "S4_rag TTFT p99 -40.0 % (no interval)" in lines and "S5 not compared (fcfs's run was invalid)" in lines
    assert gpu_mixed.changes({"variants": {"fcfs": {"mixed": {"status": "ok", "scenarios": fcfs}}}}) is None
