"""reap(): the expired validation instances and placement groups of a run whose machine died."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nodeforge.aws import tags
from nodeforge.aws.reap import expired, reap
from tests.aws.conftest import IMAGE, World

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
GROUP = "nodeforge-run-9-p5.48xlarge"


def _abandoned_run(world: World, ttl: datetime, image: str = IMAGE) -> str:
    """What a promote leaves when its machine dies mid-validation: a tagged placement group
    and an instance in it; the instance id."""
    run_tags = {tags.RUN_ID: "run-9", tags.TTL: tags.iso(ttl), tags.IMAGE: image}
    world.ec2.create_placement_group(
        GroupName=GROUP,
        Strategy="cluster",
        TagSpecifications=[{"ResourceType": "placement-group", "Tags": tags.tag_list(run_tags)}],
    )
    return world.ec2.run_instances(
        ImageId=world.ami_id,
        InstanceType="t3.micro",
        MinCount=1,
        MaxCount=1,
        Placement={"GroupName": GROUP},
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags.tag_list(run_tags)}],
    )["Instances"][0]["InstanceId"]


def test_expired() -> None:
    assert expired("2026-12-02T11:59:59Z", NOW) is True
    assert expired("2026-12-02T12:00:01Z", NOW) is False
    assert expired("tomorrow", NOW) is None


def test_an_expired_run_is_terminated_then_its_group_deleted(world: World) -> None:
    instance = _abandoned_run(world, NOW - timedelta(minutes=5))
    first = reap(world.clients(), image=IMAGE, now=NOW, dry_run=False)
    assert [(r.kind, r.name, r.action) for r in first] == [
        ("instance", instance, "terminate"),
        ("placement-group", GROUP, "wait"),
    ]
    assert world.live_instances() == []
    assert GROUP in world.fake.placement_groups  # its instance is still shutting down
    world.ec2.get_waiter("instance_terminated").wait(InstanceIds=[instance])
    second = reap(world.clients(), image=IMAGE, now=NOW, dry_run=False)
    assert [(r.kind, r.action) for r in second] == [("placement-group", "delete")]
    assert world.fake.placement_groups == set()


def test_a_live_run_and_another_image_s_run_are_kept(world: World) -> None:
    instance = _abandoned_run(world, NOW + timedelta(minutes=30))
    found = reap(world.clients(), image=IMAGE, now=NOW, dry_run=False)
    assert [(r.name, r.action, r.reason) for r in found] == [
        (instance, "keep", "lives until 2026-12-02T12:30:00Z"),
        (GROUP, "keep", "lives until 2026-12-02T12:30:00Z"),
    ]
    assert reap(world.clients(), image="p6-ubuntu24.04", now=NOW, dry_run=False) == []
    assert world.live_instances() == [instance]


def test_dry_run_touches_nothing(world: World) -> None:
    instance = _abandoned_run(world, NOW - timedelta(minutes=5))
    found = reap(world.clients(), image=IMAGE, now=NOW, dry_run=True)
    assert [r.action for r in found] == ["terminate", "wait"]
    assert world.live_instances() == [instance]
    assert world.fake.operations("TerminateInstances") == []
