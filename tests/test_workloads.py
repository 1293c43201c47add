"""Scenario table: the dataset flags each scenario hands `vllm bench serve`, scaling, identity,
natural-end validation, and the spec-decode helpers (acceptance gate, /metrics parser, the Korean acceptance columns)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.analysis import results as R
from bench.analysis import side as SIDE
from bench.analysis import spec as SPEC
from bench.analysis import summary as SUMMARY
from bench.common import workloads as W

# Captured from `vllm serve` (CPU build 0.32.0, ngram k=4) before and after a short run: the
# counters `vllm bench serve` and the sweep's telemetry read (plus the `_created` gauges next to them).
METRICS_BEFORE = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 10.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="tiny"} 1.7960533148492818e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 40.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 12.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="0"} 6.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="1"} 3.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="2"} 2.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="3"} 1.0
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 0.0
"""
METRICS_AFTER = METRICS_BEFORE.replace("} 10.0", "} 110.0").replace("} 40.0", "} 440.0").replace(
    "} 12.0", "} 232.0").replace('position="0"} 6.0', 'position="0"} 86.0').replace(
    'position="1"} 3.0', 'position="1"} 63.0').replace('position="2"} 2.0', 'position="2"} 47.0').replace(
    'position="3"} 1.0', 'position="3"} 36.0')


def test_random_scenarios_keep_the_poc_flags():
    assert W.WORKLOADS["S1_chat"].dataset_args() == [
        "--dataset-name", "random", "--random-input-len", "256", "--random-output-len", "128",
        "--random-range-ratio", "0", "--ignore-eos"]
    assert list(W.DEFAULT_WORKLOADS) == ["S1_chat", "S2_summary", "S3_moderation", "S4_rag"]


def test_korean_runs_the_custom_dataset_with_chat_template_and_natural_ends():
    k = W.WORKLOADS["K_korean"]
    args = k.dataset_args()
    assert args[:2] == ["--dataset-name", "custom"] and args[args.index("--custom-output-len") + 1] == "256"
    assert Path(args[args.index("--dataset-path") + 1]).name == W.KOREAN_PROMPTS
    assert "--ignore-eos" not in args and "--skip-chat-template" not in args
    assert k.concurrencies == (1, 8) and k.real_text and not k.fixed_output
    assert k.scaled(0.0625).output_len == 16 and k.scaled(0.0625).dataset_file == W.KOREAN_PROMPTS


def test_korean_finds_its_file_beside_the_modules_as_the_job_mounts_it(tmp_path):
    (tmp_path / W.KOREAN_PROMPTS).write_text('{"prompt": "안녕하세요"}\n', encoding="utf-8")
    args = W.WORKLOADS["K_korean"].dataset_args(tmp_path)
    assert args[args.index("--dataset-path") + 1] == str(tmp_path / W.KOREAN_PROMPTS)
    with pytest.raises(FileNotFoundError, match="korean_marketplace.jsonl not found"):
        W.WORKLOADS["K_korean"].dataset_args(tmp_path / "empty")


def test_shared_prefix_is_ninety_percent_prefix_and_expects_hits():
    s5 = W.WORKLOADS["S5_shared_prefix"]
    args = s5.dataset_args()
    value = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--prefix-repetition")}
    assert value == {"--prefix-repetition-prefix-len": "1843", "--prefix-repetition-suffix-len": "205",
                     "--prefix-repetition-num-prefixes": "4", "--prefix-repetition-output-len": "256"}
    assert 0.89 < s5.prefix_len / s5.input_len < 0.91 and s5.prefix_hits_expected
    assert not any(w.prefix_hits_expected for n, w in W.WORKLOADS.items() if n != "S5_shared_prefix")
    small = s5.scaled(0.0625)
    assert (small.prefix_len, small.suffix_len, small.output_len) == (115, 13, 16)


def test_the_prompt_set_is_part_of_the_scenario_identity(tmp_path):
    (tmp_path / W.KOREAN_PROMPTS).write_text('{"prompt": "가"}\n', encoding="utf-8")
    one = W.WORKLOADS["K_korean"].identity(tmp_path)
    (tmp_path / W.KOREAN_PROMPTS).write_text('{"prompt": "나"}\n', encoding="utf-8")
    assert W.WORKLOADS["K_korean"].identity(tmp_path) != one
    assert "dataset_sha256" not in W.WORKLOADS["S1_chat"].identity()


def _result(scenario: str, total_out: int, **extra) -> dict:
    return {"num_prompts": 4, "completed": 4, "failed": 0, "duration": 1.0, "output_throughput": 10.0,
            "request_throughput": 1.0, "p50_ttft_ms": 1, "p99_ttft_ms": 2, "p50_itl_ms": 1, "p99_itl_ms": 2,
            "total_output_tokens": total_out, R.META_OUTPUT_LEN: "256", **extra}


