"""The stack itself against the account: the AMI for its Kubernetes version, the caller role and its
session length, the S3 ranges."""

from __future__ import annotations

from typing import Any

from stacks import s3_ranges
from stacks.identity import admin_role_problems, caller_role_arn
from stacks.ops.preflight.aws import error_code, error_text
from stacks.ops.preflight.report import Finding
from stacks.versions import pins

# A first `up` (cluster ~15 min, weight sync, GPU node, cold start) runs up to about 3 hours; a session
# that ends sooner leaves a half-created stack.
FIRST_UP_SESSION_S = 3 * 3600


def session_findings(iam, caller_arn: str) -> list[Finding]:
    """The caller role's maximum session against a first `up`; nothing for users (long-term keys)."""
    role_arn = caller_role_arn(caller_arn)
    if role_arn is None or iam is None:
        return []
    role = role_arn.rsplit("/", 1)[-1]
    try:
        limit = int(iam.get_role(RoleName=role)["Role"].get("MaxSessionDuration", 3600))
    except Exception as exc:  # noqa: BLE001 - unreadable is not a failure: say how to check
        return [Finding(
            "note", "session",
            f"could not read role {role}'s maximum session duration ({error_text(exc)}); a first `up` needs 3 h",
            f"aws iam get-role --role-name {role} --query Role.MaxSessionDuration")]
    if limit >= FIRST_UP_SESSION_S:
        return []
    return [Finding(
        "warning", "session",
        f"role {role} allows sessions of {limit // 60} min; a first `pulumi up` (cluster, weight sync, GPU node, "
        "cold start) runs up to 3 h, and credentials that expire mid-run leave a half-created stack",
        f"aws iam update-role --role-name {role} --max-session-duration {FIRST_UP_SESSION_S}, and ask for 3 h "
        "sessions (role-duration-seconds: 10800 in the workflows)")]


def stack_findings(settings, clients: dict[str, Any], strict: bool = False) -> list[Finding]:
    """Checks of the stack itself against the account: the AMI, the caller role, the S3 ranges (the
    checks that need no account are in offline.py)."""
    findings: list[Finding] = []
    unknown = "blocker" if strict else "warning"
    if settings.gpu_pools and clients.get("ssm") is not None:
        versions = pins()
        k8s = settings.cluster.kubernetes_version
        parameter = versions.nvidia_ami_parameter(k8s)
        try:
            clients["ssm"].get_parameter(Name=parameter)
        except Exception as exc:  # noqa: BLE001 - classified: missing vs unreadable
            fix = (f"pick an AMI release with an NVIDIA AL2023 AMI for Kubernetes {k8s} in {settings.region} "
                   f"(al2023_ami_release in pyproject.toml), or another cluster.kubernetesVersion")
            if error_code(exc) == "ParameterNotFound":
                findings.append(Finding(
                    "blocker", "ami",
                    f"the pinned AMI release {versions.al2023_ami_release} has no NVIDIA AMI for Kubernetes {k8s} in "
                    f"{settings.region} ({parameter}): Karpenter would launch no GPU node", fix))
            else:
                findings.append(Finding(
                    unknown, "ami", f"could not look up {parameter}: {error_text(exc)}",
                    "let the preflight identity call ssm:GetParameter on /aws/service/eks/*"))
    if clients.get("sts") is not None:
        try:
            caller = clients["sts"].get_caller_identity()["Arn"]
            for problem in admin_role_problems(list(settings.cluster.admin_role_arns), caller):
                findings.append(Finding("blocker", "cluster.adminRoleArns", problem.removeprefix("vllm-poc:")))
            findings += session_findings(clients.get("iam"), caller)
        except Exception as exc:  # noqa: BLE001
            findings.append(Finding(unknown, "caller", f"could not read the caller identity: {error_text(exc)}"))
    if clients.get("ssm") is not None and clients.get("ec2") is not None:
        # The NetworkPolicy's S3 ranges (recorded at the last `up`) against AWS's list now.
        for d in s3_ranges.drift(clients["ec2"], clients["ssm"], settings.region, settings.cluster.name, settings.stack):
            findings.append(Finding(d.level, "s3 ranges", d.message, d.fix))
    return findings
