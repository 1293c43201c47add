"""The compile cache in the rendered stacks: the key, the pod's pull before vLLM and push after it,
the server role's one write grant, and the weights bucket's policy on compile-cache/ (every stack)."""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import boto3
import pytest

from components import compile_cache as cc
from components.vllm_server import CACHE_VOLUME
from tests.fixtures.code_volumes import volume_files, write_files
from tests.fixtures.pulumi_stack import render_with
from tests.test_compile_cache import read_until

REPO = Path(__file__).resolve().parents[1]
WRITE_ACTIONS = ("s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:RestoreObject",
                 "s3:PutObjectAcl", "s3:PutObjectTagging")


def deployments(rendered) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in rendered.kubernetes_objects() if o["kind"] == "Deployment"
            and o["metadata"]["labels"].get("app.kubernetes.io/name") == "vllm"}


def config_maps(rendered) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in rendered.kubernetes_objects() if o["kind"] == "ConfigMap"}


def weights_bucket(rendered) -> str:
    return rendered.outputs["weightsBucket"]


def role_policies(rendered) -> dict[str, dict]:
    """Service account -> its role's policy document (roles bound by Pod Identity)."""
    resources = rendered.resources()
    role_of = {r["inputs"]["roleArn"].rsplit("/", 1)[1]: r["inputs"]["serviceAccount"] for r in resources
               if r["type"].endswith("PodIdentityAssociation")}
    policies: dict[str, dict] = {}
    for r in resources:
        if r["type"] == "aws:iam/rolePolicy:RolePolicy":
            policies.setdefault(role_of.get(r["inputs"]["role"], r["inputs"]["role"]), {"Statement": []})[
                "Statement"].extend(json.loads(r["inputs"]["policy"])["Statement"])
    return policies


def _list(value) -> list:
    return value if isinstance(value, list) else [value]


def allows(document: dict, action: str, resource: str) -> bool:
    return any(st["Effect"] == "Allow"
               and any(fnmatch.fnmatchcase(action, a) for a in _list(st["Action"]))
               and any(fnmatch.fnmatchcase(resource, r) for r in _list(st["Resource"]))
               for st in document["Statement"])


# -- the pod ------------------------------------------------------------------------------------------


def test_every_server_pulls_before_vllm_and_pushes_beside_it(all_stacks):
    for stack, rendered in all_stacks.items():
        bucket = weights_bucket(rendered)
        maps = config_maps(rendered)
        for name, deployment in deployments(rendered).items():
            where = f"{stack}/{name}"
            pod = deployment["spec"]["template"]
            spec = pod["spec"]
            vllm = next(c for c in spec["containers"] if c["name"] == "vllm")
            pull, push = spec["initContainers"]
            # Init containers run in order and vLLM starts after the last has started: the pull
            # completes first (no restartPolicy), the push is a native sidecar that stays.
            assert pull["name"] == cc.PULL_CONTAINER and "restartPolicy" not in pull, where
            assert push["name"] == cc.PUSH_CONTAINER and push["restartPolicy"] == "Always", where
            key = pod["metadata"]["annotations"][cc.KEY_ANNOTATION]
            uri = f"s3://{bucket}/compile-cache/{key}/"
            cache_root = {e["name"]: e.get("value") for e in vllm["env"]}["VLLM_CACHE_ROOT"]
            for step, verb in ((pull, "pull"), (push, "push")):
                argv = step["command"] + step["args"]
                assert argv[:4] == ["python3", "-m", "weights.compile_cache", verb], where
                assert argv[argv.index("--uri") + 1] == uri and argv[argv.index("--dir") + 1] == cache_root, where
                assert step["image"] == vllm["image"], f"{where}: the steps reuse the image already on the node"
                mounts = {m["mountPath"]: m["name"] for m in step["volumeMounts"]}
                assert mounts[cache_root] == CACHE_VOLUME
                volumes = {v["name"]: v for v in spec["volumes"]}
                code = maps[volumes[mounts["/opt/vllm-poc/weights"]]["configMap"]["name"]]
                helpers = maps[volumes[mounts["/opt/vllm-poc/bench"]]["configMap"]["name"]]
                assert code["immutable"] and helpers["immutable"]
                # what `python -m weights.compile_cache` imports, not the weight sync's modules (hub.py)
                assert set(code["data"]) == {"__init__.py", "compile_cache.py", "cache_transfer.py", "cache_manifest.py", "store.py"}
                # the bench modules weights/ imports, as the package's tree (components/code_volume.py)
                assert set(volume_files(maps, volumes[mounts["/opt/vllm-poc/bench"]])) == {
                    "__init__.py", "common/__init__.py", "common/interrupts.py", "common/progress.py"}
            port = vllm["ports"][0]["containerPort"]
            assert push["args"][push["args"].index("--wait-for") + 1] == f"http://127.0.0.1:{port}/health"
            assert "--stay" in push["args"]
            assert pull["args"][pull["args"].index("--budget-s") + 1] == str(cc.PULL_BUDGET_S)
            inputs = json.loads(pod["metadata"]["annotations"][cc.INPUTS_ANNOTATION])
            assert inputs["tensor_parallel_size"] == int(vllm["args"][vllm["args"].index("--tensor-parallel-size") + 1])
            assert inputs["image"] in vllm["image"]


