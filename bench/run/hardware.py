"""What served a sweep: node, capacity type, instance type and the price that follows from them.

The price of a run is that of the capacity it actually landed on: a Spot pool with an on-demand
fallback may run on either, at very different prices. The sweep reads its node's
`karpenter.sh/capacity-type` (through `bench.common.kube`), then takes the price for that capacity type
from the table it was given (`--prices spot=1.50,on-demand=4.13`: config, else the catalog). An
explicit `--price-per-hour` wins; with no known capacity type and no explicit price the price is
unknown, and the report refuses a cost ratio rather than guess.
"""

from __future__ import annotations

from typing import Any

from bench.common import kube

CAPACITY_TYPES = ("on-demand", "spot")


def parse_prices(text: str | None) -> dict[str, float]:
    """"spot=1.50,on-demand=4.13" -> {"spot": 1.5, "on-demand": 4.13}; ValueError names the problem."""
    prices: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, sep, value = item.strip().partition("=")
        if not sep or name not in CAPACITY_TYPES:
            raise ValueError(f"--prices: {item!r}: expected CAPACITY=USD with CAPACITY one of "
                             f"{', '.join(CAPACITY_TYPES)}, e.g. spot=1.50,on-demand=4.13")
        try:
            prices[name] = float(value)
        except ValueError:
            raise ValueError(f"--prices: {item!r}: {value!r} is not a number") from None
        if prices[name] <= 0:
            raise ValueError(f"--prices: {item!r}: the price must be positive")
    return prices


def parse_capacity_types(text: str | None) -> list[str]:
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    bad = [n for n in names if n not in CAPACITY_TYPES]
    if bad:
        raise ValueError(f"--capacity-types: unknown {', '.join(bad)}; use {', '.join(CAPACITY_TYPES)}")
    return names


def resolve(*, node_name: str | None, configured_instance_type: str | None, gpus: int,
            capacity_type: str | None, allowed_capacity_types: list[str], prices: dict[str, float],
            price_per_hour: float | None, image: str | None,
            client: kube.InCluster | None = None) -> dict[str, Any]:
    """The manifest's `hardware` entry; reads the node when a node name is known."""
    node = kube.node_facts(client if client is not None else kube.InCluster.from_environment(), node_name) \
        if node_name else {"node": None, "error": "node name unknown (NODE_NAME not set)"}
    notes: list[str] = []
    if capacity_type:
        ctype, ctype_source = capacity_type, "--capacity-type"
    elif node.get("capacity_type"):
        ctype, ctype_source = node["capacity_type"], f"node {node_name} label {kube.CAPACITY_TYPE_LABEL}"
    elif len(allowed_capacity_types) == 1:
        ctype, ctype_source = allowed_capacity_types[0], "the pool allows only this capacity type"
    else:
        ctype, ctype_source = None, None
        notes.append("capacity type unknown" + (f" ({node['error']})" if node.get("error") else ""))

    instance_type = node.get("instance_type") or configured_instance_type
    if node.get("instance_type") and configured_instance_type and node["instance_type"] != configured_instance_type:
        notes.append(f"the node is a {node['instance_type']}, the configuration names {configured_instance_type}")

    if price_per_hour is not None:
        price, price_source = price_per_hour, "--price-per-hour"
    elif ctype and ctype in prices:
        price, price_source = prices[ctype], f"price table for {ctype}"
    else:
        price, price_source = None, None
        if prices:
            table = ", ".join(f"{name} ${value:.2f}" for name, value in prices.items())
            notes.append(f"no price for capacity type {ctype or 'unknown'} (price table: {table})")
    return {
        "node": node,
        "instance_type": instance_type,
        "configured_instance_type": configured_instance_type,
        "gpus": gpus,
        "image": image,
        "capacity_type": ctype,
        "capacity_type_source": ctype_source,
        "prices": prices,
        "price_per_hour": price,
        "price_source": price_source,
        "notes": notes,
    }
