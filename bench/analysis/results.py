"""The one reader of `vllm bench serve` result files.

Sweep validation, `--resume` and the report all go through `load_result`, so a run is judged valid
or invalid by the same rules everywhere. A result is VALID only when:

- the file exists, is a JSON object and holds every key in `REQUIRED_KEYS`;
- `completed` equals the number of prompts asked for and `failed` is 0 (`vllm bench serve` exits 0
  and writes a file with zeros in every metric when every request failed, e.g. a wrong model name);
- throughput is positive and, when the output length is known, every request produced that many
  tokens (the random dataset runs with ignore-eos, so anything shorter means the server cut it);
  scenarios whose answers end naturally (`bench.common.workloads`, K_korean) only cap the output;
- where the caller knows what was planned (`Expectation`), the file's scenario, concurrency, prompt
  count and run hash match the plan (a result recorded with other parameters is stale).

A run's telemetry (bench/run/telemetry.py) is judged here too: a run during which the server
restarted is invalid (`restart_problem`), and a random-prompt run that took more than
`SUSPECT_PREFIX_CACHE_PCT` of its prompt tokens from the prefix cache is suspect (`suspect_reason`).

Keys written by vLLM differ between releases (0.33 adds `latencies`, `queue_times`, client queue
times); only the keys below are read, extra keys are ignored.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.common import workloads as W

# Keys the sweep asks vLLM for (--percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99)
# and that the report reads. Present in vLLM 0.26 and 0.32 result files.
REQUIRED_KEYS: tuple[str, ...] = (
    "num_prompts",
    "completed",
    "failed",
    "duration",
    "output_throughput",
    "request_throughput",
    "p50_ttft_ms",
    "p99_ttft_ms",
    "p50_itl_ms",
    "p99_itl_ms",
)

# Metadata the sweep passes with `--metadata`; vLLM stores the values as strings at the top level.
META_SCENARIO = "scenario"
META_CONCURRENCY = "concurrency"
META_INPUT_LEN = "scenario_input_len"
META_OUTPUT_LEN = "scenario_output_len"
META_RUN_HASH = "bench_run_hash"
META_SEED = "bench_seed"  # the seed this process drew its prompts with (bench.run.seeds)
META_PHASE = "bench_phase"  # "measure" or "warmup"

_RESULT_NAME = re.compile(r"^(?P<scenario>[A-Za-z0-9][A-Za-z0-9_-]*)_c(?P<concurrency>[0-9]+)\.json$")


def result_filename(scenario: str, concurrency: int) -> str:
    return f"{scenario}_c{concurrency}.json"


def invalid_filename(scenario: str, concurrency: int, attempt: int) -> str:
    """Where an invalid attempt's raw file is kept; never matches `parse_result_filename`."""
    return f"{scenario}_c{concurrency}.attempt{attempt}.invalid.json"


def suspect_filename(scenario: str, concurrency: int, attempt: int) -> str:
    """Where a suspect attempt that was retried is kept; never matches `parse_result_filename`."""
    return f"{scenario}_c{concurrency}.attempt{attempt}.suspect.json"


def stale_filename(scenario: str, concurrency: int, n: int) -> str:
    """Where a result recorded with other parameters is moved on `--resume`."""
    return f"{scenario}_c{concurrency}.stale{n}.json"


def parse_result_filename(name: str) -> tuple[str, int] | None:
    """`S1_chat_c8.json` -> ("S1_chat", 8); anything else (manifest, invalid copies) -> None."""
    match = _RESULT_NAME.match(name)
    if not match:
        return None
    return match["scenario"], int(match["concurrency"])


@dataclass(frozen=True)
class Expectation:
    """What the sweep planned for one combination; None fields are not checked."""

    scenario: str
    concurrency: int
    num_prompts: int | None = None
    output_len: int | None = None
    run_hash: str | None = None


@dataclass(frozen=True)
class RunResult:
    scenario: str
    concurrency: int
    path: str | None
    problems: tuple[str, ...]
    num_prompts: int | None = None
    completed: int | None = None
    failed: int | None = None
    duration_s: float | None = None
    output_tok_s: float | None = None
    req_s: float | None = None
    total_tok_s: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p90_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p90_ms: float | None = None
    itl_p99_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p99_ms: float | None = None
    e2el_p50_ms: float | None = None
    e2el_p99_ms: float | None = None
    input_len: int | None = None
    output_len: int | None = None
    run_hash: str | None = None
    spec_acceptance_rate_pct: float | None = None
    spec_acceptance_length: float | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def valid(self) -> bool:
        return not self.problems

    @property
    def reason(self) -> str | None:
        return "; ".join(self.problems) if self.problems else None

    def with_problems(self, *extra: str) -> RunResult:
        return replace(self, problems=self.problems + tuple(p for p in extra if p))


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _int(value: Any) -> int | None:
    number = _num(value)
    return int(number) if number is not None and number == int(number) else None


