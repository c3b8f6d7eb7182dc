"""What AWS authorizes for an EC2 API call: the actions (a launch also authorizes the tags
it creates, an instant fleet the instances it runs), the resources of each, and the request
context. The evaluation itself is authorization.py's, with the condition keys the Service
Authorization Reference lists for each action and resource type.

Where AWS documents it:
- RunInstances authorizes every resource it uses or makes (instance, image, subnet, security
  groups, network interface, volumes, key pair, launch template, placement group), each
  with its own condition keys; `ec2:LaunchTemplate` is among them for a launch from a
  template (docs.aws.amazon.com/AWSEC2/latest/UserGuide/ExamplePolicies_EC2.html, "Launch
  instances (RunInstances)"; the reference's RunInstances rows).
- CreateFleet authorizes its own resource types (the reference's CreateFleet rows: fleet,
  instance, image, launch template, placement group, subnet, volume - with no
  `ec2:LaunchTemplate` key on any), and an instant fleet launches through RunInstances with
  the caller's permissions (ec2-fleet-prerequisites.html, "Permissions for EC2 Fleet users":
  the caller needs ec2:RunInstances too; the service-linked role serves maintain/request fleets).
- Tags given at creation need ec2:CreateTags, authorized with `ec2:CreateAction`
  (supported-iam-actions-tagging.html).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tests.harness.rehearsal.authorization import Target

Call = tuple[str, list[Target]]


def flat(querystring: Mapping[str, Any]) -> dict[str, str]:
    return {k: str(v[0] if isinstance(v, list) else v) for k, v in querystring.items()}


def _indexed(params: Mapping[str, str], prefix: str) -> list[dict[str, str]]:
    """`Prefix.N.Rest` params as one dict of Rest -> value per N, in order."""
    found: dict[int, dict[str, str]] = {}
    pattern = re.compile(rf"^{re.escape(prefix)}\.(\d+)(?:\.(.+))?$")
    for key, value in params.items():
        m = pattern.match(key)
        if m:
            found.setdefault(int(m.group(1)), {})[m.group(2) or ""] = value
    return [found[i] for i in sorted(found)]


def _request_tags(params: Mapping[str, str], resource_type: str) -> dict[str, str]:
    tags: dict[str, str] = {}
    for spec in _indexed(params, "TagSpecification"):
        if spec.get("ResourceType") == resource_type:
            tags |= {t["Key"]: t.get("Value", "") for t in _indexed(spec, "Tag") if "Key" in t}
    return tags


def _template_tags(data: Mapping[str, Any], resource_type: str) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for spec in data.get("TagSpecifications", []) or []
            if spec.get("ResourceType") == resource_type for t in spec.get("Tags", [])}


def _tag_context(prefix: str, tags: Mapping[str, str]) -> dict[str, list[str]]:
    return {f"{prefix}/{k}": [v] for k, v in tags.items()}


class Ec2Account:
    """Arns and facts of one account's EC2 resources in moto, for the request context."""

    def __init__(self, account: str, region: str) -> None:
        from moto.ec2.models import ec2_backends

        self.account, self.region = account, region
        self.backend = ec2_backends[account][region]
        self.base = f"arn:aws:ec2:{region}:{account}"

    def arn(self, kind: str, ident: str) -> str:
        return f"{self.base}:{kind}/{ident}"

    def tags(self, resource_id: str) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.backend.tags.get(resource_id, {}).items()}

    def template(self, spec: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
        if spec.get("LaunchTemplateId"):
            template = self.backend.get_launch_template(spec["LaunchTemplateId"])
        else:
            template = self.backend.get_launch_template_by_name(spec["LaunchTemplateName"])
        version = spec.get("Version", "$Default")
        chosen = (template.latest_version() if version == "$Latest" else template.default_version()
                  if version == "$Default" else template.get_version(int(version)))
        return str(template.id), dict(chosen.data)

    def subnet_vpc(self, subnet_id: str) -> tuple[str, str]:
        subnet = self.backend.get_subnet(subnet_id)
        return str(subnet.vpc_id), str(subnet.availability_zone)

    def group_vpc(self, group_id: str) -> str:
        group = self.backend.get_security_group_from_id(group_id)
        return str(group.vpc_id) if group is not None else ""

    def image_owner(self, image_id: str) -> str:
        try:
            return str(self.backend.describe_images(ami_ids=[image_id])[0].owner_id)
        except Exception:
            return ""


def launch_targets(acct: Ec2Account, action: str, template_id: str, data: Mapping[str, Any], subnets: list[str],
                   instance_type: str, request_tags: Mapping[str, str]) -> list[Target]:
    """Every resource a launch of `action` from this template into these subnets is
    authorized on, each with every context key the request could carry (authorization.py
    keeps those the reference lists for the action and type)."""
    lt_arn = acct.arn("launch-template", template_id)
    tags = {**_template_tags(data, "instance"), **request_tags}
    common: dict[str, list[str]] = {"ec2:Region": [acct.region], "ec2:LaunchTemplate": [lt_arn],
                                    "ec2:IsLaunchTemplateResource": ["true"]}
    instance_ctx = {**common, **_tag_context("aws:RequestTag", tags), "aws:TagKeys": list(tags),
                    "ec2:InstanceType": [instance_type or str(data.get("InstanceType", ""))]}
    targets = [Target("instance", acct.arn("instance", "*"), instance_ctx),
               Target("launch-template", lt_arn, {**common, **_tag_context("ec2:ResourceTag", acct.tags(template_id)),
                                                  **_tag_context("aws:ResourceTag", acct.tags(template_id))})]
    if image := str(data.get("ImageId", "")):
        targets.append(Target("image", f"arn:aws:ec2:{acct.region}::image/{image}",
                              {**common, "ec2:ImageID": [image], "ec2:Owner": [acct.image_owner(image)]}))
    volume_tags = _template_tags(data, "volume")
    targets.append(Target("volume", acct.arn("volume", "*"), {**common, **_tag_context("aws:RequestTag", volume_tags),
                                                              "aws:TagKeys": list(volume_tags)}))
    for subnet in subnets:
        vpc, zone = acct.subnet_vpc(subnet)
        ctx = {**common, "ec2:SubnetID": [subnet], "ec2:Vpc": [acct.arn("vpc", vpc)],
               "ec2:AvailabilityZone": [zone], **_tag_context("ec2:ResourceTag", acct.tags(subnet)),
               **_tag_context("aws:ResourceTag", acct.tags(subnet))}
        targets.append(Target("subnet", acct.arn("subnet", subnet), ctx))
        targets.append(Target("network-interface", acct.arn("network-interface", "*"), {
            **common, "ec2:Subnet": [acct.arn("subnet", subnet)], "ec2:Vpc": [acct.arn("vpc", vpc)]}))
    groups = list(data.get("SecurityGroupIds", []) or []) + [
        g for ni in data.get("NetworkInterfaces", []) or [] for g in ni.get("Groups", []) or []]
    for group in groups:
        targets.append(Target("security-group", acct.arn("security-group", group), {
            **common, "ec2:SecurityGroupID": [group], "ec2:Vpc": [acct.arn("vpc", acct.group_vpc(group))]}))
    if key := data.get("KeyName"):
        targets.append(Target("key-pair", acct.arn("key-pair", str(key)), {**common, "ec2:KeyPairName": [str(key)]}))
    if group_name := (data.get("Placement") or {}).get("GroupName"):
        targets.append(Target("placement-group", acct.arn("placement-group", str(group_name)), common))
    if action == "ec2:CreateFleet":
        targets.append(Target("fleet", acct.arn("fleet", "*"), {"ec2:Region": [acct.region]}))
    return targets


def _tagging(acct: Ec2Account, create_action: str, tags: Mapping[str, str], kinds: list[str]) -> Call:
    ctx = {"ec2:Region": [acct.region], "ec2:CreateAction": [create_action], "aws:TagKeys": list(tags),
           **_tag_context("aws:RequestTag", tags)}
    return "ec2:CreateTags", [Target(kind, acct.arn(kind, "*"), ctx) for kind in kinds]


def calls(acct: Ec2Account, action: str, querystring: Mapping[str, Any]) -> list[Call]:
    """What AWS authorizes for one EC2 API call, action by action."""
    p = flat(querystring)
    if action == "CreateFleet":
        out: list[Call] = []
        request_tags = _request_tags(p, "instance")
        for config in _indexed(p, "LaunchTemplateConfigs"):
            spec = {k.split(".", 1)[1]: v for k, v in config.items() if k.startswith("LaunchTemplateSpecification.")}
            template_id, data = acct.template(spec)
            overrides = _indexed({k: v for k, v in config.items()}, "Overrides")
            subnets = sorted({o["SubnetId"] for o in overrides if o.get("SubnetId")}) or (
                [str(data["NetworkInterfaces"][0]["SubnetId"])] if data.get("NetworkInterfaces") else [])
            itype = next((o["InstanceType"] for o in overrides if o.get("InstanceType")), "")
            out.append(("ec2:CreateFleet", launch_targets(acct, "ec2:CreateFleet", template_id, data, subnets, itype,
                                                          request_tags)))
            out.append(("ec2:RunInstances", launch_targets(acct, "ec2:RunInstances", template_id, data, subnets, itype,
                                                           request_tags)))
        if request_tags:
            out.append(_tagging(acct, "CreateFleet", request_tags, ["instance"]))
        return out
    if action == "RunInstances" and any(k.startswith("LaunchTemplate.") for k in p):
        spec = {k.split(".", 1)[1]: v for k, v in p.items() if k.startswith("LaunchTemplate.")}
        template_id, data = acct.template(spec)
        subnet = p.get("SubnetId") or (str(data["NetworkInterfaces"][0].get("SubnetId", ""))
                                       if data.get("NetworkInterfaces") else "")
        request_tags = _request_tags(p, "instance")
        out = [("ec2:RunInstances", launch_targets(acct, "ec2:RunInstances", template_id, data,
                                                   [subnet] if subnet else [], p.get("InstanceType", ""),
                                                   request_tags))]
        if request_tags:
            out.append(_tagging(acct, "RunInstances", request_tags, ["instance"]))
        return out
    if action in ("TerminateInstances", "CreateTags"):
        ids = [v for k, v in sorted(p.items()) if re.match(r"^(InstanceId|ResourceId)\.\d+$", k)]
        new = {t["Key"]: t.get("Value", "") for t in _indexed(p, "Tag") if "Key" in t}
        targets = []
        for ident in ids:
            kind = "instance" if ident.startswith("i-") else "volume" if ident.startswith("vol-") else "fleet"
            have = acct.tags(ident)
            ctx = {"ec2:Region": [acct.region], **_tag_context("ec2:ResourceTag", have),
                   **_tag_context("aws:ResourceTag", have)}
            if action == "CreateTags":
                ctx |= {"aws:TagKeys": list(new), **_tag_context("aws:RequestTag", new)}
            targets.append(Target(kind, acct.arn(kind, ident), ctx))
        return [(f"ec2:{action}", targets)]
    return [(f"ec2:{action}", [Target("", "*", {"ec2:Region": [acct.region]})])]
