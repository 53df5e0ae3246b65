"""The interface lookup that frameworks binding by interface name (gloo) use."""

import sys

import pytest

from trainkit.backend import interface_of


@pytest.mark.skipif(sys.platform != "linux", reason="interface names are looked up on Linux only")
def test_interface_of_names_the_interface_holding_an_address():
    assert interface_of("127.0.0.1") == "lo"
    assert interface_of("203.0.113.77") is None  # TEST-NET-3: on no interface of this machine
