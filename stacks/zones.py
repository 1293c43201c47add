"""Availability zones of a VPC the stack creates: where every GPU pool's instance type is offered.

The region's first N zones are not enough: g6e and g7e are offered in some zones only, and a pool whose
type is offered in none of the VPC's zones can never launch a node. The choice takes the zones (in name
order) offering every pool's type; when fewer than N do, it fills up with zones that add a type not yet
covered, then with those offering the most types. An explicit `network.availabilityZones` replaces the choice. Either way, every pool's type must be
offered in at least one chosen zone, or the config is refused naming the pool.

The zones are decided once. EKS keeps the subnets' zones it was created with and Karpenter would drift
every GPU node onto new subnets, so a live VPC's zones are never recomputed from offerings:
`python -m stacks pin-zones <stack>` writes the choice into the stack file (`network.availabilityZones`),
an unpinned stack with a live VPC keeps the zones of its subnets (`live_zones_problem` refuses a pinned
list that differs from them), and preflight says when today's offerings would choose otherwise
(`offering_notes`) without moving anything.
"""

from __future__ import annotations


def choose_zones(
    available: list[str],
    offerings: dict[str, set[str]],  # instance type -> zones offering it
    pool_types: dict[str, str],  # config key of the pool's type -> instance type
    count: int,
    override: list[str] | None = None,
) -> tuple[list[str], list[str]]:
    """(zones, problems): the VPC's zones and each pool type offered in none of them."""
    types = sorted(set(pool_types.values()))
    if override:
        zones = list(override)
    else:
        def offered(zone: str) -> set[str]:
            return {t for t in types if zone in offerings.get(t, set())}

        zones = []
        # Subnet CIDRs are keyed by zone letter, a to g (components/network.py).
        candidates = sorted(z for z in available if z[-1] <= "g")
        while candidates and len(zones) < count:
            covered = set().union(*(offered(z) for z in zones)) if zones else set()
            best = min(candidates, key=lambda z: (-(len(offered(z)) == len(types)),
                                                  -len(offered(z) - covered), -len(offered(z)), z))
            zones.append(best)
            candidates.remove(best)
        zones.sort()
    problems = []
    for key, instance_type in pool_types.items():
        where = sorted(offerings.get(instance_type, set()))
        if not set(where) & set(zones):
            problems.append(
                f"{key}: {instance_type} is offered in {', '.join(where) or 'no zone of this region'}, none of "
                f"the VPC's zones {', '.join(zones)}; "
                + ("change vllm-poc:network.availabilityZones or the pool's instance type" if override else
                   "pick a type offered here, or another region")
            )
    return zones, problems


PIN_COMMAND = "python -m stacks pin-zones"


def offering_notes(pinned: list[str], today: list[str], offerings: dict[str, set[str]],
                   pool_types: dict[str, str]) -> list[str]:
    """What preflight says about a pinned VPC when today's offerings would choose other zones: the
    pinned zones stay (a change replaces the EKS cluster), and each pool type now offered in a zone
    the VPC does not span is named. Nothing when the choice is unchanged."""
    if sorted(pinned) == sorted(today):
        return []
    notes = [f"today's offerings would choose zones {', '.join(sorted(today))}; the VPC keeps its pinned zones "
             f"{', '.join(sorted(pinned))} (network.availabilityZones): subnets never move under a live cluster, "
             "and a change of zones replaces the EKS control plane"]
    for key, instance_type in sorted(pool_types.items()):
        offered = set(offerings.get(instance_type, set()))
        outside, inside = sorted(offered - set(pinned)), sorted(offered & set(pinned))
        if outside:
            notes.append(f"{key}: {instance_type} is now also offered in {', '.join(outside)}, outside the VPC; "
                         f"its nodes launch in {', '.join(inside) or 'none of the VPC zones'}")
    return notes


def unpinned_note(stack: str, today: list[str]) -> str:
    """The warning for a created VPC whose zones are not in the stack file."""
    return (f"network.availabilityZones is not set: the first `up` takes today's choice ({', '.join(today)}) and later "
            f"runs keep the live subnets' zones; pin them in the stack file so every preview shows the same "
            f"zones: {PIN_COMMAND} {stack}")


def live_zones_problem(pinned: list[str] | None, live: list[str]) -> str | None:
    """A pinned zone list that differs from the zones of the live VPC's subnets, refused before any
    change: EKS keeps the zones its cluster was created in."""
    if not live or pinned is None or sorted(pinned) == sorted(live):
        return None
    return (f"vllm-poc:network.availabilityZones: lists {', '.join(sorted(pinned))} but the live VPC's subnets are "
            f"in {', '.join(sorted(live))}; EKS keeps the zones its cluster was created in, so a change replaces "
            f"the cluster and every node: set it back to [{', '.join(sorted(live))}], or tear the stack down "
            "before moving it")
