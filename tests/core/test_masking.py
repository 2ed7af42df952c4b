"""The one masking walk of API answers and audit records: secret-named keys and the credential
parts of URLs, at any depth, idempotent."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobring.core.masking import MASK, is_secret_key, mask_url, masked

ROBOTS = {
    "https://hooks.slack.com/services/T0AAA/B0BBB/XxSlackPathSecret": "https://hooks.slack.com/******",
    "https://oapi.dingtalk.com/robot/send?access_token=DingTok123": (
        "https://oapi.dingtalk.com/******?access_token=******"),
    "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=WeComKey-456": (
        "https://qyapi.weixin.qq.com/******?key=******"),
    "https://open.feishu.cn/open-apis/bot/v2/hook/0f1e2d3c-feishu": "https://open.feishu.cn/******",
    "http://hooks.example.com:8080/": "http://hooks.example.com:8080",
    "http://user:pw@hooks.example.com/x?a=1&b&%7Bweird%7D=2": (
        "http://hooks.example.com/******?a=******&******&******"),
    "not a url": MASK,
    "ftp://files.example.com/secret": MASK,
    "http://x:99999/": MASK,
}


@pytest.mark.parametrize(("url", "shown"), ROBOTS.items())
def test_a_robot_url_keeps_only_scheme_host_port_and_query_names(url: str, shown: str) -> None:
    assert mask_url(url) == shown
    assert mask_url(shown) == shown  # idempotent


def test_masked_walks_nested_structures() -> None:
    value = {
        "alarm_targets": [
            {"kind": "dingtalk", "url": "https://oapi.dingtalk.com/robot/send?access_token=T1",
             "secret": "S1"},
            {"kind": "email", "to": ["ops@example.com"]},
        ],
        "settings": {"smtp_password": "P", "alarm_webhook_url": "https://hooks.example.com/abc",
                     "nested": [[{"api_key": "K", "Authorization": "Bearer x"}]]},
        "must_change_password": True,
        "token_id": 7,
        "password_hash": None,
    }
    out = masked(value)
    assert out["alarm_targets"][0] == {"kind": "dingtalk", "secret": MASK,
                                       "url": "https://oapi.dingtalk.com/******?access_token=******"}
    assert out["alarm_targets"][1] == {"kind": "email", "to": ["ops@example.com"]}
    assert out["settings"] == {"smtp_password": MASK, "alarm_webhook_url": "https://hooks.example.com/******",
                               "nested": [[{"api_key": MASK, "Authorization": MASK}]]}
    assert (out["must_change_password"], out["token_id"], out["password_hash"]) == (True, 7, MASK)
    # URLs kept whole for a reader who may edit them; secrets still masked.
    shown = masked(value, urls=False)
    ding = shown["alarm_targets"][0]
    assert ding["url"].endswith("access_token=T1") and ding["secret"] == MASK


@pytest.mark.parametrize("key", ["password", "new_password", "token", "access_token", "secret",
                                 "session_secret", "password_hash", "api_key", "key", "sign", "Signature",
                                 "SMTP_PASSWORD"])
def test_secret_names(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["must_change_password", "token_id", "kind", "url", "keys",
                                 "monkey_business"])
def test_not_secret_names(key: str) -> None:
    assert not is_secret_key(key)


_KEYS = st.sampled_from(["url", "secret", "a", "hook_url", "password", "x"])


@given(st.recursive(st.text(max_size=20) | st.integers() | st.none(),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
                    max_leaves=20))
def test_masking_is_idempotent(value: object) -> None:
    assert masked(masked(value)) == masked(value)
