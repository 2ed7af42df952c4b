"""The executor address policy: what the admin will POST job parameters and tokens to."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobring.core.addresses import (
    AddressPolicy,
    AddressRefused,
    check_executor_address,
    normalise_ip,
    parse_networks,
    policy_from_text,
    refused_addresses,
)

NO_LOOPBACK = policy_from_text("127.0.0.0/8,::1", None)


@pytest.mark.parametrize(
    "address",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/",
        "http://[::ffff:a9fe:a9fe]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://2852039166/",  # 169.254.169.254 as one decimal number
        "http://0xa9.0xfe.0xa9.0xfe/",
        "http://0251.0376.0251.0376/",
        "http://169.254.43518/",
        "http://100.100.100.200/",
        "http://[fd00:ec2::254]/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://0.0.0.0:9999/",
        "http://0:9999/",
        "http://[::]:9999/",
        "http://[fe80::1]:9999/",
        "http://[fe80::1%25eth0]:9999/",
        "http://224.0.0.1:9999/",
        "http://[ff02::1]:9999/",
        "http://255.255.255.255:9999/",
        "http://user:pw@10.0.0.7:9999/",
        "http://user@10.0.0.7:9999/",
        "http://10.0.0.7:9999/?a=1",
        "http://10.0.0.7:9999/#x",
        "http://10.0.0.7:9999/a/../b",
        "http://10.0.0.7:9999/a%2f",
        "http://10.0.0.7:99999/",
        "http://10.0.0.7:0/",
        "ftp://10.0.0.7/",
        "file:///etc/passwd",
        "gopher://10.0.0.7:70/",
        "10.0.0.7:9999",
        "http:///nohost",
        "http://1.2.3.4.5/",
        "http://exa mple/",
        "http://ex\\ample/",
        "http://bücher.example/",
        "",
        "http://" + "a" * 300 + "/",
    ],
)
def test_refused_everywhere(address: str) -> None:
    with pytest.raises(AddressRefused):
        check_executor_address(address)


@pytest.mark.parametrize(
    ("address", "canonical"),
    [
        ("http://10.0.0.7:9999/", "http://10.0.0.7:9999/"),
        (" https://exec-1.internal:8443/xxl-job-executor/ ", "https://exec-1.internal:8443/xxl-job-executor/"),
        ("http://167772167:9999/", "http://10.0.0.7:9999/"),
        ("http://012.0.0.07:9999/", "http://10.0.0.7:9999/"),
        ("http://0xa.7:9999/", "http://10.0.0.7:9999/"),
        ("http://[::ffff:10.0.0.7]:9999/", "http://10.0.0.7:9999/"),
        ("http://[2001:DB8::0001]:9999/", "http://[2001:db8::1]:9999/"),
        ("http://10.0.0.7", "http://10.0.0.7"),
    ],
)
def test_accepted_and_normalised(address: str, canonical: str) -> None:
    assert check_executor_address(address) == canonical


@pytest.mark.parametrize(
    "address",
    ["http://127.0.0.1:5432/", "http://2130706433:5432/", "http://0177.0.0.1:1/", "http://0x7f.1:1/",
     "http://127.1/", "http://[::1]:1/", "http://[::ffff:127.0.0.1]:1/", "http://localhost:1/",
     "http://LOCALHOST./"],
)
def test_loopback_is_allowed_by_default_and_refused_by_a_deny_list(address: str) -> None:
    check_executor_address(address)  # local development: the demo executor is on loopback
    with pytest.raises(AddressRefused, match="refused range"):
        check_executor_address(address, NO_LOOPBACK)


def test_allow_list_admits_only_ips_inside_it() -> None:
    policy = policy_from_text(None, "10.0.0.0/8, 2001:db8::/32")
    assert check_executor_address("http://10.1.2.3:9999/", policy)
    assert check_executor_address("http://[2001:db8::5]:9999/", policy)
    for address in ("http://192.168.1.1:9999/", "http://exec.internal:9999/", "http://127.0.0.1:9999/"):
        with pytest.raises(AddressRefused):
            check_executor_address(address, policy)
    # The built-in refusals hold even inside an allow list.
    with pytest.raises(AddressRefused):
        check_executor_address("http://169.254.169.254/", policy_from_text(None, "0.0.0.0/0"))


def test_networks_parse_and_name_the_bad_one() -> None:
    assert parse_networks(" 10.0.0.0/8 ,, ::1 ") == (
        ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("::1"))
    with pytest.raises(ValueError, match="'nope'"):
        parse_networks("10.0.0.0/8,nope")
    assert policy_from_text("", "") == AddressPolicy()


def test_refused_addresses_filters() -> None:
    assert refused_addresses(["http://10.0.0.1/", "http://169.254.1.1/"], AddressPolicy()) == [
        "http://169.254.1.1/"]


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_every_ipv4_notation_normalises_to_the_same_address(value: int) -> None:
    ip = ipaddress.IPv4Address(value)
    octets = [int(p) for p in str(ip).split(".")]
    forms = [str(value), hex(value), ".".join(oct(o).replace("0o", "0") for o in octets),
             ".".join(hex(o) for o in octets), f"{octets[0]}.{value & 0xFFFFFF}",
             f"{octets[0]}.{octets[1]}.{value & 0xFFFF}", f"[::ffff:{ip}]"]
    for form in forms:
        assert normalise_ip(form.strip("[]")) == ip, form


@given(st.integers(min_value=0, max_value=2**32 - 1), st.sampled_from(["dec", "hex", "mapped"]))
def test_the_decision_does_not_depend_on_the_notation(value: int, notation: str) -> None:
    ip = ipaddress.IPv4Address(value)
    host = {"dec": str(value), "hex": hex(value), "mapped": f"[::ffff:{ip}]"}[notation]
    outcomes = []
    for text in (f"http://{ip}:9999/", f"http://{host}:9999/"):
        try:
            outcomes.append(check_executor_address(text, NO_LOOPBACK))
        except AddressRefused:
            outcomes.append("refused")
    assert outcomes[0] == outcomes[1]
    refused = ip.is_link_local or ip.is_multicast or ip.is_loopback or value >> 24 == 0 or value >> 28 == 15
    assert (outcomes[0] == "refused") == refused


@given(st.text(max_size=80))
def test_arbitrary_text_is_refused_or_a_clean_http_url(text: str) -> None:
    try:
        out = check_executor_address(text)
    except AddressRefused:
        return
    assert out.startswith(("http://", "https://")) and out.isascii()
    assert not any(c in out for c in "@?# \\")
    host = out.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
    ip = normalise_ip(host)
    if ip is not None:
        assert not ip.is_link_local and not ip.is_multicast and not ip.is_unspecified


def test_inet_aton_semantics_match_the_resolver() -> None:
    # What the admin's socket layer would connect to for a numeric host.
    assert normalise_ip("0x7f.1") == ipaddress.IPv4Address(socket.inet_aton("0x7f.1"))
    assert normalise_ip("exec.internal") is None
