"""Addresses: every host the spec names is one the machines that use it can reach, in a
form the configs that carry it can hold, and the ports it serves are its own."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

from slurmforge.contract import PORTS, SLURM_PORTS
from slurmforge.errors import Problem
from slurmforge.hosts import controller_names
from slurmforge.spec.checks.registry import check, head_names, static_hosts
from slurmforge.spec.models import Cluster, StaticTarget
from slurmforge.spec.nodes import index_width, node_index

# Names every Debian machine resolves to itself: /etc/hosts (localhost, and ::1's
# ip6-localhost and ip6-loopback) and RFC 6761's *.localhost.
LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost", "ip6-loopback"})
# Why a static machine's IPv6 address cannot be written where slurmforge writes it: Slurm
# 24.11 uses IPv6 only with CommunicationParameters=EnableIPv6 (read_config.c), which
# slurmforge does not set; Prometheus' targets are address:port (monitoring.py), unbracketed.
STATIC_IPV6 = ("slurm.conf names it as the machine's address, and Slurm uses IPv6 only with "
               "CommunicationParameters=EnableIPv6, which slurmforge does not set; Prometheus' targets write it "
               "address:port")


@dataclass(frozen=True, slots=True)
class Reached:
    """A host the spec names and the cluster's machines reach."""

    path: str
    host: str
    who: str
    """Who reaches it, and what a loopback address would make of that."""
    ipv6: str | None
    """Why an IPv6 address cannot be written where it goes, or None where its reader takes one."""


def reached_hosts(spec: Cluster) -> list[Reached]:
    """Every host name or address in the spec that some machine of the cluster connects to."""
    found: list[Reached] = []
    if isinstance(spec.target, StaticTarget):
        found += [Reached(f"{path}.address", host.address, f"the other machines would reach themselves, not {role}",
                          STATIC_IPV6) for path, _, role, host in static_hosts(spec.target)]
    nas = spec.storage.nas
    if nas.kind == "nfs" and nas.server:
        found.append(Reached("storage.nas.server", nas.server, "every node would mount the NAS from itself",
                             "the mount line is server:/export, and mount.nfs takes an IPv6 server only in "
                             "brackets (nfs(5))"))
    db = spec.accounting.database
    if spec.accounting.enabled and db.kind == "external" and db.host:
        found.append(Reached("accounting.database.host", db.host, "slurmdbd would look for it on the controller, "
                             "where kind external installs no MariaDB", None))
    if spec.mail.relay:
        found.append(Reached("mail.relay", spec.mail.relay, "dma and Alertmanager would send mail to the controller, "
                             "where nothing listens for SMTP (dma only sends)",
                             "Alertmanager's smtp_smarthost is written relay:port, and Go's net.SplitHostPort, "
                             "which reads it, refuses an IPv6 address without brackets"))
    webhook = spec.monitoring.alerts.webhook
    host = urlsplit(webhook).hostname if webhook else None
    if host:
        found.append(Reached("monitoring.alerts.webhook", host, "Alertmanager would post alerts to the controller, "
                             "where nothing takes them", None))
    return found


def is_loopback(host: str) -> bool:
    """Does every machine read this host as itself (loopback, or 0.0.0.0 and ::, which
    Linux connects to the machine itself; also as IPv4-mapped IPv6, ::ffff:127.0.0.1, which
    Linux's dual-stack sockets connect to 127.0.0.1 (ipv6(7))?"""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        name = host.lower().rstrip(".")
        return name in LOOPBACK_NAMES or name.endswith(".localhost")
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return any(a.is_loopback or a.is_unspecified for a in (address, mapped) if a is not None)


def _is_ipv6(host: str) -> bool:
    return ":" in host and _ip_version(host) == 6


def _ip_version(host: str) -> int | None:
    try:
        return ipaddress.ip_address(host).version
    except ValueError:
        return None


@check
def addresses_reach_other_machines(spec: Cluster) -> Iterator[Problem]:
    """No host the cluster's machines connect to is a loopback address or name (127.0.0.0/8,
    ::1, 0.0.0.0, either as IPv4-mapped IPv6 such as ::ffff:127.0.0.1, localhost, *.localhost):
    each machine reads it as itself. So not a static
    machine's address (every other machine would reach itself), the NFS server (every node
    would mount from itself), an external database (slurmdbd on the controller, which has no
    MariaDB then), the mail relay (dma and Alertmanager on the controller: dma only sends,
    nothing there listens for SMTP) or the webhook's host (Alertmanager's, on the controller)."""
    for reached in reached_hosts(spec):
        if is_loopback(reached.host):
            yield Problem(reached.path, f"a loopback address, which each machine reads as itself: {reached.who}",
                          "use the machine's own address or DNS name", reached.host)


