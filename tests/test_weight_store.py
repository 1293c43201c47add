"""WeightStore under Pulumi mocks: bucket controls, teardown behaviour, outputs."""

from __future__ import annotations

import asyncio
import json

import pulumi
import pytest
from pulumi.runtime import settings as runtime_settings
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from components.weight_store import WeightStore, WeightStoreArgs, results_prefix
from policy import policies
from stacks.ops import mocks as mocks_module

KMS = "arn:aws:kms:ap-northeast-2:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
MODELS = ["RedHatAI/gemma-4-31B-it-FP8-dynamic", "google/gemma-4-31B-it-assistant"]


def render(build) -> tuple[list[mocks_module.Registration], dict]:
    """Run `build()` under recording mocks; returns registrations and what build returned, resolved."""
    asyncio.set_event_loop(asyncio.new_event_loop())
    runtime_settings.ROOT.set(None)
    # Outputs made outside a render (another test, another loop) must not be awaited by this one.
    runtime_settings.SETTINGS.rpc_manager.clear()
    runtime_settings.SETTINGS.outputs.clear()
    mocks = mocks_module.install(region="ap-northeast-2", project="vllm-poc", stack="test")
    out: dict = {}

    async def body() -> None:
        out.update(await pulumi.Output.from_input(build()).future() or {})

    _sync_await(run_pulumi_func(body))
    return mocks.registrations, out


def store(**kw):
    args = WeightStoreArgs(name_prefix="vllm-poc-test", account_id="123456789012",
                           region="ap-northeast-2", model_ids=MODELS, **kw)

    def build():
        ws = WeightStore("store", args)
        return {"weights": ws.weights_bucket_name, "results": ws.results_bucket_name,
                "uris": ws.model_uris, "cache": ws.compile_cache_uri}

    return render(build)


def by_type(regs, suffix):
    return [r for r in regs if r.type.endswith(suffix)]


def companions(regs, suffix, bucket_name):
    return [r for r in by_type(regs, suffix) if r.inputs["bucket"] == bucket_name]


@pytest.fixture(scope="module")
def default_store():
    return store()


def test_bucket_names_and_model_uris(default_store):
    regs, out = default_store
    assert out["weights"] == "vllm-poc-test-weights-123456789012-ap-northeast-2"
    assert out["results"] == "vllm-poc-test-results-123456789012-ap-northeast-2"
    assert out["uris"]["RedHatAI/gemma-4-31B-it-FP8-dynamic"] == \
        f"s3://{out['weights']}/models/RedHatAI/gemma-4-31B-it-FP8-dynamic/"
    assert out["cache"] == f"s3://{out['weights']}/compile-cache/"
    assert results_prefix("dev") == "runs/dev/"
    assert len(by_type(regs, ":Bucket")) == 2


@pytest.mark.parametrize("role", ["weights", "results"])
def test_every_bucket_is_locked_down(default_store, role):
    regs, out = default_store
    bucket = out[role]
    [block] = companions(regs, "BucketPublicAccessBlock", bucket)
    assert all(block.inputs[f] is True for f in policies.PUBLIC_ACCESS_FLAGS)
    [ownership] = companions(regs, "BucketOwnershipControls", bucket)
    assert ownership.inputs["rule"] == {"objectOwnership": "BucketOwnerEnforced"}
    [sse] = companions(regs, "BucketServerSideEncryptionConfiguration", bucket)
    assert sse.inputs["rules"][0]["applyServerSideEncryptionByDefault"] == {"sseAlgorithm": "AES256"}
    [policy] = companions(regs, "BucketPolicy", bucket)
    document = json.loads(policy.inputs["policy"])
    [deny] = [st for st in document["Statement"] if st["Sid"] == "DenyInsecureTransport"]
    # The weights bucket also keeps compile-cache/ for the servers (tests/test_compile_cache_render.py);
    # this store was given no servers, so nobody may write there.
    others = [st for st in document["Statement"] if st is not deny]
    assert others == ([{"Sid": "CompileCacheWritersOnly", "Effect": "Deny", "Principal": "*",
                        "Action": ["s3:PutObject", "s3:AbortMultipartUpload"],
                        "Resource": f"arn:aws:s3:::{bucket}/compile-cache/*"}] if role == "weights" else [])
    assert deny["Effect"] == "Deny" and deny["Principal"] == "*" and deny["Action"] == "s3:*"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert deny["Resource"] == [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]
    [lifecycle] = companions(regs, "BucketLifecycleConfiguration", bucket)
    assert lifecycle.inputs["rules"][0]["abortIncompleteMultipartUpload"] == {"daysAfterInitiation": 7}
    # No versioning resource: weights are re-stageable, results are keyed by run id.
    assert not by_type(regs, "BucketVersioning") and not by_type(regs, "BucketVersioningV2")


def test_controls_are_applied_one_after_another(default_store):
    regs, _ = default_store
    urn = {r.name: r.urn for r in regs}
    order = ["ownership", "public-access", "encryption", "policy", "lifecycle"]
    for earlier, later in zip(order, order[1:]):
        [reg] = [r for r in regs if r.name == f"store-weights-{later}"]
        assert urn[f"store-weights-{earlier}"] in reg.dependencies


def test_destroy_teardown_empties_and_deletes_both(default_store):
    regs, _ = default_store
    for bucket in by_type(regs, ":Bucket"):
        assert bucket.inputs["forceDestroy"] is True
        assert "retainOnDelete" not in bucket.options and "protect" not in bucket.options


def test_retain_weights_keeps_the_weights_bucket_and_its_controls():
    regs, out = store(teardown="retain-weights")
    weights = [r for r in regs if r.name.startswith("store-weights")]
    results = [r for r in regs if r.name.startswith("store-results")]
    assert len(weights) == 6 and len(results) == 6
    assert all(r.options.get("retainOnDelete") is True for r in weights)
    assert not any(r.options.get("retainOnDelete") for r in results)
    [bucket] = [r for r in weights if r.type.endswith(":Bucket")]
    assert bucket.inputs["forceDestroy"] is False
    [results_bucket] = [r for r in results if r.type.endswith(":Bucket")]
    assert results_bucket.inputs["forceDestroy"] is True


def test_kms_encryption_with_bucket_key():
    regs, out = store(kms_key_arn=KMS)
    for sse in by_type(regs, "BucketServerSideEncryptionConfiguration"):
        rule = sse.inputs["rules"][0]
        assert rule["applyServerSideEncryptionByDefault"] == {"sseAlgorithm": "aws:kms",
                                                              "kmsMasterKeyId": KMS}
        assert rule["bucketKeyEnabled"] is True


def test_policy_pack_finds_nothing(default_store):
    regs, _ = default_store
    violations = policies.check_resources([(r.type, r.name, r.inputs, r.outputs.get("id")) for r in regs])
    assert violations == []


@pytest.mark.parametrize("prefix", ["Vllm-Poc", "vllm--poc", "x" * 30, "-vllm"])
def test_bad_name_prefix_is_refused(prefix):
    with pytest.raises(ValueError, match="bucket name prefix"):
        WeightStoreArgs(name_prefix=prefix, account_id="123456789012", region="ap-northeast-2")
