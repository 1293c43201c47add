"""The sweep with the K_korean and S5_shared_prefix scenarios: plan, command line, and a whole
sweep against the fake `vllm bench serve` (natural-end outputs valid, variant recorded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.common import workloads as W
from bench.run import grid as G
from bench.run import sweep as S
from tests.test_bench_sweep import FLAGS_026, manifest, plan_for

# Dataset flags of the two scenarios; in vLLM since 0.9.2 (custom output length) or earlier, and
# in the 0.26 dataset list (reference vllm.md 2.1: custom, sharegpt, prefix_repetition).
DATASET_FLAGS = {"--dataset-path", "--custom-output-len", "--sharegpt-output-len",
                 "--prefix-repetition-prefix-len", "--prefix-repetition-suffix-len",
                 "--prefix-repetition-num-prefixes", "--prefix-repetition-output-len"}


def test_korean_runs_at_its_own_concurrencies_unless_told():
    _, plan = plan_for("--scenarios", "S1_chat,K_korean", "--concurrencies", "1,4,64")
    assert [(p.scenario, p.concurrency) for p in plan] == [
        ("S1_chat", 1), ("S1_chat", 4), ("S1_chat", 64), ("K_korean", 1), ("K_korean", 8)]
    _, plan = plan_for("--scenarios", "K_korean", "--scenario-concurrencies", "K_korean=1,8,64")
    assert [p.concurrency for p in plan] == [1, 8, 64]
    with pytest.raises(G.UsageError, match="S5_shared_prefix not among the scenarios"):
        plan_for("--scenarios", "K_korean", "--scenario-concurrencies", "S5_shared_prefix=1")


def test_korean_command_custom_dataset_chat_template_no_ignore_eos():
    args, plan = plan_for("--scenarios", "K_korean", "--prompt-format", "custom")
    cmd = G.bench_command(["vllm"], args, plan[0], "/tok", Path("/r"), seed=0)
    flags = {c for c in cmd if c.startswith("--")}
    assert flags <= FLAGS_026 | DATASET_FLAGS
    assert "--ignore-eos" not in flags and "--skip-chat-template" not in flags
    joined = " ".join(cmd)
    assert "--backend openai --endpoint /v1/completions --dataset-name custom" in joined
    assert "--custom-output-len 256" in joined and W.KOREAN_PROMPTS in joined


def test_korean_chat_path_sends_the_same_prompts_to_the_chat_endpoint(tmp_path):
    args, plan = plan_for("--scenarios", "K_korean", "--prompt-format", "chat")
    cmd = G.bench_command(["vllm"], args, plan[0], "/tok", tmp_path, seed=0)
    joined = " ".join(cmd)
    assert "--backend openai-chat --endpoint /v1/chat/completions --dataset-name sharegpt" in joined
    assert "--sharegpt-output-len 256" in joined and "--ignore-eos" not in joined
    data = json.loads(Path(cmd[cmd.index("--dataset-path") + 1]).read_text(encoding="utf-8"))
    prompts = [r["prompt"] for r in W.load_prompt_set()]
    assert [d["conversations"][0]["value"] for d in data] == prompts
    assert all(d["conversations"][0]["from"] == "human" and len(d["conversations"]) == 2 for d in data)


def test_prompt_format_is_part_of_the_run_hash_and_so_is_the_prompt_set():
    _, custom = plan_for("--scenarios", "K_korean", "--prompt-format", "custom")
    _, chat = plan_for("--scenarios", "K_korean", "--prompt-format", "chat")
    assert not {p.run_hash for p in custom} & {p.run_hash for p in chat}
    _, random_a = plan_for("--scenarios", "S1_chat", "--prompt-format", "custom")
    _, random_b = plan_for("--scenarios", "S1_chat", "--prompt-format", "chat")
    assert [p.run_hash for p in random_a] == [p.run_hash for p in random_b]


def test_shared_prefix_rounds_prompts_to_whole_prefix_groups_and_keeps_its_share():
    _, plan = plan_for("--scenarios", "S5_shared_prefix", "--concurrencies", "1,3", "--window-s", "5")
    # the floor of 100 requests and the bursts rounded up to whole groups of the 4 prefixes
    assert [(p.concurrency, p.num_prompts) for p in plan] == [(1, 100), (3, 100)]
    assert all(p.warmups % 4 == 0 for p in plan)
    assert G.prompts_for(plan[0], 30.0, 5.0) % 4 == 0
    args, plan = plan_for("--scenarios", "S5_shared_prefix", "--scenario", "S5_shared_prefix=320/8",
                          "--concurrencies", "1")
    cmd = G.bench_command(["vllm"], args, plan[0], "/tok", Path("/r"), seed=0)
    value = {cmd[i]: cmd[i + 1] for i in range(len(cmd) - 1)}
    assert value["--dataset-name"] == "prefix_repetition"
    assert (value["--prefix-repetition-prefix-len"], value["--prefix-repetition-suffix-len"]) == ("288", "32")
    assert "--ignore-eos" in cmd and {c for c in cmd if c.startswith("--")} <= FLAGS_026 | DATASET_FLAGS


def test_sweep_with_korean_and_shared_prefix_against_the_fake(bench_stub_server, fake_bench, tmp_path):
    out = tmp_path / "run"
    variant = json.dumps({"base": "gemma-fp8", "settings": {"numSpeculativeTokens": 8}, "cross": False})
    argv = ["--base-url", bench_stub_server.url, "--model", "tiny", "--tokenizer", "/unused", "--out", str(out),
            "--vllm-bin", fake_bench.bin, "--scenarios", "S5_shared_prefix,K_korean", "--concurrencies", "1",
            "--scenario-concurrencies", "K_korean=1,2", "--window-s", "5",
            "--health-interval", "0.2", "--length-scale", "0.0625", "--variant", variant]
    assert S.main(argv) == 0
    m = manifest(out)
    assert [(r["scenario"], r["concurrency"], r["status"]) for r in m["runs"]] == [
        ("S5_shared_prefix", 1, "valid"), ("K_korean", 1, "valid"), ("K_korean", 2, "valid")]
    # The fake ends K_korean answers at half the cap: valid, because real text ends naturally.
    k1 = json.loads((out / "K_korean_c1.json").read_text())
    assert k1["total_output_tokens"] < k1["completed"] * 16
    assert m["variant"] == {"base": "gemma-fp8", "settings": {"numSpeculativeTokens": 8}, "cross": False}
    k = m["config"]["scenarios"]["K_korean"]
    assert k["dataset"] == "custom" and k["output_len"] == 16 and len(k["dataset_sha256"]) == 16
    assert k["prompt_format"] in ("custom", "chat")
    assert m["config"]["scenarios"]["S5_shared_prefix"]["prefix_len"] == 115
