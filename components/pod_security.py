"""Pod security for every workload the stack creates, in one place.

`harden(pod_spec, ...)` takes a plain pod spec and returns it meeting the Pod Security Standards'
`restricted` level, which the namespace enforces (NAMESPACE_LABELS):

- a non-root user with a high UID (the vLLM image runs as root by default, and nothing in it needs
  root: the GPU device nodes the NVIDIA runtime injects are world-accessible), no privilege
  escalation, every capability dropped, the runtime's default seccomp profile;
- a read-only root filesystem. Everything the image's tools write by default under `~` or the
  working directory goes to explicit volumes: HOME and /tmp are small emptyDirs, and every cache
  whose default follows HOME or XDG (Hugging Face, vLLM, Triton, torch inductor and extensions,
  FlashInfer JIT, the CUDA PTX JIT cache, numba, matplotlib) is pointed at the `cache_dir` the
  workload gives, or below HOME;
- no Kubernetes service-account token unless the pod reads the Kubernetes API
  (`kubernetes_api=True`). EKS Pod Identity mounts its own token for AWS credentials and does not
  need this one.

Resource limits stay with each workload, which knows its own reasons.
"""

from __future__ import annotations

from typing import Any

# A high UID/GID outside any range an image or the node uses (checkov CKV_K8S_40 asks for >= 10000).
RUN_AS = 65532
HOME = "/home/app"
TMP = "/tmp"
HOME_VOLUME = "home"
TMP_VOLUME = "tmp"
# Both are small: real caches go to the workload's cache_dir. Disk-backed (not memory), so they
# count against the pod's ephemeral storage, not its memory limit.
HOME_SIZE = "4Gi"
TMP_SIZE = "8Gi"
USER_NAME = "app"

ENFORCED_LEVEL = "restricted"


def namespace_labels(kubernetes_version: str) -> dict[str, str]:
    """Pod Security Admission labels: enforce, audit and warn at `restricted`.

    Pinned to the cluster's Kubernetes minor, so an upgrade never tightens admission unseen.
    """
    labels: dict[str, str] = {}
    for mode in ("enforce", "audit", "warn"):
        labels[f"pod-security.kubernetes.io/{mode}"] = ENFORCED_LEVEL
        labels[f"pod-security.kubernetes.io/{mode}-version"] = f"v{kubernetes_version}"
    return labels


def pod_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        # emptyDir and projected volumes become group-owned by this GID.
        "fsGroup": RUN_AS,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def writable_env(cache_dir: str | None = None, bytecode_dir: str | None = None) -> dict[str, str]:
    """Env that sends every default write location to a writable volume. `bytecode_dir`: where Python
    writes and reads its bytecode (PYTHONPYCACHEPREFIX); without one it writes none."""
    cache = cache_dir or f"{HOME}/.cache"
    return {
        "HOME": HOME,
        # getpass.getuser() (torch inductor's default cache name) needs a name; the UID has no
        # passwd entry in the image.
        "USER": USER_NAME,
        "LOGNAME": USER_NAME,
        "TMPDIR": TMP,
        "XDG_CACHE_HOME": cache,
        "XDG_CONFIG_HOME": f"{HOME}/.config",
        "HF_HOME": f"{cache}/huggingface",
        "TORCHINDUCTOR_CACHE_DIR": f"{cache}/torchinductor",
        "TORCH_EXTENSIONS_DIR": f"{cache}/torch_extensions",
        "FLASHINFER_WORKSPACE_BASE": cache,
        "CUDA_CACHE_PATH": f"{cache}/nv/ComputeCache",
        "NUMBA_CACHE_DIR": f"{cache}/numba",
        "MPLCONFIGDIR": f"{HOME}/.config/matplotlib",
        # The image's site-packages are read-only: bytecode goes to a volume, or is not written.
        **({"PYTHONPYCACHEPREFIX": bytecode_dir} if bytecode_dir else {"PYTHONDONTWRITEBYTECODE": "1"}),
    }


def _add_env(container: dict[str, Any], env: dict[str, str]) -> None:
    existing = container.setdefault("env", [])
    names = {item["name"] for item in existing}
    # The workload's own values win: a server that sets TRITON_CACHE_DIR keeps it.
    existing.extend({"name": k, "value": v} for k, v in env.items() if k not in names)


def _add_mounts(container: dict[str, Any]) -> None:
    mounts = container.setdefault("volumeMounts", [])
    taken = {m["mountPath"] for m in mounts}
    for name, path in ((HOME_VOLUME, HOME), (TMP_VOLUME, TMP)):
        if path not in taken:
            mounts.append({"name": name, "mountPath": path})


def _copy(value: Any) -> Any:
    # Containers only: leaves may be Pulumi Outputs, which cannot be deep-copied.
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def harden(pod_spec: dict[str, Any], *, kubernetes_api: bool = False,
           cache_dir: str | None = None, bytecode_dir: str | None = None) -> dict[str, Any]:
    """A copy of `pod_spec` that passes the `restricted` Pod Security Standard.

    `cache_dir`: where the workload keeps caches worth keeping (a mounted volume the workload
    declares itself); default below HOME. `bytecode_dir`: a folder on a writable volume for Python's
    bytecode, for a workload whose image ships none and whose processes import much (vLLM: the API
    server, the engine and its worker import torch and vLLM each); default: none written.
    `kubernetes_api`: mount the service-account token because the pod calls the Kubernetes API.
    """
    spec = _copy(pod_spec)
    spec["automountServiceAccountToken"] = kubernetes_api
    spec["securityContext"] = {**pod_security_context(), **spec.get("securityContext", {})}
    env = writable_env(cache_dir, bytecode_dir)
    for key in ("initContainers", "containers"):
        for container in spec.get(key, []):
            container["securityContext"] = {**container_security_context(),
                                            **container.get("securityContext", {})}
            _add_env(container, env)
            _add_mounts(container)
    volumes = spec.setdefault("volumes", [])
    names = {v["name"] for v in volumes}
    for name, size in ((HOME_VOLUME, HOME_SIZE), (TMP_VOLUME, TMP_SIZE)):
        if name not in names:
            volumes.append({"name": name, "emptyDir": {"sizeLimit": size}})
    return spec
