"""fi_info parser on real captures (tests/fixtures/outputs/efa/SOURCES.md) and its failure texts."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeforge.parsers import fi_info

EFA = Path(__file__).parent / "fixtures" / "outputs" / "efa"
OUTPUTS = EFA.parent


def _text(name: str) -> str:
    return (EFA / name).read_text(encoding="utf-8")


def _parse(name: str) -> fi_info.FiInfoResult:
    return fi_info.parse_fi_info(_text(name))


# --- single host, default listing ------------------------------------------------------------


def test_p4d_four_devices_libfabric_1_11() -> None:
    result = _parse("fi_info_p4d_rdm_4nics_111.txt")
    assert result.devices() == ("rdmap16s27", "rdmap32s27", "rdmap144s27", "rdmap160s27")
    assert result.entries[1].fabric == "EFA-fe80::1011:66ff:feeb:c5af"
    assert [h.name for h in result.hosts] == [None]
    assert result.ignored == ()


def test_libfabric_2_efa_direct_and_efa_fabrics_are_one_device() -> None:
    result = _parse("fi_info_efa_direct_libfabric2.txt")
    assert [e.fabric for e in result.entries] == ["efa-direct", "efa", "efa"]
    assert result.devices() == ("rdmap47s0",)
    assert result.domains() == ("rdmap47s0-rdm", "rdmap47s0-dgrm")
    host = result.host(None)
    assert host.endpoint_types() == ("FI_EP_RDM", "FI_EP_DGRAM")
    assert host.fabrics() == ("efa-direct", "efa")
    assert {e.version for e in result.entries} == {"201.0"}


def test_rdm_and_dgram_domains_of_one_nic() -> None:
    result = _parse("fi_info_hpc6a_rdm_dgrm_113.txt")
    assert result.domains() == ("rdmap0s6-rdm", "rdmap0s6-dgrm")
    assert result.devices() == ("rdmap0s6",)


def test_shell_prompt_names_the_host_and_rxd_is_another_provider() -> None:
    result = _parse("fi_info_shell_prompt_efa0_rxd.txt")
    assert [h.name for h in result.hosts] == ["ip-30-0-82-154"]
    assert result.devices() == ("efa_0",)
    assert result.devices("efa;ofi_rxd") == ("efa_0",)
    assert result.entries[2].protocol == "FI_PROTO_RXD"


def test_two_runs_with_bare_prompts_in_between() -> None:
    result = _parse("fi_info_manpage_verbs_tcp_two_runs.txt")
    assert [e.provider for e in result.entries] == ["verbs", "tcp"]
    assert result.devices("verbs") == ("mlx5_0",)
    assert result.devices("tcp") == ("eth0",)
    assert result.devices() == ()
    assert len(result.ignored) == 2 and "$ ./fi_info -p tcp" in result.ignored[1]


def test_cut_block_is_reported_not_counted() -> None:
    result = _parse("fi_info_tcp_rxm_duplicates_cut.txt")
    assert len(result.entries) == 6
    assert result.domains("tcp;ofi_rxm") == ("eth0", "lo")
    assert "provider block starting at line 38 lacks protocol" in result.ignored


# --- several hosts ---------------------------------------------------------------------------


def test_mpirun_ranks_keep_the_same_device_apart() -> None:
    result = _parse("fi_info_mpirun_two_ranks_ssh_warnings.txt")
    assert [h.name for h in result.hosts] == ["rank 1", "rank 0"]
    assert result.devices() == ("rdmap197s0", "rdmap197s0")
    assert result.host("rank 0").devices() == ("rdmap197s0",)
    assert [line.split(":")[0] for line in result.ignored] == ["line 1", "line 2"]


def test_mpirun_output_with_an_elision_line() -> None:
    result = _parse("fi_info_mpirun_elided_2x_p5.txt")
    assert result.host("rank 1").devices() == ("rdmap79s0",)
    assert result.host("rank 0").devices() == ("rdmap201s0",)
    assert "line 10: '...'" in result.ignored


def test_pdsh_interleaved_hosts_and_one_without_fabric() -> None:
    result = _parse("fi_info_pdsh_three_hosts_one_61.txt")
    assert result.host("compute-st-p5-1").devices() == ("rdmap79s0", "rdmap80s0")
    assert result.host("compute-st-p5-2").devices() == ("rdmap79s0", "rdmap80s0")
    assert len(result.devices()) == 4
    failed = result.failed_hosts()
    assert [h.name for h in failed] == ["compute-st-p5-3"]
    assert failed[0].failure == fi_info.GetinfoFailure(code=-61, message="No data available")
    assert any("Permanently added" in line for line in result.ignored)
    assert any("pdsh@headnode" in line for line in result.ignored)


def test_srun_label_tasks() -> None:
    result = _parse("fi_info_srun_label_two_tasks.txt")
    assert [h.name for h in result.hosts] == ["task 0", "task 1"]
    assert result.host("task 1").devices() == ("rdmap16s27", "rdmap32s27")
    assert result.domains().count("rdmap32s27-rdm") == 2


def test_dshbak_boxes_name_hosts() -> None:
    result = _parse("fi_info_dshbak_host_headers.txt")
    names = [h.name for h in result.hosts]
    assert names == ["queue1-dy-p4d-1", "queue1-dy-p4d-2", "queue1-dy-p4d-3"]
    assert result.devices() == ("rdmap0s6", "rdmap0s6")
    assert result.host("queue1-dy-p4d-3").failure == fi_info.GetinfoFailure(code=-61)


def test_prompts_of_two_hosts_concatenated() -> None:
    result = _parse("fi_info_two_prompts_concatenated.txt")
    assert [h.name for h in result.hosts] == [
        "queue-1-dy-queue-1-cr-1-1",
        "queue-1-dy-queue-1-cr-1-2",
    ]
    assert result.devices() == ("rdmap0s6", "rdmap0s6")
    assert len(result.ignored) == 1 and "Last login" in result.ignored[0]


def test_bare_host_label_and_arrow_headers() -> None:
    text = (
        "node-a:\nprovider: efa\n    fabric: efa\n    domain: rdmap0s6-rdm\n    version: 120.10\n"
        "    type: FI_EP_RDM\n    protocol: FI_PROTO_EFA\n==> node-b <==\nfi_getinfo: -61\n"
    )
    result = fi_info.parse_fi_info(text)
    assert result.host("node-a").devices() == ("rdmap0s6",)
    assert result.host("node-b").failure == fi_info.GetinfoFailure(code=-61)


def test_prompt_running_fi_info_over_ssh_names_the_remote_host() -> None:
    text = (
        "[ec2-user@head ~]$ ssh -o BatchMode=yes ec2-user@compute-1 fi_info -p efa\n"
        "fi_getinfo: -61 (No data available)\n"
        "[ec2-user@head ~]$ fi_info -p efa\nfi_getinfo: -61\n"
    )
    with pytest.raises(fi_info.NoFabricDataError):
        fi_info.parse_fi_info(text)
    result = fi_info.parse_fi_info(text + _text("fi_info_hpc6a_rdm_dgrm_113.txt"))
    assert [h.name for h in result.hosts] == ["compute-1", "head"]
    assert result.host("compute-1").failure == fi_info.GetinfoFailure(
        code=-61, message="No data available"
    )
    assert result.host("head").devices() == ("rdmap0s6",)


def test_unknown_host_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="no fi_info output from host 'nope'"):
        _parse("fi_info_p4d_rdm_4nics_111.txt").host("nope")


# --- verbose, list, version ------------------------------------------------------------------


def test_verbose_efa_blocks() -> None:
    result = _parse("fi_info_verbose_efa_rdm_dgrm_200.txt")
    rdm, dgram = result.entries
    assert (rdm.provider, rdm.fabric, rdm.domain, rdm.version) == (
        "efa",
        "efa",
        "rdmap70s0-rdm",
        "200.0",
    )
    assert (rdm.type, rdm.protocol, rdm.nic) == ("FI_EP_RDM", "FI_PROTO_EFA", "rdmap70s0")
    assert dgram.type == "FI_EP_DGRAM"
    assert result.devices() == ("rdmap70s0",)
    assert result.ignored == ()


def test_verbose_block_without_separator_uses_the_nic_name() -> None:
    entry = _parse("fi_info_manpage_verbose_verbs_rxd.txt").entries[0]
    assert entry.provider == "verbs;ofi_rxd"
    assert entry.domain == "mlx5_0-dgram"
    assert entry.device == "mlx5_0"
    assert entry.version == "116.0"


def test_provider_list() -> None:
    result = _parse("fi_info_list_providers.txt")
    providers = result.hosts[0].providers
    assert providers[0] == fi_info.ProviderVersion(name="efa", version="122.0")
    assert [p.name for p in providers][-2:] == ["off_coll", "lnx"]
    assert len(providers) == 13
    assert result.entries == ()
    assert result.devices() == ()


def test_version_output() -> None:
    host = _parse("fi_info_version_efa_installer.txt").hosts[0]
    assert host.fi_info_version == "1.22.0amzn5.0"
    assert host.libfabric_version == "1.22.0amzn5.0"
    assert host.api_version == "1.22"


# --- failures and foreign text ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("fi_getinfo: -61 (No data available)\n", -61),
        ("fi_getinfo: -61\n", -61),
        ("-61\n", -61),
        (_text("fi_info_getinfo_2.txt"), -2),
        ("Warning: Permanently added 'n1' (ED25519) to known hosts.\nfi_getinfo: -61\n", -61),
        ("n1: fi_getinfo: -61 (No data available)\nn2: fi_getinfo: -61 (No data available)\n", -61),
    ],
)
def test_getinfo_failures(text: str, code: int) -> None:
    with pytest.raises(fi_info.NoFabricDataError) as caught:
        fi_info.parse_fi_info(text)
    assert caught.value.code == code
    assert caught.value.output == text


def test_existing_fixtures_still_parse() -> None:
    result = fi_info.parse_fi_info((OUTPUTS / "fi_info_efa_three_endpoints.txt").read_text())
    assert result.devices() == ("efa_0",)
    assert result.hosts[0].name is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "fi_info printed nothing"),
        ("foo: bar\nbaz\n", "line 1 is not a 'key: value' line of fi_info: 'foo: bar'"),
        ('{"provider": "efa"}\n', "not a 'key: value' line"),
        ("provider: efa\n    fabric: efa\n", "provider block starting at line 1 lacks domain"),
        ("    fabric: efa\n", "line 1 is not a 'key: value' line"),
    ],
)
def test_foreign_text_is_a_parse_error(text: str, message: str) -> None:
    with pytest.raises(fi_info.ParseError, match=message):
        fi_info.parse_fi_info(text)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("[1,3]<stdout>:provider: efa", ("rank 3", "provider: efa")),
        ("12: provider: efa", ("task 12", "provider: efa")),
        ("ip-10-0-0-1: provider: efa", ("ip-10-0-0-1", "provider: efa")),
        ("Warning: Permanently added 'x'", (None, "Warning: Permanently added 'x'")),
        ("fi_getinfo: -61", (None, "fi_getinfo: -61")),
        ("provider: efa", (None, "provider: efa")),
    ],
)
def test_split_launcher_prefix(line: str, expected: tuple[str | None, str]) -> None:
    assert fi_info.split_launcher_prefix(line) == expected
