"""Where the cluster runs: the AWS network, head nodes, static machines, the local host."""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Iterator

from slurmforge.errors import Problem, SortedListing, listing
from slurmforge.hosts import (
    LOCAL_FIRST_HOST_OFFSET,
    OWN_TAG_KEYS,
    OWN_TAG_PREFIX,
    TAG_NAME,
    controller_names,
    login_names,
    login_subnets,
)
from slurmforge.instance_types import lookup
from slurmforge.spec.checks.addresses import daemon_ports, reached_hosts
from slurmforge.spec.checks.network import no_host_range, zone_in
from slurmforge.spec.checks.people import mariadb_reserved_words
from slurmforge.spec.checks.registry import check, is_aws, stack_makes_rds, static_hosts
from slurmforge.spec.models import AwsTarget, Cluster, LocalTarget, RestApi, StaticTarget, is_domain
from slurmforge.spec.nodes import node_names, pool_hostlist

# podman's own default network; a local cluster network must not overlap it.
PODMAN_DEFAULT = ipaddress.ip_network("10.88.0.0/16")
LOCAL_MAX_NODES = 32
# target.tags go on every resource the stack makes (the provider's default tags): instances
# whose tags are in instance metadata (a node reads its name there), IAM roles, EFS, ...; a
# tag must suit them all. EC2: keys of 1-127 characters (its API reference; IAM takes 128),
# values of at most 256, 50 tags a resource, no aws: prefix (any case). Tags in instance
# metadata: keys of letters, digits and + - = . , _ : @ only, never '.', '..' or '_index'.
# IAM and EFS: no ',' in keys; values of letters, digits, spaces and _ . : / = + - @.
TAG_KEY_MAX, TAG_VALUE_MAX, TAGS_PER_RESOURCE = 127, 256, 50
TAG_KEY_CHARS = re.compile(r"[A-Za-z0-9+\-=._:@]")
TAG_VALUE_PUNCTUATION = frozenset("_.:/=+-@")
TAG_VALUE_ASCII = re.compile(r"[A-Za-z0-9 _.:/=+@-]*")  # the usual values, without a look per character
METADATA_RESERVED_KEYS = (".", "..", "_index")
MAX_USER_TAGS = TAGS_PER_RESOURCE - len(OWN_TAG_KEYS)


def _tag_path(key: str) -> str:
    plain = bool(key) and key not in METADATA_RESERVED_KEYS and all(TAG_KEY_CHARS.fullmatch(c) for c in key)
    return f"target.tags.{key}" if plain else f"target.tags[{key!r}]"


def _tag_key_problem(key: str) -> tuple[str, str] | None:
    """What is wrong with a tag key (message, fix), or None."""
    bad = sorted({c for c in key if not TAG_KEY_CHARS.fullmatch(c)})
    if not key:
        return "an empty tag key", "give the tag a name"
    if len(key) > TAG_KEY_MAX:
        return f"a tag key of {len(key)} characters; EC2 takes at most {TAG_KEY_MAX}", "use a shorter key"
    if key.casefold().startswith("aws:"):
        return "the aws: prefix is AWS's own", f"drop it: {key[4:] or 'another key'}"
    if key == TAG_NAME:
        return "the stack names what it makes with this key (its value would replace yours)", \
            "use a key of your own, e.g. project or team"
    if key.casefold().startswith(OWN_TAG_PREFIX):
        return "slurmforge's own tag keys start so (the stack and the scheduler service set and read them)", \
            "use a key of your own, e.g. project or team"
    if bad:
        suggestion = "".join(c if TAG_KEY_CHARS.fullmatch(c) else "-" for c in key)
        if bad == [","]:
            return "',' in a tag key: IAM and EFS refuse it (the tags go on every resource)", f"use e.g. {suggestion}"
        shown = " ".join("space" if c == " " else repr(c) for c in bad)
        return (f"{shown} in a tag key: instance metadata, where the nodes read their tags, takes only letters, "
                "digits and + - = . _ : @", f"use e.g. {suggestion}")
    if key in METADATA_RESERVED_KEYS:
        return "not a tag key instance metadata can hold", "use a key of your own, e.g. project"
    return None


