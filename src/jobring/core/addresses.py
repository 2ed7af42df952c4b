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

Alarm targets (webhook and chat URLs, chosen by operators) pass a stricter policy,
:func:`check_alarm_url`: the executor policy (always-refused ranges, the executor deny list)
plus every internal range (loopback, RFC 1918, CGNAT, ULA, ...), internal host names and
single-label names, unless the admin's alarm allow list names the network or host (an
internal chat gateway). A query is allowed there (robots carry their key in it). Host names
are checked again where they are resolved: :func:`alarm_ip_problem` judges each address.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, urlsplit

from jobring.errors import JobringError

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
PULL_SCHEME = "pull"
# Broker executors (docs/dispatch.md, "Broker mode"): runs reach them through RabbitMQ, the
# other calls as for a pull executor (they poll the admin for them).
BROKER_SCHEME = "broker"
_PULL_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,199}")
MAX_ALARM_URL_LENGTH = 1000
# Matched with fullmatch ("$" would also match before a final line break).
_PATH = re.compile(r"(/[A-Za-z0-9._~!$&'()*+,;=:@-]*)*")
_LABEL = r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_NAME = re.compile(rf"(?=.{{1,253}}\Z){_LABEL}(\.{_LABEL})*")
_NUMERIC_HOST = re.compile(r"[0-9a-fA-FxX.]+")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class AddressRefused(JobringError, ValueError):
    """An executor address the admin will not call; the message says why."""


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """Refused networks on top of :data:`ALWAYS_REFUSED`, and an optional allow list (when
    given, only IP addresses inside it are accepted, and no host names)."""

    deny: tuple[IPNetwork, ...] = ()
    allow: tuple[IPNetwork, ...] | None = None


def _items(text: str | None) -> list[str]:
    """The non-empty items of a comma list, stripped."""
    return [item.strip() for item in (text or "").split(",") if item.strip()]


def parse_networks(text: str | None) -> tuple[IPNetwork, ...]:
    """A comma list of CIDRs or single IPs (``10.0.0.0/8, ::1``); ValueError names a bad one."""
    networks: list[IPNetwork] = []
    for item in _items(text):
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
    text = host[:-1] if host.endswith(".") and _NUMERIC_HOST.fullmatch(host[:-1] or "x.") else host
    ip: IPAddress
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        if not _NUMERIC_HOST.fullmatch(text) or not any(c.isdigit() for c in text):
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
    return bool(_NUMERIC_HOST.fullmatch(host)) and all(p.isdigit() or p.lower().startswith("0x")
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
    if not _PATH.fullmatch(parts.path) or any(seg in (".", "..") for seg in parts.path.split("/")):
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
    if bracketed or _looks_numeric(host) or not _NAME.fullmatch(host.rstrip(".")):
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
    """``address`` in its canonical form (trimmed, scheme and host name in lower case, an IP
    host written the one standard way, so ``http://0x7f.0.0.1:9999`` is
    ``http://127.0.0.1:9999``); AddressRefused otherwise. The path is kept as written
    (XXL-JOB admins append ``run`` to a registered address)."""
    policy = policy or AddressPolicy()
    text = address.strip()
    if text.lower().startswith(PULL_SCHEME + "://"):
        return _named_address(text, PULL_SCHEME)
    if text.lower().startswith(BROKER_SCHEME + "://"):
        return _named_address(text, BROKER_SCHEME)
    scheme, host, port, path, bracketed = _split(text)
    ip = normalise_ip(host)
    literal = ip is not None
    if ip is None:
        ip = _name_as_ip(text, host, bracketed, policy)
    if ip is not None:
        problem = _refused_ip(ip, policy)
        if problem:
            raise AddressRefused(f"{text!r}: {problem}")
    canonical = host.lower()  # urlsplit's hostname: already lower case, without brackets
    if literal and ip is not None:
        canonical = f"[{ip}]" if ip.version == 6 else str(ip)
    return f"{scheme}://{canonical if port is None else f'{canonical}:{port}'}{path}"


def is_pull_address(address: str) -> bool:
    """Whether ``address`` names a pull executor (``pull://<name>/``): one the admin never
    dials; it polls the admin for its calls (docs/dispatch.md, "Pull mode")."""
    return address[:7].lower() == PULL_SCHEME + "://"


def is_broker_address(address: str) -> bool:
    """Whether ``address`` names a broker executor (``broker://<name>/``): its runs go
    through the message broker, its other calls through its poll of the admin."""
    return address[:9].lower() == BROKER_SCHEME + "://"


def is_polled_address(address: str) -> bool:
    """Whether the admin reaches ``address`` through the executor's poll (pull and broker
    executors), never by dialing it."""
    return is_pull_address(address) or is_broker_address(address)


def broker_name(address: str) -> str:
    """The ``<name>`` of ``broker://<name>/`` (as written, without the final ``/``)."""
    return address[len(BROKER_SCHEME) + 3:].rstrip("/").lower()


def _named_address(text: str, scheme: str) -> str:
    """The canonical ``pull://<name>/`` or ``broker://<name>/`` (name in lower case); no
    network target, so the address policy has nothing to check."""
    name = text[len(scheme) + 3:].rstrip("/").lower()
    if not _PULL_NAME.fullmatch(name):
        raise AddressRefused(f"{text!r}: a {scheme} executor's name must be 1-200 of a-z, 0-9, '.', '_', '-'")
    return f"{scheme}://{name}/"


def address_key(address: str) -> str:
    """What two spellings of one executor address share: the canonical form (whatever the
    policy), without a default port and a final ``/``. Addresses are compared by it (a
    disabled address is disabled in every spelling); text that is no address is its own key."""
    try:
        canonical = check_executor_address(address, _ANY_POLICY)
    except AddressRefused:
        return address.strip()
    if is_polled_address(canonical):
        return canonical.rstrip("/")
    parts = urlsplit(canonical)
    netloc = parts.netloc
    if parts.port == {"http": 80, "https": 443}[parts.scheme]:
        netloc = netloc.rsplit(":", 1)[0]
    return f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}"


