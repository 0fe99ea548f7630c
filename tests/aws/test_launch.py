"""Launch: the network interfaces each profile gets, the run_instances request, capacity errors,
status-check waits, throttling, and the fleet that always terminates."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from mypy_boto3_ec2.type_defs import RunInstancesRequestTypeDef
from pydantic import ValidationError

from nodeforge.aws import tags
from nodeforge.aws.capacity import resolve_capacity
from nodeforge.aws.errors import (
    AwsError,
    CleanupError,
    InstanceUnreachableError,
    NoCapacityError,
)
from nodeforge.aws.fleet import validation_fleet
from nodeforge.aws.launch import (
    launch_instances,
    network_interfaces,
    run_instances_request,
    wait_ready,
)
from nodeforge.aws.netlayout import profile_layouts, recommended_layout
from nodeforge.aws.pipeline import promote
from nodeforge.catalog.loader import Catalog
from nodeforge.catalog.models import Profile
from nodeforge.errors import InputError
from tests.aws.conftest import FakeClock, World, failure, raw_failure
from tests.conftest import SHIPPED

SUBNET, GROUPS = "subnet-0123456789abcdef0", ["sg-0123456789abcdef0"]


def _layout(world: World, *instance_types: str) -> dict[str, list[tuple[int, int, str]]]:
    """What promote requests per type, from moto's DescribeInstanceTypes (AWS's own data)."""
    profiles = [Profile.model_validate(_profile_doc(t)) for t in instance_types]
    layouts = profile_layouts(
        world.ec2, profiles, region="us-east-1", config_path=None, profile_files={}
    )
    found = {}
    for name, slots in layouts.items():
        interfaces = network_interfaces(slots, subnet_id=SUBNET, security_group_ids=GROUPS)
        assert all(i["SubnetId"] == SUBNET and i["Groups"] == GROUPS for i in interfaces)
        found[name] = [
            (i["NetworkCardIndex"], i["DeviceIndex"], i.get("InterfaceType", "ena"))
            for i in interfaces
        ]
    return found


def _profile_doc(instance_type: str, efa: int | None = None) -> dict[str, Any]:
    doc = yaml.safe_load((SHIPPED / "profiles" / f"{instance_type}.yml").read_text())
    if efa is not None:
        doc["network"]["efa_interfaces"] = efa
    return dict(doc)


@pytest.mark.parametrize(
    ("name", "cards"),
    [("p5.48xlarge", 32), ("p5en.48xlarge", 16), ("p6-b200.48xlarge", 8), ("g6e.48xlarge", 4)],
)
def test_ena_primary_then_efa_only_on_every_card(world: World, name: str, cards: int) -> None:
    """EC2 User Guide, efa-acc-inst-types: ENA at card 0 device 0, EFA-only at card 0 device 1
    (card 0 supports EFA), EFA-only at device 0 of every other card."""
    layout = _layout(world, name)[name]
    assert layout == [(0, 0, "ena"), (0, 1, "efa-only")] + [
        (card, 0, "efa-only") for card in range(1, cards)
    ]


def test_p6_b300_card_0_is_ena_only(world: World) -> None:
    # EC2 reports card 0 with interface type "interface" only, and 16 EFA for 17 cards
    layout = _layout(world, "p6-b300.48xlarge")["p6-b300.48xlarge"]
    assert layout == [(0, 0, "ena")] + [(card, 0, "efa-only") for card in range(1, 17)]


def test_the_catalog_s_efa_count_is_held_to_ec2_s(world: World) -> None:
    wrong = Profile.model_validate(_profile_doc("p5en.48xlarge", efa=32))
    source = SHIPPED / "profiles" / "p5en.48xlarge.yml"
    with pytest.raises(InputError) as caught:
        profile_layouts(
            world.ec2,
            [wrong],
            region="us-east-1",
            config_path=None,
            profile_files={wrong.name: source},
        )
    text = str(caught.value)
    assert "p5en.48xlarge.yml" in text
    assert "field 'network.efa_interfaces'" in text
    assert "EC2 gives p5en.48xlarge 16 EFA interfaces" in text


def test_an_instance_type_ec2_does_not_know_names_the_region(world: World) -> None:
    unknown = Profile.model_validate(_profile_doc("p6e-gb200.36xlarge"))
    with pytest.raises(InputError) as caught:
        profile_layouts(
            world.ec2,
            [unknown],
            region="us-east-1",
            config_path=Path("pipeline.yml"),
            profile_files={},
        )
    assert "pipeline.yml: field 'region'" in str(caught.value)


@pytest.mark.parametrize(
    ("network", "expected"),
    [
        # no EFA: one ENA interface
        ({"EfaSupported": False, "NetworkCards": [{"NetworkCardIndex": 0}]}, [(0, 0, "interface")]),
        # an older answer without interface types: the default card keeps ENA when the type
        # has fewer EFA interfaces than cards
        (
            {
                "EfaSupported": True,
                "EfaInfo": {"MaximumEfaInterfaces": 2},
                "NetworkCards": [{"NetworkCardIndex": i} for i in range(3)],
            },
            [(0, 0, "interface"), (1, 0, "efa-only"), (2, 0, "efa-only")],
        ),
        # a card that offers EFA but not EFA-only: EFA (with ENA) there, primary included
        (
            {
                "EfaSupported": True,
                "EfaInfo": {"MaximumEfaInterfaces": 2},
                "NetworkCards": [
                    {"NetworkCardIndex": 0, "InterfaceTypes": ["interface", "efa"]},
                    {"NetworkCardIndex": 1, "InterfaceTypes": ["interface", "efa"]},
                ],
            },
            [(0, 0, "efa"), (1, 0, "efa")],
        ),
        # MaximumEfaInterfaces caps the EFA interfaces, whatever the cards offer
        (
            {
                "EfaSupported": True,
                "EfaInfo": {"MaximumEfaInterfaces": 1},
                "NetworkCards": [
                    {"NetworkCardIndex": i, "InterfaceTypes": ["interface", "efa", "efa-only"]}
                    for i in range(2)
                ],
            },
            [(0, 0, "interface"), (0, 1, "efa-only")],
        ),
    ],
)
def test_layout_rules(network: dict[str, Any], expected: list[tuple[int, int, str]]) -> None:
    slots = recommended_layout(network)  # type: ignore[arg-type]
    assert [(s.card, s.device_index, s.interface) for s in slots] == expected


def _request(world: World, shipped: Catalog, **config: Any) -> RunInstancesRequestTypeDef:
    profile = shipped.profiles["p6-b300.48xlarge"]
    settings = world.config(**config)
    return run_instances_request(
        ami_id=world.ami_id,
        profile=profile,
        count=2,
        config=settings,
        capacity=resolve_capacity(
            world.ec2,
            settings.capacity.get(profile.name),
            instance_type=profile.name,
            count=2,
            subnet_id=world.subnet_id,
        ),
        interfaces=network_interfaces(
            recommended_layout(
                world.ec2.describe_instance_types(InstanceTypes=["p6-b300.48xlarge"])[
                    "InstanceTypes"
                ][0]["NetworkInfo"]
            ),
            subnet_id=world.subnet_id,
            security_group_ids=[world.security_group_id],
        ),
        placement_group="pg-run",
        tags={tags.RUN_ID: "run-1", tags.TTL: "2026-12-02T16:00:00Z"},
        client_token="run-1-p6",
    )


def test_request_imdsv2_tags_placement(world: World, shipped: Catalog) -> None:
    request = _request(world, shipped, key_name="ops")
    assert request["InstanceType"] == "p6-b300.48xlarge"
    assert (request["MinCount"], request["MaxCount"]) == (2, 2)
    assert request["MetadataOptions"]["HttpTokens"] == "required"
    assert request["Placement"] == {"GroupName": "pg-run"}
    assert request["KeyName"] == "ops"
    assert len(request["NetworkInterfaces"]) == 17
    instance_tags = next(
        s["Tags"] for s in request["TagSpecifications"] if s["ResourceType"] == "instance"
    )
    assert tags.tag_map(instance_tags) == {
        tags.RUN_ID: "run-1",
        tags.TTL: "2026-12-02T16:00:00Z",
    }
    assert "InstanceMarketOptions" not in request
    assert "CapacityReservationSpecification" not in request
    assert "IamInstanceProfile" not in request


def test_request_instance_profile(world: World, shipped: Catalog) -> None:
    request = _request(world, shipped, iam_instance_profile="nodeforge-validation")
    assert request["IamInstanceProfile"] == {"Name": "nodeforge-validation"}


def test_request_capacity_block_and_reservation(world: World, shipped: Catalog) -> None:
    target = {"CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}}
    block = _request(
        world,
        shipped,
        capacity={
            "p6-b300.48xlarge": {"reservation_id": "cr-0123456789abcdef0", "capacity_block": True}
        },
    )
    assert block["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert block["CapacityReservationSpecification"] == target
    reservation = _request(
        world, shipped, capacity={"p6-b300.48xlarge": {"reservation_id": "cr-0123456789abcdef0"}}
    )
    assert "InstanceMarketOptions" not in reservation
    assert reservation["CapacityReservationSpecification"] == target


def test_launch_wait_terminate(world: World, shipped: Catalog, fake_clock: FakeClock) -> None:
    with validation_fleet(
        world.ec2, run_id="run-1", poll_s=0, timeout_s=30, progress=lambda _: None
    ) as fleet:
        group = fleet.placement_group("nodeforge-run-1", {tags.RUN_ID: "run-1"})
        ids = fleet.launch(_request(world, shipped) | {"Placement": {"GroupName": group}})
        hosts = wait_ready(world.ec2, ids, timeout_s=30, poll_s=0, clock=fake_clock.clock())
        assert len(hosts) == 2
        assert all(h.startswith("10.0.") for h in hosts)
        assert sorted(world.live_instances()) == sorted(ids)
    assert world.live_instances() == []
    assert world.fake.placement_groups == set()
    assert world.fake.deleted_groups == ["nodeforge-run-1"]
    assert world.fake.operations("TerminateInstances")[0]["InstanceIds"] == sorted(ids)


def test_cleanup_finds_instances_by_run_tag(world: World, shipped: Catalog) -> None:
    """A launch whose response was lost still ends: cleanup looks instances up by run id."""
    with validation_fleet(world.ec2, run_id="run-1", poll_s=0, timeout_s=30, progress=print):
        world.ec2.run_instances(**_request(world, shipped))  # not recorded by the fleet
        assert len(world.live_instances()) == 2
    assert world.live_instances() == []


def test_cleanup_failure_says_what_to_remove_by_hand(world: World, shipped: Catalog) -> None:
    world.session.events.register(
        "before-call.ec2.TerminateInstances",
        lambda **_: failure("UnauthorizedOperation", "not allowed"),
    )
    ec2 = world.session.client("ec2")
    with (
        pytest.raises(CleanupError, match=r"tagged nodeforge:run-id=run-1 \(i-"),
        validation_fleet(ec2, run_id="run-1", poll_s=0, timeout_s=30, progress=print) as fleet,
    ):
        fleet.launch(_request(world, shipped))


def test_no_capacity_says_what_to_do(world: World, shipped: Catalog) -> None:
    world.session.events.register(
        "before-call.ec2.RunInstances",
        lambda **_: failure(
            "InsufficientInstanceCapacity", "We currently do not have sufficient capacity", 500
        ),
    )
    ec2 = world.session.client("ec2")
    with pytest.raises(NoCapacityError) as caught:
        launch_instances(ec2, _request(world, shipped))
    text = str(caught.value)
    assert "no p6-b300.48xlarge capacity (InsufficientInstanceCapacity" in text
    assert "capacity reservation or a Capacity Block" in text
    assert "another availability zone" in text
    with pytest.raises(NoCapacityError, match="cr-0123456789abcdef0 has no free"):
        launch_instances(
            ec2,
            _request(
                world,
                shipped,
                capacity={"p6-b300.48xlarge": {"reservation_id": "cr-0123456789abcdef0"}},
            ),
        )


def _statuses(state: str, status: str) -> Any:
    def answer(params: dict[str, Any], **_: Any) -> Any:
        body = params["body"]
        ids = [value for key, value in body.items() if key.startswith("InstanceId.")]
        return (
            AWSResponse("https://ec2.fake", 200, {}, None),  # type: ignore[arg-type]
            {
                "InstanceStatuses": [
                    {
                        "InstanceId": i,
                        "InstanceState": {"Name": state, "Code": 16},
                        "InstanceStatus": {"Status": status},
                        "SystemStatus": {"Status": "ok"},
                    }
                    for i in ids
                ]
            },
        )

    return answer


def test_never_reachable_times_out(world: World, shipped: Catalog, fake_clock: FakeClock) -> None:
    world.session.events.register(
        "before-call.ec2.DescribeInstanceStatus", _statuses("running", "initializing")
    )
    ec2 = world.session.client("ec2")
    ids = launch_instances(ec2, _request(world, shipped))
    with pytest.raises(InstanceUnreachableError) as caught:
        wait_ready(ec2, ids, timeout_s=20, poll_s=5, clock=fake_clock.clock())
    assert "not reachable after 20 s" in str(caught.value)
    assert "instance status initializing" in str(caught.value)
    assert "get-console-output" in str(caught.value)
    assert fake_clock.slept == [5, 5, 5, 5]


def test_instance_gone_while_waiting(world: World, shipped: Catalog, fake_clock: FakeClock) -> None:
    world.session.events.register(
        "before-call.ec2.DescribeInstanceStatus", _statuses("terminated", "not-applicable")
    )
    ec2 = world.session.client("ec2")
    ids = launch_instances(ec2, _request(world, shipped))
    with pytest.raises(InstanceUnreachableError, match="went terminated before it became ready"):
        wait_ready(ec2, ids, timeout_s=20, poll_s=5, clock=fake_clock.clock())
    assert fake_clock.slept == []


def _throttle(times: int) -> tuple[list[int], Any]:
    seen: list[int] = []

    def answer(request: AWSPreparedRequest, **_: Any) -> AWSResponse | None:
        seen.append(1)
        if times < 0 or len(seen) <= times:
            return raw_failure(request.url, "RequestLimitExceeded", 503)
        return None

    return seen, answer


def test_throttled_launch_is_retried(
    world: World, shipped: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    slept: list[float] = []
    monkeypatch.setattr("botocore.endpoint.time.sleep", slept.append)
    seen, answer = _throttle(2)
    world.session.events.register_first("before-send.ec2.RunInstances", answer)
    clients = world.clients(api_max_attempts=5)
    ids = launch_instances(clients.ec2, _request(world, shipped))
    assert len(ids) == 2
    assert len(seen) == 3
    assert len(slept) == 2  # botocore backed off before each retry


def test_persistent_throttling_gives_a_clear_error(
    world: World, shipped: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("botocore.endpoint.time.sleep", lambda _s: None)
    seen, answer = _throttle(-1)
    world.session.events.register_first("before-send.ec2.RunInstances", answer)
    clients = world.clients(api_max_attempts=3)
    with pytest.raises(AwsError) as caught:
        promote(
            clients,
            image="p5-ubuntu24.04",
            ami_id=world.ami_id,
            profiles=[shipped.profiles["p5.48xlarge"]],
            validate=lambda _h, _p: True,
        )
    assert len(seen) == 3
    assert "kept throttling the request (RequestLimitExceeded) after 3 attempts" in str(
        caught.value
    )
    assert "api_max_attempts" in str(caught.value)
    assert world.fake.placement_groups == set()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_interrupts_and_cleans_up(world: World, shipped: Catalog, signum: int) -> None:
    before = signal.getsignal(signum)

    def run() -> None:
        with validation_fleet(
            world.ec2, run_id="run-1", poll_s=0, timeout_s=30, progress=lambda _: None
        ) as fleet:
            fleet.placement_group("nodeforge-run-1", {})
            fleet.launch(_request(world, shipped))
            os.kill(os.getpid(), signum)
            pytest.fail("the signal should have interrupted the body")

    with pytest.raises(KeyboardInterrupt):
        run()
    assert world.live_instances() == []
    assert world.fake.placement_groups == set()
    assert signal.getsignal(signum) is before


def _reservation(
    world: World, reservation_id: str, free: int, ends: str, **more: Any
) -> dict[str, Any]:
    zone = world.ec2.describe_subnets(SubnetIds=[world.subnet_id])["Subnets"][0]
    return {
        "CapacityReservationId": reservation_id,
        "InstanceType": "p6-b300.48xlarge",
        "AvailabilityZone": zone["AvailabilityZone"],
        "State": "active",
        "AvailableInstanceCount": free,
        "EndDate": ends,
        **more,
    }


def test_find_takes_the_reservation_with_room_that_ends_first(
    world: World, shipped: Catalog
) -> None:
    world.fake.capacity_reservations = [
        _reservation(world, "cr-0000000000000001a", 1, "2026-12-03T00:00:00Z"),  # too small
        _reservation(world, "cr-0000000000000002b", 2, "2026-12-09T00:00:00Z"),
        _reservation(
            world,
            "cr-0000000000000003c",
            4,
            "2026-12-04T11:30:00Z",
            ReservationType="capacity-block",
            PlacementGroupArn="arn:aws:ec2:us-east-1:123456789012:placement-group/cb-pg",
        ),
        {
            **_reservation(world, "cr-0000000000000004d", 8, "2026-12-03T00:00:00Z"),
            "State": "expired",
        },
    ]
    request = _request(world, shipped, capacity={"p6-b300.48xlarge": {"find": True}})
    assert request["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0000000000000003c"}
    }
    assert request["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    capacity = resolve_capacity(
        world.ec2,
        world.config(capacity={"p6-b300.48xlarge": {"find": True}}).capacity["p6-b300.48xlarge"],
        instance_type="p6-b300.48xlarge",
        count=2,
        subnet_id=world.subnet_id,
    )
    assert capacity is not None and capacity.placement_group == "cb-pg"


def test_find_without_room_is_no_capacity(world: World, shipped: Catalog) -> None:
    world.fake.capacity_reservations = [
        _reservation(world, "cr-0000000000000001a", 1, "2026-12-03T00:00:00Z")
    ]
    with pytest.raises(NoCapacityError, match="has 2 free instance"):
        _request(world, shipped, capacity={"p6-b300.48xlarge": {"find": True}})


@pytest.mark.parametrize(
    "target", [{}, {"find": True, "reservation_id": "cr-0123456789abcdef0"}], ids=["none", "both"]
)
def test_a_capacity_entry_names_or_finds(world: World, target: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="name a reservation_id, or set find: true"):
        world.config(capacity={"p6-b300.48xlarge": target})