def _tag_value_problem(value: str) -> tuple[str, str] | None:
    if len(value) > TAG_VALUE_MAX:
        return f"a tag value of {len(value)} characters; EC2 takes at most {TAG_VALUE_MAX}", "use a shorter value"
    if TAG_VALUE_ASCII.fullmatch(value):
        return None
    bad = sorted({c for c in value if unicodedata.category(c)[0] not in "LNZ" and c not in TAG_VALUE_PUNCTUATION})
    if bad:
        return (f"{' '.join(repr(c) for c in bad)} in a tag value: IAM and EFS take only letters, digits, spaces and "
                "_ . : / = + - @", "leave those characters out")
    return None


@check
def aws_tags(spec: Cluster) -> Iterator[Problem]:
    """target.tags suit every resource they go on: keys of 1-127 letters, digits and
    + - = . _ : @ (instance metadata, where nodes read their tags, takes no spaces or '/';
    IAM no ','), not '.', '..' or '_index', not aws:... (AWS's) nor slurmforge:... or Name
    (the stack's own), no two that differ only in case (IAM compares keys so); values of at
    most 256 letters, digits, spaces and _ . : / = + - @; at most 40 tags (EC2 takes 50 a
    resource; slurmforge's own keys are 10). Sources: the EC2, IAM and EFS API References'
    Tag (keys of 127, 128 and 128 characters; values of 256; no aws: prefix; IAM's and
    EFS's characters), the EC2 User Guide's instance tags in instance metadata (its key
    characters and reserved keys), AWS's tagging guide (50 tags a resource).
    tests/unit/test_aws_names.py runs what moto enforces of them (EC2's 50 tags, IAM's
    lengths, characters, count and case)."""
    if not isinstance(spec.target, AwsTarget):
        return
    tags = spec.target.tags
    folded: dict[str, str] = {}
    for key, value in tags.items():
        for found, shown in ((_tag_key_problem(key), None), (_tag_value_problem(value), value)):
            if found:
                yield Problem(_tag_path(key), found[0], found[1], shown)
        first = folded.setdefault(key.casefold(), key)
        if first != key:
            yield Problem(_tag_path(key), f"the same key as {first!r} to IAM, which ignores case",
                          "keep one of them", show_value=False)
    if len(tags) > MAX_USER_TAGS:
        yield Problem("target.tags", f"{len(tags)} tags; EC2 takes {TAGS_PER_RESOURCE} a resource and slurmforge's "
                      f"own keys are {len(OWN_TAG_KEYS)}", f"keep at most {MAX_USER_TAGS}", show_value=False)


@check
def aws_names_as_written(spec: Cluster) -> Iterator[Problem]:
    """Names AWS matches exactly carry no leading or trailing spaces: the EC2 key pair
    (EC2 finds key pairs by their exact name, and ' ops' is not the key pair ops), tag
    values (EC2 keeps them as written: filters, IAM conditions and cost reports would see
    'ml ' and 'ml' as two values) and availability zones (subnets' and pools': CreateSubnet
    and CreateFleet take the zone's name as written, and 'us-east-1a ' is no zone). Instance
    types are names of the catalog, which has none with spaces (known_instance_types)."""
    if not isinstance(spec.target, AwsTarget):
        return
    key = spec.target.key_name
    if key != key.strip():
        yield Problem("target.key_name", "spaces around the name: EC2 matches key pair names exactly, so no key "
                      "pair would be found", f"write the key pair's name as EC2 lists it: {key.strip()!r}", key)
    for tag, value in spec.target.tags.items():
        if value != value.strip():
            yield Problem(_tag_path(tag), "spaces around the value: EC2 keeps them, and filters, IAM conditions and "
                          "cost reports match values exactly", f"write {value.strip()!r}", value)
    zones = [(f"network.{kind}[{i}].zone", s.zone) for kind in ("public_subnets", "private_subnets")
             for i, s in enumerate(getattr(spec.network, kind))]
    zones += [(f"pools[{i}].zones[{j}]", z) for i, p in enumerate(spec.pools) if p.zones for j, z in enumerate(p.zones)]
    for path, zone in zones:
        if zone != zone.strip():
            yield Problem(path, "spaces around the zone's name: EC2 takes it as written, and no zone is called so",
                          f"write {zone.strip()!r}", zone)


