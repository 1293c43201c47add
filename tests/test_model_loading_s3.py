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
            output = log.read_text()
            if "Address already in use" in output:
                raise PortTaken(url)
            pytest.fail(f"vllm serve exited {proc.returncode}:\n{output[-5000:]}")
        try:
            with urllib.request.urlopen(f"{url}/v1/models", timeout=5) as resp:
                if [m["id"] for m in json.loads(resp.read())["data"]] == [SERVED]:
                    return
        except (OSError, ValueError, KeyError, TypeError):
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"vllm serve not ready after {budget_s:.0f} s:\n{log.read_text()[-5000:]}")
        time.sleep(0.5)


def _serve(vllm_env, args: list[str], env: dict[str, str], workdir: Path):
    """Start `vllm serve` on a free port; returns (process, url, log) once the model is served. The loader runs
    in the CPU build's worker process, with the environment the pod would give it (that platform keeps its
    multiprocessing executor even when `--distributed-executor-backend uni` is asked for)."""
    for attempt in range(3):
        port = _free_port()
        log = workdir / f"server-{attempt}.log"
        cmd = [vllm_env.vllm, "serve", *args, "--served-model-name", SERVED, "--host", "127.0.0.1",
               "--port", str(port), *SERVE_FLAGS]
        with log.open("w") as fh:
            proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, cwd=workdir)
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_ready(proc, url, log, budget_s=240)
            return proc, url, log
        except PortTaken:
            _stop(proc)
        except BaseException:
            _stop(proc)
            raise
    pytest.fail("no free port for vllm serve after 3 attempts")


def test_serves_a_model_streamed_from_s3_with_pod_identity_credentials(
        vllm_env, aws, pod_identity_agent, tmp_path):
    # batch: the class that speculates, so the rendered args carry the draft's S3 URI as well
    server = serving.ServerSettings(name="gemma", pool="l40s", model="fp8-dynamic", traffic_class="batch")
    rendered, region_env = _rendered(server)
    model_uri = rendered[0]
    speculative = json.loads(rendered[rendered.index("--speculative-config") + 1])
    assert model_uri == f"s3://{BUCKET}/models/{server.profile.hf_id}/"
    assert speculative["model"] == f"s3://{BUCKET}/models/{serving.MTP_DRAFT.hf_id}/"
    assert rendered[rendered.index("--load-format") + 1] == "runai_streamer"
    loader = json.loads(rendered[rendered.index("--model-loader-extra-config") + 1])
    assert set(loader) == {"concurrency", "memory_limit"}

    # The tiny model, built locally, uploaded to both rendered prefixes, then deleted.
    model_dir = tmp_path / "model"
    built = vllm_env.run([vllm_env.python, str(TINY_MODEL), str(model_dir)], timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "ap-northeast-2"})
    target_keys = _upload(s3, model_dir, model_uri.removeprefix(f"s3://{BUCKET}/"))
    draft_keys = _upload(s3, model_dir, speculative["model"].removeprefix(f"s3://{BUCKET}/"))
    assert any(k.endswith(".safetensors") for k in target_keys) and len(draft_keys) == len(target_keys)
    shutil.rmtree(model_dir)

    # Only the method changes (see the module docstring); the draft's URI is the rendered one.
    speculative = {**speculative, "method": "draft_model", "num_speculative_tokens": 2}
    args = list(rendered)
    args[args.index("--speculative-config") + 1] = json.dumps(speculative)
    env = isolated_env(vllm_env.env, pod_identity_agent, tmp_path / "home")
    env.update(region_env)
    env.update(AWS_ENDPOINT_URL=aws, RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING="0",
               VLLM_CPU_KVCACHE_SPACE="1", VLLM_CACHE_ROOT=str(vllm_env.cache_root),
               VLLM_ASSETS_CACHE=str(tmp_path / "vllm-assets"))
    assert not set(OTHER_CREDENTIAL_SOURCES) & set(env)
    proc, url, log = _serve(vllm_env, args, env, tmp_path)
    try:
        body = json.dumps({"model": SERVED, "prompt": "w1 w2 w3 w4", "max_tokens": 8,
                           "temperature": 0, "ignore_eos": True}).encode()
        request = urllib.request.Request(f"{url}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as resp:
            completion = json.loads(resp.read())
    finally:
        _stop(proc)
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
