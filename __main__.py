"""Pulumi entry point: the stack's config becomes settings, the settings an environment."""

from stacks.program import run

run()
