"""The alarm target policy: where the admin will POST an alarm (an operator's webhook or chat
robot URL). Executor policy plus every internal range and name, unless the allow list admits it."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobring.core.addresses import (
    INTERNAL,
    AddressRefused,
    alarm_ip_problem,
    alarm_policy_from_text,
    check_alarm_url,
    target_urls,
)

DEFAULT = alarm_policy_from_text(None, None)

# The examples and the class around them: every spelling of an internal address.
REFUSED = [
    "http://127.0.0.1/",
    "http://127.0.0.1:6379/",
    "http://127.1:8080/",
    "http://0x7f.1/",
    "http://0x7f000001/",
    "http://017700000001/",
    "http://2130706433/",
    "http://127.0.0.1./",
    "http://localhost:6379/",
    "http://LOCALHOST./x",
    "http://localhost.localdomain/",
    "http://ip6-localhost/",
    "http://api.localhost/",
    "http://0.0.0.0:5432/",
    "http://0:5432/",
    "http://[::]:5432/",
    "http://[::1]/",
    "http://[0:0:0:0:0:0:0:1]/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:a9fe:a9fe]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[::127.0.0.1]/",
    "http://2852039166/",
    "http://0xa9fea9fe/",
    "http://0251.0376.0251.0376/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://METADATA.GOOGLE.INTERNAL./",
    "http://metadata/",
    "http://instance-data/",
    "http://100.100.100.200/latest/meta-data/",
    "http://100.64.0.1/",
    "http://100.127.255.254/",
    "http://10.0.0.1/",
    "http://10.255.255.255:9200/",
    "http://172.16.0.1/",
    "http://172.31.255.1/",
    "http://192.168.1.1/",
    "http://192.0.0.170/",
    "http://198.18.0.1/",
    "http://[fc00::1]/",
    "http://[fd12:3456::1]/",
    "http://[fe80::1]/",
    "http://[fd00:ec2::254]/",
    "http://[2002:7f00:1::1]/",  # 6to4 of 127.0.0.1
    "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",  # Teredo
    "http://[::ffff:10.0.0.1]/",
    "http://224.0.0.1/",
    "http://255.255.255.255/",
    "http://redis/",  # single-label: only a search domain resolves it
    "http://db.internal/",
    "http://printer.local/",
    "http://nas.home.arpa/",
    "http://host.localdomain/",
    "http://user:pw@hooks.example.com/",
    "http://hooks.example.com@127.0.0.1/",
    "http://127.0.0.1#@hooks.example.com/",
    "http://hooks.example.com/#frag",
    "http://hooks.example.com\\@127.0.0.1/",
    "http://hooks.exa mple.com/",
    "http://[fe80::1%25eth0]/",
    "http://1.2.3.4.5/",
    "http://%31%32%37.0.0.1/",
    "ftp://hooks.example.com/",
    "file:///etc/passwd",
    "gopher://127.0.0.1:6379/_INFO",
    "hooks.example.com/x",
    "http://hooks.example.com:0/",
    "http://hooks.example.com:99999/",
    "https://hооks.example.com/",  # Cyrillic o: not ASCII
    "http:///x",
    "",
    "http://e.com/" + "a" * 1000,
]


@pytest.mark.parametrize("url", REFUSED)
def test_internal_and_malformed_alarm_urls_are_refused(url: str) -> None:
    with pytest.raises(AddressRefused):
        check_alarm_url(url, DEFAULT)


@pytest.mark.parametrize(
    ("url", "host", "port", "target", "name"),
    [
        ("https://hooks.slack.com/services/T0/B0/XX", "hooks.slack.com", 443, "/services/T0/B0/XX",
         "hooks.slack.com"),
        ("https://oapi.dingtalk.com/robot/send?access_token=abc", "oapi.dingtalk.com", 443,
         "/robot/send?access_token=abc", "oapi.dingtalk.com"),
        ("http://Hooks.Example.COM.:8080", "hooks.example.com", 8080, "/", "hooks.example.com"),
        ("http://93.184.215.14/x?y=1", "93.184.215.14", 80, "/x?y=1", None),
        ("http://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/", "2606:2800:21f:cb07:6820:80da:af6b:8b2c", 80,
         "/", None),
        ("https://open.feishu.cn/open-apis/bot/v2/hook/9c%2Fx", "open.feishu.cn", 443,
         "/open-apis/bot/v2/hook/9c%2Fx", "open.feishu.cn"),
    ],
)
def test_public_alarm_urls_are_accepted(
    url: str, host: str, port: int, target: str, name: str | None
) -> None:
    checked = check_alarm_url(url, DEFAULT)
    assert (checked.host, checked.port, checked.target, checked.name) == (host, port, target, name)
    assert not checked.name_allowed


def test_the_allow_list_admits_internal_gateways_but_never_metadata() -> None:
    policy = alarm_policy_from_text(None, "10.20.0.0/16, 127.0.0.1, chat-gw, Relay.Corp.Example.")
    assert check_alarm_url("http://10.20.3.4:8080/send", policy).ip == ipaddress.ip_address("10.20.3.4")
    assert str(check_alarm_url("http://2130706433:9000/", policy).ip) == "127.0.0.1"
    # A loopback name is judged (and later reached) as 127.0.0.1, with its Host header kept.
    local = check_alarm_url("http://localhost:9000/x", policy)
    assert (str(local.ip), local.netloc, local.name) == ("127.0.0.1", "localhost:9000", "localhost")
    gateway = check_alarm_url("http://chat-gw/hook", policy)
    assert (gateway.ip, gateway.name_allowed) == (None, True)
    assert check_alarm_url("https://relay.corp.example/x", policy).name_allowed
    for still_refused in ("http://10.21.0.1/", "http://192.168.0.1/", "http://169.254.169.254/",
                          "http://100.100.100.200/", "http://0.0.0.0/", "http://metadata.google.internal/",
                          "http://other.internal/", "http://[::1]/"):
        with pytest.raises(AddressRefused):
            check_alarm_url(still_refused, policy)
    # Addresses an allowed name resolves to may be internal; metadata stays refused.
    assert alarm_ip_problem(ipaddress.ip_address("10.99.0.1"), policy, name_allowed=True) is None
    assert alarm_ip_problem(ipaddress.ip_address("169.254.169.254"), policy, name_allowed=True)
    assert alarm_ip_problem(ipaddress.ip_address("::ffff:10.99.0.1"), policy) is not None


def test_the_executor_deny_list_applies_and_wins_over_the_allow_list() -> None:
    policy = alarm_policy_from_text("203.0.113.0/24, 10.20.30.0/24", "10.20.0.0/16")
    with pytest.raises(AddressRefused, match="refused range"):
        check_alarm_url("http://203.0.113.9/", policy)
    with pytest.raises(AddressRefused, match="refused range"):
        check_alarm_url("http://10.20.30.40/", policy)
    assert check_alarm_url("http://10.20.31.1/", policy).ip is not None


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "not a host", "metadata.google.internal", "1.2.3.4.5",
                                   "-bad.example"])
def test_a_bad_allow_entry_is_refused_by_name(entry: str) -> None:
    with pytest.raises(ValueError, match="metadata|IP network|host name"):
        alarm_policy_from_text(None, entry)


def test_refusals_do_not_echo_the_url() -> None:
    # The message goes to the client and the log: the URL may carry a robot's credential.
    with pytest.raises(AddressRefused) as refused:
        check_alarm_url("http://10.0.0.1/hook?access_token=SECRETTOKEN", DEFAULT)
    assert "SECRETTOKEN" not in str(refused.value)


@given(st.ip_addresses(v=4))
def test_every_internal_ipv4_is_refused_in_every_spelling(ip: ipaddress.IPv4Address) -> None:
    internal = any(ip in n for n in INTERNAL if n.version == 4)
    for host in (str(ip), str(int(ip)), hex(int(ip)), f"[::ffff:{ip}]"):
        url = f"http://{host}:81/"
        if internal:
            with pytest.raises(AddressRefused):
                check_alarm_url(url, DEFAULT)
        elif alarm_ip_problem(ip, DEFAULT) is None:
            assert check_alarm_url(url, DEFAULT).ip == ip


def test_target_urls_are_url_keys() -> None:
    assert target_urls({"url": "http://a/", "callback_url": "http://b/", "secret": "s", "to": ["x"],
                        "curl": "no"}) == [("url", "http://a/"), ("callback_url", "http://b/")]
