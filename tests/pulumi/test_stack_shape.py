"""What the stack builds for a spec: the resource count, pools (launch templates, spot
options, placement groups, EFA, published policies), the database, the golden image,
storage, spot notices and the outputs."""

from __future__ import annotations

import json

import pytest

from slurmforge.errors import SpecError
from slurmforge.hosts import TAG_CLUSTER, TAG_POOL, login_subnets
from slurmforge.image_variant import ImageVariant, pool_image_variant
from tests.pulumi.conftest import DYNAMIC, GOLDEN_AMI, GPU_AMI, LAB_AWS, StackRun, run_stack, variant

pytestmark = [pytest.mark.pulumi, pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")]

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
# a no-op `pulumi up` refreshes every resource: keep a 4-pool cluster under this
RESOURCE_BUDGET = 150


# --------------------------------------------------------------------------- size and shape


def test_a_four_pool_cluster_stays_under_budget(lab_aws: StackRun) -> None:
    assert len(lab_aws.spec.pools) == 4
    assert len(lab_aws.resources) < RESOURCE_BUDGET


def test_the_largest_four_pool_cluster_stays_under_budget() -> None:
    # lab-aws with everything on: the image build too (RDS, backup controller, 2 logins, 6 OSDs, EFA)
    run = run_stack(LAB_AWS, "unpinned")
    assert len(run.spec.pools) == 4 and run.of_type(DYNAMIC)
    assert len(run.resources) < RESOURCE_BUDGET


def test_resource_count_grows_by_one_per_pool(pools_aws: StackRun) -> None:
    pools = [r for r in pools_aws.resources if r.name.startswith("mlpools-gpu-spot")]
    assert sorted(r.typ for r in pools) == [LAUNCH_TEMPLATE, "slurmforge:stacks:Pool"]


def test_components_use_slurmforge_type_tokens(any_stack: StackRun) -> None:
    components = {r.typ for r in any_stack.resources if not r.custom}
    assert {"slurmforge:stacks:Network", "slurmforge:stacks:Secrets", "slurmforge:stacks:Iam",
            "slurmforge:stacks:Image", "slurmforge:stacks:NasStorage", "slurmforge:stacks:CephStorage",
            "slurmforge:stacks:HeadNodes", "slurmforge:stacks:Pool", "slurmforge:stacks:SpotEvents",
            "slurmforge:stacks:SchedulerAccess"} <= components
    assert all(t.startswith("slurmforge:stacks:") for t in components)


def test_resource_names_start_with_the_cluster_name(any_stack: StackRun) -> None:
    name = any_stack.spec.name
    assert all(r.name == name or r.name.startswith(f"{name}-") for r in any_stack.resources)


def test_provider_uses_the_spec_region_and_tags_everything_with_the_cluster(lab_aws: StackRun) -> None:
    (provider,) = lab_aws.of_type("pulumi:providers:aws")
    assert provider.inputs["region"] == "eu-west-1"
    assert json.loads(provider.inputs["defaultTags"])["tags"] == {"team": "ml-platform", TAG_CLUSTER: "lab"}


# --------------------------------------------------------------------------- pools


def templates(run: StackRun) -> dict[str, dict[str, object]]:
    prefix = f"{run.spec.name}-"
    return {t.name.removeprefix(prefix).removesuffix("-template"): t.inputs for t in run.of_type(LAUNCH_TEMPLATE)}


def test_spot_options_only_on_spot_pools(any_stack: StackRun) -> None:
    by_pool = templates(any_stack)
    for pool in any_stack.spec.pools:
        options = by_pool[pool.name].get("instanceMarketOptions")
        if pool.market.value == "spot":
            assert options == {"marketType": "spot", "spotOptions": {
                "spotInstanceType": "one-time", "instanceInterruptionBehavior": "terminate"}}
        else:
            assert options is None, pool.name


def test_placement_group_and_efa_for_the_pool_that_asks(lab_aws: StackRun) -> None:
    (group,) = lab_aws.of_type("aws:ec2/placementGroup:PlacementGroup")
    assert (group.name, group.inputs["strategy"]) == ("lab-gpu-efa-placement", "cluster")
    by_pool = templates(lab_aws)
    assert by_pool["gpu-efa"]["placement"] == {"groupName": "lab-gpu-efa-placement"}
    assert [n.get("interfaceType") for n in by_pool["gpu-efa"]["networkInterfaces"]] == ["efa"]
    for pool in ("cpu", "gpu", "gpu-spot"):
        assert "placement" not in by_pool[pool]
        assert [n.get("interfaceType") for n in by_pool[pool]["networkInterfaces"]] == [None]


def test_no_placement_group_when_no_pool_asks(pools_aws: StackRun) -> None:
    assert pools_aws.of_type("aws:ec2/placementGroup:PlacementGroup") == []


def test_templates_boot_the_golden_image_with_the_pool_type_and_tags(any_stack: StackRun) -> None:
    by_pool = templates(any_stack)
    for pool in any_stack.spec.pools:
        t = by_pool[pool.name]
        if pool_image_variant(pool) is ImageVariant.BASE or any_stack.spec.images.ami:
            assert t["imageId"] == any_stack.outputs["ami_id"]
        assert t["instanceType"] == pool.instance_types[0]
        assert {s["resourceType"]: s["tags"] for s in t["tagSpecifications"]}["instance"] == {
            TAG_CLUSTER: any_stack.spec.name, TAG_POOL: pool.name}


def test_no_pool_settings_outside_the_inventory(any_stack: StackRun) -> None:
    """The scheduler service reads its pools from the inventory (the spec, and the provider
    settings slurmforge.aws.inventory writes from the stack outputs): a second copy of them
    in Parameter Store would be read by nothing and drift from the one that is."""
    assert any_stack.of_type("aws:ssm/parameter:Parameter") == []
    assert "pool_parameters" not in any_stack.outputs


def test_no_autoscaling_group(any_stack: StackRun) -> None:
    assert not [r for r in any_stack.resources if r.typ.startswith("aws:autoscaling/")]


# --------------------------------------------------------------------------- database


def test_rds_only_when_the_database_is_external(pools_aws: StackRun, lab_aws: StackRun) -> None:
    assert pools_aws.spec.accounting.database.kind == "local"
    assert pools_aws.of_type("aws:rds/instance:Instance") == []
    assert pools_aws.outputs["database"] == {"kind": "local", "host": None, "endpoint": None}
    (rds,) = lab_aws.of_type("aws:rds/instance:Instance")
    assert (rds.inputs["engine"], rds.inputs["publiclyAccessible"]) == ("mariadb", False)
    assert (rds.inputs["dbName"], rds.inputs["username"]) == ("slurm_acct_db", "slurm")
    assert lab_aws.outputs["database"]["endpoint"] == "lab-db.mock.rds.amazonaws.com"


def test_rds_runs_with_what_slurmdbd_needs(lab_aws: StackRun) -> None:
    (group,) = lab_aws.of_type("aws:rds/parameterGroup:ParameterGroup")
    assert group.inputs["family"] == "mariadb10.11"
    assert {p["name"]: p["value"] for p in group.inputs["parameters"]} == {"innodb_lock_wait_timeout": "900"}
    (rds,) = lab_aws.of_type("aws:rds/instance:Instance")
    assert rds.inputs["parameterGroupName"] == group.name  # the group the stack made


def test_rds_reachable_from_the_controller_only(lab_aws: StackRun) -> None:
    db = lab_aws.one("aws:ec2/securityGroup:SecurityGroup", "lab-db")
    assert [(r["fromPort"], r["securityGroups"]) for r in db.inputs["ingress"]] == [(3306, ["lab-controller-id"])]
    (rds,) = lab_aws.of_type("aws:rds/instance:Instance")
    assert rds.inputs["vpcSecurityGroupIds"] == ["lab-db-id"]


def test_the_spec_database_host_resolves_to_rds(lab_aws: StackRun) -> None:
    (zone,) = lab_aws.of_type("aws:route53/zone:Zone")
    (record,) = lab_aws.of_type("aws:route53/record:Record")
    assert zone.inputs["name"] == "lab.internal" and zone.inputs["vpcs"] == [{"vpcId": "lab-vpc-id"}]
    assert (record.inputs["name"], record.inputs["type"], record.inputs["records"]) == (
        "acct.lab.internal", "CNAME", ["lab-db.mock.rds.amazonaws.com"])


# --------------------------------------------------------------------------- golden image


def test_gpu_pools_boot_the_gpu_image_variant(pools_aws: StackRun) -> None:
    """Pools with NVIDIA GPUs boot the image with the NVIDIA driver; the rest, and the head
    nodes, the base image: one bake per variant."""
    by_pool = templates(pools_aws)
    assert {name: t["imageId"] for name, t in by_pool.items()} == {
        "cpu": GOLDEN_AMI, "gpu": GPU_AMI, "gpu-spot": GPU_AMI}
    assert {i.inputs["ami"] for i in pools_aws.of_type("aws:ec2/instance:Instance")} == {GOLDEN_AMI}
    assert sorted(r.inputs["variant"] for r in pools_aws.of_type(DYNAMIC)) == ["base", "gpu"]


def test_pinned_ami_is_what_every_node_boots(lab_aws: StackRun) -> None:
    pinned = lab_aws.spec.images.ami
    assert lab_aws.outputs["ami_id"] == pinned
    assert {i.inputs["ami"] for i in lab_aws.of_type("aws:ec2/instance:Instance")} == {pinned}
    assert {t.inputs["imageId"] for t in lab_aws.of_type(LAUNCH_TEMPLATE)} == {pinned}


# --------------------------------------------------------------------------- storage, head, spot


def test_efs_mount_target_in_every_private_subnet(any_stack: StackRun) -> None:
    targets = any_stack.of_type("aws:efs/mountTarget:MountTarget")
    name = any_stack.spec.name
    assert sorted(t.inputs["subnetId"] for t in targets) == sorted(
        f"{name}-private-{i + 1}-id" for i in range(len(any_stack.spec.network.private_subnets)))
    assert {tuple(t.inputs["securityGroups"]) for t in targets} == {(f"{name}-efs-id",)}


def test_every_head_node_mounts_efs_in_its_own_zone(any_stack: StackRun) -> None:
    """A client resolves the EFS name only in a zone with a mount target: each controller and
    login node sits in one (login nodes in the public subnets slurmforge.render.login_subnets
    names, in turn)."""
    zone_of = {f"{s.name}-id": s.inputs["availabilityZone"] for s in any_stack.of_type("aws:ec2/subnet:Subnet")}
    mounted = {zone_of[t.inputs["subnetId"]] for t in any_stack.of_type("aws:efs/mountTarget:MountTarget")}
    heads = {i.name: zone_of[i.inputs["subnetId"]] for i in any_stack.of_type("aws:ec2/instance:Instance")
             if "-ceph-" not in i.name}
    public = any_stack.spec.network.public_subnets
    logins = {name: public[index].zone for name, index in login_subnets(any_stack.spec).items()}
    assert logins and logins.items() <= heads.items()
    assert set(heads.values()) <= mounted, heads


def test_a_login_zone_without_a_mount_target_is_refused_before_the_stack() -> None:
    """lab-aws with its second public subnet (the second login node's) in the one zone
    without a private subnet: validation refuses it, so the stack never builds it."""
    with pytest.raises(SpecError) as info:
        variant(LAB_AWS, "login-without-efs")
    assert [p.path for p in info.value.problems] == ["network.public_subnets[1].zone"]
    assert "lab-login-2 but no private subnet: EFS has no mount target in eu-west-1d" in info.value.problems[0].line()


def test_ceph_hosts_spread_over_zones_with_their_osds(lab_aws: StackRun) -> None:
    hosts = lab_aws.outputs["ceph_hosts"]
    assert [(h["name"], h["zone"], len(h["osd_volumes"])) for h in hosts] == [
        ("lab-ceph-1", "eu-west-1a", 2), ("lab-ceph-2", "eu-west-1b", 2), ("lab-ceph-3", "eu-west-1c", 2)]
    attachments = lab_aws.of_type("aws:ec2/volumeAttachment:VolumeAttachment")
    assert sorted((a.inputs["instanceId"], a.inputs["deviceName"]) for a in attachments)[:2] == [
        ("lab-ceph-1-id", "/dev/xvdba"), ("lab-ceph-1-id", "/dev/xvdbb")]
    assert {i.inputs["instanceType"] for i in lab_aws.of_type("aws:ec2/instance:Instance")
            if "-ceph-" in i.name} == {"m6i.2xlarge"}


def test_head_nodes_follow_the_spec(lab_aws: StackRun) -> None:
    by_name = {i.name: i.inputs for i in lab_aws.of_type("aws:ec2/instance:Instance")}
    assert (by_name["lab-controller"]["instanceType"], by_name["lab-controller"]["rootBlockDevice"]["volumeSize"]) == (
        "m6i.2xlarge", 200)
    assert (by_name["lab-login-1"]["instanceType"], by_name["lab-login-2"]["rootBlockDevice"]["volumeSize"]) == (
        "t3.large", 50)
    assert {by_name[n].get("keyName") for n in by_name} == {"lab-admin"}


def test_spot_notices_reach_the_queue(any_stack: StackRun) -> None:
    rules = {r.name: json.loads(r.inputs["eventPattern"]) for r in any_stack.of_type(
        "aws:cloudwatch/eventRule:EventRule")}
    name = any_stack.spec.name
    assert rules == {
        f"{name}-spot-interruption": {"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]},
        f"{name}-spot-rebalance": {"source": ["aws.ec2"], "detail-type": ["EC2 Instance Rebalance Recommendation"]}}
    queue_arn = f"arn:aws:mock:aws:sqs/queue:Queue:123456789012:{name}-spot-notices"
    targets = any_stack.of_type("aws:cloudwatch/eventTarget:EventTarget")
    assert sorted((t.inputs["rule"], t.inputs["arn"]) for t in targets) == sorted(
        (r, queue_arn) for r in rules)
    (policy,) = any_stack.of_type("aws:sqs/queuePolicy:QueuePolicy")
    statement = any_stack.json(policy)["Statement"][0]
    assert statement["Principal"] == {"Service": "events.amazonaws.com"}
    assert len(statement["Condition"]["ArnEquals"]["aws:SourceArn"]) == 2
    (queue,) = any_stack.of_type("aws:sqs/queue:Queue")
    assert queue.inputs["sqsManagedSseEnabled"] is True


def test_outputs_hold_what_the_inventory_needs(pools_aws: StackRun) -> None:
    out = pools_aws.outputs
    assert (out["cluster"], out["region"], out["controller"], out["ssh_user"]) == (
        "mlpools", "us-east-1", "mlpools-controller", "admin")
    assert [(h["name"], h["role"], h["public_ip"] is not None) for h in out["hosts"]] == [
        ("mlpools-controller", "controller", False), ("mlpools-login", "login", True)]
    assert sorted(out["launch_templates"]) == ["cpu", "gpu", "gpu-spot"]
    assert out["spot_queue_url"].endswith("/mlpools-spot-notices")
    assert out["efs"]["dns_name"] == "mlpools-efs-id.efs.mock.amazonaws.com"
