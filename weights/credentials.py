"""Wait for the pod's AWS credentials before the weight sync starts: `python -m weights.credentials`.

In the cluster the sync's only AWS credentials come from EKS Pod Identity: the webhook puts two
variables into the pod when it is created (AWS_CONTAINER_CREDENTIALS_FULL_URI and
AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE), and the agent on the node trades the pod's token for
credentials. A new association "may take several seconds to be effective", and `pulumi up` creates
the sync Jobs seconds after theirs, so the first pod can meet either of two states:

* no variables: the webhook did not see the association yet. They are set only when a pod is
  created, so waiting in this pod cannot help: exit 1 at once, and the Job starts a new pod (this
  runs before the pip install, so nothing is repeated);
* the variables, but the agent refuses: the association is not effective there yet. Ask again
  every few seconds, up to --wait-s (one line says so), then start, or exit 1.

Standard library only: it runs before the sync's requirements are installed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

URI_VAR = "AWS_CONTAINER_CREDENTIALS_FULL_URI"
TOKEN_FILE_VAR = "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"
WAIT_S = 60.0
INTERVAL_S = 3.0


class NoCredentials(Exception):
    """The pod cannot get credentials; the message says why and what happens next."""


def fetch_once(uri: str, token_file: str, timeout_s: float = 3.0) -> str:
    """The access key id the agent hands out now; raises with the agent's answer otherwise."""
    with open(token_file, encoding="utf-8") as fh:
        token = fh.read().strip()
    request = urllib.request.Request(uri, headers={"Authorization": token})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - the agent's URI
        body = json.loads(response.read().decode() or "{}")
    key = body.get("AccessKeyId")
    if not key:
        raise ValueError("the answer holds no AccessKeyId")
    return key


def _reason(exc: Exception) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        detail = exc.read().decode(errors="replace").strip()[:200]
        return f"HTTP {exc.code}" + (f": {detail}" if detail else "")
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return f"{type(exc).__name__}: {exc}"


def _say(message: str) -> None:
    print(message, flush=True)


def wait_for_credentials(wait_s: float = WAIT_S, interval_s: float = INTERVAL_S, env=None, log=_say) -> float:
    """Seconds it took until the agent handed out credentials; raises NoCredentials otherwise."""
    env = os.environ if env is None else env
    uri, token_file = env.get(URI_VAR), env.get(TOKEN_FILE_VAR)
    if not uri or not token_file:
        raise NoCredentials(
            f"this pod has no EKS Pod Identity credentials ({URI_VAR} is not set): the webhook created it before "
            "the service account's Pod Identity association took effect, and it sets them only when a pod is "
            "created. Exiting so that the Job starts a new pod.")
    started = time.monotonic()
    said = False
    while True:
        try:
            fetch_once(uri, token_file)
            return time.monotonic() - started
        except (OSError, ValueError) as exc:
            waited = time.monotonic() - started
            if waited + interval_s > wait_s:
                raise NoCredentials(
                    f"the EKS Pod Identity agent gave no credentials within {wait_s:g} s (last answer: {_reason(exc)}); "
                    "check the service account's association (`aws eks list-pod-identity-associations`) and the "
                    "eks-pod-identity-agent add-on. Exiting so that the Job tries a new pod.") from None
            if not said:
                log(f"weights: waiting up to {wait_s:g} s for AWS credentials from the EKS Pod Identity agent "
                    f"(a new association takes a few seconds to take effect; {_reason(exc)})")
                said = True
            time.sleep(interval_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m weights.credentials", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wait-s", type=float, default=WAIT_S,
                        help=f"how long to ask the agent before giving up (default {WAIT_S:g})")
    parser.add_argument("--interval-s", type=float, default=INTERVAL_S,
                        help=f"pause between two asks (default {INTERVAL_S:g})")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        seconds = wait_for_credentials(args.wait_s, args.interval_s)
    except NoCredentials as exc:
        print(f"weights: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("weights: stopped while waiting for AWS credentials; nothing was started", file=sys.stderr)
        return 130
    print(f"weights: AWS credentials from the EKS Pod Identity agent"
          + (f" after {seconds:.0f} s" if seconds >= 1 else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
