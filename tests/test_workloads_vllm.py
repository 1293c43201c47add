"""The new scenarios against a real vLLM (CPU build): one tiny-model server with ngram speculative
decoding and a simple chat template, one sweep of S5_shared_prefix and K_korean.

- K_korean runs the Korean prompt set with the chat template applied (client side through vLLM's
  custom dataset where pandas is installed, else server side through the chat endpoint), outputs
  capped and ending naturally, and its result carries the acceptance `vllm bench serve` read from
  the server's spec-decode counters;
- S5_shared_prefix hits the prefix cache (the CPU build's KV blocks are 128 tokens, hence a 320-token
  prompt with a 288-token shared prefix, and 8 prompts so that each of the 4 prefixes comes twice);
- the acceptance computed here from /metrics before and after the sweep agrees with the drafts the
  result files report.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

import pytest

from bench.analysis import results as R
from bench.analysis import spec as SPEC
from tests.fixtures.bench_env import SERVE_FLAGS, TINY_MODEL, _free_port, _stop, wait_healthy

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[1]
# The tiny model's word-level vocabulary has w0..w1999; role markers are plain words.
CHAT_TEMPLATE = ("{% for m in messages %}w1 {{ m['content'] }} w2 {% endfor %}"
                 "{% if add_generation_prompt %}w3 {% endif %}")
NGRAM = '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4,"prompt_lookup_min":2}'


def metrics(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        return resp.read().decode()


def counter(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


@pytest.fixture(scope="module")
def ngram_server(vllm_env, tmp_path_factory):
    root = tmp_path_factory.mktemp("ngram-vllm")
    model = root / "model"
    built = vllm_env.run([vllm_env.python, str(TINY_MODEL), str(model)], timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    config = json.loads((model / "tokenizer_config.json").read_text())
    config["chat_template"] = CHAT_TEMPLATE
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    port = _free_port()
    env = dict(vllm_env.env, VLLM_CPU_KVCACHE_SPACE="1", VLLM_CACHE_ROOT=str(vllm_env.cache_root))
    log = root / "server.log"
    cmd = [vllm_env.vllm, "serve", str(model), "--served-model-name", "tiny", "--host", "127.0.0.1",
           "--port", str(port), *SERVE_FLAGS, "--enable-prefix-caching", "--speculative-config", NGRAM]
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, url, log)
        yield url, model, env
    finally:
        _stop(proc)


def sweep(vllm_env, url, model, env, out, scenario, *extra):
    env = dict(env, PYTHONPATH=f"{REPO}:{env.get('PYTHONPATH', '')}")
    before = metrics(url)
    proc = subprocess.run(
        [vllm_env.python, "-m", "bench", "sweep", "--base-url", url, "--model", "tiny", "--tokenizer", str(model),
         "--out", str(out), "--scenarios", scenario, "--concurrencies", "1", "--window-s", "5", "--warmups", "0", "--health-timeout-s", "60",
         "--bench-args", "--temperature 0", *extra],
        env=env, cwd=REPO, text=True, capture_output=True, timeout=600)
    return proc, before, metrics(url)


@pytest.fixture(scope="module")
def swept(ngram_server, vllm_env, tmp_path_factory):
    """Two sweeps, one per scenario, so that each one's counters are its own."""
    url, model, env = ngram_server
    root = tmp_path_factory.mktemp("workloads")
    return {
        "S5_shared_prefix": (root / "s5", *sweep(vllm_env, url, model, env, root / "s5", "S5_shared_prefix",
                                                 "--scenario", "S5_shared_prefix=320/8")),
        "K_korean": (root / "k", *sweep(vllm_env, url, model, env, root / "k", "K_korean",
                                        "--scenario", "K_korean=0/16", "--scenario-concurrencies", "K_korean=1")),
    }


@pytest.mark.parametrize("scenario", ["S5_shared_prefix", "K_korean"])
def test_both_scenarios_run_valid(swept, scenario):
    out, proc, _, _ = swept[scenario]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    m = json.loads((out / "manifest.json").read_text())
    assert [(r["scenario"], r["concurrency"], r["status"]) for r in m["runs"]] == [(scenario, 1, "valid")]


