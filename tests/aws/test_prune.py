"""prune(): the newest N validated AMIs stay, and so does anything still in use."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from moto.ec2.models import ec2_backends

from nodeforge.aws import tags
from nodeforge.aws.prune import Policy, PruneResult, prune
from tests.aws.conftest import ACCOUNT, IMAGE, REGION, World


def _amis(world: World, *statuses: str) -> list[tuple[str, str]]:
    """AMIs created a day apart, oldest first, with the given statuses; (ami, snapshot) each."""
    made = []
    for day, status in enumerate(statuses, start=1):
        ami, snapshot = world.make_ami(f"{IMAGE}-202611{day:02d}", status=status)
        ec2_backends[ACCOUNT][REGION].amis[ami].creation_date = datetime(2026, 11, day)
        made.append((ami, snapshot))
    return made


# _amis creates AMIs on the first days of November: an AMI built then is not yet a week old
NOW = datetime(2026, 11, 10, tzinfo=UTC)


def _prune(
    world: World,
    *,
    keep: int,
    dry_run: bool = False,
    now: datetime = NOW,
    deprecated_for: timedelta = timedelta(0),
    **settings: Any,
) -> PruneResult:
    policy = Policy(keep=keep, unjudged_after=timedelta(days=7), deprecated_for=deprecated_for)
    return prune(world.clients(**settings), image=IMAGE, policy=policy, now=now, dry_run=dry_run)


def _exists(world: World, ami: str) -> bool:
    return bool(world.ec2.describe_images(Owners=["self"], ImageIds=[ami])["Images"])


def _snapshot_exists(world: World, snapshot: str) -> bool:
    found = world.ec2.describe_snapshots(OwnerIds=["self"])["Snapshots"]
    return snapshot in {s["SnapshotId"] for s in found}


def _decisions(result: PruneResult) -> dict[str, tuple[str, list[str]]]:
    return {d.ami: (d.action, d.reasons) for d in result.decisions}


def test_keeps_newest_deletes_rest_with_snapshots(world: World) -> None:
    world.ec2.deregister_image(ImageId=world.ami_id)  # the fixture's own AMI is not part of this
    (v1, s1), (v2, s2), (failed, s3), (v3, s4), (v4, s5), (built, s6) = _amis(
        world, "validated", "validated", "failed", "validated", "validated", "built"
    )
    result = _prune(world, keep=2, dry_run=False)
    decisions = _decisions(result)
    assert decisions[v4] == ("keep", ["one of the newest 2 validated"])
    assert decisions[v3][0] == "keep"
    assert decisions[built][0] == "keep"
    assert "not judged yet" in decisions[built][1][0]
    assert decisions[v1] == ("delete", ["validated, older than the newest 2"])
    assert decisions[failed] == ("delete", ["failed validation"])
    for ami, snapshot in ((v1, s1), (v2, s2), (failed, s3)):
        assert not _exists(world, ami)
        assert not _snapshot_exists(world, snapshot)
    for ami, snapshot in ((v3, s4), (v4, s5), (built, s6)):
        assert _exists(world, ami)
        assert _snapshot_exists(world, snapshot)


def test_never_deletes_what_is_in_use(world: World) -> None:
    (by_ssm, _), (by_template, _), (by_instance, snapshot), (by_default, _), (newest, _) = _amis(
        world, "validated", "validated", "failed", "validated", "validated"
    )
    world.session.client("ssm").put_parameter(
        Name="/nodeforge/p5-ubuntu24.04/p5.48xlarge/ami-id",
        Value=by_ssm,
        Type="String",
        DataType="aws:ec2:image",
    )
    world.ec2.create_launch_template(
        LaunchTemplateName="training", LaunchTemplateData={"ImageId": by_default}
    )
    world.ec2.create_launch_template_version(
        LaunchTemplateName="training", LaunchTemplateData={"ImageId": by_template}
    )
    world.ec2.run_instances(ImageId=by_instance, InstanceType="t3.micro", MinCount=1, MaxCount=1)

    result = _prune(world, keep=1, dry_run=False)
    decisions = _decisions(result)
    assert decisions[newest] == ("keep", ["one of the newest 1 validated"])
    parameter = "/nodeforge/p5-ubuntu24.04/p5.48xlarge/ami-id"
    assert decisions[by_ssm] == (
        "keep",
        [f"SSM parameter arn:aws:ssm:{REGION}:{ACCOUNT}:parameter{parameter}"],
    )
    [template] = world.ec2.describe_launch_templates()["LaunchTemplates"]
    in_template = f"launch template arn:aws:ec2:{REGION}:{ACCOUNT}:launch-template/"
    assert decisions[by_template] == ("keep", [in_template + template["LaunchTemplateId"]])
    assert decisions[by_default] == decisions[by_template]
    action, reasons = decisions[by_instance]
    assert action == "keep"
    assert reasons[0].startswith(f"instance arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-")
    assert _snapshot_exists(world, snapshot)
    # the fixture's AMI (status built) is the only other one, and it stays too
    assert [d.action for d in result.decisions] == ["keep"] * 6
    # the references are EC2's answer, for the instances that may still run
    [asked] = world.fake.operations("DescribeImageReferences")
    [instances] = [t for t in asked["ResourceTypes"] if t["ResourceType"] == "ec2:Instance"]
    assert "terminated" not in instances["ResourceTypeOptions"][0]["OptionValues"]


def test_launch_template_through_an_ssm_reference(world: World) -> None:
    # a launch template resolves only parameters of data type aws:ec2:image, which EC2's
    # reference check finds: the parameter keeps the AMI for the template
    ((old, _), (_newest, _)) = _amis(world, "validated", "validated")
    world.session.client("ssm").put_parameter(
        Name="/team/ami", Value=old, Type="String", DataType="aws:ec2:image"
    )
    world.ec2.create_launch_template(
        LaunchTemplateName="inference", LaunchTemplateData={"ImageId": "resolve:ssm:/team/ami"}
    )
    result = _prune(world, keep=1, dry_run=False)
    assert _decisions(result)[old] == (
        "keep",
        [f"SSM parameter arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/team/ami"],
    )


def test_references_are_asked_ten_amis_at_a_time(world: World) -> None:
    world.ec2.deregister_image(ImageId=world.ami_id)
    made = _amis(world, *["validated"] * 12)
    oldest, _ = made[0]
    world.ec2.run_instances(ImageId=oldest, InstanceType="t3.micro", MinCount=1, MaxCount=1)
    world.fake.calls.clear()
    decisions = _decisions(_prune(world, keep=1, dry_run=True))
    asked = world.fake.operations("DescribeImageReferences")
    assert sorted(len(call["ImageIds"]) for call in asked) == [2, 10]
    assert decisions[oldest][0] == "keep"
    assert decisions[oldest][1][0].startswith("instance ")
    assert [action for action, _ in decisions.values()].count("delete") == 10


def test_an_ami_never_judged_ages_out(world: World) -> None:
    world.ec2.deregister_image(ImageId=world.ami_id)
    (stale, snapshot), (fresh, _), (validated, _) = _amis(world, "built", "validating", "validated")
    # a week after the first: the second (a day younger) may still be judged by its promote
    decisions = _decisions(_prune(world, keep=1, now=datetime(2026, 11, 8, 1, tzinfo=UTC)))
    assert decisions[stale] == ("delete", ["status built since 2026-11-01: never judged"])
    assert decisions[fresh][0] == "keep"
    assert "not judged yet" in decisions[fresh][1][0]
    assert decisions[validated][0] == "keep"
    assert not _exists(world, stale)
    assert not _snapshot_exists(world, snapshot)


def test_deleted_snapshots_are_those_ec2_reports(world: World) -> None:
    world.ec2.deregister_image(ImageId=world.ami_id)
    (old, snapshot), (_newest, _) = _amis(world, "validated", "validated")
    world.fake.calls.clear()
    [decision] = [d for d in _prune(world, keep=1).decisions if d.ami == old]
    assert decision.snapshots == [snapshot]
    # one call: no AMI left deregistered with its snapshots still billed
    [call] = world.fake.operations("DeregisterImage")
    assert call == {"ImageId": old, "DeleteAssociatedSnapshots": True}
    assert world.fake.operations("DeleteSnapshot") == []


def test_dry_run_changes_nothing_and_says_why(world: World) -> None:
    (old, snapshot), (newest, _) = _amis(world, "validated", "validated")
    world.fake.calls.clear()
    result = _prune(world, keep=1, dry_run=True)
    assert result.dry_run
    decisions = _decisions(result)
    assert decisions[old] == ("delete", ["validated, older than the newest 1"])
    assert decisions[newest] == ("keep", ["one of the newest 1 validated"])
    reported = {entry["ami"]: entry for entry in result.to_json()["amis"]}
    assert reported[old]["snapshots"] == [snapshot]
    assert _exists(world, old)
    assert _snapshot_exists(world, snapshot)
    changed = {
        op for _, op, _ in world.fake.calls if not op.startswith(("Describe", "Get", "List"))
    }
    assert changed == set()


def test_other_images_are_not_touched(world: World) -> None:
    other, _ = world.make_ami("p6-20261101", status="validated", image="p6-ubuntu24.04")
    _amis(world, "validated", "validated")
    result = _prune(world, keep=1, dry_run=False)
    assert other not in _decisions(result)
    assert _exists(world, other)
    assert world.image_tags()[tags.IMAGE] == IMAGE


def test_a_protected_ami_is_unprotected_then_deleted(world: World) -> None:
    world.ec2.deregister_image(ImageId=world.ami_id)
    (old, snapshot), (_newest, _) = _amis(world, "validated", "validated")
    world.fake.protection[old] = "enabled"
    world.fake.calls.clear()
    result = _prune(world, keep=1, dry_run=False)
    [decision] = [d for d in result.decisions if d.ami == old]
    assert (decision.action, decision.unprotect_first) == ("delete", True)
    assert not _exists(world, old)
    assert not _snapshot_exists(world, snapshot)
    calls = [op for _, op, _ in world.fake.calls]
    assert calls.index("DisableImageDeregistrationProtection") < calls.index("DeregisterImage")


def test_protection_with_cooldown_is_disabled_and_the_ami_deleted_by_a_later_prune(
    world: World,
) -> None:
    world.ec2.deregister_image(ImageId=world.ami_id)
    (old, snapshot), (_newest, _) = _amis(world, "validated", "validated")
    world.fake.protection[old] = "enabled-with-cooldown"
    world.fake.calls.clear()

    first = _decisions(_prune(world, keep=1, dry_run=False))
    assert first[old][0] == "unprotect"
    assert "24 h cooldown" in first[old][1][-1]
    assert _exists(world, old) and _snapshot_exists(world, snapshot)
    assert world.fake.operations("DeregisterImage") == []

    # within the cooldown: kept, and said why
    second = _decisions(_prune(world, keep=1, dry_run=False))
    assert second[old][0] == "keep"
    assert "cooling down (disabled-until " in second[old][1][0]
    assert _exists(world, old)

    # after it, EC2 reports the AMI unprotected: the next prune deletes it
    del world.fake.protection[old]
    third = _decisions(_prune(world, keep=1, dry_run=False))
    assert third[old][0] == "delete"
    assert not _exists(world, old)


def test_dry_run_does_not_touch_protection(world: World) -> None:
    world.ec2.deregister_image(ImageId=world.ami_id)
    (old, _), (_newest, _) = _amis(world, "validated", "validated")
    world.fake.protection[old] = "enabled-with-cooldown"
    result = _prune(world, keep=1, dry_run=True)
    assert _decisions(result)[old][0] == "unprotect"
    assert world.fake.protection[old] == "enabled-with-cooldown"
    assert world.fake.operations("DisableImageDeregistrationProtection") == []


def test_an_ami_is_deprecated_first_and_deleted_once_deprecated_long_enough(world: World) -> None:
    world.ec2.deregister_image(ImageId=world.ami_id)
    (old, snapshot), (failed, _), (_newest, _) = _amis(world, "validated", "failed", "validated")
    # promote deprecated the failed AMI when it failed
    world.fake.deprecated[failed] = "2026-11-02T00:02:00Z"
    week = timedelta(days=7)

    first = _decisions(_prune(world, keep=1, deprecated_for=week))
    assert first[old] == (
        "deprecate",
        [
            "validated, older than the newest 1",
            "deprecated now, deleted by a prune from 2026-11-17",
        ],
    )
    assert first[failed][0] == "delete"  # deprecated on 2026-11-02: more than a week ago
    assert world.fake.deprecated[old] == "2026-11-10T00:02:00Z"
    assert _exists(world, old) and _snapshot_exists(world, snapshot)

    later = datetime(2026, 11, 15, tzinfo=UTC)
    second = _decisions(_prune(world, keep=1, deprecated_for=week, now=later))
    assert second[old] == (
        "keep",
        [
            "validated, older than the newest 1",
            "deprecated since 2026-11-10, deleted by a prune from 2026-11-17",
        ],
    )
    assert _exists(world, old)

    third = _decisions(_prune(world, keep=1, deprecated_for=week, now=later + timedelta(days=3)))
    assert third[old][0] == "delete"
    assert not _exists(world, old) and not _snapshot_exists(world, snapshot)


def test_an_end_of_life_in_the_future_is_brought_forward(world: World) -> None:
    # deprecate_after_days scheduled the published AMI's deprecation a year ahead
    world.ec2.deregister_image(ImageId=world.ami_id)
    (old, _), (_newest, _) = _amis(world, "validated", "validated")
    world.fake.deprecated[old] = "2027-11-01T00:00:00Z"
    decisions = _decisions(_prune(world, keep=1, deprecated_for=timedelta(days=7)))
    assert decisions[old][0] == "deprecate"
    assert world.fake.deprecated[old] == "2026-11-10T00:02:00Z"


PARTNER = "111122223333"


def _shared_old_ami(world: World) -> tuple[str, str]:
    """A published (validated, shared) AMI older than the newest one, deprecated long ago:
    (ami, snapshot)."""
    world.ec2.deregister_image(ImageId=world.ami_id)
    (old, snapshot), (_newest, _) = _amis(world, "validated", "validated")
    world.fake.deprecated[old] = "2026-11-01T00:02:00Z"
    return old, snapshot


def _shared_prune(world: World) -> dict[str, tuple[str, list[str]]]:
    return _decisions(
        _prune(world, keep=1, deprecated_for=timedelta(days=7), share_accounts=[PARTNER])
    )


def _report(world: World, ami: str, state: str, created: datetime, **extra: str) -> str:
    report_id = f"amiur-{len(world.fake.usage_reports) + 100:017x}"
    world.fake.usage_reports.append(
        {"ReportId": report_id, "ImageId": ami, "State": state, "CreationTime": created, **extra}
    )
    return report_id


def test_a_shared_ami_waits_for_a_usage_report(world: World) -> None:
    old, _ = _shared_old_ami(world)
    decisions = _shared_prune(world)
    assert decisions[old][0] == "keep"
    assert "asked EC2 for a usage report" in decisions[old][1][0]
    [asked] = world.fake.operations("CreateImageUsageReport")
    assert asked["ImageId"] == old
    assert {t["ResourceType"] for t in asked["ResourceTypes"]} == {
        "ec2:Instance",
        "ec2:LaunchTemplate",
    }
    assert _exists(world, old)

    # while EC2 makes it: kept, and no second report asked for
    world.fake.usage_reports[0]["CreationTime"] = NOW - timedelta(hours=1)
    decisions = _shared_prune(world)
    assert decisions[old] == (
        "keep",
        [f"shared: usage report {world.fake.usage_reports[0]['ReportId']} is pending"],
    )
    assert len(world.fake.operations("CreateImageUsageReport")) == 1


def test_a_shared_ami_another_account_launches_stays(world: World) -> None:
    old, _ = _shared_old_ami(world)
    report = _report(world, old, "available", NOW - timedelta(days=1))
    world.fake.usage_entries += [
        {
            "ReportId": report,
            "ImageId": old,
            "AccountId": PARTNER,
            "ResourceType": "ec2:Instance",
            "UsageCount": 3,
        },
        # the owner's own use is what DescribeImageReferences judges
        {
            "ReportId": report,
            "ImageId": old,
            "AccountId": ACCOUNT,
            "ResourceType": "ec2:Instance",
            "UsageCount": 1,
        },
    ]
    decisions = _shared_prune(world)
    assert decisions[old] == (
        "keep",
        [f"used in account {PARTNER}: 3 ec2:Instance (usage report {report} of 2026-11-09)"],
    )
    assert world.fake.operations("CreateImageUsageReport") == []
    assert _exists(world, old)


def test_a_shared_ami_no_other_account_uses_goes(world: World) -> None:
    old, snapshot = _shared_old_ami(world)
    report = _report(world, old, "available", NOW - timedelta(days=1))
    world.fake.usage_entries.append(
        {
            "ReportId": report,
            "ImageId": old,
            "AccountId": ACCOUNT,
            "ResourceType": "ec2:Instance",
            "UsageCount": 1,
        }
    )
    assert _shared_prune(world)[old][0] == "delete"
    assert not _exists(world, old) and not _snapshot_exists(world, snapshot)


def test_a_stale_or_failed_usage_report_is_asked_for_again(world: World) -> None:
    old, _ = _shared_old_ami(world)
    # older than USAGE_REPORT_FRESH: it may not show who started launching it since
    _report(world, old, "available", NOW - timedelta(days=4))
    assert "asked EC2 for a usage report" in _shared_prune(world)[old][1][0]
    world.fake.usage_reports.clear()
    _report(world, old, "error", NOW - timedelta(hours=2), StateReason="internal error")
    [why] = _shared_prune(world)[old][1]
    assert "(the last failed: internal error)" in why
    assert len(world.fake.operations("CreateImageUsageReport")) == 2
    assert _exists(world, old)


def test_usage_reports_only_for_shared_images(world: World) -> None:
    old, _ = _shared_old_ami(world)
    decisions = _decisions(_prune(world, keep=1, deprecated_for=timedelta(days=7)))
    assert decisions[old][0] == "delete"
    assert world.fake.operations("DescribeImageUsageReports") == []


def _template_with_history(world: World, name: str, pinned_ami: str, later_ami: str) -> str:
    """A launch template whose version 1 names `pinned_ami`, followed by 11 versions naming
    `later_ami`: version 1 is older than the 10 newest DescribeImageReferences reads."""
    template = world.ec2.create_launch_template(
        LaunchTemplateName=name, LaunchTemplateData={"ImageId": pinned_ami}
    )["LaunchTemplate"]["LaunchTemplateId"]
    for _ in range(11):
        world.ec2.create_launch_template_version(
            LaunchTemplateId=template, LaunchTemplateData={"ImageId": later_ami}
        )
    return template


def test_an_auto_scaling_group_pinned_to_an_old_template_version_keeps_its_ami(
    world: World,
) -> None:
    (pinned, _), (dropped, _), (newest, _) = _amis(world, "validated", "validated", "validated")
    template = _template_with_history(world, "training", pinned, newest)
    subnet = world.subnet_id
    autoscaling = world.session.client("autoscaling")
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName="trainers",
        LaunchTemplate={"LaunchTemplateId": template, "Version": "1"},
        MinSize=0,
        MaxSize=4,
        VPCZoneIdentifier=subnet,
    )
    result = _prune(world, keep=1, dry_run=False)
    decisions = _decisions(result)
    # EC2's reference check reads only the 10 newest versions: without asking the group, the
    # AMI it scales out with would be deleted
    assert decisions[pinned] == (
        "keep",
        ["Auto Scaling group trainers launches it (launch template training version 1)"],
    )
    assert decisions[dropped][0] == "delete"
    assert not _exists(world, dropped)


def test_a_mixed_instances_policy_and_the_default_version_count(world: World) -> None:
    (by_default, _), (newest, _) = _amis(world, "validated", "validated")
    template = world.ec2.create_launch_template(
        LaunchTemplateName="mixed", LaunchTemplateData={"ImageId": by_default}
    )["LaunchTemplate"]["LaunchTemplateId"]
    for _ in range(11):
        world.ec2.create_launch_template_version(
            LaunchTemplateId=template, LaunchTemplateData={"ImageId": newest}
        )
    world.session.client("autoscaling").create_auto_scaling_group(
        AutoScalingGroupName="mixed",
        MixedInstancesPolicy={
            "LaunchTemplate": {
                "LaunchTemplateSpecification": {"LaunchTemplateName": "mixed"},
                "Overrides": [{"InstanceType": "p5.48xlarge"}],
            }
        },
        MinSize=0,
        MaxSize=2,
        VPCZoneIdentifier=world.subnet_id,
    )
    action, reasons = _decisions(_prune(world, keep=1, dry_run=True))[by_default]
    assert action == "keep"
    assert reasons == [
        "Auto Scaling group mixed launches it (launch template mixed version 1 as $Default)"
    ]


def test_an_eks_node_group_pinned_to_an_old_template_version_keeps_its_ami(
    world: World,
) -> None:
    (pinned, _), (newest, _) = _amis(world, "validated", "validated")
    template = _template_with_history(world, "gpu-nodes", pinned, newest)
    eks = world.session.client("eks")
    role = "arn:aws:iam::123456789012:role/eks"
    eks.create_cluster(
        name="research", roleArn=role, resourcesVpcConfig={"subnetIds": [world.subnet_id]}
    )
    eks.create_nodegroup(
        clusterName="research",
        nodegroupName="p5",
        nodeRole=role,
        subnets=[world.subnet_id],
        launchTemplate={"id": template, "version": "1"},
    )
    action, reasons = _decisions(_prune(world, keep=1, dry_run=True))[pinned]
    assert (action, reasons) == (
        "keep",
        ["EKS node group research/p5 launches it (launch template gpu-nodes version 1)"],
    )


def test_a_group_naming_a_deleted_template_pins_nothing(world: World) -> None:
    (old, _), (_newest, _) = _amis(world, "validated", "validated")
    template = world.ec2.create_launch_template(
        LaunchTemplateName="gone", LaunchTemplateData={"ImageId": old}
    )["LaunchTemplate"]["LaunchTemplateId"]
    world.session.client("autoscaling").create_auto_scaling_group(
        AutoScalingGroupName="orphan",
        LaunchTemplate={"LaunchTemplateId": template, "Version": "1"},
        MinSize=0,
        MaxSize=1,
        VPCZoneIdentifier=world.subnet_id,
    )
    world.ec2.delete_launch_template(LaunchTemplateId=template)
    assert _decisions(_prune(world, keep=1, dry_run=True))[old][0] == "delete"
