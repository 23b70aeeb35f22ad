"""Which addresses a process tree listens on, read from /proc (no ss/netstat needed)."""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path


def _listening_inodes() -> dict[str, str]:
    found: dict[str, str] = {}
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != "0A":  # LISTEN
                continue
            hex_addr, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_addr)
            if family == socket.AF_INET:
                addr = socket.inet_ntop(family, struct.pack("<I", int(hex_addr, 16)))
            else:
                addr = socket.inet_ntop(
                    family, b"".join(struct.pack("<I", w) for w in struct.unpack(">4I", raw))
                )
            found[fields[9]] = f"{addr}:{int(hex_port, 16)}"
    return found


def listening_addresses(pids: list[int]) -> list[str]:
    inodes = _listening_inodes()
    out = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inode = target[8:-1]
                if inode in inodes:
                    out.append(inodes[inode])
    return out
