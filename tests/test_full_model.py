"""The Gemma-4-31B architecture's folder for `vllm serve --load-format dummy` (bench/demo/full_model.py):
its shape and parameter count, the flags it needs as one list, the folder built by the vLLM environment's
python and read back by its transformers, and the flags parsed by the serving image's vLLM (0.26.0)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench.demo import full_model, gpu_settings

REPO = Path(__file__).resolve().parents[1]
HELPER = Path(__file__).resolve().parent / "vllm_serve_args.py"
# transformers 5.19.0's Gemma4ForCausalLM built from this config on the meta device (2026-12-04)
COUNTED_BY_TRANSFORMERS = 30_697_345_280


def test_the_shape_is_the_31b_text_models():
    cfg = full_model.config()
    kinds = cfg["layer_types"]
    assert len(kinds) == 60 and kinds.count("full_attention") == 10 and kinds[-1] == "full_attention"
    assert all(kinds[i] == "full_attention" for i in range(5, 60, 6))
    assert (cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]) == (5376, 21504, 262144)
    assert cfg["allow_global_per_layer_attribute_access"] is True
    assert full_model.parameters(cfg) == COUNTED_BY_TRANSFORMERS


def test_the_parameter_count_follows_the_shape():
    cfg = full_model.config()
    cfg["attention_k_eq_v"] = False  # full layers with a V projection of their own: 10 x 5376 x 4 x 512 more
    assert full_model.parameters(cfg) == COUNTED_BY_TRANSFORMERS + 10 * 5376 * 4 * 512


def test_the_folders_flags_are_one_list():
    flags = list(full_model.FOLDER_FLAGS)
    assert flags[:4] == ["--load-format", "dummy", "--max-model-len", "8192"]
    assert json.loads(flags[flags.index("--hf-overrides") + 1]) == full_model.HF_OVERRIDES
    assert full_model.POC_FLAGS == ("--quantization", "fp8", "--kv-cache-dtype", "fp8")
    default = full_model.serve_flags()
    assert default[:len(flags)] == flags and default[len(flags):] == [*full_model.POC_FLAGS,
                                                                      "--gpu-memory-utilization", "0.9"]
    bf16 = full_model.serve_flags(precision="bf16", kv_cache_dtype="auto", gpu_memory_utilization=0.85,
                                  tensor_parallel_size=2)
    assert "--quantization" not in bf16 and bf16[-4:] == ["--gpu-memory-utilization", "0.85",
                                                          "--tensor-parallel-size", "2"]
    with pytest.raises(ValueError, match="nvfp4"):
        full_model.serve_flags(precision="nvfp4")
    line = full_model.serve_line(Path("/m"))
    assert line.startswith("vllm serve /m --served-model-name g4 --load-format dummy")
    assert "'{\"global_head_dim\":512,\"num_global_key_value_heads\":4,\"attention_k_eq_v\":true}'" in line
    assert line.endswith(" ".join(gpu_settings.SERVE_FLAGS))


def test_the_docs_show_the_flags_the_code_holds():
    import shlex

    page = (REPO / "docs" / "full-size.md").read_text()
    assert f"`{shlex.join(full_model.FOLDER_FLAGS)}`" in page.replace("\n", " ")
    assert f"`{shlex.join(full_model.POC_FLAGS)}`" in page
    assert f"{full_model.parameters(full_model.config()):,}" in page


@pytest.mark.vllm
@pytest.mark.no_server  # a model folder, a parser and a probe: either worker
def test_the_folder_builds_and_its_transformers_reads_it(vllm_env, tmp_path):
    folder = tmp_path / "g4"
    built = subprocess.run([vllm_env.python, "-m", "bench.demo.full_model", str(folder)], text=True,
                           capture_output=True, env={**vllm_env.env, "PYTHONPATH": str(REPO)}, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    assert "vllm serve " in built.stdout and "30.7 B parameters" in built.stdout
    summary = json.loads((folder / full_model.SUMMARY_FILE).read_text())
    assert summary["parameters"] == COUNTED_BY_TRANSFORMERS and summary["vocab_words"] == 32000
    probe = r"""
import json, sys, torch, transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
cfg = AutoConfig.from_pretrained(sys.argv[1])
with torch.device("meta"):
    model = AutoModelForCausalLM.from_config(cfg)
full = model.model.layers[5].self_attn
tok = AutoTokenizer.from_pretrained(sys.argv[1])
print(json.dumps({"transformers": transformers.__version__, "class": type(model).__name__,
                  "parameters": sum(p.numel() for p in model.parameters()),
                  "full_k_rows": full.k_proj.weight.shape[0], "full_has_v": hasattr(full, "v_proj") and full.v_proj is not None,
                  "tokens": len(tok("w1 w2 w31999")["input_ids"]), "vocab": len(tok)}))
