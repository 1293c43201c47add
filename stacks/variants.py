"""Server variants: one server in config, several servers that each change one setting.

A server may declare `variants`, a map of setting -> values:

    - name: gemma-fp8
      pool: l40s-x4
      model: fp8-dynamic
      trafficClass: batch          # MTP k=4
      variants:
        speculative: [false]        # -> gemma-fp8-spec-off
        numSpeculativeTokens: [8]   # -> gemma-fp8-k8
        kvCacheDtype: [auto]        # -> gemma-fp8-kv-auto

Each value that differs from the base's own becomes its own server (Deployment, Service, identity),
bench Job and results prefix, named `<base>-<what changed>` so that a reader sees the change. By
default every variant changes ONE setting from its base (the PoC's rule: one change at a time, the
same environment); `crossProduct: true` asks for the full grid of the listed values instead.

Checks, all at config load (`python -m stacks render`, `pulumi preview`):
- only settings that shape the numbers can vary (VARIANT_NAMES), each with a non-empty list;
- a variant must change exactly one of the served settings (read from the `vllm serve` flags it
  would run, not from the config keys: `trafficClass: [interactive]` on a batch server changes both
  speculative decoding and the scheduling policy, and is refused) unless crossProduct is set, and
  it must change something;
- the generated names fit the 40-character server name limit;
- every pool's GPU budget (gpuLimit) holds all its servers and variants at once: they run side by
  side (GPU isolation on a multi-GPU node, as the PoC compared FP8 and NVFP4); `python -m stacks
  preflight` then checks the account's quota against those gpuLimits.
A variant of a benchmark target is a target too, with the base's price per hour.

A variant may use a setting the profile otherwise refuses when that setting is what it measures:
an FP8-dynamic server with `kvCacheDtype: auto` (the BF16 KV cache the PoC measured). Its pods carry
`vllm-poc/variant-of` and `vllm-poc/variant` labels, which the policy pack's fp8 KV rule honours.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from bench.analysis.compare import server_settings
from stacks.serving import ModelUris, build_serve_spec

VARIANT_OF = "variantOf"
# Config key -> how its value reads in a variant's name.
VARIANT_NAMES: dict[str, Callable[[Any], str]] = {
    "model": lambda v: str(v),
    "pool": lambda v: f"on-{v}",
    "trafficClass": lambda v: str(v),
    "tensorParallelSize": lambda v: f"tp{v}",
    "maxModelLen": lambda v: f"len{v}",
    "maxNumSeqs": lambda v: f"seqs{v}",
    "gpuMemoryUtilization": lambda v: f"gmu{round(float(v) * 100)}",
    "speculative": lambda v: "spec-on" if v else "spec-off",
    "numSpeculativeTokens": lambda v: f"k{v}",
    "kvCacheDtype": lambda v: f"kv-{str(v).replace('_', '-')}",
    "sleepMode": lambda v: "sleep-on" if v else "sleep-off",
}
# Served settings (bench.compare names) that follow from a changed setting and do not count as a
# second change.
CONSEQUENCES = {"tensorParallelSize": {"gpus"}, "pool": {"gpus"}}


def _effective(base, key: str) -> Any:
    """The base server's value of a variant key, defaults resolved (speculative from its class)."""
    return {
        "speculative": base.uses_speculative,
        "kvCacheDtype": base.effective_kv_cache_dtype,
        "gpuMemoryUtilization": base.effective_gpu_memory_utilization,
    }.get(key, getattr(base, snake(key)))


def snake(key: str) -> str:
    """Config key (camelCase) -> settings attribute name."""
    return "".join("_" + c.lower() if c.isupper() else c for c in key)


def expand_servers(raw_servers: Any, server_model) -> tuple[Any, list[str], dict[str, list[str]]]:
    """Raw `servers` config -> (servers with variants appended, problems, {base: [variant names]}).

    `server_model` is the ServerSettings class (to resolve a base's defaults). Problems name their
    key (`servers[0].variants.kvCacheDtype`); a base that is itself invalid is left to the normal
    validation and gets no variants.
    """
    if not isinstance(raw_servers, list):
        return raw_servers, [], {}
    out: list[Any] = []
    problems: list[str] = []
    made: dict[str, list[str]] = {}
    for index, raw in enumerate(raw_servers):
        out.append(raw)
        if not isinstance(raw, dict):
            continue
        key = f"servers[{index}]"
        if VARIANT_OF in raw or "variant_of" in raw:
            problems.append(f"{key}.{VARIANT_OF}: set by the stack on generated variants; remove it "
                            "and declare variants on the base server instead")
            continue
        variants = raw.get("variants")
        if not variants:
            continue
        if not isinstance(variants, dict):
            problems.append(f"{key}.variants: expected a map of setting -> list of values, e.g. "
                            "{numSpeculativeTokens: [8], kvCacheDtype: [auto]}")
            continue
        bad = False
        for name, values in variants.items():
            if name not in VARIANT_NAMES:
                problems.append(f"{key}.variants.{name}: cannot vary; variants may change one of "
                                f"{', '.join(VARIANT_NAMES)}")
                bad = True
            elif not isinstance(values, list) or not values or len(set(map(repr, values))) != len(values):
                problems.append(f"{key}.variants.{name}: expected a non-empty list of distinct values")
                bad = True
        if bad:
            continue
        try:
            base = server_model.model_validate({k: v for k, v in raw.items() if k != "variants"})
        except Exception:  # noqa: BLE001 - the base's own problems are reported by the normal validation
            continue
        cross = bool(raw.get("crossProduct"))
        keys = list(variants)
        if cross:
            combos = [dict(zip(keys, values)) for values in itertools.product(*(variants[k] for k in keys))]
        else:
            combos = [{k: v} for k in keys for v in variants[k]]
        for combo in combos:
            changes = {k: v for k, v in combo.items() if v != _effective(base, k)}
            if not changes:
                continue  # the base itself
            name = "-".join([base.name, *(VARIANT_NAMES[k](v) for k, v in changes.items())]).lower()
            where = f"{key}.variants.{'/'.join(changes)}"
            if len(name) > 40:
                problems.append(f"{where}: variant name {name!r} is longer than 40 characters; shorten "
                                f"the base name {base.name!r}")
                continue
            variant = {k: v for k, v in raw.items() if k not in ("variants", "crossProduct")}
            variant.update(changes)
            variant["name"] = name
            variant[VARIANT_OF] = {"base": base.name, "settings": list(changes), "cross": cross}
            out.append(variant)
            made.setdefault(base.name, []).append(name)
    return out, problems, made