# RDS's master user name for MariaDB (Amazon RDS API Reference, CreateDBInstance,
# MasterUsername: "1 to 16 letters, numbers, or underscores; first character must be a
# letter; can't be a reserved word for the chosen database engine"). moto does not check it.
RDS_USER = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,15}")
# The account RDS makes on every MariaDB instance to manage it (Amazon RDS User Guide,
# MariaDB security on Amazon RDS): CreateDBInstance refuses it as MasterUsername.
RDS_OWN_USERS = frozenset({"rdsadmin"})
# CreateDBInstance, Port: "Valid Values: 1150-65535" (Amazon RDS API Reference).
RDS_PORTS = range(1150, 65536)
# Domains the cluster's own machines resolve in the VPC: AWS's service endpoints (EFS, SSM,
# Secrets Manager, RDS's own address) and EC2's private host names.
AWS_DOMAINS = ("amazonaws.com", "compute.internal", "ec2.internal")


@check
def rds_database(spec: Cluster) -> Iterator[Problem]:
    """Where the stack makes the accounting database (target aws, database kind external),
    RDS takes its user as the master user (1-16 letters, digits and '_', a letter first:
    Amazon RDS API Reference, CreateDBInstance, MasterUsername; not a reserved word, not
    RDS's own rdsadmin) and its port (1150-65535: CreateDBInstance, Port), and
    the host is the DNS name the stack publishes RDS's address under in a private zone (the
    host minus its first label): not an IP address (RDS picks its own), not a bare name (no
    zone can hold it)."""
    if not stack_makes_rds(spec):
        return
    db = spec.accounting.database
    if not RDS_USER.fullmatch(db.user):
        yield Problem("accounting.database.user", "not a master user name RDS takes",
                      "1-16 letters, digits and '_', a letter first (e.g. slurm)", db.user)
    elif db.user.lower() in mariadb_reserved_words():
        yield Problem("accounting.database.user", "a word MariaDB reserves: RDS refuses it as the master user",
                      "use e.g. slurm", db.user)
    elif db.user.lower() in RDS_OWN_USERS:
        yield Problem("accounting.database.user", "RDS's own account on every MariaDB instance: RDS refuses it as "
                      "the master user", "use e.g. slurm", db.user)
    if db.port not in RDS_PORTS:
        yield Problem("accounting.database.port", f"RDS takes ports {RDS_PORTS.start}-{RDS_PORTS.stop - 1} only "
                      "(CreateDBInstance)", "use MariaDB's 3306, or another port from 1150 up", db.port)
    host = db.host or ""
    try:
        ipaddress.ip_address(host)
        yield Problem("accounting.database.host", "an IP address, but the stack makes RDS, which picks its own",
                      f"name it instead: the stack publishes RDS's address under that name in the VPC (e.g. "
                      f"db.{spec.name}.internal)", host)
    except ValueError:
        if host and "." not in host:
            yield Problem("accounting.database.host", "a bare name: the stack publishes RDS's address in a private "
                          "DNS zone, the name minus its first label", f"use a name with a domain, e.g. "
                          f"{host}.{spec.name}.internal", host)


def _within(name: str, zone: str) -> bool:
    name, zone = name.lower().rstrip("."), zone.lower().rstrip(".")
    return name == zone or name.endswith("." + zone)


@check
def database_zone_shadows_nothing(spec: Cluster) -> Iterator[Problem]:
    """The private DNS zone the stack makes for an RDS accounting database (the host minus
    its first label) holds no name the cluster resolves elsewhere: in the VPC the zone
    answers for every name in it, and a name it lacks does not exist ("Resolver doesn't
    forward the request to a public DNS resolver. Instead, it returns NXDOMAIN": Amazon
    Route 53 Developer Guide, Considerations when working with a private hosted zone). So
    no host the spec names (the NFS server, the mail relay, the alert webhook's host), not
    AWS's own domains (amazonaws.com:
    EFS, SSM, RDS's address itself; compute.internal, ec2.internal: EC2's host names)."""
    host = spec.accounting.database.host or ""
    if not stack_makes_rds(spec) or "." not in host or _is_ip(host):
        return
    zone = host.split(".", 1)[1]
    outside = [(reached.path, reached.host) for reached in reached_hosts(spec) if reached.host != host]
    for path, name in outside:
        if name and not _is_ip(name) and _within(name, zone):
            yield Problem("accounting.database.host", f"the stack would make a private DNS zone {zone}, and {path} "
                          f"({name}) is in it: the cluster could no longer resolve it", "name the database "
                          f"in a domain of its own, e.g. db.{spec.name}.internal", host)
    aws = [domain for domain in AWS_DOMAINS if _within(zone, domain) or _within(domain, zone)]
    if aws:
        yield Problem("accounting.database.host", f"the stack would make a private DNS zone {zone}, which "
                      f"overlaps AWS's {' and '.join(aws)}: the cluster's machines could no longer resolve AWS's "
                      f"names", f"name the database in a domain of its own, e.g. db.{spec.name}.internal", host)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@check