def missing_result(scenario: str, concurrency: int, reason: str) -> RunResult:
    return RunResult(scenario=scenario, concurrency=concurrency, path=None, problems=(reason,))


def load_result(path: Path, expect: Expectation | None = None) -> RunResult:
    """Read one result file and judge it. Never raises for a bad file: the problems say why."""
    parsed = parse_result_filename(path.name)
    scenario = expect.scenario if expect else (parsed[0] if parsed else path.stem)
    concurrency = expect.concurrency if expect else (parsed[1] if parsed else 0)
    if not path.is_file():
        return missing_result(scenario, concurrency, "no result file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return RunResult(scenario, concurrency, str(path), (f"unreadable result file: {exc}",))
    if not isinstance(data, dict):
        return RunResult(scenario, concurrency, str(path), ("result file is not a JSON object",))
    return from_dict(data, scenario=scenario, concurrency=concurrency, path=str(path), expect=expect)


def from_dict(
    data: dict[str, Any],
    *,
    scenario: str,
    concurrency: int,
    path: str | None = None,
    expect: Expectation | None = None,
) -> RunResult:
    problems: list[str] = []
    missing = [key for key in REQUIRED_KEYS if _num(data.get(key)) is None]
    if missing:
        problems.append("missing keys: " + ", ".join(missing))

    num_prompts = _int(data.get("num_prompts"))
    completed = _int(data.get("completed"))
    failed = _int(data.get("failed"))
    output_tok_s = _num(data.get("output_throughput"))
    output_len = _int(data.get(META_OUTPUT_LEN))
    input_len = _int(data.get(META_INPUT_LEN))
    run_hash = data.get(META_RUN_HASH)

    wanted = expect.num_prompts if expect and expect.num_prompts is not None else num_prompts
    if expect and expect.num_prompts is not None and num_prompts is not None and num_prompts != wanted:
        problems.append(f"num_prompts {num_prompts} in file, {wanted} planned")
    if failed:
        problems.append(f"{failed} failed requests")
    if completed is not None and wanted is not None and completed < wanted:
        problems.append(f"completed {completed} < {wanted} prompts")
    if output_tok_s is not None and output_tok_s <= 0 and not missing:
        problems.append("output throughput is 0")

    expected_out = expect.output_len if expect and expect.output_len else output_len
    total_out = _int(data.get("total_output_tokens"))
    # Scenarios of real text (K_korean) end where the model ends them: output_len is only a cap.
    if not W.fixed_output(scenario):
        expected_out = None
    if expected_out and completed and total_out is not None and total_out < completed * expected_out:
        problems.append(
            f"short outputs: {total_out} tokens for {completed} requests of {expected_out}"
        )

    if expect:
        file_scenario = data.get(META_SCENARIO)
        if file_scenario is not None and str(file_scenario) != expect.scenario:
            problems.append(f"scenario {file_scenario} in file, {expect.scenario} planned")
        file_conc = _int(data.get("max_concurrency"))
        if file_conc is None:
            file_conc = _int(data.get(META_CONCURRENCY))
        if file_conc is not None and file_conc != expect.concurrency:
            problems.append(f"concurrency {file_conc} in file, {expect.concurrency} planned")
        if expect.run_hash and run_hash != expect.run_hash:
            problems.append(
                f"stale: recorded with run hash {run_hash or 'none'}, plan has {expect.run_hash}"
            )

    spec_rate = _num(data.get("spec_decode_acceptance_rate"))
    spec_len = _num(data.get("spec_decode_acceptance_length"))
    return RunResult(
        scenario=scenario,
        concurrency=concurrency,
        path=path,
        problems=tuple(problems),
        num_prompts=num_prompts,
        completed=completed,
        failed=failed,
        duration_s=_num(data.get("duration")),
        output_tok_s=output_tok_s,
        req_s=_num(data.get("request_throughput")),
        total_tok_s=_num(data.get("total_token_throughput")),
        ttft_p50_ms=_num(data.get("p50_ttft_ms")),
        ttft_p90_ms=_num(data.get("p90_ttft_ms")),
        ttft_p99_ms=_num(data.get("p99_ttft_ms")),
        itl_p50_ms=_num(data.get("p50_itl_ms")),
        itl_p90_ms=_num(data.get("p90_itl_ms")),
        itl_p99_ms=_num(data.get("p99_itl_ms")),
        tpot_p50_ms=_num(data.get("p50_tpot_ms")),
        tpot_p99_ms=_num(data.get("p99_tpot_ms")),
        e2el_p50_ms=_num(data.get("p50_e2el_ms")),
        e2el_p99_ms=_num(data.get("p99_e2el_ms")),
        input_len=input_len,
        output_len=output_len,
        run_hash=str(run_hash) if run_hash is not None else None,
        spec_acceptance_rate_pct=spec_rate,
        spec_acceptance_length=spec_len,
        raw=data,
    )


# ---------------------------------------------------------------------------------------------
# A run's telemetry, judged (the sweep judges each run so; the report judges it again)


SUSPECT_PREFIX_CACHE_PCT = 5.0


def suspect_reason(summary: dict[str, Any] | None, checked: bool,
                   limit_pct: float = SUSPECT_PREFIX_CACHE_PCT) -> str | None:
    """Why a run's numbers are suspect, or None: a random-prompt run served from the prefix cache."""
    if not summary or not checked:
        return None
    pct = summary.get("prefix_cache_hit_pct")
    if pct is not None and pct > limit_pct:
        return (f"prefix-cache hits {pct:.1f}% of prompt tokens (> {limit_pct:g}%): prompts were served "
                "from the cache, so the run measures the cache, not the hardware")
    return None


def restart_problem(summary: dict[str, Any] | None) -> str | None:
    if summary and summary.get("restart_evidence"):
        return f"server restarted during the run: {summary['restart_evidence']}"
    return None


# ---------------------------------------------------------------------------------------------
# Runs whose figures cannot be trusted for what they claim (judged by the sweep and the report alike)


MIN_CHUNKS_PER_REQUEST = 2.0
UNMEASURED_DECODE = "decode latency not measured"
SPEC_COLLAPSE = "speculative decoding accepted"
MIN_SPEC_ACCEPTANCE_PCT = W.ACCEPTANCE_GATE_PCT  # 10 %: the same floor as the real-text gate (analysis/spec.py)


def chunks_per_request(run: RunResult) -> float | None:
    """Streamed chunks per request, on average: counted from per-request detail (`itls`, one gap
    between two chunks each) where saved, else estimated from the means (the gaps of a request add up
    to its end-to-end latency less its TTFT); 1 where no gap at all was measured (ITL p99 0)."""
    detail = run.raw.get("itls")
    if isinstance(detail, list) and detail and all(isinstance(g, list) for g in detail):
        return sum(len(g) + 1 for g in detail) / len(detail)
    mean_itl, e2el, ttft = (_num(run.raw.get(k)) for k in ("mean_itl_ms", "mean_e2el_ms", "mean_ttft_ms"))
    if mean_itl and mean_itl > 0 and e2el is not None and ttft is not None:
        return 1.0 + max(0.0, e2el - ttft) / mean_itl
    if run.itl_p99_ms == 0.0 and (run.output_len is None or run.output_len > 1):
        return 1.0
    return None


def min_chunks(output_len: int | None) -> float:
    """Chunks per request, on average, below which a run's decode latency counts as not measured: two
    (a gap per request); for two-token answers, which cannot stream more than two chunks, 1.5 (at least
    half the requests streamed their two tokens apart), so that one bunched request does not unmake a run."""
    if output_len == 2:
        return 1.0 + (MIN_CHUNKS_PER_REQUEST - 1.0) / 2
    return MIN_CHUNKS_PER_REQUEST


def unmeasured_decode_reason(run: RunResult) -> str | None:
    """Why a run is no evidence for or against the decode limit: its answers came in fewer chunks than
    `min_chunks` on average, so there was (almost) no gap between chunks to measure."""
    if not run.valid:
        return None
    chunks, least = chunks_per_request(run), min_chunks(run.output_len)
    if chunks is None or chunks >= least:
        return None
    itl = "-" if run.itl_p99_ms is None else f"{run.itl_p99_ms:.1f}"
    tpot = "" if run.tpot_p99_ms is None else f", TPOT p99 {run.tpot_p99_ms:.2f} ms"
    shown = math.floor(chunks * 100) / 100  # rounded down: never "2.00 chunks (fewer than 2)"
    return (f"{UNMEASURED_DECODE}: the requests streamed {shown:.2f} chunks on average (fewer than "
            f"{least:g}; ITL p99 {itl} ms{tpot}), so the run is no evidence for or against the decode limit")


def spec_acceptance_pct(run: RunResult, telemetry: dict[str, Any] | None) -> float | None:
    """Speculative decoding's acceptance in percent: accepted / draft tokens over the run from the
    server's counters (vllm:spec_decode_num_accepted_tokens / _num_draft_tokens), else the rate
    `vllm bench serve` wrote; None without speculative decoding (no draft token)."""
    tele = telemetry or {}
    drafts, accepted = _num(tele.get("spec_draft_tokens")), _num(tele.get("spec_accepted_tokens"))
    if drafts and drafts > 0 and accepted is not None:
        return 100.0 * accepted / drafts
    return run.spec_acceptance_rate_pct


def spec_collapse_reason(run: RunResult, telemetry: dict[str, Any] | None,
                         floor_pct: float = MIN_SPEC_ACCEPTANCE_PCT) -> str | None:
    """Why a run with speculative decoding is suspect: on real text (a scenario of real language:
    acceptance on random tokens says nothing) its draft acceptance fell below the floor (the draft
    is rejected nearly always: a broken draft model or quantisation, and a throughput that says
    nothing about a working configuration)."""
    if not run.valid or not W.real_text(run.scenario):
        return None
    pct = spec_acceptance_pct(run, telemetry)
    if pct is None or pct >= floor_pct:
        return None
    return (f"{SPEC_COLLAPSE} {pct:.1f}% of draft tokens (below the floor of {floor_pct:g}%, "
            "bench sweep --min-spec-acceptance-pct): the draft is almost always rejected, so the run measures a broken "
            "draft, not the configuration")


# ---------------------------------------------------------------------------------------------
# Request errors in a run's log, as whole sentences

# `vllm bench serve` prints each failed request's error as "Error N: <text>"; an exception the client
# raised is a whole Python traceback over many lines, and only its last line says what went wrong.
_ERROR_LINE = re.compile(r"^Error [0-9]+: ?(?P<msg>.*)$")
TRACEBACK_HEAD = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Za-z_][A-Za-z0-9_]*(?::.*)?$")
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
REQUEST_ERRORS = "request errors: "


