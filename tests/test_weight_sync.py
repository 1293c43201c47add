"""The weight sync (`python -m weights sync|check`) against a fake Hugging Face Hub on loopback and moto S3.

The Hub side is huggingface_hub itself, pointed at tests/fixtures/fake_hub.py with HF_ENDPOINT; the S3
side is the shared weights.store code against a moto server over HTTP.
"""

from __future__ import annotations

import hashlib
import json
import threading

import boto3
import pytest

from stacks.ops import staging
from tests.fixtures.fake_hub import FakeHub, FakeRepo, start
from weights import hub
from weights.__main__ import main as weights_main
from weights.store import MiB, StageConfig, StagingError

BUCKET = "weights-test"
MODEL = "tiny-org/tiny-model"
DEST = f"s3://{BUCKET}/models/{MODEL}"
TOKEN = "hf_test_token"
# 5 MiB parts (S3's minimum), so an 11 MiB shard goes up in 3 parts.
CONFIG = StageConfig(concurrency=1, part_size=5 * MiB, multipart_threshold=5 * MiB)


def _blob(n: int, seed: int) -> bytes:
    block = hashlib.sha256(str(seed).encode()).digest()
    return (block * (n // len(block) + 1))[:n]


SHARDS = {"model-00001-of-00002.safetensors": _blob(11 * MiB, 1), "model-00002-of-00002.safetensors": _blob(3 * MiB, 2)}
INDEX = json.dumps({"metadata": {}, "weight_map": {"a.weight": "model-00001-of-00002.safetensors",
                                                   "b.weight": "model-00002-of-00002.safetensors"}}).encode()
FILES = {"config.json": b'{"model_type": "tiny"}', "model.safetensors.index.json": INDEX,
         ".gitattributes": b"*.safetensors filter=lfs\n", **SHARDS}


@pytest.fixture
def fake_hub(monkeypatch):
    fake, server = start(FakeHub(token=TOKEN))
    fake.add(FakeRepo(MODEL, dict(FILES)))
    monkeypatch.setenv("HF_ENDPOINT", fake.url)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    yield fake
    server.shutdown()


@pytest.fixture
def s3(aws):
    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "ap-northeast-2"})
    return client


class FlakyClient:
    """The moto client, failing every part upload after the first N (a pod killed mid-file)."""

    def __init__(self, client, fail_after_parts: int | None = None):
        self._client, self._fail_after, self.parts, self._lock = client, fail_after_parts, 0, threading.Lock()

    def __getattr__(self, name):
        return getattr(self._client, name)

    def upload_part(self, **kwargs):
        with self._lock:
            if self._fail_after is not None and self.parts >= self._fail_after:
                raise ConnectionError("simulated network drop")
            self.parts += 1
        return self._client.upload_part(**kwargs)


def _sync(client, tmp_path, **kw):
    return hub.sync(client, MODEL, "main", DEST, tmp_path / "scratch", token=TOKEN, config=CONFIG,
                    log=lambda msg: None, **kw)


def _objects(s3) -> dict[str, bytes]:
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    return {k.removeprefix(f"models/{MODEL}/"): s3.get_object(Bucket=BUCKET, Key=k)["Body"].read() for k in keys}


def test_first_run_uploads_second_run_skips_everything(fake_hub, s3, tmp_path):
    first = _sync(s3, tmp_path)
    staged = _objects(s3)
    assert staged == {k: v for k, v in FILES.items() if k != ".gitattributes"}
    assert first.uploaded_files == 4 and first.skipped_files == 0
    # the same recorded hash as stage-weights, so either path recognises the other's uploads
    head = s3.head_object(Bucket=BUCKET, Key=f"models/{MODEL}/model-00001-of-00002.safetensors")
    assert head["Metadata"]["sha256"] == hashlib.sha256(SHARDS["model-00001-of-00002.safetensors"]).hexdigest()
    assert not any((tmp_path / "scratch").iterdir()), "scratch is emptied after each file"

    fake_hub.requests.clear()
    second = _sync(s3, tmp_path)
    assert (second.uploaded_files, second.skipped_files) == (0, 4) and second.uploaded_bytes == 0
    # the shards were judged by the Hub's LFS sha256 alone: not downloaded again
    assert fake_hub.downloads("model-00001-of-00002.safetensors") == 0
    assert fake_hub.downloads("model-00002-of-00002.safetensors") == 0