def test_servers_share_a_key_only_when_what_they_compile_is_the_same(all_stacks):
    keys: dict[str, tuple[str, dict]] = {}
    for stack, rendered in all_stacks.items():
        for name, deployment in deployments(rendered).items():
            annotations = deployment["spec"]["template"]["metadata"]["annotations"]
            keys[f"{stack}/{name}"] = (annotations[cc.KEY_ANNOTATION], json.loads(annotations[cc.INPUTS_ANNOTATION]))
    by_key: dict[str, list[dict]] = {}
    for key, inputs in keys.values():
        by_key.setdefault(key, []).append(inputs)
    for key, inputs in by_key.items():
        assert all(i == inputs[0] for i in inputs), key
    # The matrix stack's variants change one compile-relevant setting each: each has its own key.
    matrix = {k: v[0] for k, v in keys.items() if k.startswith("matrix/")}
    assert len(set(matrix.values())) == len(matrix) > 1


def test_the_key_follows_the_compile_inputs_and_ignores_the_rest():
    base = dict(image="vllm/vllm-openai:v0.26.0@sha256:" + "a" * 64, models=[("org/m", "abc")],
                args=["s3://b/models/org/m/", "--port", "8000", "--max-num-seqs", "64", "--kv-cache-dtype", "fp8",
                      "--model-loader-extra-config", '{"concurrency":64}'],
                env={"VLLM_CACHE_ROOT": "/c", "AWS_REGION": "ap-northeast-2"}, gpu="l40s", tensor_parallel_size=1)
    key, inputs = cc.cache_key(**base)
    assert len(key) == 16 and inputs["flags"] == ["--max-num-seqs", "64", "--kv-cache-dtype", "fp8"]
    same = [
        {"args": [*base["args"][:-1], '{"concurrency":128}']},  # loader tuning of another instance type
        {"args": ["s3://other-bucket/models/org/m/", *base["args"][1:]]},
        {"env": {**base["env"], "AWS_REGION": "us-east-1"}},
        {"image": "registry.example/mirror/vllm:v0.26.0@sha256:" + "a" * 64},  # the same image by digest
    ]
    for change in same:
        assert cc.cache_key(**{**base, **change})[0] == key, change
    different = [
        {"args": [*base["args"][:4], "128", *base["args"][5:]]},
        {"args": [*base["args"], "--max-model-len", "4096"]},
        {"image": "vllm/vllm-openai:v0.26.0@sha256:" + "b" * 64},
        {"models": [("org/m", "def")]},
        {"gpu": "rtx pro 6000"},
        {"tensor_parallel_size": 2},
        {"env": {**base["env"], "VLLM_ATTENTION_BACKEND": "FLASHINFER"}},
    ]
    for change in different:
        assert cc.cache_key(**{**base, **change})[0] != key, change


# -- who may write ------------------------------------------------------------------------------------


