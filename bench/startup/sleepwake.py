"""Sleep mode timed on a running vLLM server: `POST /sleep`, then `POST /wake_up`.

A server started with `--enable-sleep-mode` (and VLLM_SERVER_DEV_MODE=1, which exposes the
endpoints) releases its GPU memory on `/sleep?level=N` and takes it back on `/wake_up`; both calls
return when the engine is done. Each is timed from request to response, then `/is_sleeping`
confirms the state. With a model name, the first completion after wake-up is timed as well (the
PoC: 26.8 s to sleep, 3.6 s to wake, against a 155 s restart).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

KIND = "vllm-poc/sleep-wake"
TIMEOUT_S = 600.0


def _call(method: str, url: str, body: dict | None = None, timeout: float = TIMEOUT_S) -> tuple[float, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        payload = resp.read()
    return time.perf_counter() - start, payload


def _sleeping(base: str) -> bool | None:
    try:
        _, payload = _call("GET", f"{base}/is_sleeping", timeout=30)
        return bool(json.loads(payload).get("is_sleeping"))
    except (OSError, ValueError, AttributeError):
        return None


def measure(url: str, *, level: int = 1, model: str | None = None) -> dict[str, Any]:
    """Times of one sleep/wake cycle; `error` says what failed (the server is left awake if it can be)."""
    base = url.rstrip("/")
    out: dict[str, Any] = {"kind": KIND, "url": base, "level": level, "sleep_s": None, "wake_s": None,
                           "first_request_s": None, "confirmed": False, "error": None,
                           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        out["sleep_s"] = round(_call("POST", f"{base}/sleep?level={level}")[0], 3)
        asleep = _sleeping(base)
        out["wake_s"] = round(_call("POST", f"{base}/wake_up")[0], 3)
        awake = _sleeping(base)
        out["confirmed"] = asleep is True and awake is False
        if model:
            out["first_request_s"] = round(_call("POST", f"{base}/v1/completions", {
                "model": model, "prompt": "Hello", "max_tokens": 1})[0], 3)
    except urllib.error.HTTPError as exc:
        out["error"] = (f"HTTP {exc.code} from {exc.url}: is the server started with --enable-sleep-mode and "
                        "VLLM_SERVER_DEV_MODE=1?" if exc.code == 404 else f"HTTP {exc.code} from {exc.url}")
    except OSError as exc:
        out["error"] = str(getattr(exc, "reason", exc))
    if out["error"] and out["sleep_s"] is not None and out["wake_s"] is None:
        try:
            _call("POST", f"{base}/wake_up")
        except OSError:
            pass
    return out