"""
    proc = vllm_env.run([vllm_env.python, "-c", probe, str(folder)], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    # the version is what the environment holds (locks/vllm-cpu.txt); the count is the shape's, whatever it is
    assert got["transformers"].split(".")[0] == "5"
    assert got["class"] == "Gemma4ForCausalLM" and got["parameters"] == COUNTED_BY_TRANSFORMERS
    assert got["full_k_rows"] == 4 * 512 and not got["full_has_v"]  # the full layers: 4 KV heads of 512, K = V
    assert got["vocab"] == 32003 and got["tokens"] == 3


def _serve_cases(folder: Path) -> list[dict]:
    """The full-size serve flags gpu-check passes (TP 1, 2, 4; bf16; a misspelt flag)."""
    cases = [{"id": f"tp{tp}", "args": [str(folder), "--served-model-name", "g4",
                                          *full_model.serve_flags(tensor_parallel_size=tp), *gpu_settings.SERVE_FLAGS]}
             for tp in (1, 2, 4)]
    cases.append({"id": "bf16", "args": [str(folder), *full_model.serve_flags(precision="bf16", kv_cache_dtype="auto")]})
    cases.append({"id": "misspelt", "args": [str(folder), *full_model.FOLDER_FLAGS, "--load-fromat", "dummy"]})
    return cases


def _experiment_cases(folder: Path) -> list[dict]:
    """Every variant of every gpu-check experiment, on the full-size flags."""
    import argparse

    from bench.demo import experiments, gpu_full

    args = argparse.Namespace(model_shape=full_model.SHAPE, precision="fp8", kv_cache_dtype="fp8",
                              tensor_parallel_size=1, gpu_memory_utilization=0.9)
    return [{"id": f"{e.name}/{v.label}",
             "args": [str(folder), *[f for f in gpu_full.flags(args, **v.override) if f not in v.drop], *v.extra]}
            for e in experiments.EXPERIMENTS.values() for v in e.variants]


@pytest.fixture(scope="module")
def image_parsed(vllm_image_env, tmp_path_factory) -> dict[str, dict[str, dict]]:
    """Both tests' cases through the serving image's vLLM parser in one process (each process imports vLLM and
    torch again: about 9 s on an idle machine, three times that on loaded CI cores): {"serve": results by case
    id, "experiments": results by case id}."""
    folder = tmp_path_factory.mktemp("image-parsed") / "g4"  # a local folder (a missing path is a Hub id)
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(full_model.config()))
    serve, experiments = _serve_cases(folder), _experiment_cases(folder)
    proc = subprocess.run([vllm_image_env.python, str(HELPER)], input=json.dumps(serve + experiments),
                          env=vllm_image_env.env, text=True, capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {r["id"]: r for r in json.loads(proc.stdout)}
    assert len(results) == len(serve) + len(experiments), sorted(results)
    return {"serve": {c["id"]: results[c["id"]] for c in serve},
            "experiments": {c["id"]: results[c["id"]] for c in experiments}}


@pytest.mark.vllm
@pytest.mark.no_server  # a model folder, a parser and a probe: either worker
def test_the_serving_images_vllm_parses_the_flags(image_parsed):
    results = image_parsed["serve"]
    for tp in (1, 2, 4):
        r = results[f"tp{tp}"]
        assert r["ok"], r["error"]
        got = r["parsed"]
        assert (got["load_format"], got["max_model_len"], got["kv_cache_dtype"]) == ("dummy", 8192, "fp8")
        assert got["quantization"] == "fp8" and got["hf_overrides"] == full_model.HF_OVERRIDES
        assert got["tensor_parallel_size"] == tp and got["gpu_memory_utilization"] == 0.9
        assert got["enable_prefix_caching"] is True and got["enable_sleep_mode"] is True
    assert results["bf16"]["ok"] and results["bf16"]["parsed"]["quantization"] is None
    assert not results["misspelt"]["ok"] and "--load-fromat" in results["misspelt"]["error"]


@pytest.mark.vllm
@pytest.mark.no_server  # a model folder, a parser and a probe: either worker
def test_the_experiments_flags_parse_with_the_serving_images_vllm(image_parsed):
    results = image_parsed["experiments"]
    assert len(results) >= 15
    for case, r in results.items():
        assert r["ok"], f"{case}: {r['error']}"
    assert results["prefix-caching/caching-off"]["parsed"]["enable_prefix_caching"] is False
    assert results["prefix-caching/caching-on"]["parsed"]["enable_prefix_caching"] is True
    assert results["max-num-seqs/seqs-16"]["parsed"]["max_num_seqs"] == 16
    assert results["kv-sizing/util-0.95"]["parsed"]["gpu_memory_utilization"] == 0.95
    assert results["tensor-parallel/tp4"]["parsed"]["tensor_parallel_size"] == 4
    assert results["precision/bf16"]["parsed"]["quantization"] is None


@pytest.mark.vllm
@pytest.mark.no_server  # a model folder, a parser and a probe: either worker
def test_the_transformers_trap_is_found_where_it_is(vllm_image_env):
    """The image's vLLM (0.26.0, .vllm-image) with .venv-vllm's transformers (5.19.0): a Gemma 4 config as a
    checkpoint ships it stops vLLM, and the folder without --hf-overrides loses global_head_dim; with the
    folder's flags it reads right. That the CPU build (0.32.0) reads every form right is asked by gpu-check
    itself in tests/test_gpu_check_vllm.py (its record's transformers_trap), not probed twice."""
    from bench.demo import transformers_trap as T

    image = T.run_probe(vllm_image_env.python, {**vllm_image_env.env, "VLLM_TARGET_DEVICE": "cpu"})
    found = T.finding(image)
    assert image["vllm"] == "0.26.0" and found["status"] == T.TRAP, image
    assert found["checkpoint"] == "fails: AmbiguousGlobalPerLayerAttributeError"
    assert found["served_ok"] is True and "global_head_dim is dropped" in found["without_overrides"]
    assert "transformers older than 5.15" in found["fix"]