def test_natural_ends_are_valid_for_korean_only():
    assert R.from_dict(_result("K_korean", 300), scenario="K_korean", concurrency=1).valid
    short = R.from_dict(_result("S2_summary", 300), scenario="S2_summary", concurrency=1)
    assert not short.valid and "short outputs" in short.reason


def test_acceptance_gate_applies_to_real_text_below_ten_percent():
    low = R.from_dict(_result("K_korean", 300, spec_decode_acceptance_rate=4.2), scenario="K_korean", concurrency=8)
    assert "accepted 4.2 %" in SPEC.gate_problem(low) and "configuration problem" in SPEC.gate_problem(low)
    ok = R.from_dict(_result("K_korean", 300, spec_decode_acceptance_rate=26.0), scenario="K_korean", concurrency=8)
    assert SPEC.gate_problem(ok) is None
    random_low = R.from_dict(_result("S1_chat", 4 * 256, spec_decode_acceptance_rate=1.0), scenario="S1_chat",
                             concurrency=8)
    assert SPEC.gate_problem(random_low) is None
    no_spec = R.from_dict(_result("K_korean", 300), scenario="K_korean", concurrency=8)
    assert SPEC.gate_problem(no_spec) is None


def test_acceptance_from_captured_counter_text():
    got = SPEC.acceptance_from_metrics(METRICS_BEFORE, METRICS_AFTER)
    assert got["drafts"] == 100
    assert got["acceptance_pct"] == pytest.approx(100 * 220 / 400)
    assert got["acceptance_length"] == pytest.approx(1 + 220 / 100)
    assert got["per_position"] == pytest.approx([0.80, 0.60, 0.45, 0.35])
    assert SPEC.acceptance_from_metrics("", METRICS_AFTER) is None  # no spec decoding on that server
    idle = SPEC.acceptance_from_metrics(METRICS_AFTER, METRICS_AFTER)
    assert idle["acceptance_pct"] is None and idle["drafts"] == 0


def test_table7_row_from_korean_runs():
    runs = [
        R.from_dict(_result("K_korean", 300, spec_decode_acceptance_rate=56.0, output_throughput=48.5,
                            p50_e2el_ms=2690.0, spec_decode_per_position_acceptance_rates=[0.84, 0.6, 0.39, 0.27]),
                    scenario="K_korean", concurrency=1),
        R.from_dict(_result("K_korean", 300, spec_decode_acceptance_rate=54.7, output_throughput=281.5),
                    scenario="K_korean", concurrency=8),
    ]
    row = SPEC.table7_row(runs)
    assert row.acceptance_text == "54.7-56.0%" and row.per_position_text == "0.84 / 0.60 / 0.39 / 0.27"
    assert (row.c1_tok_s, row.c1_e2el_p50_s, row.c8_tok_s) == (48.5, 2.69, 281.5)
    md = "\n".join(SPEC.table7_markdown([("MTP assistant (k=4)", row), ("baseline", None)]))
    assert "| MTP assistant (k=4) | 54.7-56.0% | 0.84 / 0.60 / 0.39 / 0.27 | 48.5 | 2.69 s | 281.5 |" in md
    assert json.dumps(row.as_dict())


def test_report_gives_table7_and_flags_the_gate(tmp_path):
    from bench.analysis import report as REP

    rows = {1: dict(spec_decode_acceptance_rate=4.0, output_throughput=48.5, p50_e2el_ms=2690.0,
                    spec_decode_per_position_acceptance_rates=[0.1, 0.05, 0.0, 0.0]),
            8: dict(spec_decode_acceptance_rate=3.0, output_throughput=281.5)}
    for c, extra in rows.items():
        data = {**_result("K_korean", 300, max_concurrency=c, **extra), "scenario": "K_korean", "concurrency": str(c)}
        (tmp_path / R.result_filename("K_korean", c)).write_text(json.dumps(data))
    side = SIDE.load_side(tmp_path, label="fp8-mtp")
    summary, issues = SUMMARY.build_summary(side, None, ttft_ms=500, itl_ms=50, threshold=1.5)
    md = REP.render_markdown(side, None, summary, issues, [], None)
    assert "## Korean prompt set (acceptance, c1 tok/s, c1 E2E p50, c8 tok/s)" in md
    assert "| fp8-mtp | 3.0-4.0% | 0.10 / 0.05 / 0.00 / 0.00 | 48.5 | 2.69 s | 281.5 |" in md
    assert "## Configuration problems" in md and "K_korean c=8: speculative decoding accepted 3.0 %" in md
