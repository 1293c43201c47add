"""Entry point the Pulumi CLI runs for `--policy-pack policy` (it runs this directory as a program).

Only builds the pack: the PolicyPack constructor starts the analyzer's gRPC server and blocks, so
tests import `policy.policies` instead, never this file.
"""

from pulumi_policy import EnforcementLevel, PolicyPack

# The CLI runs this file with the pack directory first on sys.path, so the sibling module is
# importable by its bare name (the pack's venv does not contain the project itself).
from policies import PACK_NAME, POLICIES

PolicyPack(
    name=PACK_NAME,
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=POLICIES,
)