def test_interrupted_run_resumes_with_the_parts_already_sent(fake_hub, s3, tmp_path):
    with pytest.raises(ConnectionError):
        _sync(FlakyClient(s3, fail_after_parts=2), tmp_path)
    uploads = s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
    assert len(uploads) == 1, "the interrupted upload stays in S3 to be resumed"

    again = FlakyClient(s3)
    summary = _sync(again, tmp_path)
    assert again.parts == 1, "only the missing third part of the big shard was sent"
    assert summary.resumed_bytes == 10 * MiB
    assert _objects(s3)["model-00001-of-00002.safetensors"] == SHARDS["model-00001-of-00002.safetensors"]
    assert not s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads")


def test_a_model_staged_from_a_laptop_is_recognised(fake_hub, s3, tmp_path):
    snapshot = tmp_path / "snap"
    snapshot.mkdir()
    for name, data in FILES.items():
        (snapshot / name).write_bytes(data)
    staging.stage(s3, snapshot, DEST, CONFIG, log=lambda m: None)
    summary = _sync(s3, tmp_path)
    assert summary.uploaded_files == 0 and summary.skipped_files == 4


def test_index_naming_a_missing_shard_fails_before_copying(fake_hub, s3, tmp_path):
    del fake_hub.repos[MODEL].files["model-00002-of-00002.safetensors"]
    with pytest.raises(StagingError, match="model-00002-of-00002.safetensors"):
        _sync(s3, tmp_path)
    assert _objects(s3) == {}


def test_a_file_larger_than_the_scratch_space_is_refused_up_front(fake_hub, s3, tmp_path):
    with pytest.raises(StagingError, match=r"model-00001-of-00002.safetensors.*weights.scratchGib"):
        _sync(s3, tmp_path, scratch_limit_bytes=8 * MiB)
    assert _objects(s3) == {}


def test_cli_sync_then_check_exit_codes(fake_hub, s3, tmp_path, monkeypatch, capsys):
    args = ["sync", "--model", MODEL, "--revision", "main", "--dest", DEST, "--scratch", str(tmp_path / "s")]
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert weights_main(args) == 2  # no token: the fake Hub answers 401, a retry cannot help
    assert "vllm-poc:hfToken" in capsys.readouterr().err

    assert weights_main(["check", "--dest", DEST, "--stage-hint", "python -m stacks stage-weights DIR " + DEST]) == 2
    err = capsys.readouterr().err
    assert "no config.json" in err and "stage-weights" in err

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert weights_main([*args[:4], "wrong-branch", *args[5:]]) == 2
    assert "weights.revisions" in capsys.readouterr().err
    assert weights_main(args) == 0
    assert "uploaded 4 file(s)" in capsys.readouterr().out
    assert weights_main(["check", "--dest", DEST]) == 0

    s3.delete_object(Bucket=BUCKET, Key=f"models/{MODEL}/model-00002-of-00002.safetensors")
    assert weights_main(["check", "--dest", DEST]) == 2
    assert "model-00002-of-00002.safetensors" in capsys.readouterr().err


