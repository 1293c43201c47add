"""`bench sweep` options that tie a sweep to its hardware and record telemetry around each run.

The bench Job sets the ones it knows from the stack (`JOB_FLAGS`); they keep one line in the help
and are described in docs/benchmark.md#the-bench-job."""

from __future__ import annotations

import argparse
import os

from bench.analysis import results as R
from bench.common import options as O
from bench.run import telemetry as T

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
