"""The Korean marketplace prompt set: size, categories, language, uniqueness, lengths, shipping."""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter

import pytest

from bench.common import workloads as W

ROWS = W.load_prompt_set()
# Gemma's tokenizer is a SentencePiece model with byte fallback: a piece covers one or more
# characters or one byte, so a text never takes more tokens than its UTF-8 bytes. With that bound,
# the chat template's few tokens and the output cap, every prompt must fit the smallest context a
# stack serves (8K, the PoC's).
SMALLEST_CONTEXT = 8192
TEMPLATE_TOKENS = 32


def hangul_share(text: str) -> float:
    letters = [c for c in text if c.isalpha()]
    hangul = [c for c in letters if "\uac00" <= c <= "\ud7a3" or "\u3131" <= c <= "\u318e"]
    return len(hangul) / len(letters)


def normal(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFC", text)).strip()


def test_at_least_200_prompts_with_unique_ids():
    assert len(ROWS) >= 200
    ids = [r["id"] for r in ROWS]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"ko-\d{3}", i) for i in ids)


def test_every_category_is_covered_and_nothing_else():
    counts = Counter(r["category"] for r in ROWS)
    assert set(counts) == set(W.PROMPT_CATEGORIES)
    # No category is a token presence: each is at least a tenth of the set.
    assert min(counts.values()) >= len(ROWS) // 10, counts


def test_prompts_are_korean():
    shares = [hangul_share(r["prompt"]) for r in ROWS]
    assert min(shares) >= 0.75, min(shares)
    assert sum(shares) / len(shares) >= 0.95


def test_no_duplicate_prompts_even_after_whitespace_normalisation():
    prompts = [normal(r["prompt"]) for r in ROWS]
    dupes = [p[:60] for p, n in Counter(prompts).items() if n > 1]
    assert not dupes


def test_no_two_prompts_ask_the_same_thing_over_a_shared_context():
    # Support and RAG prompts share policy texts and passages; the questions must differ.
    tails = Counter(normal(r["prompt"]).rsplit("\n", 1)[-1][-80:] for r in ROWS)
    assert max(tails.values()) == 1


def test_lengths_vary_and_fit_the_context():
    chars = sorted(len(r["prompt"]) for r in ROWS)
    assert chars[0] < 120 and chars[-1] > 500, (chars[0], chars[-1])  # short chat to long RAG
    output_cap = W.WORKLOADS["K_korean"].output_len
    for row in ROWS:
        worst_case_tokens = len(row["prompt"].encode("utf-8")) + TEMPLATE_TOKENS
        assert worst_case_tokens + output_cap <= SMALLEST_CONTEXT, row["id"]


def test_file_is_what_vllm_custom_dataset_reads():
    path = W.WORKLOADS["K_korean"].data_path()
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        assert set(row) == {"id", "category", "prompt"} and row["prompt"].strip()
    # One object per line, no blank lines, UTF-8 (not \u escapes) so that the file stays small.
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n") and "\n\n" not in text and "\\u" not in text


def test_placeholders_only_no_real_looking_personal_data():
    for row in ROWS:
        for phone in re.findall(r"01[016789]-\d{3,4}-\d{4}", row["prompt"]):
            assert phone == "010-1234-5678", row["id"]


@pytest.mark.parametrize("name", ["K_korean"])
def test_data_file_ships_with_the_bench_code(name):
    files = W.data_files()
    assert W.WORKLOADS[name].dataset_file in files
    assert files[W.KOREAN_PROMPTS] == W.WORKLOADS[name].data_path().read_text(encoding="utf-8")


def test_the_rendered_config_maps_hold_the_prompt_set_within_the_size_limit(dev):
    (config_map,) = [c for c in dev.k8s("ConfigMap") if c["metadata"]["name"].startswith("bench-prompts-")]
    assert config_map["data"][W.KOREAN_PROMPTS] == W.WORKLOADS["K_korean"].data_path().read_text(encoding="utf-8")
    # Kubernetes refuses a ConfigMap over 1 MiB (data and metadata); leave room for both to grow.
    for config_map in [c for c in dev.k8s("ConfigMap") if c["metadata"]["name"].startswith(("bench-"))]:
        size = len(json.dumps(config_map).encode("utf-8"))
        assert size < 768 * 1024, (config_map["metadata"]["name"], size)