def test_the_rendered_job_command_syncs_with_code_from_its_config_map(fake_hub, aws, tmp_path):
    """The dev stack's sync Job as rendered: its args, env and ConfigMap code, run as `python -m weights`.

    Only the pip install step is left out (the test environment has the pinned packages; tests stay
    off the network), and /scratch becomes a temporary directory.
    """
    import subprocess
    import sys

    from stacks.ops.render import render_stack
    from stacks.versions import extra

    rendered = render_stack("dev")
    (job,) = [j for j in rendered.k8s("Job") if j["metadata"]["name"].startswith("weights-google-gemma-4-31b-it-assistant-")]
    (code,) = [c for c in rendered.k8s("ConfigMap") if c["metadata"]["name"] == job["metadata"]["name"]]
    assert code["data"]["requirements.txt"].split() == extra("weight-sync")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:2] == ["sh", "-ec"] and 'exec python -m weights "$@"' in container["command"][2]

    package = tmp_path / "code" / "weights"
    package.mkdir(parents=True)
    for name, text in code["data"].items():
        (package / name).write_text(text)
    args = [str(tmp_path / "scratch") if a == "/scratch" else a for a in container["args"]]
    dest = args[args.index("--dest") + 1]
    bucket = dest.removeprefix("s3://").split("/", 1)[0]
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "ap-northeast-2"})
    fake_hub.add(FakeRepo("google/gemma-4-31B-it-assistant", {"config.json": b"{}", "model.safetensors": _blob(6 * MiB, 3)}))

    env = {**{e["name"]: e["value"] for e in container["env"] if "value" in e},
           "PYTHONPATH": str(tmp_path / "code"), "HF_TOKEN": TOKEN, "HF_ENDPOINT": fake_hub.url,
           "HF_HUB_DISABLE_XET": "1", "AWS_ENDPOINT_URL": aws, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "PATH": "/usr/bin:/bin", "HF_HOME": str(tmp_path / "hf-home")}
    run = lambda: subprocess.run([sys.executable, "-m", "weights", *args], cwd=tmp_path, env=env,  # noqa: E731
                                 capture_output=True, text=True, timeout=120)
    first = run()
    assert first.returncode == 0, first.stderr
    assert "uploaded 2 file(s)" in first.stdout
    assert str(package) in subprocess.run([sys.executable, "-c", "import weights.hub as h; print(h.__file__)"],
                                          cwd=tmp_path, env=env, capture_output=True, text=True).stdout
    second = run()
    assert second.returncode == 0 and "uploaded 0 file(s)" in second.stdout and "skipped 2 file(s)" in second.stdout


# -- failures that no retry fixes, whichever Hub call meets them ------------------------------------------


def _sync_args(tmp_path, *extra):
    return ["sync", "--model", MODEL, "--revision", "main", "--dest", DEST, "--scratch", str(tmp_path / "s"),
            "--retry-wait-s", "30", *extra]


def _model_info_calls(fake) -> int:
    return sum(n for (method, path), n in fake.requests.items() if path.startswith(f"/api/models/{MODEL}/"))


@pytest.mark.parametrize("case, expected", [
    # listing a gated repository works without access; the first download is refused
    ("gated", ["is gated", f"https://huggingface.co/{MODEL}", "pulumi config set --secret vllm-poc:hfToken"]),
    ("missing-file", ["config.json", "no such file at this revision", "vllm-poc:weights.revisions"]),
    ("missing-revision", ["has no revision 'v9'", "vllm-poc:weights.revisions", f"huggingface.co/{MODEL}/commits/main"]),
    ("missing-repo", ["was not found on the Hub", "vllm-poc:hfToken"]),
])
def test_final_hub_failures_exit_2_at_once_without_a_retry(case, expected, fake_hub, s3, tmp_path, monkeypatch, capsys):
    import time

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    args = _sync_args(tmp_path)
    if case == "gated":
        fake_hub.repos[MODEL].gated = True
    elif case == "missing-file":
        fake_hub.repos[MODEL].unavailable = frozenset({"config.json"})
    elif case == "missing-revision":
        args[args.index("main")] = "v9"
    else:
        args[args.index(MODEL)] = "tiny-org/no-such-model"
    started = time.monotonic()
    assert weights_main(args) == 2
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    with capsys.disabled():
        print(f"\n{case}: exit 2 after {elapsed:.2f} s")
    for text in expected:
        assert text in err, (text, err)
    assert "try 2 of" not in err
    # one look at the revision: a retry would list it again (after --retry-wait-s 30)
    assert _model_info_calls(fake_hub) <= 1
    assert _objects(s3) == {} or case == "missing-file"


