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
from bench.demo import experiments, full_model, gpu_experiment, gpu_full, gpu_page, gpu_settings, transformers_trap
from bench.demo import gpu_steps as S
from bench.startup import memory, phases

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

    for experiment in experiments.EXPERIMENTS.values():
        settings = []
        check = SimpleNamespace(flags=lambda **override: gpu_full.flags(_args(), **override))
        for variant in experiment.variants:
            flags = gpu_experiment.variant_flags(check, variant)
            # served as the stack's servers are by default: sleep mode off, but where the variant is sleep mode
            assert ("--enable-sleep-mode" in flags) == (variant.label == "sleep-on"), (experiment.name, flags)
            settings.append(compare.server_settings(["/m", *flags]))
        differing = {k for k in set().union(*settings) if len({s.get(k, "-") for s in settings}) > 1}
        assert len(differing) <= 1, (experiment.name, differing)
        assert len(experiment.variants) == 1 or differing, experiment.name
    caching = [compare.server_settings(["/m", "--enable-prefix-caching"]),
               compare.server_settings(["/m", "--no-enable-prefix-caching"])]
    assert [c["prefixCaching"] for c in caching] == ["on", "off"]


def test_an_experiment_passes_the_search_target_to_its_sweeps():

    experiment = experiments.EXPERIMENTS["scenarios"]
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
    assert "| util-0.85 | ok | 101.0 s | hit | 200,000 | not recorded | TRITON_ATTN |" in md
    assert "| grid | c=32 | 1,800.0 | 900.0 | 400 | 30.0 | yes |" in md  # a record from before runs had a kind
    assert "| util-0.95 | broken: vllm serve exited 1 | not measured |" in md and "None" not in md
    # a variant whose server died has no figure at a load: the comparison says so, not "no clear winner"
    record["compare"] = {"S1_chat": {"status": "ok", "said": "bench compare: 2 variants", "cells": [
        {"concurrency": 32, "output_tok_s": {"util-0.85": 1800.0, "util-0.95": None}, "winner": None,
         "winner_margin_pct": None, "noise_pct": 5.0},
        {"concurrency": 64, "output_tok_s": {"util-0.85": 1800.0, "util-0.95": 1810.0}, "winner": None,
         "winner_margin_pct": 0.6, "noise_pct": 5.0}]}}
    md = gpu_page.experiment_markdown(record)
    assert "- c=32: nothing to compare: util-0.95 has no valid run here" in md
    assert "- c=64: no clear winner (noise 5.0 %)" in md


@pytest.mark.vllm
@pytest.mark.no_server  # refused before the probes (the project's CPU build) and any server: either worker
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
    # an experiment keeps --out anyway: its --resume after a first command cut off before the record was
    # written (the H100 box, 2026-12-06) continues from what --out holds
    experiment = Check(_args(out=str(tmp_path), s3_uri=None, step_list=["sweep"], experiment="sleep-mode"))
    experiment.record["model_choice"] = gpu_full.choice(args)
    experiment.resume()
    assert experiment.previous is None
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
@pytest.mark.no_server  # a stand-in answers for vLLM; only the folder needs the vLLM environment
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


def test_the_page_lists_every_start_where_a_variant_started_again():
    """The paired sleep-mode record (H100, 2026-12-06): five starts, cold and warm, whose KV caches differ by
    1.55 GiB between cold and warm and by 4.63 GiB between sleep mode off and on; its page listed only each
    variant's last start. Rendered from the committed record."""
    record = json.loads((REPO / "docs" / "records" / "experiment-sleep-mode-2026-12-06-h100-paired" /
                         "experiment.json").read_text())
    md = gpu_page.experiment_markdown(record)
    assert "Every start, in order:" in md
    assert "| sleep-off | 1 | 180.7 s | miss | 89,356 | 37.56 GiB | 0.22 GiB |" in md
    assert "| sleep-off | 3 | 62.6 s | hit | 93,036 | 39.11 GiB | 0.22 GiB |" in md
    assert "| sleep-on | 2 | 62.1 s | hit | 104,047 | 43.74 GiB | -4.4 GiB |" in md
    assert md.count("| sleep-off | ") == 4 and md.count("| sleep-on | ") == 3  # with the table of last starts
    one = {"variants": {"a": {"status": "ok", "starts": [{"healthy_s": 1.0}]}}}
    assert "Every start" not in gpu_page.experiment_markdown(one)


def test_a_negative_non_torch_figure_in_the_memory_profile_is_warned():
    """vLLM 0.26's start-up memory profile on the H100 box (2026-12-05, the record's server lines): -4.4 GiB of
    non-torch memory, so the KV cache took that much past the utilization's share, and a long-prompt load later
    ran the GPU out of memory. The start's figures keep the profile; the pages say what the negative figure does."""
    excerpt = REPO / "docs" / "records" / "experiment-scenarios-2026-12-05-h100" / "servers.excerpt.log"
    figures = {"memory_gib": memory.from_phases(phases.parse_file(excerpt))}  # as Check.start_figures keeps it
    assert figures["memory_gib"] == {"budget": 71.26, "weights": 30.64, "peak_activation": 2.83, "non_torch": -4.4,
                                     "cuda_graphs": 0.82}  # the cold start's, the first in the excerpt
    warning = gpu_full.memory_warning(figures)
    assert warning.startswith("vLLM counted -4.4 GiB of non-torch memory, so its KV cache takes 4.4 GiB past the "
                              "utilization's 71.26 GiB")
    positive = {"memory_gib": {**figures["memory_gib"], "non_torch": 1.1}}
    assert gpu_full.memory_warning(positive) is None and gpu_full.memory_warning({"memory_gib": None}) is None
    assert memory.from_phases(phases.parse_log(["INFO nothing about memory"])) is None
    start = {"healthy_s": 71.1, "kv_cache_tokens": 104047, "compile_cache": "hit", **figures}
    assert warning in gpu_page._start_line(start)
    record = {"experiment": "scenarios", "device": {"name": "H100"}, "question": "q", "seeds": "s",
              "variants": {"fp8": {"status": "ok", "starts": [start], "sweeps": {}}}}
    page = gpu_page.experiment_markdown(record)
    assert f"- fp8: {warning}." in page and "| 104,047 | -4.4 GiB |" in page  # the sleep-mode experiment's answer
    record["variants"]["fp8"]["starts"] = [{**start, "memory_gib": None}]
    assert "| 104,047 | not logged |" in gpu_page.experiment_markdown(record)
    assert gpu_full.memory_warning({**start, "memory_gib": positive["memory_gib"]}) is None
