"""Response times of the API as the network sees them: a packet capture of its port on loopback.

sushy's own timestamps include the client's CPU and GIL waits, which on a shared 2-core machine
running 64 client threads are most of the figure. The capture timestamps each packet in the
kernel, so *request sent -> response complete* is the BMC's answer time as a capture on its
network interface would show it: the accept queue and the request's processing, nothing of the
client. Needs ``tcpdump`` (Debian package ``tcpdump``) and the right to capture (root).
"""

from __future__ import annotations

import logging
import shutil
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("fleetfish.bench")

SNAPLEN = 400  # link + IP + TCP headers and the request line of the longest action path
LINKTYPE_ETHERNET = 1  # what Linux's loopback reports
LINKTYPE_LINUX_SLL = 113  # "any" interface
METHODS = (b"GET ", b"POST ", b"PATCH ", b"PUT ", b"DELETE ", b"HEAD ")
FIN, SYN = 0x01, 0x02


@dataclass
class Exchange:
    """One HTTP request on its own connection (Ironic sends ``Connection: close``)."""

    method: str
    path: str
    request_sent: float  # first request byte on the wire (kernel timestamp, epoch seconds)
    response_done: float  # the server's FIN after its answer, else its last answer byte

    @property
    def seconds(self) -> float:
        return self.response_done - self.request_sent


def available() -> str:
    """'' when a capture can run here, else why not."""
    if not shutil.which("tcpdump"):
        return "tcpdump not installed (apt-get install tcpdump)"
    return ""


class WireCapture:
    """``with WireCapture(port, path) as cap: ...; cap.exchanges()`` (empty when unavailable)."""

    def __init__(self, port: int, path: Path, interface: str = "lo"):
        self.port = port
        self.path = Path(path)
        self.interface = interface
        self.problem = available()
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> WireCapture:
        if self.problem:
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        err = self.path.with_suffix(".log")
        self._proc = subprocess.Popen(
            # Immediate mode and -U: packets are read and written as they come; otherwise the
            # last buffer's worth is still in the kernel when tcpdump is stopped, and is lost.
            ["tcpdump", "-i", self.interface, "-n", "--immediate-mode", "-U", "-s", str(SNAPLEN)]
            + ["-w", str(self.path), f"tcp port {self.port}"],
            stdout=subprocess.DEVNULL,
            stderr=err.open("wb"),
        )
        # tcpdump says "listening on" once its filter is in place; bounded wait for that line.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self._proc.poll() is None:
            if b"listening on" in err.read_bytes():
                return self
            time.sleep(0.05)
        self.problem = err.read_bytes().decode(errors="replace").strip() or "tcpdump did not start"
        self._stop()
        return self

    def _settle(self, quiet: float = 0.3, limit: float = 3.0) -> None:
        """Wait (bounded) until the capture file stops growing: the last packets are written."""
        deadline = time.monotonic() + limit
        size = -1
        while time.monotonic() < deadline:
            now = self.path.stat().st_size if self.path.exists() else 0
            if now == size:
                return
            size = now
            time.sleep(quiet)

    def _stop(self) -> None:
        if self._proc and self._proc.poll() is None:
            self._settle()
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)

    def __exit__(self, *exc) -> None:
        self._stop()

    def exchanges(self) -> list[Exchange]:
        if self.problem or not self.path.exists():
            return []
        return exchanges(read_pcap(self.path), self.port)


@dataclass
class Segment:
    time: float
    src_port: int
    dst_port: int
    flags: int
    payload: bytes


def read_pcap(path: Path) -> list[Segment]:
    """TCP segments over IPv4 or IPv6 from a classic pcap file (what ``tcpdump -w`` writes)."""
    data = Path(path).read_bytes()
    if len(data) < 24:
        return []
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian = ">"
    else:
        raise ValueError(f"{path}: not a pcap file")
    fraction = 1e-9 if magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d") else 1e-6
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    link_len = {LINKTYPE_ETHERNET: 14, LINKTYPE_LINUX_SLL: 16}.get(linktype)
    if link_len is None:
        raise ValueError(f"{path}: link type {linktype} not handled")
    segments = []
    offset = 24
    while offset + 16 <= len(data):
        sec, frac, captured, _ = struct.unpack(endian + "IIII", data[offset : offset + 16])
        frame = data[offset + 16 : offset + 16 + captured]
        offset += 16 + captured
        segment = _tcp(frame[link_len:], sec + frac * fraction)
        if segment:
            segments.append(segment)
    return segments


def _tcp(packet: bytes, when: float) -> Segment | None:
    if not packet:
        return None
    version = packet[0] >> 4
    if version == 4:
        header, protocol = (packet[0] & 0x0F) * 4, packet[9]
    elif version == 6:
        header, protocol = 40, packet[6]
    else:
        return None
    if protocol != 6 or len(packet) < header + 20:
        return None
    tcp = packet[header:]
    src, dst = struct.unpack("!HH", tcp[:4])
    data_offset = (tcp[12] >> 4) * 4
    return Segment(when, src, dst, tcp[13], tcp[data_offset:])


def exchanges(segments: list[Segment], server_port: int) -> list[Exchange]:
    """One Exchange per connection that carried a request and got an answer."""
    open_: dict[int, dict] = {}  # client port -> the connection in progress on it
    done: list[Exchange] = []

    def close(conn: dict) -> None:
        if conn.get("request") and conn.get("answered"):
            done.append(Exchange(conn["method"], conn["path"], conn["request"], conn["answered"]))

    for seg in segments:
        if seg.dst_port == server_port:  # client -> server
            client = seg.src_port
            if seg.flags & SYN:  # a new connection on this port: the old one is over
                if client in open_:
                    close(open_.pop(client))
                open_[client] = {}
                continue
            conn = open_.setdefault(client, {})
            if seg.payload and "request" not in conn and seg.payload.startswith(METHODS):
                line = seg.payload.split(b"\r\n", 1)[0].split(b" ")
                conn.update(
                    request=seg.time,
                    method=line[0].decode(),
                    path=line[1].decode(errors="replace") if len(line) > 1 else "",
                )
        elif seg.src_port == server_port:  # server -> client
            conn = open_.get(seg.dst_port)
            if conn is None or "request" not in conn or conn.get("fin"):
                continue
            if seg.payload:
                conn["answered"] = seg.time
            if seg.flags & FIN and conn.get("answered"):
                conn["answered"] = seg.time
                conn["fin"] = True
    for conn in open_.values():
        close(conn)
    return sorted(done, key=lambda e: e.request_sent)


def action_seconds(found: list[Exchange]) -> dict[str, list[float]]:
    """Wire times of InsertMedia and Reset POSTs, the calls the fleet targets are about."""
    out: dict[str, list[float]] = {}
    for ex in found:
        if ex.method != "POST":
            continue
        for action in ("InsertMedia", "Reset"):
            if ex.path.split("?")[0].endswith(f".{action}"):
                out.setdefault(action, []).append(ex.seconds)
    return out
