"""The GPU release: `python -m bench.run.release` against a loopback fake of the Kubernetes API that
grants exactly the rendered Role's rules (components/release_job.py), and the render of the stacks
(the Role's scope, the Jobs, the Deployments without replicas, the output `gpuRelease`)."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.common import kube as K
from bench.run import release as R
from components import release_job as RJ
from components.release_job import ServerRelease
from stacks.ops.render import render_config
from tests.fixtures.pulumi_stack import stack_config

NS = "vllm"
_PATH = re.compile(r"^/apis/(?P<group>apps|batch)/v1/namespaces/(?P<ns>[^/]+)/(?P<resource>deployments|jobs)/"
                   r"(?P<name>[^/?]+)(?:/(?P<sub>scale))?$")


class FakeApi:
    """Deployments and Jobs of one namespace, behind the RBAC rules of one Role."""

    def __init__(self, rules: list[dict], deployments: dict[str, int], jobs: dict[str, list[str]]):
        self.rules = rules
        self.replicas = dict(deployments)
        # each Job's answers in turn: "" (running) until its last state, then that state forever
        self.jobs = {name: list(states) for name, states in jobs.items()}
        self.requests: list[tuple[str, str, int]] = []

    def allowed(self, verb: str, group: str, resource: str, name: str) -> bool:
        return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
                   and name in r.get("resourceNames", [name]) for r in self.rules)

    def answer(self, method: str, path: str, body: dict | None) -> tuple[int, dict]:
        match = _PATH.match(path)
        if not match or match["ns"] != NS:
            return 404, {"message": "not found"}
        resource = match["resource"] + (f"/{match['sub']}" if match["sub"] else "")
        verb = {"GET": "get", "PATCH": "patch"}[method]
        if not self.allowed(verb, match["group"], resource, match["name"]):
            return 403, {"kind": "Status", "message": f'{resource} "{match["name"]}" is forbidden: '
                                                      f'cannot {verb} in the namespace "{NS}"'}
        name = match["name"]
        if match["resource"] == "jobs":
            if name not in self.jobs:
                return 404, {"message": f'jobs "{name}" not found'}
            states = self.jobs[name]
            state = states.pop(0) if len(states) > 1 else states[0]
            conditions = [{"type": state, "status": "True"}] if state else []
            return 200, {"kind": "Job", "metadata": {"name": name}, "status": {"conditions": conditions}}
        if name not in self.replicas:
            return 404, {"message": f'deployments.apps "{name}" not found'}
        if match["sub"] and method == "PATCH":
            self.replicas[name] = body["spec"]["replicas"]
        if match["sub"]:
            return 200, {"kind": "Scale", "spec": {"replicas": self.replicas[name]}}
        # a scaled-up server is available on the next look (the fake has no start-up to wait for)
        return 200, {"kind": "Deployment", "spec": {"replicas": self.replicas[name]},
                     "status": {"availableReplicas": self.replicas[name]}}


@pytest.fixture
def serve():
    servers = []

    def start(api: FakeApi) -> K.InCluster:
        class Handler(BaseHTTPRequestHandler):
            def _handle(self):
                if self.headers.get("Authorization") != "Bearer release-token":
                    code, body = 401, {"message": "Unauthorized"}
                else:
                    length = int(self.headers.get("Content-Length") or 0)
                    sent = json.loads(self.rfile.read(length)) if length else None
                    if self.command == "PATCH":
                        assert self.headers.get("Content-Type") == "application/merge-patch+json"
                    code, body = api.answer(self.command, self.path, sent)
                api.requests.append((self.command, self.path, code))
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PATCH = _handle  # noqa: N815

            def log_message(self, *args):
                pass

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append(httpd)
        return K.InCluster(f"http://127.0.0.1:{httpd.server_address[1]}", "release-token")

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


PLAN = [ServerRelease("gemma-fp8", "1f19ec243b0000", ["startup-gemma-fp8-1f19ec243b", "bench-gemma-fp8-1f19ec243b",
                                                      "report-g7e-aaaaaaaaaa"]),
        ServerRelease("gemma-bf16", "2222222222aaaa", ["bench-gemma-bf16-2222222222"])]


def test_release_waits_for_every_job_then_scales_only_its_server_to_zero(serve, capsys):
    api = FakeApi(RJ.role_rules(PLAN), {"gemma-fp8": 1, "gemma-bf16": 1, "other": 1}, {
        "startup-gemma-fp8-1f19ec243b": ["Complete"],
        "bench-gemma-fp8-1f19ec243b": ["", "", "Failed"],  # runs two more looks, then fails for good
        "report-g7e-aaaaaaaaaa": ["", "", "", "Complete"],
    })
    client = serve(api)
    argv = ["release", "--namespace", NS, "--deployment", "gemma-fp8", "--poll-seconds", "0.01",
            *[a for job in PLAN[0].jobs for a in ("--job", job)]]
    assert R.main(argv, api=client) == 0
    assert api.replicas == {"gemma-fp8": 0, "gemma-bf16": 1, "other": 1}
    patches = [(p, c) for m, p, c in api.requests if m == "PATCH"]
    assert patches == [(f"/apis/apps/v1/namespaces/{NS}/deployments/gemma-fp8/scale", 200)]
    # no scale before the last Job ended: the PATCH comes after the report's Complete
    last_job_look = max(i for i, (m, p, _) in enumerate(api.requests) if "/jobs/report-" in p)
    assert api.requests.index(("PATCH", patches[0][0], 200)) > last_job_look
    out = capsys.readouterr().out
    assert "keeps its GPUs while" in out and "scaled it from 1 to 0 replicas" in out
    # run again (a retried pod): nothing to do, no second PATCH
    assert R.main(argv, api=client) == 0
    assert len([r for r in api.requests if r[0] == "PATCH"]) == 1
    assert "already at 0 replicas" in capsys.readouterr().out


def test_a_job_not_created_yet_is_waited_for_not_taken_as_ended(serve):
    api = FakeApi(RJ.role_rules(PLAN), {"gemma-bf16": 1}, {})
    client = serve(api)
    looks = []
    calls = {"n": 0}

    def sleep(_):
        calls["n"] += 1
        looks.append(api.replicas["gemma-bf16"])
        if calls["n"] == 3:
            api.jobs["bench-gemma-bf16-2222222222"] = ["Complete"]

    assert R.release(client, NS, "gemma-bf16", list(PLAN[1].jobs), poll_s=0, log=lambda _: None, sleep=sleep) == 0
    assert looks == [1, 1, 1] and api.replicas["gemma-bf16"] == 0


def test_the_role_grants_nothing_beyond_its_servers_and_jobs(serve, capsys):
    api = FakeApi(RJ.role_rules(PLAN), {"gemma-fp8": 1, "other": 1}, {"bench-other-1": ["Complete"]})
    client = serve(api)
    # another Deployment of the namespace: refused by the Role, exit 2 with the name, nothing scaled
    api.jobs["startup-gemma-fp8-1f19ec243b"] = ["Complete"]
    assert R.main(["release", "--namespace", NS, "--deployment", "other", "--job", "startup-gemma-fp8-1f19ec243b",
                   "--poll-seconds", "0.01"], api=client) == 2
    err = capsys.readouterr().err
    assert "forbidden" in err and "deployments/scale" in err and "Traceback" not in err
    assert api.replicas["other"] == 1
    # a Job the Role does not name: 403, final (not waited for until the deadline)
    assert R.main(["release", "--namespace", NS, "--deployment", "gemma-fp8", "--job", "bench-other-1",
                   "--poll-seconds", "0.01"], api=client) == 2
    assert api.replicas["gemma-fp8"] == 1


def test_wake_scales_a_released_server_back_and_waits_until_it_is_available(serve, capsys):
    api = FakeApi(RJ.role_rules(PLAN), {"gemma-fp8": 0, "gemma-bf16": 1}, {})
    client = serve(api)
    assert R.main(["wake", "--namespace", NS, "--deployment", "gemma-fp8", "--poll-seconds", "0.01"], api=client) == 0
    assert api.replicas["gemma-fp8"] == 1
    assert "was released (0 replicas); scaled to 1" in capsys.readouterr().out
    # a server that is up: no PATCH at all (a first `up`)
    before = len([r for r in api.requests if r[0] == "PATCH"])
    assert R.main(["wake", "--namespace", NS, "--deployment", "gemma-bf16", "--poll-seconds", "0.01"], api=client) == 0
    assert len([r for r in api.requests if r[0] == "PATCH"]) == before


def test_outside_a_pod_and_bad_arguments_exit_2_with_the_fix(capsys, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert R.main(["release", "--namespace", NS, "--deployment", "x", "--job", "j"]) == 2
    assert "runs in the cluster" in capsys.readouterr().err
    assert R.main(["wake", "--namespace", NS, "--deployment", "x", "--poll-seconds", "0"], api=object()) == 2
    assert "--poll-seconds" in capsys.readouterr().err


# -- the render -----------------------------------------------------------------------------------


def release_objects(rendered) -> dict[str, list[dict]]:
    objects = rendered.kubernetes_objects()
    return {
        "role": [o for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == RJ.RBAC_NAME],
        "jobs": [o for o in objects if o["kind"] == "Job"
                 and o["metadata"]["labels"].get("app.kubernetes.io/name") == "vllm-release"],
        "bindings": [o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")
                     and any(s.get("name") == RJ.SERVICE_ACCOUNT for s in o.get("subjects") or [])],
    }


@pytest.fixture(scope="module")
def g7e():
    return render_config(stack_config("g7e"), stack="g7e")


def test_the_role_names_only_the_stacks_benchmarked_servers_and_the_jobs_that_use_them(g7e):
    found = release_objects(g7e)
    (role,) = found["role"]
    (binding,) = found["bindings"]
    assert binding["kind"] == "RoleBinding" and binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RJ.RBAC_NAME}
    targets = sorted(stack_config("g7e")["vllm-poc:bench"]["targets"])
    by_resource = {r["resources"][0]: r for r in role["rules"]}
    assert sorted(by_resource) == ["deployments", "deployments/scale", "jobs"]
    assert by_resource["deployments/scale"]["verbs"] == ["get", "patch"]
    assert by_resource["deployments/scale"]["resourceNames"] == targets
    assert by_resource["deployments"]["verbs"] == ["get"] and by_resource["deployments"]["resourceNames"] == targets
    assert all(r.get("resourceNames") for r in role["rules"])  # no rule without names: no list, no other object
    # the Jobs it may read are the stack's start-up, bench, report (and mix-check) Jobs, each by name
    jobs = {o["metadata"]["name"]: o for o in g7e.kubernetes_objects() if o["kind"] == "Job"}
    kinds = {jobs[n]["metadata"]["labels"]["app.kubernetes.io/name"] for n in by_resource["jobs"]["resourceNames"]}
    assert kinds <= {"vllm-startup", "vllm-bench", "vllm-report", "vllm-mixcheck"} and "vllm-report" in kinds
    # every release Job waits for its server's start-up, sweep and the report, all rendered
    release = [j for j in found["jobs"] if j["metadata"]["labels"]["vllm-poc/action"] == "release"]
    assert sorted(j["metadata"]["labels"]["app.kubernetes.io/instance"] for j in release) == targets
    for job in release:
        server = job["metadata"]["labels"]["app.kubernetes.io/instance"]
        argv = job["spec"]["template"]["spec"]["containers"][0]["command"]
        waits = [argv[i + 1] for i, a in enumerate(argv) if a == "--job"]
        assert all(w in jobs for w in waits)
        labels = [jobs[w]["metadata"]["labels"] for w in waits]
        assert {"vllm-startup", "vllm-bench", "vllm-report"} <= {x["app.kubernetes.io/name"] for x in labels}
        assert all(x.get("app.kubernetes.io/instance") in (server, "g7e") for x in labels)
        assert argv[argv.index("--deployment") + 1] == server
        # not waited for; besides that only the scanner's waiver of its API token (security/waivers.toml)
        annotations = job["metadata"]["annotations"]
        assert {k: v for k, v in annotations.items() if not k.startswith("checkov.io/skip")} == {
            "pulumi.com/skipAwait": "true"}
        assert [v.split("=", 1)[0] for k, v in annotations.items() if k.startswith("checkov.io/skip")] == ["CKV_K8S_38"]
        pod = job["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == RJ.SERVICE_ACCOUNT and pod["automountServiceAccountToken"] is True
        assert "karpenter.sh/nodepool" not in json.dumps(pod)  # on the system nodes, never on a GPU node


def test_released_servers_leave_replicas_to_the_release_and_the_output_says_so(g7e):
    targets = set(stack_config("g7e")["vllm-poc:bench"]["targets"])
    for deployment in g7e.k8s("Deployment"):
        if deployment["metadata"]["name"] in targets:
            assert "replicas" not in deployment["spec"]  # no later `up` scales a released server back up
    out = g7e.outputs["gpuRelease"]
    assert set(out["servers"]) >= targets
    assert all(out["servers"][t].startswith("released once") for t in targets)
    assert out["gpuUsdPerHourWhileMeasuring"] > out["gpuUsdPerHourAfterRelease"] >= 0
    # an emptied GPU node goes: consolidation WhenEmpty, and nothing marks the node itself do-not-disrupt
    # (the annotation is on the server's and the bench's pods, which the release removes)
    for pool in g7e.k8s("NodePool"):
        assert pool["spec"]["disruption"]["consolidationPolicy"] == "WhenEmpty"
        assert "karpenter.sh/do-not-disrupt" not in json.dumps(pool["spec"]["template"].get("metadata") or {})
    # the wake Job comes before the start-up record, which comes before the sweep
    for target in targets:
        startup = g7e.one("kubernetes:batch/v1:Job", f"startup-{target}-job")
        assert f"gpu-release-wake-{target}" in {d.rsplit("::", 1)[-1] for d in startup.dependencies}


def test_release_off_keeps_the_servers_and_their_replicas():
    config = stack_config("g7e")
    config["vllm-poc:bench"] = {**config["vllm-poc:bench"], "releaseGpus": False}
    rendered = render_config(config, stack="g7e")
    assert release_objects(rendered) == {"role": [], "jobs": [], "bindings": []}
    assert all(d["spec"]["replicas"] >= 1 for d in rendered.k8s("Deployment"))
    out = rendered.outputs["gpuRelease"]
    assert out["gpuUsdPerHourAfterRelease"] == out["gpuUsdPerHourWhileMeasuring"] > 0
    assert all("bench.releaseGpus is false" in fate for name, fate in out["servers"].items()
               if name in config["vllm-poc:bench"]["targets"])
