#!/usr/bin/env python3
"""Builds Fixtures/android-smp-legacy.btsnoop: one LE legacy pairing (Just Works,
bonding, keys distributed both ways: LTK with EDIV/Rand, IRK and identity address,
CSRK) between an Android phone (Samsung Galaxy S7 edge, central) and a Xiaomi Mi
Band 2, from the phone's own HCI snoop log published on GitHub.

Source (btsnoop_hci.log, datalink 1002 / H4):
  github.com/mtoslalibu/ec521  docs/bt-logs/btsnoop_hci.log at 5d0f1af7b5077fe49a3b1108187fbc00602ab349 (2018)

Kept, in recorded order and byte for byte except addresses: the pairing link's LE
(Enhanced) Connection Complete, every ACL frame on that link's SMP channel (CID
0x0006), LE Start Encryption and its Command Status, LE Long Term Key Request /
Reply, Encryption Change and Key Refresh Complete. Every device address (the band's,
the RPAs in the connection event, the phone's identity address in Identity Address
Information) becomes C0:FE:ED:00:00:nn (a random address keeps its two top bits).
The keys are the phone's and the band's, as published. Usage:
android-smp-excerpt.py EC521.log OUT.btsnoop
"""
import struct
import sys


def records(path):
    data = open(path, "rb").read()
    assert data[:8] == b"btsnoop\0", path
    version, datalink = struct.unpack(">II", data[8:16])
    assert version == 1 and datalink == 1002, (version, datalink)
    i = 16
    while i + 24 <= len(data):
        orig, incl, flags, drops, ts = struct.unpack(">IIIIq", data[i:i + 24])
        yield flags, ts, data[i + 24:i + 24 + incl]
        i += 24 + incl


def main(path, out_path):
    frames = list(records(path))
    # The link: the first SMP frame's (ACL, CID 6).
    def smp_handle(body):
        if len(body) >= 10 and body[0] == 0x02 and body[7] == 0x06 and body[8] == 0x00:
            return (body[1] | body[2] << 8) & 0x0FFF
        return None
    first = next(i for i, (_, _, b) in enumerate(frames) if smp_handle(b) is not None)
    handle = smp_handle(frames[first][2])
    # The connection event that made it: the last one for the handle before the first SMP frame.
    def connection_event(body):
        return len(body) >= 15 and body[0] == 0x04 and body[1] == 0x3E and body[3] in (0x01, 0x0A) and body[4] == 0 \
            and (body[5] | body[6] << 8) == handle
    start = max(i for i in range(first) if connection_event(frames[i][2]))
    end = next((i for i in range(first, len(frames)) if len(frames[i][2]) >= 7 and frames[i][2][0] == 0x04 and frames[i][2][1] == 0x05
                and (frames[i][2][4] | frames[i][2][5] << 8) == handle), len(frames))

    mapping = {}

    def replace(addr, random):
        addr = bytes(addr)
        if addr == bytes(6):
            return addr
        if addr not in mapping:
            top = (addr[5] & 0xC0) if random else 0xC0
            mapping[addr] = bytes([len(mapping) + 1, 0, 0, 0xED, 0xFE, top])
        return mapping[addr]

    out = bytearray(b"btsnoop\0" + struct.pack(">II", 1, 1002))
    kept = 0
    for flags, ts, body in frames[start:end]:
        b = bytearray(body)
        keep = False
        if b[0] == 0x02 and smp_handle(b) == handle:
            keep = True
            if b[9] == 0x09 and len(b) >= 17:  # Identity Address Information
                b[11:17] = replace(b[11:17], b[10] == 1)
        elif b[0] == 0x01 and len(b) >= 6:
            opcode = b[1] | b[2] << 8
            keep = opcode in (0x2019, 0x201A, 0x201B) and (b[4] | b[5] << 8) == handle
        elif b[0] == 0x04:
            code = b[1]
            if code == 0x3E and connection_event(b):
                keep = True
                b[9:15] = replace(b[9:15], b[8] & 1 == 1)
                if b[3] == 0x0A:
                    b[15:21] = replace(b[15:21], True)
                    b[21:27] = replace(b[21:27], True)
            elif code == 0x3E and b[3] == 0x05 and (b[4] | b[5] << 8) == handle:  # LE Long Term Key Request
                keep = True
            elif code in (0x08, 0x30) and (b[4] | b[5] << 8) == handle:  # Encryption Change, Key Refresh Complete
                keep = True
            elif code == 0x0F and (b[5] | b[6] << 8) in (0x2019, 0x201A, 0x201B):  # Command Status
                keep = True
            elif code == 0x0E and (b[4] | b[5] << 8) in (0x201A, 0x201B):  # LTK (Negative) Reply complete
                keep = True
        if keep:
            out += struct.pack(">IIIIq", len(b), len(b), flags, 0, ts) + bytes(b)
            kept += 1
    open(out_path, "wb").write(out)
    print(f"{kept} frames of handle 0x{handle:04x}, {len(mapping)} addresses replaced -> {out_path}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
