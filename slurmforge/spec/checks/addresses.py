"""Addresses: every host the spec names is one the machines that use it can reach, in a
form the configs that carry it can hold, and the ports it serves are its own."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

from slurmforge.contract import PORTS, SLURM_PORTS
from slurmforge.errors import Problem
from slurmforge.hosts import controller_names
from slurmforge.spec.checks.registry import check, head_names, static_hosts
from slurmforge.spec.models import Cluster, StaticTarget

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
    Linux connects to the machine itself)?"""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        name = host.lower().rstrip(".")
        return name in LOOPBACK_NAMES or name.endswith(".localhost")
    return address.is_loopback or address.is_unspecified


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
    ::1, 0.0.0.0, localhost, *.localhost): each machine reads it as itself. So not a static
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


@check
def mail_relay_listens(spec: Cluster) -> Iterator[Problem]:
    """mail.relay is not the controller itself: dma, which sends job mail there, and
    Alertmanager run on the controller, and nothing on it listens for SMTP (dma only sends)."""
    relay = spec.mail.relay
    if not relay:
        return
    own = {name.lower() for name in controller_names(spec)}
    if isinstance(spec.target, StaticTarget):
        backup = spec.target.backup_controller if spec.head.backup_controller else None
        own |= {h.address for h in (spec.target.controller, backup) if h is not None}
    if relay.lower().rstrip(".") in own:
        yield Problem("mail.relay", "the controller itself: dma and Alertmanager send from there, and nothing on it "
                      "listens for SMTP (dma only sends)", "name your site's SMTP relay, or remove mail.relay to keep "
                      "job mail on the controller (/var/mail/<user>)", relay)


def daemon_ports() -> dict[int, str]:
    """The ports the cluster's own daemons listen on (contract.py): Slurm's, Prometheus',
    Alertmanager's, the node exporter's, the scheduler service's."""
    return {**SLURM_PORTS, **{port: name.replace("_", " ") for name, port in PORTS.items()}}


@check
def database_port_free(spec: Cluster) -> Iterator[Problem]:
    """An external database on one of the cluster's own machines listens on a port none of
    the cluster's daemons takes there (slurmctld 6817, slurmd 6818, slurmdbd 6819,
    slurmrestd, Prometheus, Alertmanager, the node exporter, the scheduler service): MariaDB
    could not bind it, or the daemon could not."""
    db = spec.accounting.database
    if not spec.accounting.enabled or db.kind != "external" or not db.host:
        return
    machines = {name.lower() for name in head_names(spec)}
    if isinstance(spec.target, StaticTarget):
        for _, _, _, host in static_hosts(spec.target):
            machines |= {host.name.lower(), host.address}
    taken = {**daemon_ports(), spec.rest_api.port: "slurmrestd"}
    if db.host.lower().rstrip(".") in machines and db.port in taken:
        yield Problem("accounting.database.port", f"{taken[db.port]}'s port, and the database is on the cluster's "
                      f"machine {db.host}: MariaDB and {taken[db.port]} cannot both listen on it",
                      "use MariaDB's 3306, or another port no daemon of the cluster takes", db.port)
