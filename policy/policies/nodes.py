"""Rules on Karpenter's node objects: IMDSv2 with hop limit 1 on every EC2NodeClass, and the GPU taint
on every GPU NodePool."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .values import as_list, get, is_unknown
from .workloads import EC2_NODE_CLASS, NODE_POOL


# Rule: EC2NodeClass requires IMDSv2 with hop limit 1


def check_ec2nodeclass_imds(resource_type: str, props: Mapping[str, Any], name: str = "",
                            config: Mapping[str, Any] | None = None) -> list[str]:
    """Every EC2NodeClass counts as a GPU class: a NodeClass carries no GPU marker, any GPU NodePool
    may reference it, and the al2023 alias picks the NVIDIA AMI for GPU instance types by itself.
    Karpenter's defaults equal the required values today; the rule asks for them explicitly so that
    a default change or an override cannot expose node credentials to pods."""
    if resource_type != EC2_NODE_CLASS:
        return []
    options = get(props, "spec", "metadataOptions")
    if is_unknown(options):
        return []
    label = name or "EC2NodeClass"
    if not isinstance(options, Mapping):
        return [f"{label}: spec.metadataOptions is missing; set httpTokens: required and "
                f"httpPutResponseHopLimit: 1 so pods cannot reach the node role through IMDS."]
    messages: list[str] = []
    hop = options.get("httpPutResponseHopLimit")
    if not is_unknown(hop) and not (isinstance(hop, (int, float)) and not isinstance(hop, bool)
                                    and hop == 1):
        messages.append(f"{label}: spec.metadataOptions.httpPutResponseHopLimit is {hop!r}; set it "
                        f"to 1 so only the node (not pods) reaches IMDS.")
    tokens = options.get("httpTokens")
    if not is_unknown(tokens) and tokens != "required":
        messages.append(f"{label}: spec.metadataOptions.httpTokens is {tokens!r}; set it to "
                        f"'required' (IMDSv2 only).")
    return messages


# Rule: GPU NodePool carries the nvidia.com/gpu NoSchedule taint

GPU_TAINT_KEY = "nvidia.com/gpu"
_GPU_FAMILY = re.compile(r"^(g|gr|p)\d")
_POSITIVE_OPERATORS = frozenset({"In", "Exists", "Gt", "Gte"})


def _is_gpu_requirement(requirement: Mapping[str, Any]) -> bool:
    key = requirement.get("key")
    operator = requirement.get("operator")
    if not isinstance(key, str) or operator not in _POSITIVE_OPERATORS:
        return False
    if key.startswith("karpenter.k8s.aws/instance-gpu-") or key.startswith("karpenter.k8s.aws/instance-accelerator-"):
        return True
    values = [v for v in as_list(requirement.get("values")) if isinstance(v, str)] \
        if not is_unknown(requirement.get("values")) else []
    if key == "node.kubernetes.io/instance-type":
        return any(_GPU_FAMILY.match(v) for v in values)
    if key == "karpenter.k8s.aws/instance-family":
        return any(_GPU_FAMILY.match(v) for v in values)
    if key == "karpenter.k8s.aws/instance-category":
        return any(v in ("g", "p") for v in values)
    return False


def is_gpu_nodepool(props: Mapping[str, Any]) -> bool:
    """GPU if a requirement selects g*/p* instance types or GPU attributes, the template labels
    nvidia.com/gpu.present, or the limits cap nvidia.com/gpu."""
    requirements = as_list(get(props, "spec", "template", "spec", "requirements"))
    if not is_unknown(requirements):
        if any(isinstance(r, Mapping) and _is_gpu_requirement(r) for r in requirements):
            return True
    labels = get(props, "spec", "template", "metadata", "labels")
    if isinstance(labels, Mapping) and str(labels.get("nvidia.com/gpu.present", "")).lower() == "true":
        return True
    limits = get(props, "spec", "limits")
    return isinstance(limits, Mapping) and GPU_TAINT_KEY in limits


def check_gpu_nodepool_taint(resource_type: str, props: Mapping[str, Any], name: str = "",
                             config: Mapping[str, Any] | None = None) -> list[str]:
    if resource_type != NODE_POOL or not is_gpu_nodepool(props):
        return []
    taints = as_list(get(props, "spec", "template", "spec", "taints"))
    if is_unknown(taints):
        return []
    for taint in taints:
        if isinstance(taint, Mapping) and taint.get("key") == GPU_TAINT_KEY:
            effect = taint.get("effect")
            if effect == "NoSchedule" or is_unknown(effect):
                return []
    return [f"{name or 'NodePool'}: GPU NodePool without the taint {GPU_TAINT_KEY}:NoSchedule in "
            f"spec.template.spec.taints; without it any pod can land on (and keep alive) a GPU node."]
