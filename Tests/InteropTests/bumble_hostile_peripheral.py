"""Bumble as a hostile GATT server (peripheral), for InteropTests.

Usage: bumble_hostile_peripheral.py HCI_PORT MODE [MODE ...]
Advertises as F1:F2:F3:F4:F5:F7 (random) on Rootcanal (tcp-client:127.0.0.1:HCI_PORT).
Bumble's own ATT layer is taken off the link: every ATT request from the central is
answered here, by hand. Each connection gets the next MODE; after a disconnection
Bumble advertises again until every mode has had its connection (or 60 s pass).

The database the answers describe: a Battery service 0x0001-0x0005, its Battery Level
characteristic declared at 0x0002 (value 0x0003), a CCCD at 0x0004. Each mode lies in
one answer:
  zero-handle        the characteristic declaration at handle 0x0000
  not-increasing     a Read By Type response listing 0x0003, then 0x0002
  find-info-repeat   every Find Information response lists 0x0004, whatever was asked
  wrong-opcode       Read By Group Type answered with a Read Response
  oversized          Read By Group Type answered with 26 octets at ATT_MTU 23
  entry-length       Read By Group Type entries 5 octets long (6 or 20 are defined)
  error-for-another  Read By Group Type answered with an Error Response for a Read Request
  include-backwards  an include declaration at 0x0005 whose included range is 0x0005-0x0001
  include-repeat     every Read By Type for includes lists the one at 0x0005, whatever was asked
  prepare-echo-changed  a Prepare Write Response whose value's last octet is changed
  prepare-queue-full    the second Prepare Write Request refused: Prepare Queue Full
  mtu-not-supported     Exchange MTU refused: Request Not Supported (Vol 3 Part G §4.3.1)
  att-silent            no ATT PDU answered at all (the kernel without bluetoothd)
Prepare Write Requests are otherwise echoed, Execute Write and Write Requests answered.
In the smp- modes Bumble's SMP layer is off the link too; our central's Pairing Request
is answered by hand:
  smp-key-size-6      a Pairing Response offering a 6-octet maximum key size
  smp-short-response  a Pairing Response one octet short
  smp-extra-keys      a Pairing Response asking for keys the request did not offer
  smp-refused         Pairing Failed, Pairing Not Supported
and every SMP PDU our host sends is printed as {"event": "smp", "mode", "pdu"}.
In the signaling mode Bumble, the peripheral, sends our central the LE signaling
commands of signaling_cases() one at a time and prints {"event": "signaling", "name",
"got"}: what our central sent on LE signaling within 2 s (null if nothing); then
{"event": "signaling-done"}. A parameter update the controller applies prints
{"event": "parameters", "interval_ms", "latency", "timeout_ms"}.
Exchange MTU is otherwise answered with 23.

Prints {"event": "request", "mode", "pdu"} for each ATT PDU received, {"event":
"disconnected", "mode", "requests"} after each link, {"event": "done"} at the end.
"""

import asyncio
import json
import sys

from bumble.device import Device
from bumble.hci import Address
from bumble.transport import open_transport

ATT, SIGNALING, SMP = 0x0004, 0x0005, 0x0006


def signaling_cases():
    """(name, LE signaling PDU) a peripheral sends our central in the signaling mode."""
    def update(ident, lo, hi, latency, timeout):
        return bytes([0x12, ident, 8, 0]) + le16(lo) + le16(hi) + le16(latency) + le16(timeout)
    return [
        # 30-45 ms, latency 0, 4.2 s: valid (Part A §4.20), accepted and applied.
        ("parameter update", update(0x31, 24, 36, 0, 420)),
        ("parameter update, minimum above maximum", update(0x32, 40, 24, 0, 500)),
        # 50 ms with latency 4 needs a timeout above 500 ms; 100 ms is too short.
        ("parameter update, timeout too short", update(0x33, 24, 40, 4, 10)),
        ("parameter update, interval below 7.5 ms", update(0x34, 5, 40, 0, 500)),
        ("parameter update one octet short", bytes([0x12, 0x35, 7, 0]) + le16(24) + le16(40) + le16(0) + b"\x01"),
        ("unknown signaling code", b"\x7f\x36\x00\x00"),
        ("disconnection request for an unknown CID", b"\x06\x37\x04\x00" + le16(0x0040) + le16(0x0041)),
    ]


def emit(**kw):
    print(json.dumps(kw), flush=True)


def le16(v):
    return bytes([v & 0xFF, v >> 8])


def not_found(opcode, start):
    return bytes([0x01, opcode]) + le16(start) + b"\x0a"