_ANY_POLICY = AddressPolicy(deny=(), allow=None)


def refused_addresses(addresses: Iterable[str], policy: AddressPolicy) -> list[str]:
    """The addresses among ``addresses`` that :func:`check_executor_address` refuses."""
    out: list[str] = []
    for address in addresses:
        try:
            check_executor_address(address, policy)
        except AddressRefused:
            out.append(address)
    return out


# -- alarm targets ---------------------------------------------------------------------------

# Fine for an executor, never for an alarm target unless the alarm allow list admits it.
INTERNAL: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(n)
    for n in (
        "127.0.0.0/8",  # loopback
        "10.0.0.0/8",  # RFC 1918
        "172.16.0.0/12",  # RFC 1918
        "192.168.0.0/16",  # RFC 1918
        "100.64.0.0/10",  # carrier-grade NAT (cloud metadata such as 100.100.100.200 lives here)
        "192.0.0.0/24",  # IETF protocol assignments (DS-Lite, NAT64 gateways)
        "198.18.0.0/15",  # benchmarking, used inside data centres
        "::1/128",  # loopback
        "fc00::/7",  # unique local
        "100::/64",  # discard-only
        "64:ff9b:1::/48",  # local-use NAT64
        "2001::/32",  # Teredo: tunnels to an IPv4 address
        "2002::/16",  # 6to4: embeds an IPv4 address
    )
)
# Names that only an internal resolver answers (RFC 6761, RFC 8375, ICANN's .internal).
INTERNAL_SUFFIXES = ("localhost", "internal", "local", "localdomain", "home.arpa")
_URL_TEXT = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=:@/?%\[\]-]*")


@dataclass(frozen=True, slots=True)
class AlarmTargetPolicy:
    """Refused networks on top of :data:`ALWAYS_REFUSED` (the executor deny list), and the
    networks and host names admitted although internal (``alarm_target_allow``)."""

    deny: tuple[IPNetwork, ...] = ()
    allow_networks: tuple[IPNetwork, ...] = ()
    allow_names: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class AlarmUrl:
    """An alarm URL that passed :func:`check_alarm_url`. ``ip`` is None for a host name
    (to be resolved, and each address judged by :func:`alarm_ip_problem`)."""

    scheme: str
    host: str  # an IP in canonical form (no brackets), or the lower-case name without a final dot
    port: int  # the port to connect to (the scheme's default when none is written)
    target: str  # path and query, at least "/"
    netloc: str  # what the Host header says: the host as written, and the port if written
    ip: IPAddress | None
    name: str | None  # the host name (lower case, no final dot) when the URL names one
    name_allowed: bool  # the host name is in the allow list

    def url_for(self, ip: IPAddress) -> str:
        """This URL with ``ip`` in place of the host: where the request is actually sent."""
        host = f"[{ip}]" if ip.version == 6 else str(ip)
        return f"{self.scheme}://{host}:{self.port}{self.target}"


