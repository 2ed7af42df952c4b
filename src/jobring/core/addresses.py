"""Which executor addresses the admin may call: a pure check of an address URL.

The admin POSTs job parameters (and the executor token) to every executor address, so an
address is a request target an attacker would love to choose (cloud metadata, a database
port on the admin's host). :func:`check_executor_address` accepts ``http(s)://host[:port]
[/path]`` only: no user info, query or fragment, a plain path (mounted executors), and a
host that is not in a refused range. IPv4 written in decimal, octal, hex or short form
(``2130706433``, ``0177.0.0.1``, ``0x7f.1``) and IPv4-mapped/embedded IPv6 are normalised
before the check, and the returned address carries the normalised host.

Host names are accepted as written (resolving them here would be I/O and could change
later); with an allow list only IP addresses inside it are accepted.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Never a legitimate executor: link-local (cloud metadata lives there), unspecified,
# multicast, broadcast, and the metadata addresses outside link-local.
ALWAYS_REFUSED: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",  # "this network"; 0.0.0.0 reaches the local host on Linux
        "169.254.0.0/16",  # link-local, incl. 169.254.169.254 (AWS, GCP, Azure metadata)
        "100.100.100.200/32",  # Alibaba Cloud metadata
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, incl. 255.255.255.255 broadcast
        "::/128",  # unspecified
        "fe80::/10",  # link-local
        "fec0::/10",  # deprecated site-local
        "ff00::/8",  # multicast
        "fd00:ec2::254/128",  # AWS metadata over IPv6
    )
)
# Host names that are metadata services or the local host under another name.
REFUSED_NAMES = frozenset({"metadata", "metadata.google.internal", "metadata.goog", "instance-data",
                           "instance-data.ec2.internal"})
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
MAX_ADDRESS_LENGTH = 255
_PATH = re.compile(r"^(/[A-Za-z0-9._~!$&'()*+,;=:@-]*)*$")
_LABEL = r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_NAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")
_NUMERIC_HOST = re.compile(r"^[0-9a-fA-FxX.]+$")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class AddressRefused(ValueError):
    """An executor address the admin will not call; the message says why."""


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """Refused networks on top of :data:`ALWAYS_REFUSED`, and an optional allow list (when
    given, only IP addresses inside it are accepted, and no host names)."""

    deny: tuple[IPNetwork, ...] = ()
    allow: tuple[IPNetwork, ...] | None = None


def parse_networks(text: str | None) -> tuple[IPNetwork, ...]:
    """A comma list of CIDRs or single IPs (``10.0.0.0/8, ::1``); ValueError names a bad one."""
    networks: list[IPNetwork] = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is not an IP network (expected e.g. 10.0.0.0/8)") from None
    return tuple(networks)


def policy_from_text(deny: str | None, allow: str | None) -> AddressPolicy:
    """The policy of the ``executor_address_deny`` / ``_allow`` settings (comma CIDR lists;
    an empty allow list means no allow list)."""
    allowed = parse_networks(allow)
    return AddressPolicy(deny=parse_networks(deny), allow=allowed or None)


def normalise_ip(host: str) -> IPAddress | None:
    """``host`` as an IP address when it is one in any notation inet_aton accepts (decimal,
    octal, hex, 1-4 parts) or IPv6; None for a host name. Embedded IPv4 (mapped, NAT64,
    compatible) is returned as the IPv4 address it reaches."""
    text = host[:-1] if host.endswith(".") and _NUMERIC_HOST.match(host[:-1] or "x.") else host
    ip: IPAddress
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        if not _NUMERIC_HOST.match(text) or not any(c.isdigit() for c in text):
            return None
        try:
            ip = ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        # IPv4-compatible ::a.b.c.d (deprecated), but not :: and ::1 themselves.
        if int(ip) >> 32 == 0 and int(ip) > 1:
            return ipaddress.IPv4Address(int(ip))
    return ip


def _looks_numeric(host: str) -> bool:
    """A host made of digits and dots only (or hex parts) that is no valid IP: refused
    rather than left to the resolver, which might read it as a number."""
    return bool(_NUMERIC_HOST.match(host)) and all(p.isdigit() or p.lower().startswith("0x")
                                                   for p in host.rstrip(".").split("."))


def _refused_ip(ip: IPAddress, policy: AddressPolicy) -> str | None:
    for network in ALWAYS_REFUSED + policy.deny:
        if ip.version == network.version and ip in network:
            return f"{ip} is in a refused range ({network})"
    if policy.allow is not None and not any(ip.version == n.version and ip in n for n in policy.allow):
        return f"{ip} is not in the allowed executor networks"
    return None


def _split(text: str) -> tuple[str, str, int | None, str, bool]:
    """(scheme, host, port, path, bracketed host) of an acceptable URL shape."""
    if not text or len(text) > MAX_ADDRESS_LENGTH:
        raise AddressRefused(f"an address must have 1-{MAX_ADDRESS_LENGTH} characters")
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) > 126 or ch == "\\" for ch in text):
        raise AddressRefused(f"{text!r} must be plain ASCII without spaces or backslashes")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise AddressRefused(f"{text!r} is not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise AddressRefused(f"{text!r} is not an http(s) URL")
    if "@" in parts.netloc:
        raise AddressRefused(f"{text!r} must not contain user info (user:password@)")
    if parts.query or parts.fragment or "?" in text or "#" in text:
        raise AddressRefused(f"{text!r} must not have a query or fragment")
    if not _PATH.match(parts.path) or any(seg in (".", "..") for seg in parts.path.split("/")):
        raise AddressRefused(f"{text!r} has a path that is not a plain path")
    if port is not None and not 0 < port < 65536:
        raise AddressRefused(f"{text!r} has an invalid port")
    host = parts.hostname or ""
    if not host:
        raise AddressRefused(f"{text!r} has no host")
    bracketed = parts.netloc.startswith("[")
    if bracketed and "%" in host:
        raise AddressRefused(f"{text!r}: IPv6 zone ids are not accepted")
    return parts.scheme, host, port, parts.path, bracketed


def _name_as_ip(text: str, host: str, bracketed: bool, policy: AddressPolicy) -> IPAddress | None:
    """For a host name: the loopback address for a local host name, None for another
    acceptable name; AddressRefused for a refused one."""
    if bracketed or _looks_numeric(host) or not _NAME.match(host.rstrip(".")):
        raise AddressRefused(f"{text!r} does not have a valid host")
    name = host.rstrip(".").lower()
    if name in REFUSED_NAMES:
        raise AddressRefused(f"{text!r}: {name} is a metadata service")
    if name in LOOPBACK_NAMES:
        return ipaddress.ip_address("127.0.0.1")
    if policy.allow is not None:
        raise AddressRefused(f"{text!r}: with an allow list only IP addresses are accepted")
    return None


def check_executor_address(address: str, policy: AddressPolicy | None = None) -> str:
    """``address`` trimmed, with an IP host in its canonical form; AddressRefused otherwise."""
    policy = policy or AddressPolicy()
    text = address.strip()
    scheme, host, port, path, bracketed = _split(text)
    ip = normalise_ip(host)
    literal = ip is not None
    if ip is None:
        ip = _name_as_ip(text, host, bracketed, policy)
        if ip is None:
            return text
    problem = _refused_ip(ip, policy)
    if problem:
        raise AddressRefused(f"{text!r}: {problem}")
    if not literal:
        return text
    canonical = f"[{ip}]" if ip.version == 6 else str(ip)
    return f"{scheme}://{canonical if port is None else f'{canonical}:{port}'}{path}"


def refused_addresses(addresses: Iterable[str], policy: AddressPolicy) -> list[str]:
    """The addresses among ``addresses`` that :func:`check_executor_address` refuses."""
    out: list[str] = []
    for address in addresses:
        try:
            check_executor_address(address, policy)
        except AddressRefused:
            out.append(address)
    return out
