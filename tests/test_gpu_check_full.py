"""gpu-check's full-size path and experiments, on the CPU side: the options' checks (exit 2 naming the flag),
the tensor-parallel size against the GPUs seen, the flags and environment per variant, what a start's log says
(KV cache tokens, attention backend, head dimensions, precision) from a trimmed CUDA log and a synthetic
full-size one, the records' page sections, and the transformers trap's judgement. A 31B model cannot run
on a CPU: tests/test_gpu_check_vllm.py runs the whole check with the tiny model (TP=1), and the
full-size refusal on the CPU build is the last test here."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.__main__ import main as bench_main
from bench.demo import full_model, gpu_experiment, gpu_full, gpu_page, gpu_settings, transformers_trap
from bench.analysis import results as R
from bench.analysis import side as SIDE
from bench.demo import gpu_steps as S
from bench.startup import phases

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "gpu_check"
SYNTHETIC = FIXTURES / "h200-gemma4-31b-cold.synthetic.log"


def _args(**kw) -> argparse.Namespace:
    base = {"model_shape": full_model.SHAPE, "precision": "fp8", "kv_cache_dtype": "fp8", "tensor_parallel_size": 1,
            "gpu_memory_utilization": 0.9, "concurrencies": None, "health_timeout": None}
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize("argv, words", [
    (["--tensor-parallel-size", "0"], "--tensor-parallel-size 0: give a whole number of GPUs"),
    (["--tensor-parallel-size", "two"], "--tensor-parallel-size: 'two': give a whole number"),
    (["--tensor-parallel-size", "2"], "--tensor-parallel-size 2: only with --model-shape gemma-4-31b"),
    (["--precision", "bf16"], "--precision bf16: only with --model-shape gemma-4-31b"),
    (["--model-shape", "gemma-4-31b", "--precision", "nvfp4"], "--precision nvfp4: choose fp8 or bf16"),
    (["--model-shape", "gemma-4-31b", "--kv-cache-dtype", "bf16"], "--kv-cache-dtype bf16: choose fp8 or auto"),
    (["--model-shape", "gemma-4-31b", "--gpu-memory-utilization", "1.2"], "--gpu-memory-utilization 1.2: give a fraction"),
    (["--model-shape", "llama"], "--model-shape: invalid choice"),
    (["--variants", "seqs-16"], "--variants: only with --experiment NAME"),
    (["--experiment", "max-num-seqs", "--variants", "seqs-7"], "experiment max-num-seqs has seqs-16, seqs-32"),
    (["--experiment", "kv-sizing"], "add --model-shape gemma-4-31b"),
    (["--model-shape", "gemma-4-31b", "--experiment", "prefix-caching", "--scenarios", "S1_chat"],
     "experiment prefix-caching sweeps S5_shared_prefix"),
    (["--model-shape", "gemma-4-31b", "--experiment", "scenarios", "--target-width", "1"],
     "--target-width 1: give hi / lo of the capacity's ends, above 1"),
])
def test_bad_full_size_input_exits_2_naming_the_flag(argv, words, capsys, tmp_path):
    try:
        rc = bench_main(["gpu-check", "--out", str(tmp_path / "gc"), *argv])
    except SystemExit as stop:  # refused while the arguments are parsed
        rc = stop.code
    assert rc == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert not (tmp_path / "gc" / "gpu-check.json").exists()


def test_the_shapes_defaults_suit_a_31b_model():
    full, tiny = _args(), _args(model_shape="tiny")
    gpu_full.check_args(full, ValueError)
    gpu_full.check_args(tiny, ValueError)
    assert (full.concurrencies, full.health_timeout) == ("1,16,64", 900.0)  # a cold start took 247 s on an H200
    assert (tiny.concurrencies, tiny.health_timeout) == ("1,4,16,64", 600.0)
    given = _args(concurrencies="4", health_timeout=1200.0)
    gpu_full.check_args(given, ValueError)
    assert (given.concurrencies, given.health_timeout) == ("4", 1200.0)


def test_the_tensor_parallel_size_is_checked_against_the_gpus_seen():
    with pytest.raises(ValueError, match="--tensor-parallel-size 2: this machine shows 1 GPU; give 1 or fewer"):
        gpu_full.check_device(_args(tensor_parallel_size=2), True, 1, ValueError)
    with pytest.raises(ValueError, match="needs a GPU"):
        gpu_full.check_device(_args(), False, 0, ValueError)
    gpu_full.check_device(_args(tensor_parallel_size=4), True, 4, ValueError)  # fits: nothing raised
    gpu_full.check_device(_args(model_shape="tiny"), False, 0, ValueError)  # the tiny model runs on a CPU


def test_full_size_flags_and_the_nccl_setting():
    flags = gpu_full.flags(_args())
    assert flags == [*full_model.serve_flags(), *gpu_settings.SERVE_FLAGS]
    two = gpu_full.flags(_args(), tensor_parallel_size=2)
    assert gpu_full.tp_of(two) == 2 and gpu_full.tp_of(flags) == 1
    assert gpu_full.environment({"A": "1"}, 2) == {"A": "1", "NCCL_NVLS_ENABLE": "0"}
    assert gpu_full.environment({"A": "1"}, 1) == {"A": "1"}
    assert gpu_full.choice(_args(tensor_parallel_size=2))["tensor_parallel_size"] == 2
    assert gpu_full.describe(gpu_full.choice(_args())) == ("gemma-4-31b with random weights (fp8 weights, fp8 KV "
                                                           "cache, tensor parallel 1)")


def test_a_full_size_start_log_gives_the_engine_it_built():
    """From the synthetic full-size log (labelled so in its first line: the shared README's figures in vLLM
    0.26's format), and from a trimmed real log of the tiny model (FlashAttention 3)."""
    assert SYNTHETIC.read_text().startswith("# SYNTHETIC")
    text = SYNTHETIC.read_text()
    got = gpu_full.log_figures(text)
    assert got["attention_backend"] == "TRITON_ATTN" and got["head_dims"] == [256, 512]
    assert got["engine"] == {"load_format": "dummy", "tensor_parallel_size": 1, "quantization": "fp8",
                             "kv_cache_dtype": "fp8", "dtype": "bfloat16"}
    parsed = phases.parse_file(SYNTHETIC)
    assert (parsed["kv_cache_tokens"], parsed["kv_cache_gib"], parsed["compile_total_s"]) == (230160, 96.75, 129.8)
    assert gpu_full.start_problems(got, _args()) == []
    assert gpu_full.start_problems(got, _args(precision="bf16", tensor_parallel_size=2)) == [
        "the engine ran quantization fp8, not none", "the engine ran tensor_parallel_size 1, not 2"]
    assert gpu_full.start_problems(got, _args(), precision="bf16") == ["the engine ran quantization fp8, not none"]
    # a start without the heterogeneous head dimensions line: the trap's silent half
    dropped = gpu_full.log_figures("\n".join(l for l in text.splitlines() if "heterogeneous" not in l))
    assert "did not log the Gemma 4 head dimensions" in gpu_full.start_problems(dropped, _args())[0]
    tiny = gpu_full.log_figures((FIXTURES / "h200-cold.log").read_text())
    assert (tiny["attention_backend"], tiny["flash_attn_version"], tiny["head_dims"]) == ("FLASH_ATTN", 3, None)


def test_the_page_names_the_model_and_the_trap():
    trap = transformers_trap.finding({"vllm": "0.26.0", "transformers": "5.17.0",
                                      "served": {"head_size": 512}, "without_overrides": {"head_size": 256},
                                      "checkpoint": {"error": "AmbiguousGlobalPerLayerAttributeError"}})
    summary = full_model.summary(full_model.config(), 32000)
    record = {"date": "2026-12-05", "device": {"name": "NVIDIA H200"}, "versions": {"vllm": "0.26.0"}, "broken": [],
              "model": gpu_full.model_record(summary, _args()), "transformers_trap": trap,
              "checks": {"model": {"status": "ok", **summary},
                         "cold_start": {"status": "ok", "healthy_s": 247.4, "kv_cache_tokens": 230160,
                                        "attention_backend": "TRITON_ATTN", "compile_cache": "miss"},
                         "speculative": {"status": "skipped", "reason": gpu_full.SPECULATIVE_SKIPPED}}}
    md = gpu_page.markdown(record)
    assert "Model: gemma-4-31b with random weights, 30.7 B parameters, online FP8 (--quantization fp8)" in md
    assert "Transformers trap: trap (vLLM 0.26.0 with transformers 5.17.0: a Gemma 4 config as the checkpoint" in md
    assert "KV cache 230,160 tokens, attention TRITON_ATTN" in md and "30.7 B parameters, vocabulary 262,144" in md
    assert "| Speculative decoding with a draft model | skipped: random weights: a draft model" in md
    assert "None" not in md


def test_the_trap_is_judged_from_what_vllm_read():
    ok = transformers_trap.finding({"vllm": "0.32.0", "transformers": "5.19.0", "served": {"head_size": 512},
                                    "without_overrides": {"head_size": 512}, "checkpoint": {"head_size": 512}})
    assert ok["status"] == "ok" and ok["served_ok"] and ok["checkpoint_ok"] and ok["fix"] is None
    dropped = transformers_trap.finding({"vllm": "0.26.0", "transformers": "5.17.0", "served": {"head_size": 256},
                                         "checkpoint": {"head_size": 512}})
    assert dropped["status"] == "trap" and dropped["served_ok"] is False and "silently" in dropped["summary"]
    assert transformers_trap.finding({"error": "ModuleNotFoundError: No module named 'vllm'"})["status"] == "not checked"
    assert transformers_trap.at_risk("0.26.0", "5.17.0") and transformers_trap.at_risk("0.26.0+cu130", "5.15.0.dev0")
    assert transformers_trap.at_risk("0.26.0", "5.14.1") is False and transformers_trap.at_risk("0.32.0", "5.19.0") is False
    assert transformers_trap.at_risk(None, "5.17.0") is None


def test_each_experiment_is_one_change_at_a_time():
    """Every variant of an experiment differs from the others in one `bench compare` setting."""
    from bench.analysis import compare

    for experiment in gpu_experiment.EXPERIMENTS.values():
        settings = []
        for variant in experiment.variants:
            flags = [f for f in gpu_full.flags(_args(), **variant.override) if f not in variant.drop] + list(variant.extra)
            settings.append(compare.server_settings(["/m", *flags]))
        differing = {k for k in set().union(*settings) if len({s.get(k, "-") for s in settings}) > 1}
        assert len(differing) <= 1, (experiment.name, differing)
        assert len(experiment.variants) == 1 or differing, experiment.name
    caching = [compare.server_settings(["/m", "--enable-prefix-caching"]),
               compare.server_settings(["/m", "--no-enable-prefix-caching"])]
    assert [c["prefixCaching"] for c in caching] == ["on", "off"]


def test_an_experiment_passes_the_search_target_to_its_sweeps():

    experiment = gpu_experiment.EXPERIMENTS["scenarios"]
    for width, tail in ((None, ["--capacity-search"]), (1.1, ["--capacity-search", "--target-width", "1.1"])):
        args = _args(target_width=width, budget_minutes=9.0, window_s=15.0, length_scale=1.0,
                     instance_type="h200-box", concurrencies_given=False)
        # the server answers to the full-size name, and the sweep (so its report) names that model
        server = S.Server(proc=None, url="u", log=Path("/l"), launched=0.0,
                          cmd=S.serve_command("py", Path("/m"), 1, [], S.FULL_SERVED_NAME))
        check = SimpleNamespace(args=args, runtime=SimpleNamespace(python="py"), server=server,
                                model_dir=Path("/m"), vllm_wrapper=lambda: Path("/v"))
        argv = gpu_experiment.sweep_argv(check, experiment, experiment.variants[0], ["/m"], "S4_rag", Path("/o"))
        assert argv[-len(tail):] == tail
        assert argv[argv.index("--model") + 1] == "gemma-4-31b-random"
        assert argv[argv.index("--budget-minutes") + 1] == "9"


def test_an_experiment_record_renders():
    record = {"experiment": "kv-sizing", "question": "KV cache tokens", "seeds": "blog", "device": {"name": "H200"},
              "variants": {"util-0.85": {"status": "ok", "starts": [{"healthy_s": 101.0, "kv_cache_tokens": 200000,
                                                                     "compile_cache": "hit",
                                                                     "attention_backend": "TRITON_ATTN"}],
                                         "sweeps": {"S1_chat": {"rc": 0, "seconds": 40.0, "gpus": 2, "runs": [
                                             {"concurrency": 32, "output_tok_s": 1800.0, "ttft_p99_ms": 400.0,
                                              "itl_p99_ms": 30.0, "valid": True}]}}},
                           "util-0.95": {"status": "broken", "reason": "vllm serve exited 1"}},
              "compare": {"S1_chat": {"status": "waiting", "reason": "1 variant swept so far; a comparison needs two"}}}
    md = gpu_page.experiment_markdown(record)
    assert "| util-0.85 | ok | 101.0 s | hit | 200,000 | TRITON_ATTN |" in md
    assert "| grid | c=32 | 1,800.0 | 900.0 | 400 | 30.0 | yes |" in md  # a record from before runs had a kind
    assert "| util-0.95 | broken: vllm serve exited 1 | not measured |" in md and "None" not in md


@pytest.mark.vllm
def test_the_full_size_is_refused_on_the_cpu_build(vllm_env, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench", "gpu-check", "--out", str(tmp_path / "gc"), "--model-shape",
                           full_model.SHAPE], cwd=REPO, env={**vllm_env.env, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--model-shape gemma-4-31b: this needs a GPU" in proc.stderr and "Traceback" not in proc.stderr


def test_resume_carries_the_earlier_checks_of_the_same_model(tmp_path):
    from bench.demo.gpu_check import Check
    from bench.demo.gpu_runtime import UsageError

    args = _args(out=str(tmp_path), s3_uri=None, step_list=["sweep"])
    check = Check(args)
    check.record["model_choice"] = gpu_full.choice(args)
    with pytest.raises(UsageError, match="gpu-check.json does not exist; run gpu-check without --resume first"):
        check.resume()
    earlier = {"started_at": "2026-12-05T09:00:00Z", "model_choice": gpu_full.choice(_args(precision="bf16")),
               "checks": {"cold_start": {"status": "ok", "healthy_s": 247.4},
                          "sleep_wake": {"status": "broken", "reason": "wake-up took back too little"},
                          "timeline": {"status": "skipped", "reason": "not in --steps"}}}
    (tmp_path / "gpu-check.json").write_text(json.dumps(earlier))
    with pytest.raises(UsageError, match=r"was made with gemma-4-31b with random weights \(bf16 weights"):
        check.resume()
    (tmp_path / "gpu-check.json").write_text(json.dumps({**earlier, "model_choice": gpu_full.choice(args)}))
    check.resume()
    assert check.step("cold_start", lambda: {}) == {"status": "ok", "healthy_s": 247.4,
                                                     "carried_from": "2026-12-05T09:00:00Z"}
    assert check.step("timeline", lambda: {})["reason"] == "not in --steps"
    check.step("sleep_wake", lambda: {})
    assert check.record["broken"] == ["sleep_wake"]  # a carried broken check stays broken in the record


FAKE = FIXTURES / "fake_gpu_python.py"


def _fake_run(vllm_env, tmp_path, gpus: int, *argv: str) -> subprocess.CompletedProcess:
    env = {**vllm_env.env, "PYTHONPATH": str(REPO), "FAKE_GPUS": str(gpus), "FAKE_REAL_PYTHON": vllm_env.python,
           "FAKE_SERVE_RECORD": str(tmp_path / "serve.json")}
    return subprocess.run([sys.executable, "-m", "bench", "gpu-check", "--python", str(FAKE), "--out",
                           str(tmp_path / "gc"), "--model-shape", full_model.SHAPE, *argv], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.vllm
def test_the_full_size_path_on_a_stand_in_gpu(vllm_env, tmp_path):
    """The orchestration of the full-size path with a stand-in for vLLM on a GPU (tests/fixtures/gpu_check/
    fake_gpu_python.py: the synthetic full-size log, /health): the folder built by the real transformers,
    the flags served, the record's model, KV cache tokens, attention backend and engine, the trap's finding;
    then TP=2 on a machine of 1 GPU (exit 2) and of 2 (NCCL_NVLS_ENABLE=0, the record per TP size)."""
    proc = _fake_run(vllm_env, tmp_path, 1, "--steps", "model,cold_start,timeline,speculative")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads((tmp_path / "gc" / "gpu-check.json").read_text())
    served = json.loads((tmp_path / "serve.json").read_text())
    assert served["args"][served["args"].index("--load-format") + 1] == "dummy" and served["NCCL_NVLS_ENABLE"] is None
    assert json.loads(served["args"][served["args"].index("--hf-overrides") + 1]) == full_model.HF_OVERRIDES
    assert record["model"]["shape"] == full_model.SHAPE and record["model"]["parameters"] == 30_697_345_280
    assert record["model"]["quantization"].startswith("online FP8") and record["model"]["tensor_parallel_size"] == 1
    assert record["transformers_trap"]["status"] == "trap" and record["transformers_trap"]["served_ok"] is True
    cold = record["checks"]["cold_start"]
    assert cold["status"] == "ok", cold
    assert (cold["kv_cache_tokens"], cold["attention_backend"], cold["head_dims"]) == (230160, "TRITON_ATTN", [256, 512])
    assert cold["engine"]["quantization"] == "fp8" and cold["compile_total_s"] == 129.8
    assert record["checks"]["speculative"] == {"status": "skipped", "reason": gpu_full.SPECULATIVE_SKIPPED}
    md = (tmp_path / "gc" / "gpu-check.md").read_text()
    assert "KV cache 230,160 tokens, attention TRITON_ATTN" in md and "None" not in md

    refused = _fake_run(vllm_env, tmp_path, 1, "--steps", "model", "--tensor-parallel-size", "2")
    assert refused.returncode == 2 and "--tensor-parallel-size 2: this machine shows 1 GPU" in refused.stderr

    two = _fake_run(vllm_env, tmp_path, 2, "--steps", "model,cold_start", "--tensor-parallel-size", "2")
    assert two.returncode == 0, two.stdout[-3000:] + two.stderr[-3000:]
    served = json.loads((tmp_path / "serve.json").read_text())
    assert served["NCCL_NVLS_ENABLE"] == "0" and served["args"][served["args"].index("--tensor-parallel-size") + 1] == "2"
    record = json.loads((tmp_path / "gc" / "gpu-check.json").read_text())
    assert record["model_choice"]["tensor_parallel_size"] == 2 and record["device"]["gpus_seen"] == 2
    assert record["checks"]["cold_start"]["engine"]["tensor_parallel_size"] == 2


def test_the_help_says_the_weights_are_random_and_what_that_leaves_out(capsys):
    with pytest.raises(SystemExit):
        bench_main(["gpu-check", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "gemma-4-31b (the Gemma-4-31B architecture with RANDOM weights, on a GPU" in text
    assert "Random weights do not measure accuracy, speculative acceptance, the vision tower" in text


def _experiment_check(out: Path, experiment: str, **given) -> SimpleNamespace:
    """A gpu-check stand-in for gpu_experiment.run: full-size arguments checked as the command checks them."""
    args = SimpleNamespace(**{"experiment": experiment, "variants": None, "scenarios": None, "model_shape": "gemma-4-31b",
                              "precision": "fp8", "kv_cache_dtype": "fp8", "gpu_memory_utilization": 0.9,
                              "tensor_parallel_size": 1, "budget_minutes": None, "target_width": None, **given})
    gpu_experiment.check_args(args, ValueError)
    return SimpleNamespace(out=out, args=args, build_model=lambda: {"parameters": 1},
                           record={"model_choice": {"shape": "gemma-4-31b"}, "device": {"name": "H200"}, "versions": {},
                                   "transformers_trap": {}})


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
    line = [l for l in capsys.readouterr().out.splitlines() if ": fp8: " in l][0]
    assert line.endswith("fp8: broken: vllm serve exited 1 before /health answered: ValueError: Free memory")
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
    experiment = gpu_experiment.EXPERIMENTS["prefix-caching"]
    assert gpu_experiment.finished(experiment, done, root / "caching-off", ["S5_shared_prefix"])
    assert not gpu_experiment.finished(experiment, done, root / "caching-off", ["S5_shared_prefix", "S1_chat"])
    assert not gpu_experiment.finished(experiment, {**done, "status": "broken"}, root / "caching-off",
                                       ["S5_shared_prefix"])
    assert not gpu_experiment.finished(experiment, {**done, "sweeps": {"S5_shared_prefix": {"rc": 1}}},
                                       root / "caching-off", ["S5_shared_prefix"])
    priority = gpu_experiment.EXPERIMENTS["priority"]
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


def test_the_experiment_page_states_each_capacity_as_bench_compare_does():
    """The prefix-caching record from the H200 (2026-12-05): its page said "caching-off not measured" where
    compare.md said "below 432.5 tok/s (never meets the SLO ...)" for the same runs, and "bench compare: bench
    compare: ... 1 cells". The page now words each capacity from bench compare's interval, with its words."""
    from bench.analysis import answer
    from bench.demo import gpu_page

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


def test_a_sweeps_capacity_counts_a_ttft_miss_without_a_decode_figure_as_compare_does(tmp_path):
    """A run whose tokens came in one chunk (no decode latency to measure) is still a miss where its TTFT
    misses alone: the experiment's record counts it as bench compare does (one function judges both)."""
    from bench.analysis import compare as CMP
    from tests.test_bench_compare import BASE_FLAGS, sweep

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
    from bench.analysis import capacity_report as CR
    from tests.test_bench_compare import BASE_FLAGS, sweep

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


def test_each_sweep_states_its_capacity_and_repeats_say_how_far_apart_they_are(tmp_path):
    """Each experiment sweep's capacity under the SLO is computed once, by bench compare's function, and kept in
    the record; a scenario measured again (--again) lists each sweep's point and how far apart the points lie
    (issue 34: two from fresh servers within 5 %)."""
    from bench.analysis import answer
    from bench.demo import gpu_page
    from tests.test_bench_compare import BASE_FLAGS, sweep

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


def test_a_sweep_cut_off_keeps_its_runs_and_capacity_in_the_record(tmp_path, monkeypatch):
    """The H200 box, 2026-12-05: S4_rag's sweep had its c=1 and c=2 runs and its closed-loop capacity when the
    command's limit cut the open-loop search off, and the record said nothing of them (`sweeps` empty):
    the capacity had to be rebuilt by hand with `bench report`. A cut-off sweep is recorded as far as it got,
    the page says so, and the next command continues it (it is not taken for finished)."""
    import signal as sig

    from bench.common.interrupts import Interrupted
    from tests.test_bench_compare import BASE_FLAGS, sweep

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
    experiment = gpu_experiment.EXPERIMENTS["max-num-seqs"]
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
