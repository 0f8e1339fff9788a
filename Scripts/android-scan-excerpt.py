#!/usr/bin/env python3
"""Builds Fixtures/android-scan.btsnoop: the LE Advertising Reports of two Android
HCI snoop logs published on GitHub, with every device address replaced.

Sources (the phones' own btsnoop_hci.log, datalink 1002 / H4):
  github.com/phlash/blefun   btsnoop_hci.log at eb7c9733223b2d9229201c70bb132d02bc178ce2 (2019, Qualcomm controller)
  github.com/cnrd/yeelock    btsnoop_hci.log at 2d713d78082af7d977055037a4f748e2f5cfc99f (2019)

Only controller-to-host LE Advertising Report events are kept, in recorded order,
byte for byte except the address: each distinct address becomes C0:FE:ED:00:00:nn
(a random address keeps its two top bits, so static / resolvable / non-resolvable
stays what the phone saw). Event type, address type, AD structures and RSSI are
the phones'. Usage: android-scan-excerpt.py BLEFUN.log YEELOCK.log OUT.btsnoop
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
        body = data[i + 24:i + 24 + incl]
        i += 24 + incl
        yield flags, ts, body


def main(out_path, *paths):
    mapping = {}
    out = bytearray(b"btsnoop\0" + struct.pack(">II", 1, 1002))
    kept = 0
    end = None  # the previous source's last timestamp
    for path in paths:
        shift = None
        for flags, ts, body in records(path):
            # H4 event (0x04), LE Meta (0x3E), LE Advertising Report (0x02), one report.
            if len(body) < 14 or body[0] != 0x04 or body[1] != 0x3E or body[3] != 0x02 or body[4] != 1:
                continue
            if shift is None:
                # The sources one after the other, a second apart, each with its own timing.
                shift = 0 if end is None else end + 1_000_000 - ts
            addr_type, addr = body[6], bytes(body[7:13])
            key = (addr_type, addr)
            if key not in mapping:
                n = len(mapping) + 1
                top = (addr[5] & 0xC0) if addr_type == 1 else 0xC0
                mapping[key] = bytes([n, 0, 0, 0xED, 0xFE, top | 0x00])
            new = body[:7] + mapping[key] + body[13:]
            end = ts + shift
            out += struct.pack(">IIIIq", len(new), len(new), flags, 0, end) + new
            kept += 1
    open(out_path, "wb").write(out)
    print(f"{kept} reports, {len(mapping)} devices -> {out_path}")


if __name__ == "__main__":
    main(sys.argv[3], sys.argv[1], sys.argv[2])