@check
def addresses_in_forms_their_readers_take(spec: Cluster) -> Iterator[Problem]:
    """No IPv6 address where the configs slurmforge writes cannot carry one: a static
    machine's (slurm.conf without CommunicationParameters=EnableIPv6: Slurm 24.11's
    read_config.c; Prometheus' address:port targets), the NFS server's (server:/export in the
    mount line: nfs(5) wants brackets), the mail relay's (Alertmanager's relay:port smarthost:
    Go's net.SplitHostPort refuses it). The external database and the webhook take one
    (slurmdbd hands StorageHost to the MariaDB client; a URL has its brackets)."""
    for reached in reached_hosts(spec):
        if reached.ipv6 is not None and _is_ipv6(reached.host) and not is_loopback(reached.host):
            yield Problem(reached.path, f"an IPv6 address: {reached.ipv6}", "use the machine's IPv4 address or its "
                          "DNS name", reached.host)


_DOTTED_DIGITS = re.compile(r"[0-9.]+")


def webhook_host_problem(url: str) -> str | None:
    """Why Alertmanager could not post to this URL's host and port (a phrase), or None.
    Alertmanager reads the URL with Go's net/url (url.Parse) and dials it with net/http:
    - an IPv6 address without brackets: url.Parse takes what follows the last ':' as the
      port (RFC 3986 wants IPv6 hosts in brackets), so fe80::1 is host 'fe80:' port 1;
    - a port that is not 1-65535: net.Dial refuses it ("invalid port");
    - digits and dots that are not a dotted quad (127.1, 10.1.2): Go's own resolver reads
      no such shorthand and looks it up in DNS (where it does not exist), while glibc's
      inet_aton would read 127.1 as 127.0.0.1: one name, two machines, neither meant."""
    hostport = urlsplit(url).netloc.rpartition("@")[2]
    if hostport.startswith("["):
        inside, closed, rest = hostport[1:].partition("]")
        if not closed or _ip_version(inside) != 6:
            return f"[{inside}] in brackets but not an IPv6 address: Go's url.Parse refuses it"
        if rest and not rest.startswith(":"):
            return f"{rest!r} after the brackets: Go's url.Parse refuses it"
        host, port = inside, rest[1:]
    elif hostport.count(":") > 1:
        host, _, port = hostport.rpartition(":")
        return (f"an IPv6 address without brackets: Go's url.Parse takes what follows the last ':' as the port "
                f"(host {host!r}, port {port!r})")
    else:
        host, _, port = hostport.partition(":")
    if port and (not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535):
        return f"port {port}: TCP ports are 1-65535, and Go's net.Dial refuses any other"
    if _DOTTED_DIGITS.fullmatch(host) and _ip_version(host) != 4:
        return (f"{host} is digits and dots but not an IPv4 address of four numbers: Go's resolver would look it up "
                "as a name")
    return None


@check
def webhook_url_alertmanager_reads(spec: Cluster) -> Iterator[Problem]:
    """monitoring.alerts.webhook's host and port are ones Alertmanager can post to: Go's
    url.Parse and net.Dial, which it reads and dials the URL with, take an IPv6 host only in
    brackets (RFC 3986; without them the last ':' starts the port), a port of 1-65535, and
    dotted digits only as a dotted quad (127.1 is no IPv4 address to Go's resolver)."""
    webhook = spec.monitoring.alerts.webhook
    why = webhook_host_problem(webhook) if webhook else None
    if webhook and why:
        yield Problem("monitoring.alerts.webhook", f"Alertmanager could not post there: {why}",
                      "write the receiver's DNS name or IPv4 address, an IPv6 address in brackets "
                      "(http://[2001:db8::1]:9000/), and a port of 1-65535", webhook)