def exception_line(lines: list[str]) -> str | None:
    """The exception a traceback ends with ("ConnectionRefusedError: [Errno 111] Connection refused"),
    from the lines after its head; None when the block holds none."""
    last = None
    for line in lines:
        if _ERROR_LINE.match(line) or line.startswith("="):
            break
        text = line.strip()
        if not text or line[0].isspace() or text == TRACEBACK_HEAD or text.startswith(_CHAINED):
            continue
        if _EXCEPTION_LINE.match(text):
            last = text
        elif last is not None:
            break
    return last


def traceback_words(exception: str | None, log_name: str | None = None) -> str:
    """A traceback in words: the exception it ends with, said to be its last line, and where it all is."""
    where = f"; all of it in {log_name}" if log_name else ""
    if exception:
        return f"{exception[:200]} (the last line of its Python traceback{where})"
    return "a Python traceback that names no exception" + (f" (all of it in {log_name})" if log_name else "")


def request_errors(text: str, log_name: str | None = None, limit: int = 3) -> list[str]:
    """The first distinct request errors a `vllm bench serve` log shows, each as one phrase: the error
    as printed ("Not Found"), or for a traceback the exception it ends with, said to be its last line
    and where the whole of it is (`log_name`); never the traceback's first line."""
    lines = text.splitlines()
    seen: list[str] = []
    for i, line in enumerate(lines):
        m = _ERROR_LINE.match(line)
        if not m:
            continue
        msg = m["msg"].strip()
        if not msg or msg == TRACEBACK_HEAD:
            msg = traceback_words(exception_line(lines[i + 1:]), log_name)
        else:
            msg = msg[:200]
        if msg not in seen:
            seen.append(msg)
            if len(seen) >= limit:
                break
    return seen


def whole_reason(reason: str | None, log_text: str | None, log_name: str | None = None) -> str | None:
    """A recorded reason whose request errors were cut to a traceback's first line ("request errors:
    Traceback (most recent call last):", as sweeps before this rule wrote it), made whole again from the
    run's log where it is at hand, else said to be cut."""
    if not reason or REQUEST_ERRORS not in reason:
        return reason
    head, _, tail = reason.partition(REQUEST_ERRORS)
    segment, sep, after = tail.partition("; ")
    if TRACEBACK_HEAD not in segment:
        return reason
    errors = request_errors(log_text, log_name) if log_text else []
    if not errors:
        cut = ("a Python exception whose traceback the sweep cut to its first line ("
               + (f"the whole of it is in {log_name})" if log_text and log_name else "the run's log is not in this folder)"))
        errors = list(dict.fromkeys(cut if e.strip() == TRACEBACK_HEAD else e for e in segment.split(" / ")))
    return f"{head}{REQUEST_ERRORS}{' / '.join(errors)}{sep}{after}"
