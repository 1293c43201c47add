"""gpu-check's experiments, their record and page, on the CPU side: a command cut off or stopped and the same
command again (a finished variant kept, --again setting the earlier sweep aside), each sweep's runs and its
capacity under the SLO as `bench compare` gives it. tests/test_gpu_experiment_page.py holds what the page
says of records and sweeps, tests/test_gpu_check_full.py the full-size options and start logs, and
tests/test_gpu_check_vllm.py runs an experiment on vLLM's CPU build."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.__main__ import main as bench_main
from bench.analysis import side as SIDE
from bench.demo import experiments, gpu_experiment, gpu_full, gpu_page
from tests.fixtures.compare_sweeps import BASE_FLAGS, flags, search_run, sweep

REPO = Path(__file__).resolve().parents[1]


def _experiment_check(out: Path, experiment: str, **given) -> SimpleNamespace:
    """A gpu-check stand-in for gpu_experiment.run: full-size arguments checked as the command checks them."""
    args = SimpleNamespace(**{"experiment": experiment, "variants": None, "scenarios": None, "model_shape": "gemma-4-31b",
                              "precision": "fp8", "kv_cache_dtype": "fp8", "gpu_memory_utilization": 0.9,
                              "tensor_parallel_size": 1, "budget_minutes": None, "target_width": None, **given})
    gpu_experiment.check_args(args, ValueError)
    return SimpleNamespace(out=out, args=args, build_model=lambda: {"parameters": 1},
                           flags=lambda **override: gpu_full.flags(args, **override),
                           record={"model_choice": {"shape": "gemma-4-31b"}, "device": {"name": "H200"}, "versions": {},
                                   "transformers_trap": {}})


def test_each_variant_says_whether_its_start_compiles(tmp_path, monkeypatch, capsys):
    """The H100 box, 2026-12-06: sleep mode off is another key of vLLM's compile cache than every start --out held,
    so its first start compiles, which a ten-minute command must plan for. Each variant says so before it starts:
    from the starts --out records (gpu-check's cold start with its own flags, or an experiment's variants)."""
    def started(check, experiment, variant, root, entry, save, record):
        entry.update(status="ok", flags=gpu_experiment.variant_flags(check, variant), starts=[{"healthy_s": 90.0}])

    monkeypatch.setattr(gpu_experiment, "run_variant", started)
    check = _experiment_check(tmp_path, "sleep-mode", variants="sleep-off", scenarios="S2_summary")
    assert gpu_experiment.run(check, "sleep-mode") == 0
    assert "sleep-off: --out records no start yet: this one compiles" in capsys.readouterr().out
    # every experiment serves without sleep mode, as the stack does by default: another utilization, prefix
    # caching or the scheduling policy keeps the key, and the sleep-off start's cache serves them
    for name, variants in (("kv-sizing", "util-0.85"), ("prefix-caching", "caching-off"), ("scenarios", "fp8")):
        check = _experiment_check(tmp_path, name, variants=variants)
        assert gpu_experiment.run(check, name) == 0
        assert f"{variants}: a start --out records had the same compile-cache key" in capsys.readouterr().out
    # the priority experiment serves with the stack's --max-num-seqs 64: a key of its own, which seqs-64 then shares
    # (the scheduling policy is no factor)
    for name, variants in (("sleep-mode", "sleep-on"), ("max-num-seqs", "seqs-16"), ("precision", "bf16"),
                           ("priority", "priority")):
        check = _experiment_check(tmp_path, name, variants=variants)
        assert gpu_experiment.run(check, name) == 0
        assert f"{variants}: its flags change vLLM's compile-cache key" in capsys.readouterr().out
    check = _experiment_check(tmp_path, "max-num-seqs", variants="seqs-64")
    assert gpu_experiment.run(check, "max-num-seqs") == 0
    assert "seqs-64: a start --out records had the same compile-cache key" in capsys.readouterr().out
    # gpu-check's own cold start (its flags, with sleep mode for its sleep_wake check) counts as a start: it
    # serves the sleep-on variant's key, not the experiments' without sleep mode; another model's record counts
    # for nothing
    other = tmp_path / "other"
    (other / "experiments" / "x").mkdir(parents=True)
    (other / "experiments" / "x" / "experiment.json").write_text(json.dumps({"model_choice": {"shape": "tiny"},
        "variants": {"a": {"flags": ["--load-format", "dummy"], "starts": [{"healthy_s": 1.0}]}}}))
    (other / "gpu-check.json").write_text(json.dumps({"model_choice": {"shape": "gemma-4-31b"},
                                                        "checks": {"cold_start": {"status": "ok"}}}))
    check = _experiment_check(other, "scenarios", scenarios="S1_chat")
    fp8 = gpu_experiment.variant_flags(check, experiments.EXPERIMENTS["scenarios"].variant("fp8"))
    sleep_on = gpu_experiment.variant_flags(check, experiments.EXPERIMENTS["sleep-mode"].variant("sleep-on"))
    assert "--enable-sleep-mode" not in fp8 and "--enable-sleep-mode" in check.flags()
    assert gpu_experiment.cache_warm(check, fp8) == gpu_experiment.COLD
    assert gpu_experiment.cache_warm(check, sleep_on) == gpu_experiment.WARM
    # the records of 2026-12-06 wrote sleep-off's flags with --no-enable-sleep-mode, vLLM's default: the same key
    assert gpu_experiment.cache_key_flags([*fp8, "--no-enable-sleep-mode"]) == gpu_experiment.cache_key_flags(fp8)
    (other / "gpu-check.json").unlink()
    assert gpu_experiment.cache_warm(check, fp8) == gpu_experiment.FIRST


def test_an_experiment_cut_off_says_so_and_shows_only_this_commands_start(tmp_path, monkeypatch, capsys):
    """The H200 box, 2026-12-05: a second command's server failed to start, and its line showed the first command's
    /health and KV cache as if they were its own. A variant that adds no start shows none; a stop mid-variant marks
    it cut off in the record, which is saved, and goes on up."""
    from bench.common.interrupts import Interrupted
    import signal as sig

    check = _experiment_check(tmp_path, "scenarios", scenarios="S1_chat")
    (tmp_path / "experiments" / "scenarios").mkdir(parents=True)
    (tmp_path / "experiments" / "scenarios" / "experiment.json").write_text(json.dumps({"variants": {"fp8": {
        "status": "ok", "starts": [{"healthy_s": 54.1, "kv_cache_tokens": 233816}], "sweeps": {}}}}))

    def fails_to_start(check, experiment, variant, root, entry, save, record):
        entry.update(status="broken", reason="vllm serve exited 1 before /health answered: ValueError: Free memory")

    monkeypatch.setattr(gpu_experiment, "run_variant", fails_to_start)
    assert gpu_experiment.run(check, "scenarios") == 1
    lines = [l for l in capsys.readouterr().out.splitlines() if ": fp8: " in l]
    line = lines[-1]
    assert line.endswith("fp8: broken: vllm serve exited 1 before /health answered: ValueError: Free memory")
    # a record from before starts kept their flags: whether the start compiles is not guessed
    assert lines[0].endswith("fp8: --out records starts without their flags: whether this one compiles is not known "
                             "before it starts")
    assert "54.1" not in line and "233816" not in line

    def stopped(check, experiment, variant, root, entry, save, record):
        raise Interrupted(sig.SIGTERM)

    monkeypatch.setattr(gpu_experiment, "run_variant", stopped)
    with pytest.raises(Interrupted):
        gpu_experiment.run(check, "scenarios")
    entry = json.loads((tmp_path / "experiments" / "scenarios" / "experiment.json").read_text())["variants"]["fp8"]
    assert entry["status"] == "cut off" and entry["reason"].startswith("stopped by SIGTERM; the same command continues")
    assert entry["starts"] == [{"healthy_s": 54.1, "kv_cache_tokens": 233816}]
    page = (tmp_path / "experiments" / "scenarios" / "experiment.md").read_text()
    assert "| fp8 | cut off: stopped by SIGTERM" in page and "None" not in page


def test_a_variant_an_earlier_command_finished_is_kept_without_a_start(tmp_path, monkeypatch, capsys):
    """The H200 box, 2026-12-05: the prefix-caching command run again after a time limit started caching-off's
    server once more (109 s) and measured its finished sweep again. A variant whose asked-for sweeps (and mixed
    load, where the experiment has one) finished is kept; one missing a scenario, or not ok, runs."""
    root = tmp_path / "experiments" / "prefix-caching"
    for label in ("caching-off", "caching-on"):
        (root / label / "S5_shared_prefix").mkdir(parents=True)
        (root / label / "S5_shared_prefix" / "manifest.json").write_text("{}")
    done = {"status": "ok", "starts": [{"healthy_s": 273.0}], "sweeps": {"S5_shared_prefix": {"rc": 0}}}
    experiment = experiments.EXPERIMENTS["prefix-caching"]
    assert gpu_experiment.finished(experiment, done, root / "caching-off", ["S5_shared_prefix"])
    assert not gpu_experiment.finished(experiment, done, root / "caching-off", ["S5_shared_prefix", "S1_chat"])
    assert not gpu_experiment.finished(experiment, {**done, "status": "broken"}, root / "caching-off",
                                       ["S5_shared_prefix"])
    assert not gpu_experiment.finished(experiment, {**done, "sweeps": {"S5_shared_prefix": {"rc": 1}}},
                                       root / "caching-off", ["S5_shared_prefix"])
    priority = experiments.EXPERIMENTS["priority"]
    assert not gpu_experiment.finished(priority, done, root / "caching-off", ["S5_shared_prefix"])
    assert gpu_experiment.finished(priority, {**done, "mixed": {"status": "ok"}}, root / "caching-off",
                                   ["S5_shared_prefix"])

    check = _experiment_check(tmp_path, "prefix-caching")
    (root / "experiment.json").write_text(json.dumps({"variants": {"caching-off": done}}))
    ran = []

    def runs(check, experiment, variant, root, entry, save, record):
        ran.append(variant.label)
        entry.update(status="ok", sweeps={"S5_shared_prefix": {"rc": 0}})

    monkeypatch.setattr(gpu_experiment, "run_variant", runs)
    monkeypatch.setattr(gpu_experiment, "compare", lambda *a: {"status": "ok", "variants": ["caching-off", "caching-on"]})
    assert gpu_experiment.run(check, "prefix-caching") == 0
    assert ran == ["caching-on"]
    said = capsys.readouterr().out
    assert "caching-off: kept from an earlier command" in said
    record = json.loads((root / "experiment.json").read_text())
    assert record["variants"]["caching-off"]["starts"] == [{"healthy_s": 273.0}]

    # a command for one scenario of several, that scenario swept: kept, though the others are not swept yet
    scenarios = tmp_path / "experiments" / "scenarios"
    (scenarios / "fp8" / "S1_chat").mkdir(parents=True)
    (scenarios / "fp8" / "S1_chat" / "manifest.json").write_text("{}")
    (scenarios / "experiment.json").write_text(json.dumps({"variants": {"fp8": {**done, "sweeps": {"S1_chat": {"rc": 0}}}}}))
    ran.clear()
    assert gpu_experiment.run(_experiment_check(tmp_path, "scenarios", scenarios="S1_chat"), "scenarios") == 0
    assert ran == [] and "fp8: kept from an earlier command" in capsys.readouterr().out


def test_again_measures_a_finished_variant_anew_and_keeps_the_earlier_sweep(tmp_path, monkeypatch, capsys):
    """--again: a repeat from a fresh server in the same --out (its compile cache warm), as issue 34 asks of
    each capacity; the earlier sweep moves aside (SCENARIO.earlier-N, and the record's `earlier`), never lost."""
    folder = tmp_path / "caching-off"
    (folder / "S5_shared_prefix").mkdir(parents=True)
    (folder / "S5_shared_prefix" / "manifest.json").write_text('{"run": 1}')
    entry = {"status": "ok", "sweeps": {"S5_shared_prefix": {"dir": str(folder / "S5_shared_prefix"), "rc": 0,
                                                             "runs": [{"concurrency": 8}], "seconds": 107.8}}}
    gpu_experiment.set_aside(entry, folder, "S5_shared_prefix")
    assert not (folder / "S5_shared_prefix").exists() and entry["sweeps"] == {}
    assert json.loads((folder / "S5_shared_prefix.earlier-1" / "manifest.json").read_text()) == {"run": 1}
    assert entry["earlier"] == [{"scenario": "S5_shared_prefix", "dir": str(folder / "S5_shared_prefix.earlier-1"),
                                 "rc": 0, "runs": [{"concurrency": 8}], "seconds": 107.8}]
    (folder / "S5_shared_prefix").mkdir()  # a second repeat: the next number
    gpu_experiment.set_aside(entry, folder, "S5_shared_prefix")
    assert (folder / "S5_shared_prefix.earlier-2").is_dir() and len(entry["earlier"]) == 2
    gpu_experiment.set_aside(entry, folder, "S1_chat")  # nothing measured: nothing to move
    assert len(entry["earlier"]) == 2

    with pytest.raises(ValueError, match="--again: only with --experiment NAME"):
        gpu_experiment.check_args(SimpleNamespace(experiment=None, variants=None, scenarios=None, again=True),
                                  ValueError)
    root = tmp_path / "experiments" / "prefix-caching"
    (root / "caching-off" / "S5_shared_prefix").mkdir(parents=True)
    (root / "caching-off" / "S5_shared_prefix" / "manifest.json").write_text("{}")
    (root / "experiment.json").write_text(json.dumps({"variants": {"caching-off": {
        "status": "ok", "starts": [{"healthy_s": 273.0}], "sweeps": {"S5_shared_prefix": {"rc": 0}}}}}))
    check = _experiment_check(tmp_path, "prefix-caching", variants="caching-off", again=True)
    ran = []
    monkeypatch.setattr(gpu_experiment, "run_variant", lambda check, experiment, variant, *a: ran.append(variant.label))
    monkeypatch.setattr(gpu_experiment, "compare", lambda *a: {"status": "waiting", "reason": "one variant"})
    gpu_experiment.run(check, "prefix-caching")
    assert ran == ["caching-off"] and "kept from an earlier command" not in capsys.readouterr().out


def test_a_variant_swept_again_enters_the_comparison_with_every_finished_sweep(tmp_path):
    """The H100 box, 2026-12-06: seqs-64 and seqs-128 were swept twice, each time from a fresh server, yet the
    comparison took the latest sweep alone. Every finished sweep of a variant now enters bench compare under its
    label (the earlier ones first), as one variant's repeats; one a stop cut off, or another scenario's, does not.
    The record's `earlier` names the box's folders: the folder's name is read beside the variant's."""
    import os


    root = tmp_path / "experiments" / "max-num-seqs"
    made = {("seqs-32", "S1_chat"): 1354.2, ("seqs-64", "S1_chat.earlier-1"): 2108.4,
            ("seqs-64", "S1_chat"): 2111.7, ("seqs-64", "S1_chat.earlier-2"): 900.0}
    for (label, name), tok_s in made.items():
        sweep(root / label / name, {("S1_chat", 64): tok_s}, server_flags=flags(max_num_seqs=label.split("-")[1]))
    box = "/root/gc/experiments/max-num-seqs/seqs-64"
    record = {"variants": {
        "seqs-32": {"sweeps": {"S1_chat": {"rc": 0}}},
        "seqs-64": {"sweeps": {"S1_chat": {"rc": 0}}, "earlier": [
            {"scenario": "S1_chat", "dir": f"{box}/S1_chat.earlier-1", "rc": 0},
            {"scenario": "S1_chat", "dir": f"{box}/S1_chat.earlier-2", "rc": None, "cut_off": True},
            {"scenario": "S2_summary", "dir": f"{box}/S2_summary.earlier-1", "rc": 0}]}}}
    assert gpu_experiment.repeats(record["variants"]["seqs-64"], root / "seqs-64", "S1_chat") == [
        root / "seqs-64" / "S1_chat.earlier-1", root / "seqs-64" / "S1_chat"]
    check = SimpleNamespace(runtime=SimpleNamespace(env={**os.environ, "PYTHONPATH": str(REPO)}))
    result = gpu_experiment.compare(check, experiments.EXPERIMENTS["max-num-seqs"], record, root, "S1_chat")
    assert result["status"] == "ok" and result["variants"] == ["seqs-32", "seqs-64"], result
    assert result["sweeps"] == {"seqs-32": 1, "seqs-64": 2}
    cell = result["cells"][0]
    assert cell["output_tok_s_sweeps"]["seqs-64"] == [2108.4, 2111.7]
    assert cell["output_tok_s"]["seqs-64"] == pytest.approx((2108.4 + 2111.7) / 2)
    assert result["said"].startswith("bench compare: 2 variants from 3 sweeps, 1 cell")
    page = gpu_page.experiment_markdown({**record, "experiment": "max-num-seqs", "compare": {"S1_chat": result}})
    assert "- each from fresh servers, pooled as one variant's repeats (a cell is their mean): seqs-64 (2 sweeps)" in page


def test_a_sweep_repeated_from_a_fresh_server_records_the_pooled_capacity(tmp_path, monkeypatch):
    """The H100 box, 2026-12-07: S2_summary swept twice from fresh servers (--again) met the SLO at c=4 both
    times (228.7 and 228.6 tok/s) and missed it at c=8; the page listed each sweep's capacity alone. The second
    sweep's record now holds the capacity of both pooled, by the function bench compare pools a variant with
    (their runs at one load and size are repeats), and the page says it."""
    from bench.analysis import capacity_report as CR

    folder = tmp_path / "fp8"
    figures = iter([(228.7, 420.0, 399.8, 692.0), (228.6, 403.0, 399.4, 746.0)])

    def swept(argv, log, env=None):
        c4, ttft4, c8, ttft8 = next(figures)
        made = sweep(folder / "S2_summary", {("S2_summary", 4): c4}, server_flags=BASE_FLAGS, ttft99=ttft4)
        search_run(made, "S2_summary", 8, 1, c8, ttft8)
        return 0

    monkeypatch.setattr(gpu_experiment, "run_logged", swept)
    entry: dict = {"sweeps": {}}
    check = SimpleNamespace(runtime=SimpleNamespace(env={}))
    gpu_experiment.sweep_scenario(check, ["bench", "sweep"], folder, "S2_summary", entry, lambda: None, gpus=1)
    assert "pooled" not in entry["sweeps"]["S2_summary"]  # one sweep: nothing to pool
    gpu_experiment.set_aside(entry, folder, "S2_summary")
    gpu_experiment.sweep_scenario(check, ["bench", "sweep"], folder, "S2_summary", entry, lambda: None, gpus=1)
    pooled = entry["sweeps"]["S2_summary"]["pooled"]
    assert pooled["sweeps"] == ["S2_summary.earlier-1", "S2_summary"]
    closed = pooled["capacity"]["closed"]
    assert (closed["load_pass"], closed["load_fail"], closed["repeats"]) == (4, 8, 2)
    assert closed["source_runs"] == ["S2_summary.earlier-1/S2_summary_c4.json", "S2_summary/S2_summary_c4.json"]
    assert closed["noise_source"] == "measured" and closed["point_tok_s"] == pytest.approx(228.65)
    sides = [SIDE.load_side(folder / name, label="fp8") for name in pooled["sweeps"]]
    assert closed == CR.sides_capacity(sides, ttft_ms=500, decode_ms=50)["S2_summary"]["closed"].as_dict()
    page = gpu_page.repeat_lines("S2_summary", entry["sweeps"]["S2_summary"], entry["earlier"])
    assert any(line.startswith("- closed loop, the 2 sweeps pooled (their runs at one load and size are repeats, "
                               "the band between servers measured): 228.7 tok/s, 95 % interval") for line in page), "\n".join(page)


@pytest.mark.parametrize("again, advice", [
    (False, "run the same command again: the experiment keeps its finished sweeps"),
    (True, "run the same command without --again: the experiment keeps its finished sweeps"),
])
def test_a_stopped_experiment_says_how_to_continue(tmp_path, monkeypatch, capsys, again, advice):
    """A stopped --again command run as it was would set its own runs aside and start them over: it says to
    drop --again, which continues them."""
    import signal as sig

    from bench.common.interrupts import Interrupted
    from bench.demo import gpu_cli

    class Stopped:
        def __init__(self, args):
            pass

        def run(self):
            raise Interrupted(sig.SIGTERM)

    monkeypatch.setattr(gpu_cli, "Check", Stopped)
    argv = ["gpu-check", "--out", str(tmp_path / "gc"), "--model-shape", "gemma-4-31b", "--experiment",
            "prefix-caching"] + (["--again"] if again else [])
    assert bench_main(argv) == 143
    err = capsys.readouterr().err
    assert "stopped by SIGTERM; its vLLM server is stopped" in err and advice in err, err


def test_a_sweep_cut_off_keeps_its_runs_and_capacity_in_the_record(tmp_path, monkeypatch):
    """The H200 box, 2026-12-05: S4_rag's sweep had its c=1 and c=2 runs and its closed-loop capacity when the
    command's limit cut the open-loop search off, and the record said nothing of them (`sweeps` empty):
    the capacity had to be rebuilt by hand with `bench report`. A cut-off sweep is recorded as far as it got,
    the page says so, and the next command continues it (it is not taken for finished)."""
    import signal as sig

    from bench.common.interrupts import Interrupted

    folder = tmp_path / "fp8"
    calls = []

    def cut_off(argv, log, env=None):
        calls.append(argv)
        sweep(folder / "S4_rag", {("S4_rag", 1): 70.0, ("S4_rag", 2): 120.0}, server_flags=BASE_FLAGS)
        raise Interrupted(sig.SIGTERM)

    monkeypatch.setattr(gpu_experiment, "run_logged", cut_off)
    check = SimpleNamespace(runtime=SimpleNamespace(env={}))
    entry: dict = {"sweeps": {}}
    saved = []
    with pytest.raises(Interrupted):
        gpu_experiment.sweep_scenario(check, ["bench", "sweep"], folder, "S4_rag", entry, lambda: saved.append(1),
                                      gpus=1)
    got = entry["sweeps"]["S4_rag"]
    assert saved and got["cut_off"] is True and got["rc"] is None and calls == [["bench", "sweep"]]
    assert [r["concurrency"] for r in got["runs"]] == [1, 2]
    assert got["capacity"] == gpu_experiment.sweep_capacity(folder / "S4_rag", "S4_rag") and got["capacity"]["closed"]
    assert not gpu_experiment.swept(entry, folder, "S4_rag")  # the next command continues it
    # nor is it compared while cut off: a comparison waits for the sweep to finish
    for label in ("seqs-16", "seqs-32"):
        (tmp_path / label / "S4_rag").mkdir(parents=True)
    experiment = experiments.EXPERIMENTS["max-num-seqs"]
    both = {"variants": {"seqs-16": {"sweeps": {"S4_rag": {"rc": 0}}}, "seqs-32": {"sweeps": entry["sweeps"]}}}
    waiting = gpu_experiment.compare(check, experiment, both, tmp_path, "S4_rag")
    assert waiting == {"status": "waiting", "reason": "1 variant swept so far; a comparison needs two"}
    record = {"experiment": "scenarios", "device": {"name": "H200"}, "question": "q", "seeds": "s",
              "variants": {"fp8": {"status": "cut off", "reason": "stopped by SIGTERM", "starts": [{"healthy_s": 71.1}],
                                   "sweeps": entry["sweeps"]}}}
    page = gpu_page.experiment_markdown(record)
    assert "**fp8: S4_rag** (cut off after " in page and "the same command continues it" in page
    assert "Capacity under the SLO (closed loop): " in page and "None" not in page and "exit None" not in page
    # the next command resumes it, and a finished sweep is recorded as such
    monkeypatch.setattr(gpu_experiment, "run_logged", lambda argv, log, env=None: calls.append(argv) or 0)
    gpu_experiment.sweep_scenario(check, ["bench", "sweep"], folder, "S4_rag", entry, lambda: None, gpus=1)
    assert calls[-1] == ["bench", "sweep", "--resume"] and entry["sweeps"]["S4_rag"]["rc"] == 0
    assert "cut_off" not in entry["sweeps"]["S4_rag"] and gpu_experiment.swept(entry, folder, "S4_rag")


def test_the_mixed_loads_changes_are_worked_out_once_in_the_record(tmp_path, monkeypatch):
    """The priority experiment's second variant runs in a later command than the first: the change from one to
    the other is worked out when the record is written (`mixed.changes`), from both variants' rows, and the page
    renders it from there."""
    def row(ttft, ci):
        return {"valid": True, "ttft_p99_ms": ttft, "ttft_p99_ci_ms": ci, "e2e_p99_ms": 4 * ttft,
                "e2e_p99_ci_ms": [4 * c for c in ci]}

    figures = {"fcfs": row(5000.0, [4900.0, 5100.0]), "priority": row(3000.0, [2900.0, 3100.0])}

    def mixed(check, experiment, variant, root, entry, save, record):
        record.setdefault("mixed", {"rates": {"S1_chat": 1.0}, "utilization": 0.81})
        entry.update(status="ok", sweeps={}, mixed={"status": "ok", "scenarios": {"S1_chat": figures[variant.label]}})

    monkeypatch.setattr(gpu_experiment, "run_variant", mixed)
    monkeypatch.setattr(gpu_experiment, "compare", lambda *a: {"status": "waiting", "reason": "r"})
    root = tmp_path / "experiments" / "priority"
    assert gpu_experiment.run(_experiment_check(tmp_path, "priority", variants="fcfs", scenarios="S1_chat"),
                              "priority") == 0
    assert json.loads((root / "experiment.json").read_text())["mixed"]["changes"] is None  # one variant so far
    assert gpu_experiment.run(_experiment_check(tmp_path, "priority", variants="priority", scenarios="S1_chat"),
                              "priority") == 0
    changes = json.loads((root / "experiment.json").read_text())["mixed"]["changes"]
    assert [(r["figure"], r["change_pct"], r["clear"]) for r in changes["rows"]] == \
        [("e2e_p99_ms", -40.0, True), ("ttft_p99_ms", -40.0, True)]
    assert "- priority against fcfs: S1_chat e2e p99 -40.0 % (clear); S1_chat TTFT p99 -40.0 % (clear)." in \
        (root / "experiment.md").read_text()