def cluster_machines(spec: Cluster) -> dict[str, str]:
    """Every name and address of the cluster's own machines (names lowercase, as DNS
    compares them), and what it names: the controllers, the other head and Ceph hosts, a
    static target's machines by name and address. Pool nodes: `pool_node`."""
    machines = {name.lower(): f"{what} {name}" for name, what in head_names(spec).items()}
    if isinstance(spec.target, StaticTarget):
        for _, _, role, host in static_hosts(spec.target):
            machines.setdefault(host.name.lower(), role)
            machines.setdefault(host.address, role)
    machines.update(dict.fromkeys((name.lower() for name in controller_names(spec)), "the controller itself"))
    if isinstance(spec.target, StaticTarget):
        backup = spec.target.backup_controller if spec.head.backup_controller else None
        machines.update(dict.fromkeys((h.address for h in (spec.target.controller, backup) if h is not None),
                                      "the controller itself"))
    return machines


def pool_node(spec: Cluster, host: str) -> str | None:
    """The pool node a host name names (`node <name> of pool <pool>`), or None."""
    name = host.lower().rstrip(".")
    prefix = name.rpartition("-")[0]
    for pool in spec.pools:
        if spec.node_prefix(pool).lower() == prefix and node_index(name, prefix, index_width(pool),
                                                                   pool.max_nodes) is not None:
            return f"node {name} of pool {pool.name}"
    return None


@check
def mail_relay_listens(spec: Cluster) -> Iterator[Problem]:
    """mail.relay is none of the cluster's own machines: dma, which sends job mail there,
    and Alertmanager run on the controller, and nothing on any of the cluster's machines
    listens for SMTP (slurmforge installs dma, which only sends, and no mail server). So not
    the controller, a login, database or Ceph host, a static machine (by name or address) or
    a pool's node."""
    relay = spec.mail.relay
    if not relay:
        return
    what = cluster_machines(spec).get(relay.lower().rstrip(".")) or pool_node(spec, relay)
    if what == "the controller itself":
        yield Problem("mail.relay", "the controller itself: dma and Alertmanager send from there, and nothing on it "
                      "listens for SMTP (dma only sends)", "name your site's SMTP relay, or remove mail.relay to keep "
                      "job mail on the controller (/var/mail/<user>)", relay)
    elif what is not None:
        yield Problem("mail.relay", f"{what} of this cluster, where nothing listens for SMTP (slurmforge installs "
                      "no mail server, only dma, which sends)", "name your site's SMTP relay, or remove mail.relay "
                      "to keep job mail on the controller (/var/mail/<user>)", relay)


def daemon_ports() -> dict[int, str]:
    """The ports the cluster's own daemons listen on (contract.py): Slurm's, Prometheus',
    Alertmanager's, the node exporter's, the scheduler service's."""
    return {**SLURM_PORTS, **{port: name.replace("_", " ") for name, port in PORTS.items()}}


# sshd listens on 22 on every machine of the cluster (Ansible's and the users' way in); a
# Ceph host's monitor on 3300 and 6789, its OSDs, manager and MDS on ports from 6800 to 7300
# (Ceph's network configuration reference: ms_bind_port_min and ms_bind_port_max).
SSHD_PORT = 22
CEPH_MON_PORTS = (3300, 6789)
CEPH_DAEMON_PORTS = range(6800, 7301)


def _taken_on(spec: Cluster, what: str) -> dict[int, str]:
    """The ports the cluster's daemons listen on, on a machine that is `what`."""
    taken = {**daemon_ports(), spec.rest_api.port: "slurmrestd", SSHD_PORT: "sshd"}
    if what.startswith("Ceph host"):
        taken |= {port: "Ceph's monitor" for port in CEPH_MON_PORTS}
        taken |= {port: "a Ceph OSD, manager or MDS" for port in CEPH_DAEMON_PORTS}
    return taken


@check
def database_port_free(spec: Cluster) -> Iterator[Problem]:
    """An external database on one of the cluster's own machines listens on a port none of
    the cluster's daemons takes there (sshd 22, slurmctld 6817, slurmd 6818, slurmdbd 6819,
    slurmrestd, Prometheus, Alertmanager, the node exporter, the scheduler service; on a
    Ceph host Ceph's 3300, 6789 and 6800-7300): MariaDB could not bind it, or the daemon
    could not."""
    db = spec.accounting.database
    if not spec.accounting.enabled or db.kind != "external" or not db.host:
        return
    what = cluster_machines(spec).get(db.host.lower().rstrip(".")) or pool_node(spec, db.host)
    taken = _taken_on(spec, what) if what is not None else {}
    if db.port in taken:
        yield Problem("accounting.database.port", f"{taken[db.port]}'s port, and the database is on the cluster's "
                      f"machine {db.host}: MariaDB and {taken[db.port]} cannot both listen on it",
                      "use MariaDB's 3306, or another port no daemon of the cluster takes", db.port)