def test_each_server_role_writes_its_own_key_and_no_other_role_writes_compile_caches(all_stacks):
    for stack, rendered in all_stacks.items():
        bucket_arn = f"arn:aws:s3:::{weights_bucket(rendered)}"
        servers = deployments(rendered)
        keys = {name: d["spec"]["template"]["metadata"]["annotations"][cc.KEY_ANNOTATION]
                for name, d in servers.items()}
        policies = role_policies(rendered)
        for account, document in policies.items():
            own = keys.get(account)
            for other, key in keys.items():
                for action in WRITE_ACTIONS:
                    expected = action in ("s3:PutObject", "s3:AbortMultipartUpload") and key == own
                    assert allows(document, action, f"{bucket_arn}/compile-cache/{key}/torch_compile_cache/x") \
                        is expected, f"{stack}: {account} {action} on {other}'s key"
            for action in WRITE_ACTIONS:
                for elsewhere in ("compile-cache/manifest.json", "compile-cache/other-key/x", "assets/x"):
                    assert not allows(document, action, f"{bucket_arn}/{elsewhere}"), f"{stack}: {account} {elsewhere}"
                if account in keys:
                    assert not any(allows(document, action, f"{bucket_arn}/models/{m}x")
                                   for m in ("", "RedHatAI/gemma-4-31B-it-FP8-dynamic/")), f"{stack}: {account}"
        for account in keys:  # reads stay as they were: every key is readable
            assert allows(policies[account], "s3:GetObject", f"{bucket_arn}/compile-cache/any-key/manifest.json")


def _denied(policy: dict, action: str, resource: str, tags: dict[str, str]) -> bool:
    """Whether a Deny statement of a bucket policy applies (StringNotEquals on principal tags only)."""
    for st in policy["Statement"]:
        if st["Effect"] != "Deny" or action not in _list(st["Action"]):
            continue
        if not any(fnmatch.fnmatchcase(resource, r) for r in _list(st["Resource"])):
            continue
        conditions = st.get("Condition", {})
        if set(conditions) - {"StringNotEquals", "Bool"}:
            raise AssertionError(f"the test's evaluator does not know {set(conditions)}")
        if "Bool" in conditions:
            continue  # the TLS rule; these requests are over TLS
        if all(tags.get(k.removeprefix("aws:PrincipalTag/")) not in _list(v)
               for k, v in conditions.get("StringNotEquals", {}).items()):
            return True
    return False


def test_the_weights_bucket_refuses_compile_cache_writes_from_anyone_but_the_servers(all_stacks):
    for stack, rendered in all_stacks.items():
        [resource] = [r for r in rendered.resources() if r["type"] == "aws:s3/bucketPolicy:BucketPolicy"
                      and r["name"].endswith("weights-policy")]
        policy = json.loads(resource["inputs"]["policy"])
        bucket_arn = f"arn:aws:s3:::{weights_bucket(rendered)}"
        cluster_arn = next(r for r in rendered.resources() if r["type"] == "eks:index:Cluster")
        cluster_arn = f"arn:aws:eks:ap-northeast-2:123456789012:cluster/{cluster_arn['inputs']['name']}"
        target = f"{bucket_arn}/compile-cache/0123456789abcdef/files/x.so"
        for server in deployments(rendered):
            session = {"eks-cluster-arn": cluster_arn, "kubernetes-namespace": "vllm",
                       "kubernetes-service-account": server}
            assert not _denied(policy, "s3:PutObject", target, session), f"{stack}: {server}"
            for tag, value in (("kubernetes-service-account", "vllm-bench"),
                               ("kubernetes-service-account", "vllm-weight-sync"),
                               ("kubernetes-namespace", "default"),
                               ("eks-cluster-arn", cluster_arn.replace("cluster/", "cluster/other-"))):
                assert _denied(policy, "s3:PutObject", target, {**session, tag: value}), f"{stack}: {tag}={value}"
        assert _denied(policy, "s3:PutObject", target, {})  # a person, a CI role: no Pod Identity tags
        assert not _denied(policy, "s3:PutObject", f"{bucket_arn}/models/org/m/config.json", {})
        assert not _denied(policy, "s3:DeleteObject", target, {})  # clearing a cache by hand stays possible


