"""`python -m bench streamer <s3 uri> --out DIR`: Run:ai streamer throughput over a settings grid.

Streams a staged model's safetensors from S3 to host memory with the Run:ai model streamer (the
loader behind vLLM's `--load-format runai_streamer`; no GPU needed) once per point of a grid of
concurrency (RUNAI_STREAMER_CONCURRENCY: S3 clients) x memory limit (RUNAI_STREAMER_MEMORY_LIMIT:
the CPU buffer), and prints each point's rate and its share of the instance's baseline network
bandwidth (bench/startup/netlimits.py). Each point runs in a fresh process, because the streamer reads its
settings from the environment when it starts, so one point cannot leak into the next.

Recommendation: the fastest point, unless a point with fewer S3 clients, then a smaller buffer,
comes within --tolerance-pct of it (fewer connections and less host memory beside the engine for
the same load time).

Writes DIR/streamer.json:
  {"uri", "bytes", "instance_type",
   "points": [{"concurrency", "memory_limit_bytes", "seconds", "gbps", "share_of_baseline_pct"}],
   "recommendation": {"concurrency", "memory_limit_bytes"}}
`gbps` is 10^9 bits per second over the streamer's own byte count. S3 access follows boto3's
chain (Pod Identity in the cluster); AWS_ENDPOINT_URL sends it to another endpoint (with
RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING=0 for stores that need path-style addressing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import options as O
from bench.common import s3
from bench.common.cli import Help, run_one
from bench.startup import netlimits

GIB = 2**30
DEFAULT_CONCURRENCY = (8, 16, 32, 64)
DEFAULT_MEMORY_LIMIT_GIB = (8, 24)
POINT_TIMEOUT_S = 1800


def _ints(text: str, what: str, minimum: int) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}: comma-separated integers expected, got {text!r}") from None
    if not values or any(v < minimum for v in values):
        raise argparse.ArgumentTypeError(f"{what}: values must be >= {minimum}, got {text!r}")
    return sorted(set(values))


def _point_worker(uri: str) -> int:
    """Runs in the child process: stream every safetensors file under uri, print bytes and seconds."""
    from runai_model_streamer import SafetensorsStreamer, list_safetensors

    files = sorted(list_safetensors(uri if uri.endswith("/") else uri + "/"))
    if not files:
        print(json.dumps({"error": f"no *.safetensors under {uri}"}))
        return 3
    consumed = 0
    start = time.perf_counter()
    with SafetensorsStreamer() as streamer:
        streamer.stream_files(files, device="cpu")
        for _, tensor in streamer.get_tensors():
            consumed += tensor.numel() * tensor.element_size()
        total = streamer.total_size
    seconds = time.perf_counter() - start
    print(json.dumps({"bytes": total, "consumed": consumed, "seconds": seconds, "files": len(files)}))
    return 0


def run_point(uri: str, concurrency: int, memory_limit_bytes: int, *, timeout_s: float = POINT_TIMEOUT_S) -> dict:
    env = dict(os.environ)
    env["RUNAI_STREAMER_CONCURRENCY"] = str(concurrency)
    env["RUNAI_STREAMER_MEMORY_LIMIT"] = str(memory_limit_bytes)
    root = str(Path(__file__).resolve().parents[2])  # the folder holding the bench package
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-m", "bench.startup.streamer", "--point", uri], env=env,
                          capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    last = next((line for line in reversed(proc.stdout.splitlines()) if line.startswith("{")), None)
    data = json.loads(last) if last else {}
    if proc.returncode != 0 or "seconds" not in data:
        why = data.get("error") or (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"concurrency {concurrency}, memory limit {memory_limit_bytes}: {why}")
    if data["consumed"] != data["bytes"]:
        raise RuntimeError(f"concurrency {concurrency}: streamed {data['consumed']} of {data['bytes']} bytes")
    return data


def recommend(points: list[dict[str, Any]], tolerance_pct: float) -> dict[str, int] | None:
    """Fewest S3 clients, then the smallest buffer, among points within tolerance of the fastest."""
    timed = [p for p in points if p.get("seconds")]
    if not timed:
        return None
    fastest = min(p["seconds"] for p in timed)
    good = [p for p in timed if p["seconds"] <= fastest * (1 + tolerance_pct / 100)]

    def buffer_rank(value: int) -> float:
        return float("inf") if value < 0 else value  # -1 is unlimited

    best = min(good, key=lambda p: (p["concurrency"], buffer_rank(p["memory_limit_bytes"]), p["seconds"]))
    return {"concurrency": best["concurrency"], "memory_limit_bytes": best["memory_limit_bytes"]}


def sweep(uri: str, concurrencies: list[int], memory_limits_gib: list[int], instance_type: str | None, *,
          repeats: int = 1, tolerance_pct: float = 5.0, runner=run_point, log=print) -> dict[str, Any]:
    limit = netlimits.limit(instance_type)
    points: list[dict[str, Any]] = []
    total_bytes = None
    for memory_gib in memory_limits_gib:
        memory_bytes = -1 if memory_gib < 0 else memory_gib * GIB
        for concurrency in concurrencies:
            runs = [runner(uri, concurrency, memory_bytes) for _ in range(repeats)]
            total_bytes = runs[0]["bytes"]
            seconds = statistics.median(r["seconds"] for r in runs)
            rate = netlimits.gbps(total_bytes, seconds)
            point = {
                "concurrency": concurrency,
                "memory_limit_bytes": memory_bytes,
                "seconds": round(seconds, 4),
                "gbps": round(rate, 3) if rate is not None else None,
                "share_of_baseline_pct": netlimits.share_pct(rate, limit.baseline_gbps if limit else None),
            }
            points.append(point)
            share = f", {point['share_of_baseline_pct']}% of {limit.baseline_gbps:g} Gbps baseline" if limit else ""
            log(f"bench streamer: concurrency {concurrency:>4}, memory limit "
                f"{'unlimited' if memory_bytes < 0 else f'{memory_gib} GiB'}: {point['seconds']:.2f} s, "
                f"{point['gbps']} Gbps{share}")
    return {
        "uri": uri,
        "bytes": total_bytes,
        "instance_type": instance_type,
        "points": points,
        "recommendation": recommend(points, tolerance_pct),
    }


def upload(path: Path, root: Path, uri: str) -> bool:
    """Store a result file under the results prefix (same relative key), like the sweep does."""
    try:
        uploader = s3.Uploader(s3.S3Location.parse(uri, option="--upload"), root)
    except Exception as exc:  # noqa: BLE001 - a bad URI or no boto3: say so, keep the local file
        print(f"bench: --upload {uri}: {exc}", file=sys.stderr)
        return False
    return uploader.upload(path)


def run(args: argparse.Namespace) -> int:
    if not args.uri.startswith("s3://") or len(args.uri) <= len("s3://"):
        print(f"bench streamer: {args.uri!r} is not an s3:// URI of a staged model "
              "(e.g. s3://<weights bucket>/models/<hf id>/)", file=sys.stderr)
        return 2
    if args.instance_type and netlimits.limit(args.instance_type) is None:
        print(f"bench streamer: --instance-type {args.instance_type!r} is not in the network table; use one of "
              f"{', '.join(sorted(netlimits.NETWORK))}", file=sys.stderr)
        return 2
    try:
        import runai_model_streamer  # noqa: F401
    except ImportError:
        print("bench streamer: runai-model-streamer is not installed "
              "(pip install 'runai-model-streamer[s3]'; the vllm/vllm-openai image ships it)", file=sys.stderr)
        return 2
    try:
        result = sweep(args.uri, args.concurrency, args.memory_limit_gib, args.instance_type,
                       repeats=args.repeats, tolerance_pct=args.tolerance_pct)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"bench streamer: {exc}", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "streamer.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if args.upload and not upload(out / "streamer.json", out, args.upload):
        return 1
    rec = result["recommendation"]
    mem = "unlimited" if rec["memory_limit_bytes"] < 0 else f"{rec['memory_limit_bytes'] // GIB} GiB"
    print(f"bench streamer: {result['bytes']:,} bytes; recommended for {args.instance_type or 'this host'}: "
          f"concurrency {rec['concurrency']}, memory limit {mem} "
          f"(--model-loader-extra-config '{{\"concurrency\": {rec['concurrency']}, "
          f"\"memory_limit\": {rec['memory_limit_bytes']}}}') -> {out / 'streamer.json'}")
    line = loader_profile_line(result, args.upload.rstrip("/") + "/streamer.json" if args.upload
                               else str(out / "streamer.json"))
    if line:
        print(f"bench streamer: to adopt it, in stacks/serving/profiles.py LOADER_PROFILES: {line}")
    return 0


def loader_profile_line(result: dict[str, Any], where: str) -> str | None:
    """The stack's per-instance loader entry for the recommendation, citing the result it came from."""
    rec, instance = result.get("recommendation"), result.get("instance_type")
    if not rec or not instance or rec["memory_limit_bytes"] < 0:
        return None
    point = next(p for p in result["points"] if (p["concurrency"], p["memory_limit_bytes"])
                 == (rec["concurrency"], rec["memory_limit_bytes"]))
    share = f", {point['share_of_baseline_pct']}% of baseline" if point.get("share_of_baseline_pct") is not None else ""
    return (f'"{instance}": LoaderProfile({rec["concurrency"]}, {rec["memory_limit_bytes"] // GIB}, '
            f'"bench streamer {where}: {point["seconds"]} s, {point["gbps"]} Gbps{share}"),')


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "streamer", help="Run:ai streamer S3 throughput over concurrency x memory limit", description=__doc__,
        formatter_class=Help,
    )
    p.add_argument("uri", help="s3:// prefix of a staged model's safetensors (models/<hf id>/)")
    O.add_renamed(p, "--concurrencies", type=O.concurrencies, default=list(DEFAULT_CONCURRENCY), dest="concurrency",
                  help="S3 clients per point, increasing (default: 8,16,32,64)")
    p.add_argument("--memory-limit-gib", type=lambda t: _ints(t, "--memory-limit-gib", -1),
                   default=list(DEFAULT_MEMORY_LIMIT_GIB),
                   help="CPU buffer per point in GiB, -1 = unlimited (default: 8,24)")
    p.add_argument("--instance-type", default=None, help="instance this runs on, for the share of its network")
    p.add_argument("--repeats", type=lambda t: _ints(t, "--repeats", 1)[0], default=1,
                   help="runs per point; the median counts (default: 1)")
    p.add_argument("--tolerance-pct", type=float, default=5.0,
                   help="points this close to the fastest count as equal for the recommendation (default: 5)")
    O.add_out(p, "streamer", "streamer.json", s3=False)
    p.add_argument("--upload", default=os.environ.get("VLLM_POC_RESULTS_URI") or None,
                   help="s3://bucket/prefix/ to store streamer.json under (env VLLM_POC_RESULTS_URI)")
    p.set_defaults(func=run)
    return p


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.startup.streamer ...` = `python -m bench streamer ...` with only the modules it needs."""
    return run_one(add_parser, "streamer", argv)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--point":
        sys.exit(_point_worker(sys.argv[2]))
    sys.exit(main())
