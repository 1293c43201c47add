"""AWS credentials for the operator commands: whether this machine has any, and how to provide them.

preflight and teardown-check read the account. Without credentials they do not stop at the SDK's
first error: preflight still runs every check that needs no account and lists the others it could
not run; teardown-check says which credentials and permissions it needs. Both then exit
INCOMPLETE, which no other outcome uses.
"""

from __future__ import annotations

from dataclasses import dataclass

# Exit code of a command that ran what it could and could not run the rest for want of AWS
# credentials (0: all checked, no blocker; 1: a blocker or a leftover; 2: bad input).
INCOMPLETE = 3

HOW_TO_PROVIDE = (
    "give this shell AWS credentials for the stack's account: `aws sso login --profile <profile>` and "
    "`export AWS_PROFILE=<profile>`, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (with AWS_SESSION_TOKEN for "
    "temporary keys); `aws sts get-caller-identity` shows whom they name. Then rerun the same command"
)

# The SDK's own exceptions for absent, unreadable or expired credentials (by name: botocore need not be imported).
_CREDENTIAL_ERRORS = {
    "NoCredentialsError", "PartialCredentialsError", "ProfileNotFound", "CredentialRetrievalError",
    "TokenRetrievalError", "SSOTokenLoadError", "UnauthorizedSSOTokenError", "InvalidConfigError",
}
# Error codes AWS answers with when the keys themselves are refused.
_REFUSED_CODES = {"ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId", "UnrecognizedClientException",
                  "AuthFailure", "SignatureDoesNotMatch", "RequestExpired"}


@dataclass(frozen=True)
class NotRun:
    """An AWS check a command could not run: what it answers and what it reads."""
    check: str
    answers: str
    reads: str

    def to_dict(self) -> dict[str, str]:
        return {"check": self.check, "answers": self.answers, "reads": self.reads}


def credentials_problem(exc: BaseException) -> str | None:
    """The sentence for an exception that means "no usable credentials", else None."""
    name = type(exc).__name__
    code = (getattr(exc, "response", None) or {}).get("Error", {}).get("Code")
    if name in _CREDENTIAL_ERRORS or code in _REFUSED_CODES:
        return f"AWS refused or found no credentials ({code or name}: {exc})"
    return None


def missing_credentials() -> str | None:
    """None where the SDK finds credentials (without calling AWS); else why it found none."""
    import boto3

    try:
        found = boto3.Session().get_credentials()
    except Exception as exc:  # noqa: BLE001 - a broken profile is the same answer: no credentials
        return credentials_problem(exc) or f"AWS credentials could not be read ({type(exc).__name__}: {exc})"
    if found is None:
        return ("no AWS credentials found (no AWS_PROFILE or AWS_ACCESS_KEY_ID, no default profile in "
                "~/.aws, no instance or container role)")
    return None