def login_zones_reach_efs(spec: Cluster) -> Iterator[Problem]:
    """On AWS with EFS, every public subnet holding a login node is in a zone with a private
    subnet: EFS has its mount targets there, and a client resolves the file system's name
    only in a zone with one (the login node mounts the NAS)."""
    if not isinstance(spec.target, AwsTarget) or spec.storage.nas.kind != "efs":
        return
    private = sorted({s.zone for s in spec.network.private_subnets})
    logins: dict[int, list[str]] = {}
    for name, index in login_subnets(spec).items():
        logins.setdefault(index, []).append(name)
    for index, names in sorted(logins.items()):
        zone = spec.network.public_subnets[index].zone
        if zone not in private and zone_in(spec.target.region, zone):  # else: subnet_zones_in_region
            nodes = f"login node {names[0]}" if len(names) == 1 else f"login nodes {listing(names)}"
            where = f"put this public subnet in {' or '.join(private)}" if private else "add private subnets"
            yield Problem(f"network.public_subnets[{index}].zone", f"holds {nodes} but no private subnet: EFS has "
                          f"no mount target in {zone}, and the login node mounts the NAS",
                          f"add a private subnet in {zone}, or {where}", zone)


@check
def head_instance_types_known(spec: Cluster) -> Iterator[Problem]:
    """Head node instance types are in the catalog and not burstable for the controller."""
    if not is_aws(spec):
        return
    for role in ("controller", "login"):
        t = getattr(spec.head, role).instance_type
        if lookup(t) is None:
            yield Problem(f"head.{role}.instance_type", "unknown instance type", "use e.g. m6i.xlarge", t)
    if spec.head.controller.instance_type.startswith(("t2.", "t3.")):
        yield Problem("head.controller.instance_type", "burstable types throttle slurmctld under load",
                      "use m6i.large or bigger", spec.head.controller.instance_type)


@check
def login_node_exists(spec: Cluster) -> Iterator[Problem]:
    """There is a login node: users need somewhere to run sbatch and srun."""
    if isinstance(spec.target, StaticTarget):
        if not spec.target.login:
            yield Problem("target.login", "no login host: users would have nowhere to submit jobs",
                          "add a login host (a small VM is enough)", show_value=False)
    elif spec.head.login_count == 0:
        yield Problem("head.login_count", "no login node: users would have nowhere to submit jobs",
                      "use login_count: 1 or more", 0)


@check
def static_target_hosts(spec: Cluster) -> Iterator[Problem]:
    """A static target lists, for every pool, exactly max_nodes machines; hosts only for
    known pools; every machine once: no name (compared as DNS does, ignoring case) or
    address twice, none called localhost (every machine's name for itself)."""
    target = spec.target
    if not isinstance(target, StaticTarget):
        return
    pools = {p.name: p for p in spec.pools}
    known = SortedListing(pools)
    for pool_name, members in target.nodes.items():
        if pool_name not in pools:
            yield Problem(f"target.nodes.{pool_name}", "unknown pool", f"use one of: {known}", pool_name)
        elif len(members) != pools[pool_name].max_nodes:
            yield Problem(f"target.nodes.{pool_name}", f"{len(members)} host(s) for max_nodes "
                          f"{pools[pool_name].max_nodes}", "list one machine per node, or change max_nodes",
                          show_value=False)
    for i, p in enumerate(spec.pools):
        if p.name not in target.nodes:
            yield Problem(f"pools[{i}].name", "no machines listed under target.nodes",
                          f"add target.nodes.{p.name} with its {p.max_nodes} machine(s)", p.name)
    names: dict[str, str] = {}
    addresses: dict[str, str] = {}
    for path, what, role, host in static_hosts(target):
        if host.name.lower() == "localhost":
            yield Problem(f"{path}.name", "localhost is every machine's name for itself",
                          "use the machine's own host name", host.name)
        elif host.name.lower() in names:
            yield Problem(f"{path}.name", f"also {names[host.name.lower()]}: one machine cannot be both",
                          f"give the {what} a machine of its own", host.name)
        if host.address in addresses:
            yield Problem(f"{path}.address", f"also the address of {addresses[host.address]}",
                          f"give the {what} a machine of its own", host.address)
        names.setdefault(host.name.lower(), role)
        addresses.setdefault(host.address, role)


