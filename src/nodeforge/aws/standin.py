"""The validation stand-in, a seam for end-to-end tests: promote validates testinfra hosts named
in the environment (a local container) instead of the instances it launched.

Everything else runs for real: the launch with the profile's EFA layout, the status waits, the
always-terminate cleanup, publish or retire. Only against a fake AWS account: the stand-in is
refused unless every endpoint boto3 would use is on loopback (a moto_server), so it can never
publish a real AMI that was validated on something else.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, ValidationError

from nodeforge.aws.pipeline import Node, Validator, run_suite
from nodeforge.catalog.loader import Catalog
from nodeforge.catalog.models import Model
from nodeforge.errors import InputError
from nodeforge.target import target_for
from nodeforge.validate import Stage

ENV = "NODEFORGE_VALIDATION_STAND_IN"
_ENDPOINTS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_EC2", "AWS_ENDPOINT_URL_SSM")
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


class StandIn(Model):
    """`NODEFORGE_VALIDATION_STAND_IN` as JSON."""

    hosts: str = Field(min_length=1)
    """testinfra hosts validated for every profile, e.g. podman://NAME."""
    image: str
    """The catalog image the stand-in was built from: the suite compares it with this image's
    resolved vars, since it is not the image being promoted."""
    profile: str | None = None
    stage: Stage = "target"
    """build: what the stand-in can pass without a GPU; target: what a real instance runs."""
    builder_hosts: str | None = None
    """testinfra hosts checked in place of Packer's builder (always the build stage);
    default: `hosts`."""


def stand_in_from(environ: Mapping[str, str]) -> StandIn | None:
    """The stand-in the environment names, None when it names none; InputError when it is
    malformed or AWS is not a loopback fake."""
    raw = environ.get(ENV)
    if not raw:
        return None
    for name in _ENDPOINTS:
        url = environ.get(name)
        if (url is None and name == "AWS_ENDPOINT_URL") or (
            url is not None and urlsplit(url).hostname not in _LOOPBACK
        ):
            raise InputError(
                f"{ENV} is set but {name} is {url or 'unset'}, not a loopback endpoint",
                field=ENV,
                fix="unset it: the stand-in is for tests against a fake AWS account "
                "(moto_server on loopback) only",
            )
    # botocore would then skip the endpoint variables and reach the real AWS
    if environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").lower() == "true":
        raise InputError(
            f"{ENV} is set together with AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true",
            field=ENV,
            fix="unset one of them: the stand-in is for tests against a fake AWS account only",
        )
    try:
        return StandIn.model_validate(json.loads(raw))
    except json.JSONDecodeError as exc:
        problem = f"not JSON ({exc})"
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        problem = f"{'.'.join(str(p) for p in first['loc']) or 'value'}: {first['msg']}"
    raise InputError(
        problem,
        field=ENV,
        fix='set JSON such as {"hosts": "podman://NAME", "image": "local-debian13", '
        '"stage": "build"}',
    )


def stand_in_validator(
    catalog: Catalog,
    stand_in: StandIn,
    *,
    report_root: Path,
    progress: Callable[[str], None],
) -> Validator:
    target = target_for(catalog, stand_in.image, stand_in.profile)

    def validate(nodes: Sequence[Node], profile: str) -> bool:
        progress(
            f"{profile}: {ENV}: validating {stand_in.hosts} ({stand_in.stage} stage, "
            f"{stand_in.image} vars) in place of {', '.join(n.address for n in nodes)}"
        )
        return run_suite(
            catalog,
            target,
            hosts=stand_in.hosts,
            stage=stand_in.stage,
            report_dir=report_root / profile,
        ).ok

    return validate
