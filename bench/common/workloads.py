"""What each benchmark scenario sends: the dataset behind it, as data.

The PoC's four scenarios (chat, summary, moderation, RAG) are fixed-length random-token prompts. Two more measure
what random tokens cannot:

- `K_korean`: the project's own Korean marketplace prompt set (`bench/data/korean_marketplace.jsonl`,
  see bench/data/README.md) through `vllm bench serve --dataset-name custom`, the chat template
  applied by the client, outputs capped at 256 tokens and ending naturally (no ignore-eos). Real text
  is what speculative-decoding acceptance means anything on (the PoC compared draft methods on Korean
  prompts), so it runs at concurrency 1 and 8 by default, the two loads the PoC compared them at.
- `S5_shared_prefix`: a long common prefix plus a short unique suffix per request (vLLM's
  `prefix_repetition` dataset): 90 % of each prompt is shared, as in a public Gemma-4 prefix-caching
  measurement. It is
  the one scenario where prefix-cache hits are expected; no run of it is ever flagged for them.

Each scenario says which `vllm bench serve` dataset flags it needs (`dataset_args`), whether every
request must reach the output length (`fixed_output`), whether prefix-cache hits are expected
(`prefix_hits_expected`) and whether its text is real language (`real_text`: the acceptance gate
applies there). Every flag used exists in vLLM 0.26 and 0.32 (`custom`, `prefix_repetition`,
`--custom-output-len`, `--skip-chat-template`, `--prefix-repetition-*`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

# The prompt set lives in bench/data/, in the repository and in the bench Job alike: the Job mounts
# the bench package as the same tree, with the prompt set's ConfigMap projected into data/.
DATA_DIR = Path(__file__).resolve().parents[1] / "data"
KOREAN_PROMPTS = "korean_marketplace.jsonl"
PROMPT_CATEGORIES = ("chat_reply", "listing", "summarize", "moderation", "support", "rag")

# Below this acceptance rate (percent) on real text, speculative decoding is misconfigured rather
# than slow: the PoC measured 26-28 % for ngram and 55-56 % for MTP on Korean prompts, and a
# known failure mode (compressed-tensors FP8 target + fp8 KV, MTP draft without KV scales) sits
# near 0 %. Random-token prompts are exempt: nothing can be predicted on them.
ACCEPTANCE_GATE_PCT = 10.0
# Upper bound of the tokens a chat template adds around one user turn.
CHAT_TEMPLATE_TOKENS = 32


@dataclass(frozen=True)
class Workload:
    name: str
    dataset: str  # vLLM dataset name: random, custom or prefix_repetition
    input_len: int  # tokens per prompt; for custom datasets 0 (the prompts' own lengths)
    output_len: int  # tokens per request; for custom datasets a cap
    prefix_len: int = 0  # prefix_repetition: shared prefix tokens (part of input_len)
    num_prefixes: int = 0  # prefix_repetition: distinct prefixes
    dataset_file: str | None = None  # custom: file name in DATA_DIR
    concurrencies: tuple[int, ...] | None = None  # default concurrencies; None = the sweep's list
    fixed_output: bool = True  # every request must produce output_len tokens (ignore-eos)
    prefix_hits_expected: bool = False
    real_text: bool = False
    summary: str = ""

    @property
    def suffix_len(self) -> int:
        return self.input_len - self.prefix_len

    @property
    def lengths_text(self) -> str:
        if self.dataset == "custom":
            return f"prompt set/<={self.output_len}"
        return f"{self.input_len}/{self.output_len}"

    def scaled(self, scale: float) -> Workload:
        """Lengths multiplied by `scale` (tests); a custom dataset keeps its prompts, only its cap."""
        if scale == 1:
            return self
        out = max(2, round(self.output_len * scale))  # 1 token has no inter-token gap
        if self.dataset == "custom":
            return replace(self, output_len=out)
        if self.dataset == "prefix_repetition":
            prefix = max(1, round(self.prefix_len * scale))
            suffix = max(1, round(self.suffix_len * scale))
            return replace(self, input_len=prefix + suffix, prefix_len=prefix, output_len=out)
        return replace(self, input_len=max(1, round(self.input_len * scale)), output_len=out)

    def dataset_args(self, data_dir: Path | None = None) -> list[str]:
        """The `vllm bench serve` dataset flags of this scenario."""
        if self.dataset == "random":
            return ["--dataset-name", "random", "--random-input-len", str(self.input_len),
                    "--random-output-len", str(self.output_len), "--random-range-ratio", "0",
                    "--ignore-eos"]
        if self.dataset == "prefix_repetition":
            return ["--dataset-name", "prefix_repetition",
                    "--prefix-repetition-prefix-len", str(self.prefix_len),
                    "--prefix-repetition-suffix-len", str(self.suffix_len),
                    "--prefix-repetition-num-prefixes", str(self.num_prefixes),
                    "--prefix-repetition-output-len", str(self.output_len),
                    # Random tokens, like the random dataset: fixed lengths make runs comparable.
                    "--ignore-eos"]
        if self.dataset == "custom":
            # No --ignore-eos and no --skip-chat-template: answers end where the model ends them,
            # capped at output_len, and the prompts are wrapped in the model's chat template.
            return ["--dataset-name", "custom", "--dataset-path", str(self.data_path(data_dir)),
                    "--custom-output-len", str(self.output_len)]
        raise ValueError(f"scenario {self.name}: unknown dataset {self.dataset!r}")

    def data_path(self, data_dir: Path | None = None) -> Path:
        if not self.dataset_file:
            raise ValueError(f"scenario {self.name} has no dataset file")
        folder = Path(data_dir) if data_dir else DATA_DIR
        if (folder / self.dataset_file).is_file():
            return folder / self.dataset_file
        raise FileNotFoundError(f"scenario {self.name}: {self.dataset_file} not found in {folder}")

    def max_request_tokens(self) -> int:
        """The longest request (prompt + output) this scenario can send, for context-length checks.

        For the prompt set an upper bound: a byte-fallback tokenizer (Gemma's SentencePiece) never
        takes more tokens than a text's UTF-8 bytes, plus the chat template's few tokens."""
        if self.dataset == "custom":
            rows = load_prompt_set(self.data_path())
            return max(len(r["prompt"].encode("utf-8")) for r in rows) + CHAT_TEMPLATE_TOKENS + self.output_len
        return self.input_len + self.output_len

    def identity(self, data_dir: Path | None = None) -> dict[str, Any]:
        """What makes two runs of this scenario the same workload (part of the run hash)."""
        ident: dict[str, Any] = {"dataset": self.dataset, "input_len": self.input_len,
                                 "output_len": self.output_len}
        if self.dataset == "prefix_repetition":
            ident.update(prefix_len=self.prefix_len, num_prefixes=self.num_prefixes)
        if self.dataset_file:
            ident["dataset_sha256"] = file_sha256(self.data_path(data_dir))
        return ident


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        # The PoC's four scenarios (input/output tokens).
        Workload("S1_chat", "random", 256, 128, summary="the PoC's chat scenario"),
        Workload("S2_summary", "random", 1024, 256, summary="the PoC's summary scenario"),
        Workload("S3_moderation", "random", 512, 16, summary="the PoC's moderation scenario"),
        Workload("S4_rag", "random", 4096, 256, summary="the PoC's RAG scenario"),
        # A public Gemma-4 measurement: 90 % of each prompt a common prefix (prefix caching on: +40.5 % tok/s
        # and 2.1x lower TTFT p99 at c=8). Four prefixes stand for a few fixed system prompts or
        # policy documents; 2,048 input tokens keep it inside every stack's 8K context.
        Workload("S5_shared_prefix", "prefix_repetition", 2048, 256, prefix_len=1843, num_prefixes=4,
                 prefix_hits_expected=True,
                 summary="long shared system/context prefix + short unique question"),
        # The PoC's Korean comparison of draft methods: Korean marketplace prompts, c=1 and c=8.
        Workload("K_korean", "custom", 0, 256, dataset_file=KOREAN_PROMPTS, concurrencies=(1, 8),
                 fixed_output=False, real_text=True,
                 summary="Korean marketplace prompt set (chat template, natural ends, <= 256 tokens)"),
    ]
}
# The PoC's sweep: what runs when no scenario is named.
DEFAULT_WORKLOADS = ("S1_chat", "S2_summary", "S3_moderation", "S4_rag")


def workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(WORKLOADS)}") from None


def custom_dataset_available() -> bool:
    """vLLM's custom dataset reads JSONL with pandas, which vLLM only installs with its `bench` extra."""
    return importlib.util.find_spec("pandas") is not None


def chat_dataset(workload: Workload, scratch: Path, data_dir: Path | None = None) -> Path:
    """The prompt set as a ShareGPT-style JSON file (one user turn each) for the chat path."""
    rows = load_prompt_set(workload.data_path(data_dir))
    path = Path(scratch) / (Path(workload.dataset_file or workload.name).stem + ".chat.json")
    convs = [{"id": r.get("id", str(i)), "conversations": [{"from": "human", "value": r["prompt"]},
                                                             {"from": "gpt", "value": ""}]}
             for i, r in enumerate(rows)]
    path.write_text(json.dumps(convs, ensure_ascii=False), encoding="utf-8")
    return path


def prompt_format(workload: Workload, choice: str = "auto") -> str | None:
    """How a real-text scenario reaches the server: `custom` (vLLM's custom dataset, the chat
    template applied by the client, /v1/completions) or `chat` (the same prompts as one user turn
    each to /v1/chat/completions, the template applied by the server). `auto` takes custom where
    pandas is installed (vLLM's `bench` extra), else chat. None for synthetic scenarios."""
    if workload.dataset != "custom":
        return None
    if choice not in ("auto", "custom", "chat"):
        raise ValueError(f"prompt format {choice!r}: use auto, custom or chat")
    if choice == "auto":
        return "custom" if custom_dataset_available() else "chat"
    return choice


def request_args(workload: Workload, *, fmt: str | None, scratch: Path, data_dir: Path | None = None) -> list[str]:
    """Backend, endpoint and dataset flags of one `vllm bench serve` run of this scenario."""
    if fmt == "chat":
        return ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
                "--dataset-name", "sharegpt", "--dataset-path", str(chat_dataset(workload, scratch, data_dir)),
                "--sharegpt-output-len", str(workload.output_len)]
    return ["--backend", "openai", "--endpoint", "/v1/completions", *workload.dataset_args(data_dir)]


def fixed_output(scenario: str) -> bool:
    """Whether every request of this scenario must produce its full output length (unknown: yes)."""
    known = WORKLOADS.get(scenario)
    return known.fixed_output if known else True


def real_text(scenario: str) -> bool:
    """Whether this scenario's prompts are real language (where a draft's acceptance means something)."""
    known = WORKLOADS.get(scenario)
    return bool(known and known.real_text)


def load_prompt_set(path: Path | None = None) -> list[dict[str, Any]]:
    """The Korean prompt set as a list of {"id", "category", "prompt"}."""
    path = path or WORKLOADS["K_korean"].data_path()
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise ValueError(f"{path}:{number}: expected an object with a 'prompt' string")
        rows.append(row)
    return rows


def data_files() -> dict[str, str]:
    """Data files the bench Job needs beside the code: {file name: text}."""
    names = sorted({w.dataset_file for w in WORKLOADS.values() if w.dataset_file})
    return {name: (DATA_DIR / name).read_text(encoding="utf-8") for name in names}
