"""The Pulumi program: config -> settings -> environment."""

from __future__ import annotations

import pulumi
from pulumi.runtime import config as runtime_config

from stacks import environment, loader, waivers
from stacks.settings import PROJECT, ConfigError


def current_settings():
    """Settings of the stack Pulumi is running, from its config (validated before any resource).

    The same checks as every command's (stacks.loader): unknown namespaces and keys, secrets,
    region, tags, values and the keys between them, all reported at once.
    """
    # The language host hands the stack's config to the program as strings (JSON for objects).
    values = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    secret_keys = frozenset(runtime_config.get_config_secret_keys_env() or []) | frozenset(
        runtime_config._SECRET_KEYS.get() or [])
    return loader.settings_from_values(values, stack=pulumi.get_stack(),
                                       project=pulumi.get_project() or PROJECT, secret_keys=secret_keys)


def run() -> None:
    try:
        settings = current_settings()
    except ConfigError as err:
        # A RunError is reported by the engine as a plain message, without a Python traceback.
        raise pulumi.RunError(str(err)) from None
    try:
        # The checkov waivers, as checkov's own skip annotations on the objects they name.
        pulumi.runtime.register_stack_transformation(waivers.checkov_transformation(waivers.checkov_waivers()))
    except ValueError as err:
        raise pulumi.RunError(str(err)) from None
    try:
        outputs = environment.build(settings)
    except ConfigError as err:
        # checks against the account (caller role, offerings, AMI) fail the same way as bad config
        raise pulumi.RunError(str(err)) from None
    for name, value in outputs.items():
        pulumi.export(name, value)