@check
def backup_controller_machine(spec: Cluster) -> Iterator[Problem]:
    """A static target names the backup controller's machine exactly when the spec asks for one."""
    if not isinstance(spec.target, StaticTarget):
        return
    if spec.head.backup_controller and spec.target.backup_controller is None:
        yield Problem("target.backup_controller", "head.backup_controller is true but no machine is named for it",
                      "add target.backup_controller with its name and address, or set head.backup_controller: "
                      "false", show_value=False)
    if not spec.head.backup_controller and spec.target.backup_controller is not None:
        yield Problem("head.backup_controller", "false, but target.backup_controller names a machine",
                      "set head.backup_controller: true, or remove target.backup_controller", show_value=False)


@check
def static_pools_fixed_size(spec: Cluster) -> Iterator[Problem]:
    """On a static target min_nodes = max_nodes: machines you own are not powered up on demand."""
    if not isinstance(spec.target, StaticTarget):
        return
    for i, p in enumerate(spec.pools):
        if p.min_nodes != p.max_nodes:
            yield Problem(f"pools[{i}].min_nodes", f"{p.min_nodes} but max_nodes {p.max_nodes}: a static target "
                          "cannot start nodes on demand", "set min_nodes equal to max_nodes", show_value=False)


@check
def static_host_names_match_nodes(spec: Cluster) -> Iterator[Problem]:
    """On a static target each machine is named as Slurm names its node (`<node_prefix>-<index>`)."""
    if not isinstance(spec.target, StaticTarget):
        return
    for p in spec.pools:
        hosts = spec.target.nodes.get(p.name, [])
        expected = set(node_names(spec, p)) if hosts else set()
        for j, host in enumerate(hosts):
            if host.name not in expected:
                yield Problem(f"target.nodes.{p.name}[{j}].name", f"Slurm names this pool's nodes "
                              f"{pool_hostlist(spec, p)}", "rename the machine, or set the pool's node_prefix",
                              host.name)


@check
def local_target_size(spec: Cluster) -> Iterator[Problem]:
    """The local target runs every node as a container on this machine: keep it small; and
    its network holds an address for every container the spec implies (each pool's
    max_nodes, the controllers, the login nodes, the Ceph hosts), counting what is not the
    containers': the network and broadcast addresses and the first host addresses, which
    the local provider leaves to podman (its gateway) and spare."""
    if not isinstance(spec.target, LocalTarget):
        return
    total = sum(p.max_nodes for p in spec.pools)
    if total > LOCAL_MAX_NODES:
        yield Problem("pools", f"{total} nodes on one machine", f"keep local clusters at {LOCAL_MAX_NODES} nodes "
                      "or fewer", show_value=False)
    nodes = min(total, LOCAL_MAX_NODES)
    heads = len(controller_names(spec)) + len(login_names(spec)) + (spec.storage.ceph.hosts if spec.storage.ceph
                                                                     else 0)
    size = ipaddress.ip_network(spec.target.subnet).num_addresses
    usable = max(0, size - 2 - LOCAL_FIRST_HOST_OFFSET)
    if usable < nodes + heads:
        prefix = 32 - (nodes + heads + 2 + LOCAL_FIRST_HOST_OFFSET - 1).bit_length()
        yield Problem("target.subnet", f"{usable} addresses for containers ({size}, less the network, broadcast "
                      f"and the first {LOCAL_FIRST_HOST_OFFSET} the local provider leaves to podman) for "
                      f"{nodes + heads}: {nodes} nodes and {heads} controller, login and Ceph containers",
                      f"use a /{prefix} or larger (e.g. a /24)", spec.target.subnet)