def answer(mode, pdu, prepares):
    """The answer to one request, or None for a command. `prepares`: the Prepare Write
    Requests this link sent before this one."""
    op = pdu[0]
    if op == 0x16:  # Prepare Write: echoed (§3.4.6.1), unless this mode lies
        if mode == "prepare-echo-changed" and len(pdu) > 5:
            return b"\x17" + pdu[1:-1] + bytes([pdu[-1] ^ 0xFF])
        if mode == "prepare-queue-full" and prepares >= 1:
            return b"\x01\x16" + pdu[1:3] + b"\x09"
        return b"\x17" + pdu[1:]
    if op == 0x18:
        return b"\x19"
    if op == 0x12:
        return b"\x13"
    if op == 0x02:
        if mode == "mtu-not-supported":
            return b"\x01\x02\x00\x00\x06"
        return b"\x03" + le16(23)
    if op == 0x10:  # Read By Group Type
        start = int.from_bytes(pdu[1:3], "little")
        if mode == "wrong-opcode":
            return b"\x0b\x00"
        if mode == "oversized":
            return b"\x11\x06" + (le16(1) + le16(5) + le16(0x180F)) * 4
        if mode == "entry-length":
            return b"\x11\x05" + le16(1) + le16(5) + b"\x0f"
        if mode == "error-for-another":
            return b"\x01\x0a" + le16(1) + b"\x01"
        if start <= 1:
            return b"\x11\x06" + le16(1) + le16(5) + le16(0x180F)
        return not_found(op, start)
    if op == 0x08:  # Read By Type
        start, type_ = int.from_bytes(pdu[1:3], "little"), pdu[5:]
        if type_ == le16(0x2802):  # Include
            if mode == "include-backwards":
                return b"\x09\x08" + le16(5) + le16(5) + le16(1) + le16(0x180A)
            if mode == "include-repeat":
                return b"\x09\x08" + le16(5) + le16(0x10) + le16(0x12) + le16(0x180A)
            return not_found(op, start)
        if type_ != le16(0x2803):
            return not_found(op, start)
        if mode == "zero-handle":
            return b"\x09\x07" + le16(0) + b"\x12" + le16(3) + le16(0x2A19)
        if mode == "not-increasing":
            return b"\x09\x07" + le16(3) + b"\x12" + le16(4) + le16(0x2A19) + le16(2) + b"\x12" + le16(3) + le16(0x2A19)
        if start <= 2:
            return b"\x09\x07" + le16(2) + b"\x12" + le16(3) + le16(0x2A19)
        return not_found(op, start)
    if op == 0x04:  # Find Information
        start = int.from_bytes(pdu[1:3], "little")
        if mode == "find-info-repeat" or start <= 4:
            return b"\x05\x01" + le16(4) + le16(0x2902)
        return not_found(op, start)
    if op & 0x40 or op in (0x1E,):  # a command, or a confirmation
        return None
    return bytes([0x01, op, 0, 0, 0x06])


def smp_answer(mode, pdu):
    """The answer to our central's Pairing Request in an smp- mode, or None."""
    if pdu[:1] != b"\x01" or len(pdu) != 7:
        return None
    if mode == "smp-key-size-6":
        return b"\x02\x03\x00\x01\x06\x00\x00"
    if mode == "smp-short-response":
        return b"\x02\x03\x00\x01\x10\x00"
    if mode == "smp-extra-keys":
        # Responder keys the request did not ask for (the Link Key bit, 0x08).
        return b"\x02\x03\x00\x01\x10" + bytes([pdu[5], pdu[6] | 0x08])
    if mode == "smp-refused":
        return b"\x05\x05"
    return None


async def main():
    port, modes = sys.argv[1], sys.argv[2:]
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as (source, sink):
        device = Device.with_hci("bumble-hostile", Address("F1:F2:F3:F4:F5:F7"), source, sink)
        queue = list(modes)
        current = {"mode": None, "requests": 0, "prepares": 0}
        finished = asyncio.Event()
        manager = device.l2cap_channel_manager
        passed_on = manager.on_pdu

        def tap(connection, cid, pdu):
            mode = current["mode"]
            if cid == SIGNALING and mode == "signaling":
                signaled.put_nowait(bytes(pdu))
                return
            if cid == SMP and mode and mode.startswith("smp-"):
                pdu = bytes(pdu)
                emit(event="smp", mode=mode, pdu=pdu.hex())
                reply = smp_answer(mode, pdu)
                if reply is not None:
                    connection.send_l2cap_pdu(SMP, reply)
                return
            if cid != ATT:
                return passed_on(connection, cid, pdu)
            pdu = bytes(pdu)
            current["requests"] += 1
            emit(event="request", mode=mode, pdu=pdu.hex())
            reply = None if mode == "att-silent" else answer(mode, pdu, current["prepares"])
            if pdu[:1] == b"\x16":
                current["prepares"] += 1
            if reply is not None:
                connection.send_l2cap_pdu(ATT, reply)

        manager.on_pdu = tap

        signaled = asyncio.Queue()

        async def signal(connection):
            # Each case, then what our central sent on LE signaling within 2 s.
            for name, pdu in signaling_cases():
                while not signaled.empty():
                    signaled.get_nowait()
                connection.send_l2cap_pdu(SIGNALING, pdu)
                try:
                    got = (await asyncio.wait_for(signaled.get(), 2.0)).hex()
                except asyncio.TimeoutError:
                    got = None
                emit(event="signaling", name=name, got=got)
            emit(event="signaling-done")

        def on_connection(connection):
            current["mode"] = queue.pop(0) if queue else None
            current["requests"] = 0
            current["prepares"] = 0
            emit(event="connected", mode=current["mode"])
            if current["mode"] == "signaling":
                connection.on("connection_parameters_update",
                              lambda: emit(event="parameters", interval_ms=connection.parameters.connection_interval,
                                           latency=connection.parameters.peripheral_latency,
                                           timeout_ms=connection.parameters.supervision_timeout))
                asyncio.get_running_loop().create_task(signal(connection))

            def on_disconnection(reason):
                emit(event="disconnected", mode=current["mode"], requests=current["requests"])
                if queue:
                    asyncio.get_running_loop().create_task(device.start_advertising())
                else:
                    finished.set()

            connection.on("disconnection", on_disconnection)

        device.on("connection", on_connection)
        await device.power_on()
        await device.start_advertising()
        emit(event="advertising", address=str(device.random_address))
        try:
            await asyncio.wait_for(finished.wait(), 60)
        except asyncio.TimeoutError:
            pass
        emit(event="done")


if __name__ == "__main__":
    asyncio.run(main())
