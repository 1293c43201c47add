"""The server under test: GET /health until it answers, and what it says about itself.

The sweep waits for /health before its first run, saying every 10 s why it still waits (connection
refused, the HTTP status, a timeout), then reads /version, /v1/models and /server_info for the
manifest. A server started with an API key answers /v1 only with it: the requests carry
OPENAI_API_KEY as a bearer token, as `vllm bench serve` does.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request
from typing import Any


def _get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    # A server started with an API key answers /v1 only with it; `vllm bench serve` sends the same
    # OPENAI_API_KEY as a bearer token.
    key = os.environ.get("OPENAI_API_KEY")
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read() if exc.fp else b""


def health_problem(exc: BaseException) -> str:
    """Why GET /health did not answer, in words."""
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, ConnectionRefusedError):
        return ("connection refused (nothing listens at that address yet: the server is not started, or the port "
                "is wrong)")
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return "no answer in time (the connection or the reply timed out)"
    if isinstance(reason, socket.gaierror):
        return "the host name does not resolve (DNS)"
    if isinstance(reason, ConnectionResetError):
        return "connection reset by the server"
    text = str(reason) or reason.__class__.__name__
    return text


def wait_for_health(base_url: str, timeout_s: float, interval_s: float = 5.0, say_every_s: float = 10.0,
                    say=None) -> float:
    """Poll GET /health until 200; returns the seconds waited, raises TimeoutError.

    Every `say_every_s` seconds it says why it is still waiting (connection refused, the HTTP
    status, a timeout)."""
    say = say or (lambda line: print(line, flush=True))
    start = time.monotonic()
    last = "no answer yet"
    said = start
    while True:
        try:
            status, _ = _get(f"{base_url}/health", timeout=min(10.0, max(timeout_s, 1.0)))
            if status == 200:
                return time.monotonic() - start
            last = f"HTTP {status}" + (" (the server is up but not ready: vLLM answers 503 while it loads the model)"
                                       if status == 503 else "")
        except (OSError, urllib.error.URLError) as exc:
            last = health_problem(exc)
        now = time.monotonic()
        elapsed = now - start
        if elapsed >= timeout_s:
            raise TimeoutError(f"{base_url}/health did not answer 200 within {elapsed:.0f} s (last: {last}); check "
                               "--base-url and the server's log, or wait longer with --health-timeout-s")
        if now - said >= say_every_s:
            said = now
            say(f"bench sweep: still waiting for {base_url}/health after {elapsed:.0f} s: {last} "
                f"(giving up after {timeout_s:.0f} s)")
        time.sleep(min(interval_s, max(0.1, timeout_s - elapsed), max(0.1, say_every_s - (now - said))))


def probe_server(base_url: str, model: str) -> dict[str, Any]:
    """What the server says about itself; every probe is optional."""
    info: dict[str, Any] = {"base_url": base_url, "model": model}
    for name, path in (("version", "/version"), ("models", "/v1/models"), ("server_info", "/server_info")):
        try:
            status, body = _get(base_url + path)
            if status == 200:
                info[name] = json.loads(body)
        except (OSError, ValueError, urllib.error.URLError):
            pass
    version = info.get("version")
    info["vllm_version"] = version.get("version") if isinstance(version, dict) else None
    models = info.get("models")
    data = [m for m in (models.get("data") or [] if isinstance(models, dict) else []) if isinstance(m, dict)]
    info["served_models"] = [m.get("id") for m in data]
    entry = next((m for m in data if m.get("id") == model), None)
    info["max_model_len"] = entry.get("max_model_len") if entry else None
    info["root"] = entry.get("root") if entry else None
    info.pop("version", None)
    info.pop("models", None)
    if "server_info" in info and len(json.dumps(info["server_info"])) > 200_000:
        info["server_info"] = "(omitted: larger than 200 kB)"
    return info

