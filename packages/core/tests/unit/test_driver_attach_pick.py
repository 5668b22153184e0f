"""Which node a driver attaches to when several of the cluster's nodes have sockets it can
reach (one machine, several network namespaces sharing its files): the one on an
address of the driver's own network namespace, else the first."""

from __future__ import annotations

from dataclasses import dataclass

from rayfield._private.driver.attach import is_own_address, node_host, pick_local


@dataclass(frozen=True)
class Node:
    address: str


def test_the_node_on_an_own_address_is_picked_over_an_earlier_one() -> None:
    nodes = [Node("10.9.9.11:4000"), Node("10.9.9.1:4001")]
    assert pick_local(nodes, lambda host: host == "10.9.9.1") is nodes[1]


def test_without_an_own_address_the_first_node_is_picked() -> None:
    nodes = [Node("10.9.9.11:4000"), Node("10.9.9.12:4001")]
    assert pick_local(nodes, lambda host: False) is nodes[0]


def test_node_host_strips_the_port_and_ipv6_brackets() -> None:
    assert node_host("10.0.0.5:6379") == "10.0.0.5"
    assert node_host("[::1]:6379") == "::1"


def test_loopback_is_own_and_a_documentation_address_is_not() -> None:
    assert is_own_address("127.0.0.1")
    assert not is_own_address("192.0.2.7")  # TEST-NET-1: on no interface
    assert not is_own_address("not-an-ip")