def expand_bench(raw_bench: Any, made: dict[str, list[str]]) -> Any:
    """Variants of a benchmark target are targets too, at the base's price per hour."""
    if not isinstance(raw_bench, dict) or not made:
        return raw_bench
    bench = dict(raw_bench)
    targets = bench.get("targets")
    if not isinstance(targets, list):
        return raw_bench
    added = [v for t in targets if t in made for v in made[t] if v not in targets]
    bench["targets"] = [*targets, *added]
    prices = bench.get("pricePerHour")
    if isinstance(prices, dict):
        bench["pricePerHour"] = {**prices, **{v: prices[t] for t in targets if t in prices
                                              for v in made.get(t, []) if v not in prices}}
    return bench


def expand_config(data: Any, server_model) -> Any:
    """StackSettings input with variants expanded (servers and bench targets); raises on problems."""
    if not isinstance(data, dict) or "servers" not in data:
        return data
    servers, problems, made = expand_servers(data["servers"], server_model)
    if problems:
        raise ValueError("\n".join(problems))
    out = {**data, "servers": servers}
    if "bench" in data:
        out["bench"] = expand_bench(data["bench"], made)
    return out


# -- checks on validated settings ----------------------------------------------------------------


def served_settings(server, instance) -> dict[str, str]:
    """What the server's `vllm serve` flags set (bench.compare's reading), plus its hardware."""
    spec = build_serve_spec(server, instance, ModelUris.for_bucket("weights", server), region="unused")
    settings = server_settings(list(spec.args))
    settings["instanceType"] = instance.name
    settings["gpus"] = str(spec.gpus * spec.replicas)
    return settings


def variant_problems(settings) -> list[str]:
    """One change at a time (unless a cross product was asked for), and a change at all."""
    problems = []
    for index, server in enumerate(settings.servers):
        origin = server.variant_of
        if origin is None:
            continue
        base = next((s for s in settings.servers if s.name == origin.base), None)
        if base is None:
            continue
        try:
            mine = served_settings(server, settings.pool(server.pool).instance)
            theirs = served_settings(base, settings.pool(base.pool).instance)
        except (StopIteration, ValueError, KeyError):
            continue  # pool or pairing problems are reported by the other checks
        differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        owned = set().union(*(CONSEQUENCES.get(k, set()) for k in origin.settings))
        changed = [k for k in differ if k not in owned]
        where = f"servers[{index}] ({server.name}, variant of {base.name})"
        if not changed:
            problems.append(f"{where}: changes nothing in the served flags ({', '.join(origin.settings)}); "
                            "remove that value from variants")
        elif len(changed) > 1 and not origin.cross:
            problems.append(
                f"{where}: differs from its base in {len(changed)} served settings ({', '.join(changed)}) "
                f"through {', '.join(origin.settings)}; a variant changes one setting at a time: vary a "
                "narrower key, or set crossProduct: true to ask for the full cross product")
    return problems


def gpu_budget_problems(settings) -> list[str]:
    """Every pool must hold all its servers (and variants) at once: they run side by side."""
    problems = []
    for index, pool in enumerate(settings.gpu_pools):
        users = [(s.name, s.tensor_parallel_size * s.replicas) for s in settings.servers if s.pool == pool.name]
        need = sum(g for _, g in users)
        if need > pool.gpu_limit and len(users) > 1:
            listed = ", ".join(f"{n} {g}" for n, g in users)
            problems.append(
                f"gpuPools[{index}].gpuLimit: {pool.name!r} allows {pool.gpu_limit} GPUs but its servers and "
                f"variants need {need} at once ({listed}); raise gpuLimit (then check the quota with "
                "`python -m stacks preflight`) or drop variants")
    return problems
