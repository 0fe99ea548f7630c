"""moto_server on a free loopback port, fresh, with this process's AWS environment pointing at
it (fake credentials, us-east-1, no profile): what subprocesses (Packer's double,
ansible-inventory's aws_ec2 plugin) and boto3 clients in the test reach as AWS."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from moto.server import ThreadedMotoServer


@contextmanager
def moto_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    # moto's catalogue of public AMIs takes seconds to load and nothing here needs it
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        # moto's backends live in this process: a test that ran before in the same worker
        # (pytest -n) may have left resources behind
        reset = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
        urllib.request.urlopen(reset)
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        yield endpoint
    finally:
        server.stop()
