"""Pod security: every rendered pod passes the level its namespace enforces (restricted).

The Pod Security Standards checks are implemented in tests/fixtures/pod_security_standards.py and
are shown here to refuse what the admission controller would refuse.
"""

from __future__ import annotations

import copy

import pytest

from components import pod_security
from tests.fixtures import pod_security_standards as pss

ENFORCE = "pod-security.kubernetes.io/enforce"


def namespaces(rendered) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in rendered.k8s("Namespace")}


def test_every_rendered_pod_meets_its_namespace_level(all_stacks):
    for stack, rendered in all_stacks.items():
        objects = rendered.kubernetes_objects()
        levels = {name: ns["metadata"].get("labels", {}).get(ENFORCE, "privileged")
                  for name, ns in namespaces(rendered).items()}
        workloads = [o for o in objects if o["kind"] in pss.WORKLOAD_KINDS]
        assert workloads, f"{stack}: no workloads rendered"
        for obj in workloads:
            ((label, spec),) = pss.pod_specs([obj])
            namespace = obj["metadata"]["namespace"]
            assert levels.get(namespace) == "restricted", f"{stack}: {namespace} does not enforce restricted"
            assert pss.violations(spec, "restricted") == [], f"{stack} {label}"


def test_namespace_enforces_audits_and_warns_restricted_pinned_to_the_cluster_version(dev):
    labels = namespaces(dev)["vllm"]["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
        assert labels[f"pod-security.kubernetes.io/{mode}-version"] == "v1.36"


def test_pods_mount_no_service_account_token_unless_they_call_the_api(dev):
    objects = dev.kubernetes_objects()
    # A pod calls the Kubernetes API exactly when RBAC grants its service account something.
    bound = {(s.get("namespace"), s["name"]) for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")
             for s in o.get("subjects", []) if s["kind"] == "ServiceAccount"}
    callers = []
    for label, spec in pss.pod_specs(objects):
        namespace = label.split("/")[1] if label.count("/") >= 2 else "vllm"
        calls_api = (namespace, spec.get("serviceAccountName", "default")) in bound
        assert spec["automountServiceAccountToken"] is calls_api, label
        callers += [label] if calls_api else []
    # the bench sweep (its node), the start-up timeline (pods, events, nodes, NodeClaims), and the GPU
    # release's wake and release Jobs (their server's scale, the Jobs they wait for)
    assert sorted(c.split("/")[1].split("-")[0] for c in callers) == ["bench", "release", "startup", "wake"], callers
    assert all(c.startswith("Job/") for c in callers), callers


def test_root_filesystem_read_only_with_every_write_location_on_a_volume(dev):
    for label, spec in pss.pod_specs(dev.kubernetes_objects()):
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert "hostPath" not in str(volumes)
        for container in spec["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            env = {e["name"]: e.get("value") for e in container["env"]}
            for variable in ("HOME", "TMPDIR", "XDG_CACHE_HOME", "HF_HOME", "TORCHINDUCTOR_CACHE_DIR",
                             "FLASHINFER_WORKSPACE_BASE", "CUDA_CACHE_PATH", "TRITON_CACHE_DIR",
                             "VLLM_CACHE_ROOT"):
                if variable not in env:
                    assert variable in ("TRITON_CACHE_DIR", "VLLM_CACHE_ROOT"), (label, variable)
                    continue  # the bench leaves these to follow XDG_CACHE_HOME
                path = env[variable]
                owner = max((m for m in mounts if path == m or path.startswith(m.rstrip("/") + "/")),
                            key=len, default=None)
                assert owner, f"{label}: {variable}={path} is on the read-only root filesystem"
                assert "emptyDir" in volumes[mounts[owner]], (label, variable)
            assert env["USER"]  # getpass.getuser() without a passwd entry for the UID
            # Python's bytecode: on a volume for vLLM's servers (the image ships none; each of their
            # processes would compile torch and vLLM again), not written anywhere for the rest
            prefix = env.get("PYTHONPYCACHEPREFIX")
            if container["name"] == "vllm":
                assert prefix == f"{env['VLLM_CACHE_ROOT']}/pycache" and "PYTHONDONTWRITEBYTECODE" not in env, label
            if prefix is None:
                assert env["PYTHONDONTWRITEBYTECODE"] == "1", label
            else:
                owner = max((m for m in mounts if prefix.startswith(m.rstrip("/") + "/")), key=len, default=None)
                assert owner and "emptyDir" in volumes[mounts[owner]], (label, prefix)


# -- the harden() helper ------------------------------------------------------------------------


def bare_pod() -> dict:
    return {"containers": [{"name": "c", "image": "x@sha256:" + "a" * 64,
                            "env": [{"name": "HOME", "value": "/data"}]}],
            "initContainers": [{"name": "i", "image": "x@sha256:" + "a" * 64}]}


def test_harden_makes_a_bare_pod_restricted_and_keeps_the_workloads_own_values():
    assert pss.violations(bare_pod(), "restricted")  # the unhardened pod is refused
    spec = pod_security.harden(bare_pod())
    assert pss.violations(spec, "restricted") == []
    assert spec["automountServiceAccountToken"] is False
    assert pod_security.harden(bare_pod(), kubernetes_api=True)["automountServiceAccountToken"] is True
    env = [e for e in spec["containers"][0]["env"] if e["name"] == "HOME"]
    assert env == [{"name": "HOME", "value": "/data"}]
    assert spec["securityContext"]["runAsUser"] >= 10000
    assert {v["name"] for v in spec["volumes"]} == {"home", "tmp"}
    # the input is not changed
    assert "securityContext" not in bare_pod()["containers"][0]


def test_harden_is_idempotent():
    once = pod_security.harden(bare_pod(), cache_dir="/var/cache/x")
    assert pod_security.harden(once, cache_dir="/var/cache/x") == once


# -- the standards helper refuses what admission refuses -----------------------------------------


def hardened() -> dict:
    return pod_security.harden(bare_pod())


@pytest.mark.parametrize("mutate, level", [
    (lambda s: s.update(hostNetwork=True), "baseline"),
    (lambda s: s.update(hostPID=True), "baseline"),
    (lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/var/lib"}}), "baseline"),
    (lambda s: s["containers"][0]["securityContext"].update(privileged=True), "baseline"),
    (lambda s: s["containers"][0]["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]), "baseline"),
    (lambda s: s["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 80}]), "baseline"),
    (lambda s: s["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]), "baseline"),
    (lambda s: s["containers"][0]["securityContext"].update(seccompProfile={"type": "Unconfined"}), "baseline"),
    (lambda s: s["containers"][0]["securityContext"].update(procMount="Unmasked"), "baseline"),
    (lambda s: s["volumes"].append({"name": "n", "nfs": {"server": "x", "path": "/"}}), "restricted"),
    (lambda s: s["initContainers"][0]["securityContext"].update(allowPrivilegeEscalation=True), "restricted"),
    (lambda s: s["containers"][0]["securityContext"].update(runAsNonRoot=False), "restricted"),
    (lambda s: s["containers"][0]["securityContext"].update(runAsUser=0), "restricted"),
    (lambda s: s["containers"][0]["securityContext"]["capabilities"].update(drop=["NET_RAW"]), "restricted"),
    (lambda s: s["containers"][0]["securityContext"]["capabilities"].update(add=["CHOWN"]), "restricted"),
])
def test_standards_helper_refuses_each_violation(mutate, level):
    spec = hardened()
    mutate(spec)
    assert pss.violations(spec, level), "not refused"
    if level == "restricted":
        assert pss.violations(spec, "baseline") == []


def test_seccomp_may_be_set_on_the_pod_only():
    spec = hardened()
    for container in spec["containers"] + spec["initContainers"]:
        del container["securityContext"]["seccompProfile"]
    assert pss.violations(spec, "restricted") == []
    del spec["securityContext"]["seccompProfile"]
    assert len(pss.violations(spec, "restricted")) == 2


def test_unknown_level_is_an_error():
    with pytest.raises(ValueError):
        pss.violations(copy.deepcopy(hardened()), "strict")