def test_a_gated_download_fails_even_after_the_listing_succeeded(fake_hub, s3, tmp_path):
    fake_hub.repos[MODEL].gated = True
    commit, files = hub.list_revision(MODEL, "main", TOKEN)  # what the Hub shows anyone
    assert commit and files
    with pytest.raises(StagingError, match=r"model.safetensors.index.json: .* is gated"):
        _sync(s3, tmp_path)
    # the first refused file (the index, read before anything is copied) ended the sync
    resolved = {path.rsplit("/", 1)[-1] for (_, path) in fake_hub.requests if "/resolve/" in path}
    assert resolved == {"model.safetensors.index.json"} and fake_hub.downloads() == 0


def test_passing_hub_errors_are_retried_in_the_same_process(fake_hub, s3, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    fake_hub.failures = 2  # two 503s, then the Hub answers
    args = _sync_args(tmp_path)
    args[args.index("--retry-wait-s") + 1] = "0"
    assert weights_main(args) == 0
    out, err = capsys.readouterr()
    assert "try 2 of 4" in err and "try 3 of 4" in err and "503" in err
    assert "uploaded 4 file(s)" in out and _model_info_calls(fake_hub) == 3

    fake_hub.failures = 5
    assert weights_main([*args, "--attempts", "2"]) == 1
    assert "gave up after 2 tries" in capsys.readouterr().err


# -- credentials before the sync -------------------------------------------------------------------------


def _wait_for_credentials(agent, env_extra=None, *args):
    import subprocess
    import sys

    from tests.fixtures.pod_identity import OTHER_CREDENTIAL_SOURCES

    env = {k: v for k, v in __import__("os").environ.items() if k not in OTHER_CREDENTIAL_SOURCES}
    env.pop("AWS_CONTAINER_CREDENTIALS_FULL_URI", None)
    env.update(env_extra if env_extra is not None else agent.env())
    return subprocess.run([sys.executable, "-m", "weights.credentials", *args], env=env, capture_output=True,
                          text=True, timeout=60)


def test_the_sync_waits_for_credentials_that_appear_after_a_delay(pod_identity_agent):
    # Refused a number of times rather than for a time: a loaded machine may take longer than any
    # fixed delay just to start the process, which would then never see a refusal.
    pod_identity_agent.refuse_next = 6
    done = _wait_for_credentials(pod_identity_agent, None, "--wait-s", "20", "--interval-s", "0.2")
    assert done.returncode == 0, done.stderr
    assert "waiting up to 20 s for AWS credentials from the EKS Pod Identity agent" in done.stdout
    assert "HTTP 500" in done.stdout and "weights: AWS credentials from the EKS Pod Identity agent" in done.stdout
    assert len(pod_identity_agent.requests) == 7  # refused six times, asked again, then served
    print(done.stdout)


def test_credentials_that_never_come_end_the_pod_in_bounded_time(pod_identity_agent):
    import time

    pod_identity_agent.refuse_until = time.monotonic() + 600
    late = _wait_for_credentials(pod_identity_agent, None, "--wait-s", "1", "--interval-s", "0.2")
    assert late.returncode == 1 and "gave no credentials within 1 s" in late.stderr
    assert "list-pod-identity-associations" in late.stderr
    # no Pod Identity variables at all: waiting cannot help, the Job starts a new pod
    none = _wait_for_credentials(pod_identity_agent, {}, "--wait-s", "30")
    assert none.returncode == 1 and "no EKS Pod Identity credentials" in none.stderr
    assert "starts a new pod" in none.stderr


def test_the_rendered_sync_waits_for_credentials_before_its_pip_install(dev):
    from components.weight_sync import CREDENTIALS_WAIT_S

    for job in dev.k8s("Job"):
        if job["metadata"]["labels"]["app.kubernetes.io/name"] != "vllm-weight-sync":
            continue
        script = job["spec"]["template"]["spec"]["containers"][0]["command"][2].splitlines()
        assert script[0] == f"python -m weights.credentials --wait-s {CREDENTIALS_WAIT_S}"
        assert script[1].startswith("python -m pip install") and script[2] == 'exec python -m weights "$@"'
        rules = job["spec"]["podFailurePolicy"]["rules"]
        assert {"action": "FailJob", "onExitCodes": {"containerName": "sync", "operator": "In", "values": [2]}} in rules
