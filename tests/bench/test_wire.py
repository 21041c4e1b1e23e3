"""The packet-capture reader turns a pcap of the API port into per-request answer times."""

from __future__ import annotations

import shutil
import struct

import pytest

from bench.wire import WireCapture, action_seconds, exchanges, read_pcap

API = 8000
ACK, FIN_ACK, SYN = 0x10, 0x11, 0x02


def _frame(src: int, dst: int, flags: int, payload: bytes = b"") -> bytes:
    tcp = struct.pack("!HHIIBBHHH", src, dst, 0, 0, 5 << 4, flags, 65535, 0, 0) + payload
    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0, 64, 6, 0, b"\x7f\0\0\1", b"\x7f\0\0\1"
    )
    return b"\0" * 12 + b"\x08\x00" + ip + tcp  # Ethernet header as loopback reports it


def _pcap(path, packets) -> None:
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for when, frame in packets:
        sec, usec = int(when), round((when - int(when)) * 1e6)
        out.append(struct.pack("<IIII", sec, usec, len(frame), len(frame)) + frame)
    path.write_bytes(b"".join(out))


INSERT = b"POST /redfish/v1/Systems/a/VirtualMedia/Cd/Actions/VirtualMedia.InsertMedia HTTP/1.1\r\n"
RESET = b"POST /redfish/v1/Systems/a/Actions/ComputerSystem.Reset HTTP/1.1\r\n"


def test_answer_time_runs_from_the_request_bytes_to_the_servers_fin(tmp_path):
    pcap = tmp_path / "api.pcap"
    _pcap(
        pcap,
        [
            (100.000, _frame(50001, API, SYN)),
            # The client's GIL wait between connect and send is not the server's time.
            (100.500, _frame(50001, API, ACK, INSERT)),
            (100.530, _frame(API, 50001, ACK, b"HTTP/1.1 202 Accepted\r\n")),
            (100.540, _frame(API, 50001, FIN_ACK)),
            (100.900, _frame(50001, API, FIN_ACK)),
            # The same client port again: a new connection, a new exchange.
            (101.000, _frame(50001, API, SYN)),
            (101.001, _frame(50001, API, ACK, RESET)),
            (101.011, _frame(API, 50001, ACK, b"HTTP/1.1 202 Accepted\r\n")),
            # No FIN captured: the last answer byte ends it.
            (102.000, _frame(50002, API, SYN)),
            (102.001, _frame(50002, API, ACK, b"GET /redfish/v1/ HTTP/1.1\r\n")),
        ],
    )
    found = exchanges(read_pcap(pcap), API)
    assert [(e.method, e.path.rsplit(".", 1)[-1]) for e in found] == [
        ("POST", "InsertMedia"),
        ("POST", "Reset"),
    ]  # the unanswered GET is not an exchange
    times = action_seconds(found)
    assert times["InsertMedia"] == [pytest.approx(0.040, abs=1e-4)]
    assert times["Reset"] == [pytest.approx(0.010, abs=1e-4)]


def test_a_file_that_is_not_a_capture_is_refused(tmp_path):
    bad = tmp_path / "x.pcap"
    bad.write_bytes(b"not a pcap file at all.....")
    with pytest.raises(ValueError, match="not a pcap"):
        read_pcap(bad)


@pytest.mark.skipif(not shutil.which("tcpdump"), reason="needs tcpdump")
def test_capture_of_a_real_http_exchange_on_loopback(tmp_path):
    """tcpdump really captures a request to a local server and the reader times it."""
    import http.server
    import threading

    import requests

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            threading.Event().wait(0.05)  # the answer takes at least 50 ms
            self.send_response(204)
            self.send_header("Connection", "close")
            self.end_headers()

        def log_message(self, *args):
            return

    server = http.server.HTTPServer(("127.0.0.1", 0), Slow)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with WireCapture(port, tmp_path / "cap.pcap") as cap:
            if cap.problem:
                pytest.skip(f"cannot capture here: {cap.problem}")
            url = f"http://127.0.0.1:{port}/redfish/v1/Systems/x/Actions/ComputerSystem.Reset"
            assert requests.post(url, json={}, timeout=10).status_code == 204
    finally:
        server.shutdown()
        server.server_close()
    times = action_seconds(cap.exchanges())
    assert len(times["Reset"]) == 1 and 0.05 <= times["Reset"][0] < 5, times
