"""`bench sweep` options that tie a sweep to its hardware and record telemetry around each run."""

from __future__ import annotations

import argparse
import os

from bench.analysis import results as R
from bench.run import telemetry as T


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name) or default


def add_measurement_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prices", default=_env("VLLM_POC_PRICES"),
                   help="hourly price per capacity type, e.g. spot=1.50,on-demand=4.13: the one of the "
                        "node's capacity type is recorded (env VLLM_POC_PRICES)")
    p.add_argument("--capacity-type", default=_env("VLLM_POC_CAPACITY_TYPE"),
                   help="capacity type of the server's node (default: read from the node's "
                        "karpenter.sh/capacity-type label; env VLLM_POC_CAPACITY_TYPE)")
    p.add_argument("--capacity-types", default=_env("VLLM_POC_CAPACITY_TYPES"),
                   help="capacity types the server's pool allows; with one, it is the capacity type "
                        "when the node cannot be read (env VLLM_POC_CAPACITY_TYPES)")
    p.add_argument("--node-name", default=_env("NODE_NAME"),
                   help="node the bench runs on (the server's); its labels are read with the pod's "
                        "service account (env NODE_NAME)")
    p.add_argument("--image", default=_env("VLLM_POC_IMAGE"),
                   help="the server's container image, recorded and part of the run hash (env VLLM_POC_IMAGE)")
    p.add_argument("--metrics-url", default=None,
                   help="the server's Prometheus metrics, read before and after each run and sampled "
                        "during it (default: <base-url>/metrics; 'none' to skip)")
    p.add_argument("--gpu-metrics-url", default=_env("VLLM_POC_GPU_METRICS_URL"),
                   help="NVIDIA DCGM exporter metrics of the server's node, sampled during each run "
                        "(default: none; the Job sets it; env VLLM_POC_GPU_METRICS_URL)")
    p.add_argument("--telemetry-interval", type=float, default=T.DEFAULT_INTERVAL_S,
                   help="seconds between telemetry samples during a run (default: %(default)s)")
    p.add_argument("--suspect-prefix-cache-pct", type=float, default=R.SUSPECT_PREFIX_CACHE_PCT,
                   help="a random-prompt run with more prefix-cache hits than this percent of its "
                        "prompt tokens is suspect: retried, and left out of the report's figures "
                        "(default: %(default)s)")
    p.add_argument("--min-spec-acceptance-pct", type=float, default=R.MIN_SPEC_ACCEPTANCE_PCT,
                   help="a run on real text (K_korean) whose speculative decoding accepted fewer draft tokens "
                        "(accepted / draft, from the server's counters) than this percent is suspect: a collapsed "
                        "draft, left out of the "
                        "report's figures (default: %(default)s; a working MTP draft accepts about 55 %% on real text)")
    p.add_argument("--server-args", default=_env("VLLM_POC_SERVER_ARGS"),
                   help="the server's vllm serve flags, recorded in the manifest (env VLLM_POC_SERVER_ARGS)")
