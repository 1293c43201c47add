"""Availability zones of a VPC the stack creates: where every GPU pool's instance type is offered.

The region's first N zones are not enough: g6e and g7e are offered in some zones only, and a pool whose
type is offered in none of the VPC's zones can never launch a node. The choice takes the zones (in name
order) offering every pool's type; when fewer than N do, it fills up with zones that add a type not yet
covered, then with those offering the most types. An explicit `network.availabilityZones` replaces the choice. Either way, every pool's type must be
offered in at least one chosen zone, or the config is refused naming the pool.
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
        candidates = sorted(available)
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
