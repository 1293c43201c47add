"""The real loading path, end to end: vLLM (CPU) streams a model from S3 with the stack's loader flags.

The server gets exactly what the stack renders for the weights (from `serving.build_serve_spec`, not
retyped): the model URI `s3://<weights bucket>/models/<hf id>/`, `--load-format runai_streamer` and
`--model-loader-extra-config`, plus the spec's AWS region. S3 is a moto server on 127.0.0.1;
credentials come only from a fake EKS Pod Identity agent on loopback (tests/fixtures/pod_identity.py):
the server's environment has no static keys, no profile and no instance metadata. The only copy of
the weights is the one in S3 (the local build is deleted after the upload), and the server must
answer a completion.

The batch traffic class adds the MTP draft as `--speculative-config` with its own S3 URI. The CPU
build can run a draft model (method `draft_model`), so the draft is streamed from its rendered S3
prefix too; the method is the one thing changed from the rendered config: `mtp` needs a Gemma 4
assistant architecture (model type gemma4_assistant, sharing the target's KV cache), which no tiny
random checkpoint provides, while `draft_model` loads any small causal LM with the target's
vocabulary through the same loader and URI. The tiny model stands in for the draft.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import boto3
import pytest

from stacks import catalog, serving
from tests.fixtures.bench_env import SERVE_FLAGS, TINY_MODEL, _free_port, _stop
from tests.fixtures.pod_identity import OTHER_CREDENTIAL_SOURCES, isolated_env

pytestmark = pytest.mark.vllm

BUCKET = "vllm-poc-dev-weights-123456789012"
INSTANCE = "g6e.2xlarge"
LOADER_FLAGS = ("--load-format", "--model-loader-extra-config", "--speculative-config")
SERVED = "tiny"


def _rendered(server: serving.ServerSettings) -> tuple[list[str], dict[str, str]]:
    """The model URI, the loader flags and the region env of the server as the stack renders it."""
    spec = serving.build_serve_spec(server, catalog.gpu_instance(INSTANCE),
                                    serving.ModelUris.for_bucket(BUCKET, server), region="ap-northeast-2")
    args = list(spec.args)
    picked = [args[0]]
    for flag in LOADER_FLAGS:
        if flag in args:
            picked += [flag, args[args.index(flag) + 1]]
    region = {k: spec.env[k] for k in ("AWS_REGION", "AWS_DEFAULT_REGION")}
    return picked, region


def _upload(client, folder: Path, prefix: str) -> list[str]:
    keys = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        key = prefix + path.relative_to(folder).as_posix()
        client.upload_file(str(path), BUCKET, key)
        keys.append(key)
    return keys


class PortTaken(Exception):
    pass


def _wait_ready(proc, url: str, log: Path, budget_s: float) -> None:
    """Until this process serves the model: other tests on the machine may hold a stub on the port."""
    deadline = time.monotonic() + budget_s
    while True:
        if proc.poll() is not None:
            text = log.read_text()
    assert completion["usage"]["completion_tokens"] == 8, completion
    assert completion["choices"][0]["text"].split(), completion
    # Target and draft weights were streamed by the Run:ai streamer from S3 (the only copy), not
    # downloaded: vLLM pulls just config and tokenizer files into its cache.
    assert text.count("Loading safetensors using Runai Model Streamer: 100% Completed") == 2, text[-4000:]
    assert "Loading drafter model" in text
    assert not list(tmp_path.rglob("*.safetensors"))
    # Credentials: only the agent's, fetched with the token, by the streamer's C++ S3 client as well
    # as by the Python side that lists and pulls the small files.
    served = pod_identity_agent.served()
    assert all(r.authorized for r in pod_identity_agent.requests)
    clients = {r.user_agent.split("/")[0] for r in served}
    assert "aws-sdk-cpp" in clients, (clients, text[-3000:])