def alarm_policy_from_text(deny: str | None, allow: str | None) -> AlarmTargetPolicy:
    """The policy of ``executor_address_deny`` and ``alarm_target_allow`` (a comma list of
    CIDRs, IPs and host names); ValueError names a bad entry."""
    networks: list[IPNetwork] = []
    names: set[str] = set()
    for item in _items(allow):
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
            continue
        except ValueError:
            pass
        name = item.rstrip(".").lower()
        if name in REFUSED_NAMES:
            raise ValueError(f"{item!r} is a metadata service")
        if _looks_numeric(name) or not _NAME.fullmatch(name):
            raise ValueError(f"{item!r} is neither an IP network nor a host name (10.1.2.0/24, chat.corp)")
        names.add(name)
    return AlarmTargetPolicy(parse_networks(deny), tuple(networks), frozenset(names))


def _in(ip: IPAddress, networks: Iterable[IPNetwork]) -> IPNetwork | None:
    return next((n for n in networks if ip.version == n.version and ip in n), None)


def alarm_ip_problem(ip: IPAddress, policy: AlarmTargetPolicy, *, name_allowed: bool = False) -> str | None:
    """Why an alarm may not be sent to ``ip`` (None: it may). The allow list admits internal
    addresses, never an always-refused or denied one."""
    ip = normalise_ip(str(ip)) or ip
    refused = _in(ip, ALWAYS_REFUSED + policy.deny)
    if refused is not None:
        return f"{ip} is in a refused range ({refused})"
    if name_allowed or _in(ip, policy.allow_networks) is not None:
        return None
    internal = _in(ip, INTERNAL)
    if internal is not None:
        return f"{ip} is an internal address ({internal}); alarm_target_allow admits internal gateways"
    return None


def _alarm_name_problem(name: str, policy: AlarmTargetPolicy) -> str | None:
    if name in REFUSED_NAMES:
        return f"{name} is a metadata service"
    if name in policy.allow_names:
        return None
    if name.endswith(tuple("." + s for s in INTERNAL_SUFFIXES)) or name in INTERNAL_SUFFIXES:
        return f"{name} is an internal host name; alarm_target_allow admits internal gateways"
    if "." not in name:
        return f"{name} is a single-label (internal) host name; alarm_target_allow admits internal gateways"
    return None


def _alarm_split(text: str) -> tuple[SplitResult, int | None, str]:
    if not text or len(text) > MAX_ALARM_URL_LENGTH:
        raise AddressRefused(f"an alarm URL must have 1-{MAX_ALARM_URL_LENGTH} characters")
    if not _URL_TEXT.fullmatch(text):
        raise AddressRefused("must be plain ASCII without spaces, backslashes or fragments")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise AddressRefused("is not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise AddressRefused("must be an http(s) URL")
    if "@" in parts.netloc:
        raise AddressRefused("must not contain user info (user:password@)")
    if port is not None and not 0 < port < 65536:
        raise AddressRefused("has an invalid port")
    host = parts.hostname or ""
    if not host:
        raise AddressRefused("has no host")
    if parts.netloc.startswith("[") and "%" in host:
        raise AddressRefused("IPv6 zone ids are not accepted")
    return parts, port, host


def _alarm_host(host: str, bracketed: bool, policy: AlarmTargetPolicy) -> tuple[IPAddress | None, str | None]:
    """(IP, name) of an acceptable alarm URL host: the IP is None for a name to resolve."""
    ip = normalise_ip(host)
    name = None
    if ip is None:
        name = host.rstrip(".").lower()
        if bracketed or _looks_numeric(name) or not _NAME.fullmatch(name):
            raise AddressRefused("does not have a valid host")
        if name not in LOOPBACK_NAMES or name in policy.allow_names:
            problem = _alarm_name_problem(name, policy)
            if problem:
                raise AddressRefused(problem)
            return None, name
        ip = ipaddress.ip_address("127.0.0.1")  # judged, and later reached, as that address
    problem = alarm_ip_problem(ip, policy)
    if problem:
        raise AddressRefused(problem)
    return ip, name


def check_alarm_url(url: str, policy: AlarmTargetPolicy | None = None) -> AlarmUrl:
    """``url`` as an :class:`AlarmUrl` when an alarm may be sent there; AddressRefused (whose
    message says why, without the URL: it may hold a credential) otherwise."""
    policy = policy or AlarmTargetPolicy()
    parts, port, written = _alarm_split(url)
    ip, name = _alarm_host(written, parts.netloc.startswith("["), policy)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    default_port = 443 if parts.scheme == "https" else 80
    host = str(ip) if ip is not None else str(name)
    return AlarmUrl(parts.scheme, host, port or default_port, target, parts.netloc, ip, name,
                    name is not None and name in policy.allow_names)


def target_urls(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The (key, URL) pairs of an alarm target's settings the admin calls: ``url`` and every
    key ending in ``_url``."""
    return [(k, v) for k, v in config.items()
            if (k == "url" or k.endswith("_url")) and isinstance(v, str)]
