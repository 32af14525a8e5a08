"""Per-process CPU in P1 and P2 (`bench.cpu`): the broker is the process listening on the bench's
bootstrap port, found through /proc on a real listening socket, and each process' CPU becomes
µs per delivery."""

from __future__ import annotations

import os
import socket

import pytest

from bench.cpu import bootstrap_broker_pid, listening_links, listening_pid, per_delivery_us


def test_p1_the_broker_is_the_process_listening_on_the_bootstrap_port() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert listening_pid(port) == os.getpid()
        assert bootstrap_broker_pid(f"127.0.0.1:{port}") == os.getpid()
        assert bootstrap_broker_pid(f"localhost:{port},127.0.0.1:1") == os.getpid()
        # a broker on another machine is not sampled here
        assert bootstrap_broker_pid(f"kafka.example.com:{port}") is None
    # closed: nobody listens there any more
    assert listening_pid(port) is None


_LOOPBACK6 = "0000000000000000FFFF00000100007F"  # ::ffff:127.0.0.1, as /proc/net/tcp6 has it


def _row(n: int, local: str, remote: str, state: str, inode: int) -> str:
    """One row of /proc/net/tcp6 (sl, local, remote, st, queues, timers, uid, timeout, inode)."""
    queues = "00000000:00000000 00:00000000 00000000"
    return f"   {n}: {local} {remote} {state} {queues}     0        0 {inode} 1 0"


#: a broker listening on [::ffff:127.0.0.1]:9092 (0x2384) and :9093, one client connected
_TCP6 = "\n".join(
    [
        "  sl  local_address remote_address st tx_queue rx_queue tr tm->when retrnsmt uid"
        " timeout inode",
        _row(0, f"{_LOOPBACK6}:2385", f"{'0' * 32}:0000", "0A", 4403626),
        _row(1, f"{_LOOPBACK6}:2384", f"{'0' * 32}:0000", "0A", 4403981),
        _row(2, f"{_LOOPBACK6}:2384", f"{_LOOPBACK6}:D431", "01", 4409999),
    ]
)


def test_p1_an_ipv6_listener_is_read_from_the_tcp6_table() -> None:
    # the broker's two listeners (9092, 9093) and one accepted connection on 9092
    assert listening_links(_TCP6, 9092) == {"socket:[4403981]"}
    assert listening_links(_TCP6, 9093) == {"socket:[4403626]"}
    assert listening_links(_TCP6, 9094) == set()


def test_p1_a_connected_socket_on_the_port_is_not_a_listener() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            client_port = client.getsockname()[1]
            assert listening_pid(client_port) is None


def test_p1_cpu_per_delivery_is_the_share_of_a_core_over_the_delivery_rate() -> None:
    figures = {
        "worker_cpu_percent": 50.0,  # half a core at 1,000/s: 500 µs each
        "broker_cpu_percent": 20.0,
        "nginx_cpu_percent": None,  # not sampled
        "bench_cpu_percent": 5.0,
        "box_cpu_percent": 150.0,
    }
    found = per_delivery_us(figures, 1000.0)
    assert found["worker_us_per_delivery"] == pytest.approx(500.0)
    assert found["broker_us_per_delivery"] == pytest.approx(200.0)
    assert found["nginx_us_per_delivery"] is None
    assert found["publisher_us_per_delivery"] == pytest.approx(50.0)
    assert found["box_us_per_delivery"] == pytest.approx(1500.0)
    assert set(per_delivery_us(figures, 0.0).values()) == {None}