def test_a_server_without_a_compile_cache_has_no_steps_no_write_and_no_place_in_the_bucket_policy():
    rendered = render_with("dev", servers=[{"name": "gemma-fp8", "pool": "l40s", "model": "fp8-dynamic",
                                            "trafficClass": "batch", "compileCache": False}],
                           bench={"targets": []})
    [deployment] = deployments(rendered).values()
    assert "initContainers" not in deployment["spec"]["template"]["spec"]
    assert cc.KEY_ANNOTATION not in deployment["spec"]["template"]["metadata"].get("annotations", {})
    document = role_policies(rendered)["gemma-fp8"]
    assert not any(allows(document, "s3:PutObject", f"arn:aws:s3:::{weights_bucket(rendered)}/compile-cache/{k}/x")
                   for k in ("any", "0123456789abcdef"))
    policy = json.loads(next(r for r in rendered.resources() if r["name"].endswith("weights-policy"))["inputs"]["policy"])
    assert _denied(policy, "s3:PutObject", f"arn:aws:s3:::{weights_bucket(rendered)}/compile-cache/k/x",
                   {"kubernetes-service-account": "gemma-fp8", "kubernetes-namespace": "vllm"})


# -- the rendered commands, run --------------------------------------------------------------------------


class _Health(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def _rendered_step(step: dict, cache_dir: Path, port: int | None = None) -> list[str]:
    argv = step["command"] + step["args"]
    argv[argv.index("--dir") + 1] = str(cache_dir)
    if port is not None:
        argv[argv.index("--wait-for") + 1] = f"http://127.0.0.1:{port}/health"
    return [sys.executable if argv[0] == "python3" else argv[0], *argv[1:]]


def test_the_rendered_steps_carry_a_cache_from_one_pod_to_the_next_with_code_from_their_config_maps(
        dev, aws, tmp_path):
    [deployment] = deployments(dev).values()
    spec = deployment["spec"]["template"]["spec"]
    pull, push = spec["initContainers"]
    bucket = weights_bucket(dev)
    boto3.client("s3").create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "ap-northeast-2"})
    # The code the pod mounts, written out of the rendered ConfigMaps.
    code_root = tmp_path / "opt"
    volumes = {v["name"]: v for v in spec["volumes"]}
    for mount in pull["volumeMounts"]:
        if mount["mountPath"].startswith(cc.CODE_DIR):
            write_files(volume_files(config_maps(dev), volumes[mount["name"]]), code_root / Path(mount["mountPath"]).name)
    env = {**os.environ, "PYTHONPATH": str(code_root)}

    first = tmp_path / "first-pod"
    first.mkdir()
    done = subprocess.run(_rendered_step(pull, first), env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "no compile cache at" in done.stdout, done.stderr
    compiled = first / "torch_compile_cache/torch_aot_compile/abc/rank_0_0/model"
    compiled.parent.mkdir(parents=True)
    compiled.write_bytes(b"compiled graph")
    (first / "assets").mkdir()
    (first / "assets/tokenizer.json").write_text("{}")

    health = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=health.serve_forever, daemon=True).start()
    sidecar = subprocess.Popen(_rendered_step(push, first, health.server_address[1]), env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        key = deployment["spec"]["template"]["metadata"]["annotations"][cc.KEY_ANNOTATION]
        manifest = f"compile-cache/{key}/manifest.json"
        for _ in range(120):
            if "Contents" in boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=manifest):
                break
            assert sidecar.poll() is None, sidecar.communicate()
            time.sleep(0.5)
        else:
            pytest.fail("the sidecar never pushed")
    finally:
        sidecar.terminate()
        out, err = sidecar.communicate(timeout=20)
        health.shutdown()
    assert sidecar.returncode == 0 and "uploaded 1 file(s)" in out, err

    second = tmp_path / "second-pod"
    second.mkdir()
    done = subprocess.run(_rendered_step(pull, second), env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "restored 1 file(s)" in done.stdout, done.stderr
    assert (second / "torch_compile_cache/torch_aot_compile/abc/rank_0_0/model").read_bytes() == b"compiled graph"
    assert not (second / "assets").exists()


def test_the_rendered_steps_run_as_the_pod_user_on_a_read_only_root(dev, aws, tmp_path):
    """The pull and the push sidecar as the pod runs them: UID 65532, no capabilities, the root
    filesystem read-only but for the pod's volumes (tests/test_pod_security_vllm.py's sandbox)."""
    import shutil
    import signal
    import tempfile

    from components import pod_security
    from tests.test_pod_security_vllm import CONFINE, UID, _owned_by_uid, _readable_tree, mapped_env
    from weights import compile_cache as weights_cache

    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("setpriv"):
        pytest.fail("this test needs root, unshare and setpriv (util-linux), as CI has")
    sandbox = Path(tempfile.mkdtemp(prefix="vllm-poc-cache-steps-"))
    sandbox.chmod(0o755)
    try:
        [deployment] = deployments(dev).values()
        spec = deployment["spec"]["template"]["spec"]
        pull, push = spec["initContainers"]
        volumes = _owned_by_uid(sandbox, "home", "tmp", "cache")
        code = sandbox / "opt"
        maps, by_name = config_maps(dev), {v["name"]: v for v in spec["volumes"]}
        for mount in pull["volumeMounts"]:
            if mount["mountPath"].startswith(cc.CODE_DIR):
                write_files(volume_files(maps, by_name[mount["name"]]), code / Path(mount["mountPath"]).name)
        _readable_tree(code)
        bucket = weights_bucket(dev)
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "ap-northeast-2"})
        seed = tmp_path / "seed"
        (seed / "torch_compile_cache/aot").mkdir(parents=True)
        (seed / "torch_compile_cache/aot/model").write_bytes(b"graph" * 1000)
        uri = pull["args"][pull["args"].index("--uri") + 1]
        assert weights_cache.push(s3, seed, uri, progress=False).outcome == "pushed"

        cache_mount = pull["args"][pull["args"].index("--dir") + 1]
        mapping = {pod_security.HOME: volumes["home"], pod_security.TMP: volumes["tmp"],
                   cache_mount: volumes["cache"], cc.CODE_DIR: code}

        def env_of(container: dict) -> dict[str, str]:
            env = mapped_env(container, mapping)
            venv = Path(sys.executable).parent.parent
            view = sandbox / "venv"
            view.mkdir(exist_ok=True)
            return {**env, "PATH": f"{view / 'bin'}:/usr/bin:/bin", "AWS_ENDPOINT_URL": os.environ["AWS_ENDPOINT_URL"],
                    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                    "VENV": str(venv), "VENV_VIEW": str(view), "POD_HOME": str(volumes["home"]),
                    "POD_TMP": str(volumes["tmp"]), "POD_CACHE": str(volumes["cache"]),
                    "STASH": str(sandbox / "pyenv"), "POD_UID": str(UID)}

        (sandbox / "pyenv").mkdir()

        def confined(container: dict, port: int | None = None) -> list[str]:
            argv = container["command"] + container["args"]
            argv[argv.index("--dir") + 1] = str(volumes["cache"])
            if port is not None:
                argv[argv.index("--wait-for") + 1] = f"http://127.0.0.1:{port}/health"
            return ["unshare", "--mount", "--propagation", "private", "sh", "-c", CONFINE, "confine",
                    str(sandbox / "venv/bin/python3"), *argv[1:]]

        done = subprocess.run(confined(pull), env=env_of(pull), capture_output=True, text=True, timeout=120,
                              cwd=volumes["tmp"])
        assert done.returncode == 0, done.stderr
        assert "restored 1 file(s)" in done.stdout, done.stdout + done.stderr
        restored = volumes["cache"] / "torch_compile_cache/aot/model"
        assert restored.read_bytes() == b"graph" * 1000 and restored.stat().st_uid == UID

        compiled = volumes["cache"] / "torch_compile_cache/aot/more"
        compiled.write_bytes(b"compiled on this node")
        os.chown(compiled, UID, UID)
        health = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
        threading.Thread(target=health.serve_forever, daemon=True).start()
        sidecar = subprocess.Popen(confined(push, health.server_address[1]), env=env_of(push), cwd=volumes["tmp"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        said = ""
        try:
            key = uri.rstrip("/").rsplit("/", 1)[1]
            for _ in range(120):
                manifest = json.loads(s3.get_object(Bucket=bucket, Key=f"compile-cache/{key}/manifest.json")["Body"].read())
                if len(manifest["files"]) == 2:
                    break
                assert sidecar.poll() is None, sidecar.communicate()
                time.sleep(0.5)
            else:
                pytest.fail("the confined sidecar never pushed")
            said = read_until(sidecar, "idle until the pod stops")  # the pod stops once the push is over
        finally:
            sidecar.send_signal(signal.SIGTERM)
            out, err = sidecar.communicate(timeout=20)
            health.shutdown()
        out = said + out
        assert sidecar.returncode == 0, err
        assert "1 file(s) compiled since the stored cache" in out
        assert "Read-only file system" not in out + err and "Permission denied" not in out + err
    finally:
        shutil.rmtree(sandbox, ignore_errors=True)
