"""Operator commands, run as `python -m stacks <command>` (stacks/__main__.py lists them).

Each command module exposes `add_parser(subparsers)`; they read stack files through stacks.loader and
use the Pulumi program's own modules, never the other way round: the program (the rest of stacks/)
and the components import nothing from here.

  render, diff          the stack's desired state offline (mocks: Pulumi's mock runtime), and its
                        change against a git ref
  config-reference      the config reference table, generated from the settings models
  preflight             the account before `pulumi up`: GPU offerings, quotas, prices, the stack's checks
  api-path, allow-my-address
                        the way to the Kubernetes API from this machine
  stage-weights         upload a model snapshot to the weights bucket from a laptop
  pre-destroy, teardown-check
                        before and after `pulumi destroy`: nothing left running or billed
  vllm_flags            `python -m stacks.ops.vllm_flags generate|shim`: the `vllm serve` flag list
                        that extraArgs are checked against
"""
