"""`bench sweep`'s options: what it runs (server, scenarios, concurrencies, run sizes), where it writes,
and those that tie a sweep to its hardware and record telemetry around each run.

The bench Job sets the ones it knows from the stack (`JOB_FLAGS`); they keep one line in the help
and are described in docs/benchmark.md#the-bench-job."""

from __future__ import annotations

import argparse
import os

from bench.analysis import results as R
from bench.common import options as O
from bench.run import client as bench_client
from bench.run import extra_runs, sizing
from bench.run import telemetry as T
from bench.run.grid import DEFAULT_CONCURRENCIES

JOB_FLAGS = ("--variant", "--prices", "--capacity-types", "--node-name", "--image", "--server-args",
             "--gpu-metrics-url")


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name) or default


def add_measurement_options(p: argparse.ArgumentParser) -> None:
    O.add_capacity_type(p, default=_env("VLLM_POC_CAPACITY_TYPE"),
                        of="the server's node (default: its node label; env VLLM_POC_CAPACITY_TYPE)")
    O.add_metrics_url(p, "around each run")
    O.add_renamed(p, "--telemetry-interval-s", type=O.above_zero(float), default=T.DEFAULT_INTERVAL_S,
                  dest="telemetry_interval", metavar="SECONDS",
                  help="between telemetry samples during a run (default: %(default)s)")
    p.add_argument("--suspect-prefix-cache-pct", type=float, default=R.SUSPECT_PREFIX_CACHE_PCT, metavar="PCT",
                   help="a random-prompt run with more prompt tokens from the prefix cache is suspect "
                        "(default: %(default)s)")
    p.add_argument("--min-spec-acceptance-pct", type=float, default=R.MIN_SPEC_ACCEPTANCE_PCT, metavar="PCT",
                   help="a K_korean run whose speculative decoding accepted fewer drafts is suspect "
                        "(default: %(default)s)")
    job = p.add_argument_group(
        "set by the bench Job, each also from its environment variable (docs/benchmark.md#the-bench-job)",
        "  " + ", ".join(JOB_FLAGS))
    hidden = argparse.SUPPRESS
    job.add_argument("--variant", default=_env("VLLM_POC_VARIANT"), help=hidden)
    job.add_argument("--prices", default=_env("VLLM_POC_PRICES"), help=hidden)
    job.add_argument("--capacity-types", default=_env("VLLM_POC_CAPACITY_TYPES"), help=hidden)
    job.add_argument("--node-name", default=_env("NODE_NAME"), help=hidden)
    job.add_argument("--image", default=_env("VLLM_POC_IMAGE"), help=hidden)
    job.add_argument("--server-args", default=_env("VLLM_POC_SERVER_ARGS"), help=hidden)
    job.add_argument("--gpu-metrics-url", default=_env("VLLM_POC_GPU_METRICS_URL"), help=hidden)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base-url", required=True, metavar="URL", help="the server, e.g. http://gemma-fp8:8000")
    p.add_argument("--model", required=True, metavar="NAME", help="served model name (as in GET /v1/models)")
    p.add_argument("--tokenizer", required=True, metavar="DIR",
                   help="tokenizer folder, or the model's s3:// prefix")
    O.add_out(p, "sweep", "results, logs and manifest.json")
    p.add_argument("--scenarios", metavar="NAMES",
                   help="scenarios to run (default: S1_chat to S4_rag, and any --scenario)")
    p.add_argument("--scenario", action="append", metavar="NAME=IN/OUT",
                   help="set or add a scenario's input/output tokens, e.g. S1_chat=32/8 (repeatable)")
    p.add_argument("--scenario-concurrencies", action="append", type=O.named_concurrencies,
                   help="a scenario's own concurrencies, e.g. K_korean=1,8,64 (repeatable)")
    p.add_argument("--prompt-format", choices=("auto", "custom", "chat"), default="auto",
                   help="K_korean's chat template: custom (client side; needs pandas), chat (server side) or auto "
                        "(default: auto)")
    p.add_argument("--length-scale", type=O.above_zero(float), default=1.0,
                   help="factor on every scenario's lengths (tests)")
    p.add_argument("--concurrencies", default=",".join(map(str, DEFAULT_CONCURRENCIES)), type=O.concurrencies_text,
                   help="client concurrencies, increasing (default: %(default)s)")
    p.add_argument("--window-s", type=float, default=sizing.DEFAULT_WINDOW_S,
                   help=f"seconds each run holds its load, sized from a burst (at least {sizing.MIN_WINDOW_S:g}; "
                        "default: %(default)s)")
    p.add_argument("--min-prompts", type=int, default=sizing.MIN_REQUESTS,
                   help=f"fewest requests in a run (at least {sizing.MIN_REQUESTS}; default: %(default)s)")
    p.add_argument("--prompts-per-concurrency", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--warmups", default="auto", metavar="N",
                   help="requests of the burst that sizes each run, or auto: two waves (default: auto)")
    p.add_argument("--seed", type=int, default=0, help="dataset seed (default: %(default)s)")
    p.add_argument("--bench-args", default=_env("VLLM_POC_BENCH_ARGS"),
                   help="more `vllm bench serve` arguments, one quoted string (env VLLM_POC_BENCH_ARGS)")
    p.add_argument("--attempts", type=O.above_zero(int), default=2,
                   help="failed attempts before a combination is recorded invalid; a run that only fell "
                        f"short of its window runs again larger, up to {sizing.MAX_RESIZES} times more "
                        "(default: %(default)s)")
    O.add_run_timeout(p, 3600.0)
    O.add_health_timeout(p, 1800.0)
    p.add_argument("--health-interval", type=float, default=5.0, help=argparse.SUPPRESS)
    p.add_argument("--health-say-every", type=float, default=10.0, help=argparse.SUPPRESS)
    p.add_argument("--resume", action="store_true",
                   help="skip combinations whose result file re-validates against this plan")
    p.add_argument("--upload", default=_env("VLLM_POC_RESULTS_URI"), metavar="URI",
                   help="s3:// prefix each file goes to as it is written; --resume reads it first (env "
                        "VLLM_POC_RESULTS_URI)")
    p.add_argument("--vllm-bin", default=_env("VLLM_POC_VLLM_BIN"), metavar="CMD",
                   help="vllm command (default: `vllm` on PATH; env VLLM_POC_VLLM_BIN)")
    p.add_argument("--label", default=_env("VLLM_POC_LABEL"),
                   help="name of this configuration in reports (env VLLM_POC_LABEL)")
    p.add_argument("--instance-type", default=_env("VLLM_POC_INSTANCE_TYPE"), metavar="TYPE",
                   help="recorded in the manifest (env VLLM_POC_INSTANCE_TYPE)")
    p.add_argument("--gpus", type=O.above_zero(int), default=_env("VLLM_POC_GPUS", "1"),
                   help="GPUs behind the server (default: 1; env VLLM_POC_GPUS)")
    O.add_price(p, repeatable=False, default=_env("VLLM_POC_PRICE_PER_HOUR"),
                prices="those GPUs (/SPOT: on a Spot node); wins over --prices (env VLLM_POC_PRICE_PER_HOUR)")
    add_measurement_options(p)
    O.add_slo(p)
    extra_runs.add_arguments(p)
    bench_client.add_arguments(p)