def test_korean_runs_the_prompt_set_with_the_chat_template_and_natural_ends(swept):
    out, _, _, _ = swept["K_korean"]
    m = json.loads((out / "manifest.json").read_text())
    k = m["config"]["scenarios"]["K_korean"]
    data = json.loads((out / "K_korean_c1.json").read_text())
    (rec,) = m["runs"]
    # the prompt set's 8 prompts, drawn again until the run holds its window (at least 100 requests)
    n = data["completed"]
    assert n == rec["num_prompts"] >= 100 and data["failed"] == 0
    assert data["total_output_tokens"] <= n * 16  # capped; an answer may end before the cap
    log = (out / rec["attempts"][-1]["log"]).read_text()
    command = log.splitlines()[0]
    assert "--ignore-eos" not in command and "--skip-chat-template" not in command
    if k["prompt_format"] == "custom":
        assert "--dataset-name custom" in command and "/v1/completions" in command
    else:
        assert "--dataset-name sharegpt" in command and "/v1/chat/completions" in command
    # The template's markers (w1 ... w2 w3) around each Korean prompt: 3 tokens more than the words.
    assert data["total_input_tokens"] > n * 3


def test_acceptance_is_read_from_the_servers_counters(swept):
    out, _, before, after = swept["K_korean"]
    window = SPEC.acceptance_from_metrics(before, after)
    assert window is not None  # the CPU build speculates with ngram and exposes the counters
    data = json.loads((out / "K_korean_c1.json").read_text())
    (rec,) = json.loads((out / "manifest.json").read_text())["runs"]
    if len(rec["attempts"]) > 1:
        # a run repeated for a short window: the server's counters hold every attempt, the sweep's own
        # reading of the kept attempt is the comparison (taken the same way, before and after it)
        tele = rec["telemetry"]
        window = {"drafts": tele["spec_drafts"],
                  "acceptance_pct": 100.0 * tele["spec_accepted_tokens"] / tele["spec_draft_tokens"]
                  if tele["spec_draft_tokens"] else None}
    assert data["spec_decode_num_drafts"] == window["drafts"]
    k = R.load_result(out / "K_korean_c1.json")
    if window["drafts"]:
        assert k.spec_acceptance_rate_pct is not None and 0 <= k.spec_acceptance_rate_pct <= 100
        assert len(SPEC.per_position(k) or []) == 4
        assert k.spec_acceptance_rate_pct == pytest.approx(window["acceptance_pct"], abs=0.01)


def test_shared_prefix_hits_the_prefix_cache(swept):
    out, _, before, after = swept["S5_shared_prefix"]
    hits = counter(after, "vllm:prefix_cache_hits_total") - counter(before, "vllm:prefix_cache_hits_total")
    queries = counter(after, "vllm:prefix_cache_queries_total") - counter(before, "vllm:prefix_cache_queries_total")
    assert queries > 0 and hits > 0, (hits, queries)
    s5 = json.loads((out / "S5_shared_prefix_c1.json").read_text())
    # whole prefixes: the run's prompts spread evenly over the 4 prefixes, each served from the cache
    # after its first time
    n = s5["completed"]
    assert n >= 100 and n % 4 == 0
    assert s5["total_input_tokens"] == n * 320 and s5["total_output_tokens"] == n * 8


def test_shared_prefix_hits_are_expected_and_never_flagged(swept):
    """The sweep's own telemetry sees the hits; a random-prompt run with as many would be suspect."""
    out, _, _, _ = swept["S5_shared_prefix"]
    m = json.loads((out / "manifest.json").read_text())
    (rec,) = m["runs"]
    assert m["config"]["scenarios"]["S5_shared_prefix"]["prefix_cache_check"] is False
    assert rec["telemetry"]["prefix_cache_hits"] > 0 and rec["telemetry"]["prefix_cache_hit_pct"] > 5
    assert rec["status"] == "valid" and rec["suspect"] is None


def test_korean_acceptance_per_position_in_the_sweeps_telemetry(swept):
    out, _, _, _ = swept["K_korean"]
    (rec,) = json.loads((out / "manifest.json").read_text())["runs"]
    data = json.loads((out / "K_korean_c1.json").read_text())
    by_pos = rec["telemetry"]["spec_acceptance_by_position"]
    if data["spec_decode_num_drafts"]:
        assert by_pos == pytest.approx([100 * r for r in data["spec_decode_per_position_acceptance_rates"]], abs=0.01)
