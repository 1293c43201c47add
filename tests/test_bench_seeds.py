"""Prompt seeds: distinct per scenario x concurrency x attempt within a sweep, identical between two
sweeps with the same --seed, different with another; warm-ups draw prompts of their own.

`vllm bench serve` is the recording fake (tests/fixtures/bench_fake_vllm.py): it logs each call's
`--seed`, `--num-prompts` and `--num-warmups`.
"""

from __future__ import annotations

import json

from bench.run import seeds
from bench.run import sweep as S


def args(server, out, fake, *extra):
    return ["--base-url", server.url, "--model", "tiny", "--tokenizer", "/unused", "--out", str(out),
            "--vllm-bin", fake.bin, "--scenarios", "S1_chat,S3_moderation", "--concurrencies", "1,4,8",
            "--window-s", "5", "--health-interval", "0.2",
            "--metrics-url", "none", *extra]


def flag(call: dict, name: str) -> str:
    argv = call["argv"]
    return argv[argv.index(name) + 1]


def measured(fake) -> dict[tuple[str, int], int]:
    """(combination, attempt) -> seed of the measured calls so far."""
    out: dict[tuple[str, int], int] = {}
    for call in fake.calls_made():
        n = 1 + sum(1 for k in out if k[0] == call["key"])
        out[(call["key"], n)] = call["seed"]
    return out


def test_every_process_of_a_sweep_draws_its_own_prompts(bench_stub_server, fake_bench, tmp_path):
    fake_bench.plan({"S1_chat_c4": ["partial", "ok"], "S3_moderation_c8": ["crash", "ok"]})
    assert S.main(args(bench_stub_server, tmp_path / "a", fake_bench)) == 0
    runs = measured(fake_bench)
    assert len(runs) == 8  # 6 combinations, two of them retried
    assert len(set(runs.values())) == 8
    warmups = fake_bench.calls_made("warmup")
    assert len(warmups) == 8 and not {c["seed"] for c in warmups} & set(runs.values())
    assert len({c["seed"] for c in warmups}) == 8
    for call in fake_bench.calls_made():
        assert flag(call, "--num-warmups") == "0"  # vLLM's own warm-up would replay the first prompt
    for call in warmups:  # the burst: two waves at the run's concurrency, 8 to 256 requests
        conc = int(call["key"].rsplit("_c", 1)[1])
        assert flag(call, "--num-prompts") == str(max(8, min(256, 2 * conc))) and flag(call, "--max-concurrency") == str(conc)
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    retried = next(r for r in manifest["runs"] if r["scenario"] == "S1_chat" and r["concurrency"] == 4)
    assert [a["seed"] for a in retried["attempts"]] == [runs[("S1_chat_c4", 1)], runs[("S1_chat_c4", 2)]]
    assert retried["attempts"][1]["seed"] == seeds.run_seed(0, "S1_chat", 4, 2)
    result = json.loads((tmp_path / "a" / "S1_chat_c4.json").read_text())
    assert result["bench_seed"] == str(runs[("S1_chat_c4", 2)])


def test_same_seed_same_prompts_other_seed_other_prompts(bench_stub_server, fake_bench, tmp_path):
    assert S.main(args(bench_stub_server, tmp_path / "a", fake_bench, "--seed", "7")) == 0
    first = measured(fake_bench)
    first_warm = [c["seed"] for c in fake_bench.calls_made("warmup")]
    fake_bench.calls.write_text("")
    assert S.main(args(bench_stub_server, tmp_path / "b", fake_bench, "--seed", "7")) == 0
    assert measured(fake_bench) == first  # the two sides of a comparison send identical prompts
    assert [c["seed"] for c in fake_bench.calls_made("warmup")] == first_warm
    fake_bench.calls.write_text("")
    assert S.main(args(bench_stub_server, tmp_path / "c", fake_bench, "--seed", "8")) == 0
    other = measured(fake_bench)
    assert other.keys() == first.keys() and not set(other.values()) & set(first.values())


def test_seed_derivation_is_stable_and_in_range():
    a = seeds.run_seed(0, "S1_chat", 1, 1)
    assert a == seeds.run_seed(0, "S1_chat", 1, 1) and 0 <= a < 2**31 - 1
    others = {seeds.run_seed(0, "S1_chat", 2, 1), seeds.run_seed(0, "S1_chat", 1, 2),
              seeds.run_seed(1, "S1_chat", 1, 1), seeds.run_seed(0, "S2_summary", 1, 1),
              seeds.run_seed(0, "S1_chat", 1, 1, seeds.WARMUP)}
    assert a not in others and len(others) == 5
