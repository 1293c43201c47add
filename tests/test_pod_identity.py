"""The fake Pod Identity agent speaks the protocol the AWS SDKs implement, and checks the token."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import boto3
import pytest

from tests.fixtures.pod_identity import OTHER_CREDENTIAL_SOURCES, isolated_env


def test_botocore_gets_its_credentials_from_the_agent(pod_identity_agent, aws, tmp_path, monkeypatch):
    env = isolated_env({"AWS_ACCESS_KEY_ID": "static", "AWS_PROFILE": "x", "AWS_REGION": "ap-northeast-2"},
                       pod_identity_agent, tmp_path / "home")
    assert not set(OTHER_CREDENTIAL_SOURCES) & set(env)
    for key in OTHER_CREDENTIAL_SOURCES:
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    session = boto3.Session()
    credentials = session.get_credentials().get_frozen_credentials()
    assert credentials.access_key == pod_identity_agent.access_key_id
    assert credentials.token.startswith("pod-identity-session-")
    assert session.get_credentials().method == "container-role"
    # and they work against the S3 endpoint under test
    session.client("s3").create_bucket(
        Bucket="pod-identity-check", CreateBucketConfiguration={"LocationConstraint": "ap-northeast-2"})
    assert [r.authorized for r in pod_identity_agent.requests] == [True]


@pytest.mark.parametrize("headers, path", [({}, "/v1/credentials"),
                                           ({"Authorization": "wrong"}, "/v1/credentials"),
                                           (None, "/v1/other")])
def test_the_agent_refuses_without_the_token(pod_identity_agent, headers, path):
    url = pod_identity_agent.url.replace("/v1/credentials", path)
    if headers is None:
        headers = {"Authorization": pod_identity_agent.token}
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5)
    assert err.value.code in (401, 404)
    assert "AccessKeyId" not in json.loads(err.value.read())
    assert pod_identity_agent.served() == []