@check
def local_subnet_usable(spec: Cluster) -> Iterator[Problem]:
    """The local network is a private range no machine keeps for itself and does not overlap
    podman's default 10.88.0.0/16: not loopback, link-local or 'this network' (Python counts
    them private, but no container could use such an address: the kernel keeps 127.0.0.0/8
    for the host's own lo, and routes neither of the others over a bridge)."""
    if not isinstance(spec.target, LocalTarget):
        return
    net = ipaddress.IPv4Network(spec.target.subnet)
    why = no_host_range(spec.target.subnet)
    if why is not None:
        yield Problem("target.subnet", f"{why}: the containers could not use it", "use a private range such as "
                      "10.89.0.0/24", spec.target.subnet)
    elif not net.is_private:
        yield Problem("target.subnet", "not a private range: containers would shadow real internet addresses",
                      "use a private range such as 10.89.0.0/24", spec.target.subnet)
    elif net.overlaps(PODMAN_DEFAULT):
        yield Problem("target.subnet", f"overlaps podman's default network {PODMAN_DEFAULT}",
                      "use e.g. 10.89.0.0/24", spec.target.subnet)


@check
def mail_domain(spec: Cluster) -> Iterator[Problem]:
    """mail.domain is a DNS domain (labels of letters, digits and '-', with a dot), never
    an address or a URL: slurmctld appends it to user names after an '@'."""
    d = spec.mail.domain
    if d is not None and not is_domain(d):
        yield Problem("mail.domain", "not a DNS domain", "use e.g. example.org (no '@', no https://)", d)


@check
def mail_relay_when_leaving(spec: Cluster) -> Iterator[Problem]:
    """mail.domain and mail.port need mail.relay: mail to user@domain leaves the cluster
    only through an SMTP relay (without one it stays on the controller)."""
    mail = spec.mail
    if mail.relay is None and mail.domain is not None:
        yield Problem("mail.relay", f"job mail goes to <user>@{mail.domain} but there is no relay to send it through",
                      "set mail.relay to your SMTP relay, or remove mail.domain to keep job mail on the "
                      "controller (/var/mail/<user>)")
    elif mail.relay is None and mail.port != 25:
        yield Problem("mail.port", "a port without a relay", "set mail.relay, or remove mail.port", mail.port)


@check
def alert_mail_needs_relay(spec: Cluster) -> Iterator[Problem]:
    """monitoring.alerts.email needs mail.relay: Alertmanager sends alert mail through it."""
    if spec.monitoring.alerts.email and spec.mail.relay is None:
        yield Problem("monitoring.alerts.email", "alert mail needs an SMTP relay to leave the cluster",
                      "set mail.relay, or use monitoring.alerts.webhook instead")


@check
def images_ami_only_on_aws(spec: Cluster) -> Iterator[Problem]:
    """images.ami only applies to target aws."""
    if spec.images.ami and not is_aws(spec):
        yield Problem("images.ami", "only applies to target aws", "remove it", spec.images.ami)


@check
def images_refresh_needs_a_built_image(spec: Cluster) -> Iterator[Problem]:
    """images.refresh builds the node image again: not with images.ami, an image slurmforge
    does not build."""
    if spec.images.refresh and spec.images.ami:
        yield Problem("images.refresh", "refreshes an image slurmforge builds, and images.ami pins one it does not",
                      "bake the pinned AMI again from the current packages and pin the new id, or remove images.ami",
                      spec.images.refresh)


@check
def rest_api_port_free(spec: Cluster) -> Iterator[Problem]:
    """rest_api.port is none of the ports the cluster's own daemons listen on (Slurm's,
    Prometheus', the exporters', the scheduler service's)."""
    taken = daemon_ports()
    port = spec.rest_api.port
    if port in taken:
        yield Problem("rest_api.port", f"is {taken[port]}'s port",
                      f"choose another port (Slurm's REST API usually listens on {RestApi().port})", port)
