"""Listen versus announce (ledger/addresses.py) and the servers that use it: nothing meant for
another host names a wildcard, and loopback is said to be loopback (issue 44, findings 1, 4, 5)."""

from __future__ import annotations

import pytest

from ledger import addresses
from ledger.addresses import (
    AddressError,
    announce_url,
    check_public_url,
    listening_urls,
    local_url,
)


@pytest.fixture
def one_interface(monkeypatch):
    monkeypatch.setattr(addresses, "interface_addresses", lambda: {"eth0": ["10.9.0.5"]})


@pytest.fixture
def two_interfaces(monkeypatch):
    monkeypatch.setattr(addresses, "interface_addresses",
                        lambda: {"eth0": ["10.9.0.5"], "wg0": ["10.77.0.1", "fd00::1"]})
    monkeypatch.setattr(addresses, "default_route_interface", lambda: None)


def test_a_wildcard_listener_announces_the_hosts_one_address_and_says_so(one_interface):
    announced = announce_url(listen_host="0.0.0.0", port=8545, option="GYM_ANNOUNCE_HOST")
    assert announced.url == "http://10.9.0.5:8545"
    assert "eth0" in announced.note and "GYM_ANNOUNCE_HOST" in announced.note
    assert not announced.loopback
    assert listening_urls("0.0.0.0", 8000, "/v1") == "http://10.9.0.5:8000/v1"


def test_with_several_addresses_it_asks_which_one(two_interfaces):
    with pytest.raises(AddressError, match=r"10\.9\.0\.5 \(eth0\), 10\.77\.0\.1 \(wg0\): set "
                                           r"--endpoint URL"):
        announce_url(listen_host="0.0.0.0", port=8000, option="--endpoint URL")
    explicit = announce_url(listen_host="0.0.0.0", port=8000, option="--endpoint URL",
                            explicit="10.77.0.1")
    assert (explicit.url, explicit.note) == ("http://10.77.0.1:8000", None)


def test_with_several_the_default_routes_interface_is_announced(two_interfaces, monkeypatch):
    monkeypatch.setattr(addresses, "default_route_interface", lambda: "wg0")
    announced = announce_url(listen_host="0.0.0.0", port=8000, option="--endpoint URL")
    assert announced.url == "http://10.77.0.1:8000"
    assert "wg0's address (the default route's)" in announced.note


def test_the_default_route_is_read_from_the_kernels_table(tmp_path):
    table = tmp_path / "route"
    table.write_text("Iface\tDestination\tGateway\tFlags\n"
                     "docker0\t000011AC\t00000000\t0001\n"
                     "eth0\t00000000\t0100000A\t0003\n")
    assert addresses.default_route_interface(str(table)) == "eth0"
    assert addresses.default_route_interface(str(tmp_path / "none")) is None


def test_explicit_urls_win_and_a_wildcard_is_never_one(one_interface):
    announced = announce_url(listen_host="0.0.0.0", port=8000, path="/v1", option="--endpoint",
                             explicit="https://node.example/v1/")
    assert announced.url == "https://node.example/v1"
    with pytest.raises(AddressError, match="without a port or path"):
        announce_url(listen_host="0.0.0.0", port=8545, option="GYM_ANNOUNCE_HOST",
                     explicit="10.0.0.1:9000")
    v6 = announce_url(listen_host="::", port=8545, option="GYM_ANNOUNCE_HOST", explicit="fd00::2")
    assert v6.url == "http://[fd00::2]:8545"
    for bad in ("0.0.0.0", "http://0.0.0.0:8000/v1", "http://[::]:8000"):
        with pytest.raises(AddressError, match="not an address another host can use"):
            announce_url(listen_host="0.0.0.0", port=8000, option="--endpoint", explicit=bad)


def test_loopback_is_announced_as_loopback():
    announced = announce_url(listen_host="127.0.0.1", port=8545, option="GYM_ANNOUNCE_HOST")
    assert announced.url == "http://127.0.0.1:8545" and announced.loopback
    assert "only this machine" in announced.note
    named = announce_url(listen_host="10.0.0.2", port=8545, option="X")
    assert (named.url, named.note, named.loopback) == ("http://10.0.0.2:8545", None, False)


def test_public_urls_are_checked():
    with pytest.raises(AddressError, match="names no address another host can reach: set "
                                           "--endpoint URL"):
        check_public_url("http://0.0.0.0:8000/v1", what="the endpoint", option="--endpoint URL")
    assert "loopback" in check_public_url("http://localhost:8000/v1", what="the endpoint",
                                          option="--endpoint URL")
    assert check_public_url("http://10.0.0.2:8000/v1", what="e", option="o") is None


def test_credentials_never_leave_in_a_url():
    from ledger.addresses import without_credentials

    assert without_credentials("http://alice:s3cret@10.0.0.2:5001") == "http://10.0.0.2:5001"
    assert without_credentials("http://10.0.0.2:5001/x") == "http://10.0.0.2:5001/x"


def test_local_url_dials_loopback_for_a_wildcard():
    assert local_url("http://0.0.0.0:8545") == "http://127.0.0.1:8545"
    assert local_url("http://[::]:8545") == "http://[::1]:8545"
    assert local_url("http://10.0.0.2:8545") == "http://10.0.0.2:8545"


def test_the_node_registers_what_other_hosts_can_reach(one_interface):
    from inference_node.launch import registered_endpoint

    assert registered_endpoint("0.0.0.0", 8000, None) == "http://10.9.0.5:8000/v1"
    assert registered_endpoint("0.0.0.0", 8000, "http://node.example:9000/v1") == \
        "http://node.example:9000/v1"
    with pytest.raises(AddressError):
        registered_endpoint("127.0.0.1", 8000, "http://0.0.0.0:8000/v1")
    from rich.console import Console

    console = Console(record=True, width=200)
    assert registered_endpoint("127.0.0.1", 8000, None, console) == "http://127.0.0.1:8000/v1"
    said = console.export_text()
    assert "warning:" in said and "--endpoint URL" in said


def test_a_dashboard_on_every_interface_answers_under_the_hosts_addresses(one_interface):
    from governance.dashboard.security import allowed_hosts, served_origins

    origins = served_origins("0.0.0.0", 8600)
    assert origins[0] == "http://10.9.0.5:8600"
    assert "http://127.0.0.1:8600" in origins and "http://localhost:8600" in origins
    assert not any("0.0.0.0" in origin for origin in origins)
    assert allowed_hosts(served_origins("0.0.0.0", 8600, ["http://dao.example:8600"])) == [
        "10.9.0.5", "127.0.0.1", "dao.example", "localhost"]
