"""Every secure default of the AWS stack, over examples/pools-aws.yaml and a lab-style
AWS spec: checked on what the program registered with the engine (inputs as sent)
and on the resolved stack outputs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from slurmforge.contract import NFS_OPTIONS
from slurmforge.hosts import TAG_CLUSTER, TAG_POOL, login_names
from slurmforge.node.program import render_join
from slurmforge.secrets import CLUSTER_SECRETS
from tests.pulumi.conftest import (
    DB_PASSWORD,
    JWT_B64,
    LAB_AWS,
    MUNGE_B64,
    POOLS_AWS,
    StackRun,
    launch_template_user_data,
    pool_join_settings,
    run_stack,
    user_data_program,
)

pytestmark = [pytest.mark.pulumi, pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")]

SG = "aws:ec2/securityGroup:SecurityGroup"
INSTANCE = "aws:ec2/instance:Instance"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
WORLD = "0.0.0.0/0"


def ingress_rules(run: StackRun) -> list[tuple[str, dict[str, Any]]]:
    rules = [(g.name, rule) for g in run.of_type(SG) for rule in g.inputs.get("ingress", [])]
    # inline rules only: a separate rule resource would escape these checks
    separate = [r.typ for r in run.resources if "securityGroupRule" in r.typ or "IngressRule" in r.typ]
    assert not separate, separate
    return rules


def world_rules(run: StackRun) -> list[tuple[str, dict[str, Any]]]:
    return [(name, r) for name, r in ingress_rules(run)
            if WORLD in r.get("cidrBlocks", []) or "::/0" in r.get("ipv6CidrBlocks", [])]


# --------------------------------------------------------------------------- ingress


def test_no_world_ingress_anywhere(any_stack: StackRun) -> None:
    assert len(any_stack.of_type(SG)) >= 4
    assert world_rules(any_stack) == []


def test_login_ssh_only_from_admin_cidrs(any_stack: StackRun) -> None:
    login = any_stack.one(SG, f"{any_stack.spec.name}-login")
    assert login.inputs["ingress"][0] == {
        "description": "SSH from the admin CIDRs", "protocol": "tcp", "fromPort": 22, "toPort": 22,
        "cidrBlocks": any_stack.spec.network.admin_cidrs}


def test_rest_api_reaches_the_login_node_from_inside_the_vpc_only(any_stack: StackRun) -> None:
    """slurmrestd's port (rest_api.port) on the login group, from the VPC's CIDR: no other
    group, no other CIDR."""
    port = any_stack.spec.rest_api.port
    admitting = [(name, r) for name, r in ingress_rules(any_stack)
                 if r["protocol"] == "tcp" and r["fromPort"] <= port <= r["toPort"]]
    assert [(name, r["fromPort"], r["toPort"], r["cidrBlocks"]) for name, r in admitting] == [
        (f"{any_stack.spec.name}-login", port, port, [any_stack.spec.network.vpc_cidr])]


def test_rest_api_rule_follows_the_spec_port() -> None:
    run = run_stack(POOLS_AWS, "rest-port")
    login = run.one(SG, "mlpools-login")
    assert [(r["fromPort"], r["toPort"]) for r in login.inputs["ingress"] if r["fromPort"] != 22] == [(8443, 8443)]


def test_world_ssh_only_when_the_spec_says_so_and_only_to_the_login_node() -> None:
    run = run_stack(POOLS_AWS, "world-ssh")
    assert [(name, r["protocol"], r["fromPort"], r["toPort"]) for name, r in world_rules(run)] == [
        ("mlpools-login", "tcp", 22, 22)]


def test_cluster_traffic_stays_inside_the_cluster_group(any_stack: StackRun) -> None:
    group = any_stack.one(SG, f"{any_stack.spec.name}-cluster")
    assert group.inputs["ingress"] == [{
        "description": group.inputs["ingress"][0]["description"], "protocol": "-1", "fromPort": 0, "toPort": 0,
        "self": True}]


def test_monitoring_ports_only_from_cluster_members(any_stack: StackRun) -> None:
    """Prometheus (9090), Alertmanager (9093), node exporter (9100), the service's /metrics
    (9110): any rule that lets them in admits only members of the cluster
    group, no CIDR."""
    from slurmforge.contract import (
        ALERTMANAGER_PORT,
        NODE_EXPORTER_PORT,
        PROMETHEUS_PORT,
        SERVICE_PORT,
    )

    ports = (PROMETHEUS_PORT, ALERTMANAGER_PORT, NODE_EXPORTER_PORT, SERVICE_PORT)
    admitting = [(name, r) for name, r in ingress_rules(any_stack)
                 if r["protocol"] in ("-1", "tcp")
                 and any(r["protocol"] == "-1" or r["fromPort"] <= p <= r["toPort"] for p in ports)]
    assert [name for name, _ in admitting] == [f"{any_stack.spec.name}-cluster"]
    assert all(r.get("self") is True and not r.get("cidrBlocks") for _, r in admitting)


def test_nfs_only_from_the_cluster_group(any_stack: StackRun) -> None:
    efs = any_stack.one(SG, f"{any_stack.spec.name}-efs")
    assert [(r["fromPort"], r["securityGroups"]) for r in efs.inputs["ingress"]] == [
        (2049, [f"{any_stack.spec.name}-cluster-id"])]


def test_default_security_group_is_emptied(any_stack: StackRun) -> None:
    (default,) = any_stack.of_type("aws:ec2/defaultSecurityGroup:DefaultSecurityGroup")
    assert default.inputs.get("ingress", []) == [] and default.inputs.get("egress", []) == []


# --------------------------------------------------------------------------- IMDSv2


def test_imdsv2_with_hop_limit_1_on_every_launch_template(any_stack: StackRun) -> None:
    templates = any_stack.of_type(LAUNCH_TEMPLATE)
    assert len(templates) == len(any_stack.spec.pools)
    for t in templates:
        meta = t.inputs["metadataOptions"]
        assert (t.name, meta["httpTokens"], meta["httpPutResponseHopLimit"]) == (t.name, "required", 1)


def test_imdsv2_with_hop_limit_1_on_every_instance(any_stack: StackRun) -> None:
    spec = any_stack.spec
    instances = any_stack.of_type(INSTANCE)
    ceph = spec.storage.ceph.hosts if spec.storage.ceph else 0
    assert len(instances) == 1 + spec.head.backup_controller + spec.head.login_count + ceph
    for i in instances:
        meta = i.inputs["metadataOptions"]
        assert (i.name, meta["httpTokens"], meta["httpPutResponseHopLimit"]) == (i.name, "required", 1)


# --------------------------------------------------------------------------- encryption


def test_every_launch_template_volume_is_encrypted(any_stack: StackRun) -> None:
    for t in any_stack.of_type(LAUNCH_TEMPLATE):
        devices = t.inputs["blockDeviceMappings"]
        assert devices and all(d["ebs"]["encrypted"] == "true" for d in devices), t.name


def test_every_instance_root_volume_is_encrypted(any_stack: StackRun) -> None:
    for i in any_stack.of_type(INSTANCE):
        assert i.inputs["rootBlockDevice"]["encrypted"] is True, i.name
        assert "ebsBlockDevices" not in i.inputs, f"{i.name}: data disks must be separate, encrypted volumes"


def test_every_ceph_osd_volume_is_encrypted_and_sized_by_the_spec(any_stack: StackRun) -> None:
    ceph = any_stack.spec.storage.ceph
    assert ceph is not None
    volumes = any_stack.of_type("aws:ebs/volume:Volume")
    assert len(volumes) == ceph.osd_count
    assert {(v.inputs["encrypted"], v.inputs["size"]) for v in volumes} == {(True, ceph.osd_size_gb)}


def test_efs_and_rds_are_encrypted() -> None:
    """The golden image: tests/pulumi/test_golden_image.py (its build volume, made in moto)."""
    (efs,) = run_stack(LAB_AWS).of_type("aws:efs/fileSystem:FileSystem")
    (rds,) = run_stack(LAB_AWS).of_type("aws:rds/instance:Instance")
    assert efs.inputs["encrypted"] is True
    assert rds.inputs["storageEncrypted"] is True


# --------------------------------------------------------------------------- public addresses


def test_only_login_nodes_get_a_public_address(any_stack: StackRun) -> None:
    public = sorted(i.name for i in any_stack.of_type(INSTANCE) if i.inputs["associatePublicIpAddress"])
    assert public == sorted(login_names(any_stack.spec))
    eips = any_stack.of_type("aws:ec2/eip:Eip")
    attached = sorted(e.inputs["instance"] for e in eips if "instance" in e.inputs)
    assert attached == sorted(f"{n}-id" for n in login_names(any_stack.spec))
    assert len(eips) == len(attached) + 1  # and the NAT gateway's


def test_pool_nodes_never_get_a_public_address(any_stack: StackRun) -> None:
    for t in any_stack.of_type(LAUNCH_TEMPLATE):
        assert [n["associatePublicIpAddress"] for n in t.inputs["networkInterfaces"]] == ["false"], t.name


def test_no_subnet_assigns_public_addresses(any_stack: StackRun) -> None:
    subnets = any_stack.of_type("aws:ec2/subnet:Subnet")
    assert subnets and all(s.inputs["mapPublicIpOnLaunch"] is False for s in subnets)


def test_private_subnets_in_distinct_zones(any_stack: StackRun) -> None:
    private = [s for s in any_stack.of_type("aws:ec2/subnet:Subnet") if "-private-" in s.name]
    zones = [s.inputs["availabilityZone"] for s in private]
    assert len(zones) == len(any_stack.spec.network.private_subnets) >= 2
    assert len(set(zones)) == len(zones)


def test_head_nodes_and_ceph_sit_in_private_subnets_except_login(lab_aws: StackRun) -> None:
    subnet_of = {i.name: i.inputs["subnetId"] for i in lab_aws.of_type(INSTANCE)}
    assert subnet_of["lab-controller"] == "lab-private-1-id"
    assert subnet_of["lab-controller-backup"] == "lab-private-2-id"  # another zone
    assert {subnet_of[f"lab-ceph-{i}"] for i in (1, 2, 3)} == {f"lab-private-{i}-id" for i in (1, 2, 3)}
    assert {subnet_of[n] for n in login_names(lab_aws.spec)} == {"lab-public-1-id", "lab-public-2-id"}


# --------------------------------------------------------------------------- IAM


def scheduler_statements(run: StackRun) -> dict[str, dict[str, Any]]:
    policy = run.one("aws:iam/rolePolicy:RolePolicy", f"{run.spec.name}-scheduler")
    assert policy.inputs["role"] == f"{run.spec.name}-controller"  # the controller's role
    return {s["Sid"]: s for s in run.json(policy)["Statement"]}


def test_scheduler_launches_only_from_this_clusters_templates(any_stack: StackRun) -> None:
    launch = scheduler_statements(any_stack)["LaunchFromClusterTemplates"]
    arns = launch["Condition"]["ArnLike"]["ec2:LaunchTemplate"]
    assert sorted(arns) == sorted(f"arn:aws:ec2:mock:123456789012:launch-template/{t.name}-id"
                                  for t in any_stack.of_type(LAUNCH_TEMPLATE))
    # CreateFleet's request context has no ec2:LaunchTemplate key (AWS's Service Authorization
    # Reference): the condition is RunInstances' alone, CreateFleet is scoped by the template resources
    assert launch["Action"] == "ec2:RunInstances"


def test_scheduler_must_tag_what_it_launches_with_the_cluster_and_a_pool(any_stack: StackRun) -> None:
    statements = scheduler_statements(any_stack)
    deny = statements["LaunchOnlyTaggedForThisCluster"]
    assert deny["Effect"] == "Deny"
    assert deny["Condition"] == {"StringNotEquals": {f"aws:RequestTag/{TAG_CLUSTER}": any_stack.spec.name}}
    deny = statements["LaunchOnlyPoolMachines"]
    assert deny["Effect"] == "Deny" and deny["Condition"] == {"Null": {f"aws:RequestTag/{TAG_POOL}": "true"}}


def test_scheduler_terminates_only_this_clusters_pool_machines(any_stack: StackRun) -> None:
    statements = scheduler_statements(any_stack)
    touching = [s for s in statements.values() if s["Effect"] == "Allow" and
                "ec2:TerminateInstances" in s["Action"]]
    assert [s["Sid"] for s in touching] == ["ManageClusterInstances"]
    assert touching[0]["Condition"] == {"StringEquals": {f"ec2:ResourceTag/{TAG_CLUSTER}": any_stack.spec.name},
                                        "Null": {f"ec2:ResourceTag/{TAG_POOL}": "false"}}
    keep = statements["KeepTheClusterTag"]
    assert keep["Effect"] == "Deny" and keep["Condition"]["ForAnyValue:StringEquals"] == {
        "aws:TagKeys": [TAG_CLUSTER, TAG_POOL]}
    # no instance of the stack carries the pool tag: the policy lets the service touch none of them
    assert all(TAG_POOL not in i.inputs["tags"] for i in any_stack.of_type(INSTANCE))
    # what the AWS provider calls on a node's instance (slurmforge/aws/provider.py)
    assert set(touching[0]["Action"]) == {"ec2:TerminateInstances", "ec2:CreateTags"}


def test_scheduler_policy_has_nothing_broader(any_stack: StackRun) -> None:
    for s in scheduler_statements(any_stack).values():
        actions = [s["Action"]] if isinstance(s["Action"], str) else s["Action"]
        assert not any(a == "*" or a.endswith(":*") for a in actions), s["Sid"]
        if s["Resource"] == "*":  # only EC2's Describe calls, which have no resource-level permissions
            assert all(a.startswith("ec2:Describe") for a in actions), s["Sid"]
        # a fleet's other resources are unconditioned: CreateFleet needs the cluster's templates
        # (FleetFromClusterTemplates) and runs its instances through RunInstances' condition
        if s["Effect"] == "Allow" and s["Sid"] not in ("DescribeIsReadOnly", "ReadSpotNotices",
                                                       "FleetFromClusterTemplates", "FleetResources"):
            assert "Condition" in s, s["Sid"]


def test_fleets_only_from_this_clusters_templates(any_stack: StackRun) -> None:
    fleet = scheduler_statements(any_stack)["FleetFromClusterTemplates"]
    region = any_stack.spec.target.region
    assert fleet["Resource"] == [f"arn:aws:ec2:{region}:123456789012:fleet/*"] + [
        f"arn:aws:ec2:mock:123456789012:launch-template/{t.name}-id" for t in any_stack.of_type(LAUNCH_TEMPLATE)]


def test_one_role_per_node_kind_and_each_host_uses_its_own(lab_aws: StackRun) -> None:
    roles = sorted(r.name for r in lab_aws.of_type("aws:iam/role:Role"))
    assert roles == ["lab-ceph", "lab-compute", "lab-controller", "lab-login"]
    profile = {i.name: i.inputs["iamInstanceProfile"] for i in lab_aws.of_type(INSTANCE)}
    assert profile["lab-controller"] == profile["lab-controller-backup"] == "lab-controller"
    assert {profile[n] for n in login_names(lab_aws.spec)} == {"lab-login"}
    assert {profile[f"lab-ceph-{i}"] for i in (1, 2, 3)} == {"lab-ceph"}
    assert {t.inputs["iamInstanceProfile"]["arn"].rsplit(":", 1)[1] for t in lab_aws.of_type(LAUNCH_TEMPLATE)} == {
        "lab-compute"}


def test_node_roles_read_only_their_secrets(any_stack: StackRun) -> None:
    name = any_stack.spec.name
    arns = any_stack.outputs["secret_arns"]
    readable = {p.name: any_stack.json(p)["Statement"][0]["Resource"]
                for p in any_stack.of_type("aws:iam/rolePolicy:RolePolicy") if not p.name.endswith(
                    ("-scheduler", "-builder-archive"))}
    assert readable == {f"{name}-controller": [arns["munge_key"], arns["db_password"]],
                        f"{name}-login": [arns["munge_key"]], f"{name}-compute": [arns["munge_key"]]}


# --------------------------------------------------------------------------- secrets


def test_secrets_are_exported_only_as_secret_outputs(any_stack: StackRun) -> None:
    assert {k for k, secret in any_stack.secret.items() if secret} == {"munge_key", "db_password"}
    assert any_stack.outputs["munge_key"] == MUNGE_B64 and any_stack.outputs["db_password"] == DB_PASSWORD
    public = json.dumps({k: v for k, v in any_stack.outputs.items() if not any_stack.secret[k]})
    assert MUNGE_B64 not in public and DB_PASSWORD not in public and JWT_B64 not in public


def test_secrets_are_generated_and_stored_in_secrets_manager(any_stack: StackRun) -> None:
    name = any_stack.spec.name
    keys = {k.name: k.inputs["length"] for k in any_stack.of_type("random:index/randomBytes:RandomBytes")}
    assert keys == {f"{name}-munge-key": 1024, f"{name}-jwt-key": 32}
    versions = {v.name: v for v in any_stack.of_type("aws:secretsmanager/secretVersion:SecretVersion")}
    assert versions[f"{name}-munge-key"].inputs["secretString"] == MUNGE_B64
    assert versions[f"{name}-db-password"].inputs["secretString"] == DB_PASSWORD
    assert versions[f"{name}-jwt-key"].inputs["secretString"] == JWT_B64
    # the rollout copies each of the cluster's secrets from the ARN the stack exports
    assert set(any_stack.outputs["secret_arns"]) == {s.stack_key for s in CLUSTER_SECRETS}
    assert all("secretString" in v.secret_inputs for v in versions.values())


def test_no_secret_value_in_any_resource_input_but_its_secret(any_stack: StackRun) -> None:
    holders = {"aws:secretsmanager/secretVersion:SecretVersion", "aws:rds/instance:Instance"}
    for r in any_stack.resources:
        if r.typ not in holders:
            text = json.dumps(r.inputs, default=repr)
            assert MUNGE_B64 not in text and DB_PASSWORD not in text and JWT_B64 not in text, r.name
    for rds in any_stack.of_type("aws:rds/instance:Instance"):
        assert "password" in rds.secret_inputs


# --------------------------------------------------------------------------- user data


def test_pool_user_data_is_the_join_program_for_the_stacks_outputs(any_stack: StackRun) -> None:
    """Every pool's user data is the one join program, rendered for what the stack made:
    its controllers' addresses, its munge key's secret, its EFS."""
    spec = any_stack.spec
    source = POOLS_AWS.name if spec.name == "mlpools" else LAB_AWS.name
    expected = render_join(spec, pool_join_settings(any_stack), source)
    for pool in spec.pools:
        assert user_data_program(launch_template_user_data(any_stack, pool.name)) == expected, pool.name
    assert "ansible" not in expected.lower() and "apt-get" not in expected


def test_pool_user_data_mounts_the_nas_with_the_one_set_of_nfs_options(pools_aws: StackRun) -> None:
    program = user_data_program(launch_template_user_data(pools_aws, "gpu"))
    assert pool_join_settings(pools_aws).nas_source == f"{pools_aws.outputs['efs']['dns_name']}:"
    assert f"{pools_aws.outputs['efs']['dns_name']}:" in program and NFS_OPTIONS in program


def test_pool_user_data_knows_both_controllers(lab_aws: StackRun) -> None:
    program = user_data_program(launch_template_user_data(lab_aws, "cpu"))
    addresses = {h["name"]: h["private_ip"] for h in lab_aws.outputs["hosts"]}
    controllers = (("lab-controller", addresses["lab-controller"]),
                   ("lab-controller-backup", addresses["lab-controller-backup"]))
    assert pool_join_settings(lab_aws).controllers == controllers  # the primary first
    assert all(name in program and address in program for name, address in controllers)
