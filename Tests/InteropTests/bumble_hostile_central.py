"""Bumble as a hostile central against our GATT server, for InteropTests.

Usage: bumble_hostile_central.py HCI_PORT ADDRESS VALUE CCCD LONG
Connects over Rootcanal (tcp-client:127.0.0.1:HCI_PORT) to ADDRESS (public). Bumble's
own ATT and SMP layers are taken off the link: every PDU our host sends on the ATT,
LE signaling and SMP channels is captured here instead, and the cases below are sent
as raw L2CAP PDUs, each malformed or out of place in its own way. VALUE is the handle
of a read/write/indicate characteristic value, CCCD its Client Characteristic
Configuration, LONG the handle of a 300-octet read-only value.

For each case prints {"event": "case", "name", "cid", "sent", "got"}: "got" is the hex
of the first PDU our host sent on that channel within 2 s (null if none). A case that
expects no answer is followed by an ATT Read Request for VALUE, whose answer shows the
link still serves (its own case, "<name>: still served"). Requests our host makes on
its own (Exchange MTU) are answered and never taken for an answer.

Then opens LE credit-based channels to SPSM 0x0081 (LE Credit Based Connection Request,
source CIDs 0x0050...) and breaks one rule on each (see channel_cases); prints
{"event": "channel-case", "name", "response", "got"}: our host's connection response
and the next signaling PDU it sent (its Disconnection Request, identifier shown as 00).
Then disconnects and prints {"event": "done"}.
"""

import asyncio
import json
import logging
import os
import sys

from bumble.device import Device
from bumble.hci import Address, HCI_AclDataPacket
from bumble.transport import open_transport

ATT, SIGNALING, SMP = 0x0004, 0x0005, 0x0006
EATT = 0x0060  # Bumble's source CID for the one enhanced ATT bearer it opens


def emit(**kw):
    print(json.dumps(kw), flush=True)


def le16(v):
    return bytes([v & 0xFF, v >> 8])


def cases(value, cccd, long):
    """(name, channel, PDU, answered): what a hostile central sends, in order."""
    return [
        # ATT (Vol 3 Part F §3.4; an Error Response is 01 <request opcode> <handle> <code>).
        ("read handle 0", ATT, b"\x0a" + le16(0), True),
        ("read a handle past the database", ATT, b"\x0a" + le16(0xFFFF), True),
        ("read request one octet short", ATT, b"\x0a\x01", True),
        ("find information from handle 0", ATT, b"\x04" + le16(0) + le16(0xFFFF), True),
        ("find information start after end", ATT, b"\x04" + le16(5) + le16(3), True),
        ("find by type value from handle 0", ATT, b"\x06" + le16(0) + le16(0xFFFF) + le16(0x2800) + le16(0xFFF0), True),
        ("read by group type of characteristics", ATT, b"\x10" + le16(1) + le16(0xFFFF) + le16(0x2803), True),
        ("read by type with a 3-octet UUID", ATT, b"\x08" + le16(1) + le16(0xFFFF) + b"\x03\x28\x00", True),
        ("read multiple with one handle", ATT, b"\x0e" + le16(value), True),
        ("read blob past the end", ATT, b"\x0c" + le16(long) + le16(301), True),
        ("read blob at the end", ATT, b"\x0c" + le16(long) + le16(300), True),
        ("write a read-only value", ATT, b"\x12" + le16(long) + b"\x01", True),
        ("write one octet to a CCCD", ATT, b"\x12" + le16(cccd) + b"\x01", True),
        ("notifications from a CCCD that only indicates", ATT, b"\x12" + le16(cccd) + b"\x01\x00", True),
        ("write command to a read-only value", ATT, b"\x52" + le16(long) + b"\x01", False),
        ("signed write with no signing key", ATT, b"\xd2" + le16(value) + b"\x01" + bytes(12), False),
        ("unknown request opcode", ATT, b"\x30\x01\x02", True),
        ("unknown command opcode", ATT, b"\x70\x01\x02", False),
        ("prepare write longer than ATT_MTU", ATT, b"\x16" + le16(value) + le16(0) + bytes(30), True),
        ("prepare write to a read-only value", ATT, b"\x16" + le16(long) + le16(0) + b"\x01", True),
        ("execute write with reserved flags", ATT, b"\x18\x02", True),
        ("execute write with nothing prepared", ATT, b"\x18\x01", True),
        ("the client's indication", ATT, b"\x1d" + le16(value) + b"\x05", True),
        ("a confirmation nobody asked for", ATT, b"\x1e", False),
        ("exchange MTU below the minimum", ATT, b"\x02" + le16(22), True),
        ("read the long value after that exchange", ATT, b"\x0a" + le16(long), True),
        # LE signaling (Vol 3 Part A §4).
        ("disconnection request for an unknown CID", SIGNALING, b"\x06\x07\x04\x00" + le16(0x0040) + le16(0x0041), True),
        ("unknown signaling code", SIGNALING, b"\x7f\x08\x00\x00", True),
        ("signaling length longer than the frame", SIGNALING, b"\x06\x09\x08\x00" + le16(0x0040) + le16(0x0041), True),
        ("connection parameter update request from the central", SIGNALING,
         b"\x12\x0a\x08\x00" + le16(6) + le16(12) + le16(0) + le16(400), True),
        ("LE credit based connection to an unused SPSM", SIGNALING,
         b"\x14\x0b\x0a\x00" + le16(0x0080) + le16(0x0040) + le16(23) + le16(23) + le16(1), True),
        ("signaling identifier 0", SIGNALING, b"\x06\x00\x04\x00" + le16(0x0040) + le16(0x0041), False),
        # SMP (Vol 3 Part H §3.5).
        ("pairing request one octet short", SMP, b"\x01\x03\x00\x01\x10\x07", True),
        ("pairing confirm before any pairing request", SMP, b"\x03" + bytes(16), True),
        ("unknown SMP code", SMP, b"\x7e\x00", True),
        ("pairing request with a 6-octet key", SMP, b"\x01\x03\x00\x01\x06\x07\x07", True),
    ]


def acl_cases(value):
    """(name, packet boundary flag, ACL payload): L2CAP framing a hostile central breaks."""
    read = b"\x0a" + le16(value)
    return [
        # A first fragment whose B-frame says 10 octets and brings 3; the next first
        # fragment (the read that follows) starts a new frame.
        ("B-frame shorter than its length field", 0, le16(10) + le16(ATT) + read),
        # A continuing fragment with nothing started.
        ("continuing fragment with no start", 1, read),
        # A B-frame whose 5 octets exceed its length field's 3.
        ("B-frame longer than its length field", 0, le16(3) + le16(ATT) + read + b"\xff\xff"),
    ]


def drain_all(inbound):
    for q in inbound.values():
        while not q.empty():
            q.get_nowait()


def channel_cases():
    """(name, our source CID, initial credits, frames to send given the CID our host chose)."""
    return [
        # An SDU length of 65 on a channel whose MTU is 64.
        ("SDU longer than the MTU", 0x0050, 5, lambda dcid: [(dcid, le16(65) + bytes(10))]),
        # A K-frame of 40 octets where the MPS is 30.
        ("K-frame longer than the MPS", 0x0051, 5, lambda dcid: [(dcid, le16(38) + bytes(38))]),
        # Three K-frames (each a 1-octet SDU) on the 2 credits granted.
        ("more K-frames than credits", 0x0052, 5, lambda dcid: [(dcid, le16(1) + b"\x01")] * 3),
        # Flow Control Credit Ind taking our credits past 65535 (65535 granted, 1 more).
        ("credits beyond 65535", 0x0053, 65535, lambda dcid: [(SIGNALING, b"\x16\x21\x04\x00" + le16(0x0053) + le16(1))]),
    ]


async def main():
    if os.environ.get("BUMBLE_LOGLEVEL"):
        logging.basicConfig(level=os.environ["BUMBLE_LOGLEVEL"].upper())
    port, address = sys.argv[1], sys.argv[2]
    value, cccd, long = (int(a, 0) for a in sys.argv[3:6])
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as (source, sink):
        device = Device.with_hci("bumble-hostile", Address("F2:F3:F4:F5:F6:F7"), source, sink)
        await device.power_on()
        inbound = {cid: asyncio.Queue() for cid in (ATT, SIGNALING, SMP, EATT)}
        manager = device.l2cap_channel_manager
        passed_on = manager.on_pdu

        # While Bumble pairs, its Security Manager gets the SMP PDUs.
        pairing = {"on": False}

        def tap(connection, cid, pdu):
            pdu = bytes(pdu)
            if cid == SMP and pairing["on"]:
                passed_on(connection, cid, pdu)
                return
            if cid == ATT and pdu[:1] == b"\x02":
                # Our host's own Exchange MTU Request: answered, not an answer to a case.
                connection.send_l2cap_pdu(ATT, b"\x03" + le16(23))
                return
            if cid in inbound:
                inbound[cid].put_nowait(pdu)
                # A request our host makes of the central (parameter update) still gets Bumble's answer.
                if cid == SIGNALING and pdu[:1] == b"\x12":
                    passed_on(connection, cid, pdu)
                return
            passed_on(connection, cid, pdu)

        manager.on_pdu = tap
        connection = await asyncio.wait_for(device.connect(Address(address, Address.PUBLIC_DEVICE_ADDRESS)), 20)
        emit(event="connected")

        async def answer(cid, timeout):
            try:
                return (await asyncio.wait_for(inbound[cid].get(), timeout)).hex()
            except asyncio.TimeoutError:
                return None

        for name, cid, pdu, answered in cases(value, cccd, long):
            drain_all(inbound)
            connection.send_l2cap_pdu(cid, pdu)
            emit(event="case", name=name, cid=cid, sent=pdu.hex(), got=await answer(cid, 2.0 if answered else 1.0))
            if not answered:
                connection.send_l2cap_pdu(ATT, b"\x0a" + le16(value))
                emit(event="case", name=f"{name}: still served", cid=ATT, sent=("0a" + le16(value).hex()),
                     got=await answer(ATT, 2.0))
        # ACL packets whose L2CAP framing is broken (Part A §3, §7.2), sent as raw HCI ACL
        # data through Bumble's host: each is answered by nothing, and a read after it
        # shows the link still serves (the read is a fresh B-frame in a first fragment).
        queue = device.host.connections[connection.handle].acl_packet_queue
        for name, pb, data in acl_cases(value):
            drain_all(inbound)
            queue.enqueue(HCI_AclDataPacket(connection_handle=connection.handle, pb_flag=pb, bc_flag=0,
                                            data_total_length=len(data), data=data), connection.handle)
            emit(event="case", name=name, cid=ATT, sent=data.hex(), got=await answer(ATT, 1.0))
            connection.send_l2cap_pdu(ATT, b"\x0a" + le16(value))
            emit(event="case", name=f"{name}: still served", cid=ATT, sent=("0a" + le16(value).hex()),
                 got=await answer(ATT, 2.0))

        # LE credit-based channels to SPSM 0x0081, which our side publishes with MTU 64,
        # MPS 30 and 2 initial credits and never reads from (so it gives no credits back).
        # Each channel breaks one rule of Part A §10.1 / §4.24; our host must answer with
        # its Disconnection Request for that channel, answered here in turn.
        for name, scid, credits, frames in channel_cases():
            drain_all(inbound)
            connection.send_l2cap_pdu(SIGNALING, b"\x14\x20\x0a\x00" + le16(0x0081) + le16(scid) + le16(100) + le16(100) + le16(credits))
            response = await answer(SIGNALING, 2.0)
            got = None
            if response and len(response) == 28 and response.startswith("15"):
                dcid = int.from_bytes(bytes.fromhex(response[8:12]), "little")
                for cid, frame in frames(dcid):
                    connection.send_l2cap_pdu(cid, frame)
                got = await answer(SIGNALING, 2.0)
                if got and got.startswith("06"):
                    # The identifier is our host's to choose: shown as 00.
                    ident = bytes.fromhex(got[2:4])
                    connection.send_l2cap_pdu(SIGNALING, b"\x07" + ident + b"\x04\x00" + bytes.fromhex(got[8:16]))
                    got = got[:2] + "00" + got[4:]
            emit(event="channel-case", name=name, response=response, got=got)
        # An enhanced ATT bearer (SPSM 0x0027, Part G §5.3) asked for on the unencrypted
        # link: its channel shall be encrypted (§5.3.2), so it is refused, "insufficient
        # authentication" (no key, Vol 3, Part C, §10.3.1). Then Bumble pairs.
        drain_all(inbound)
        connection.send_l2cap_pdu(SIGNALING, b"\x17\x3f\x0a\x00" + le16(0x0027) + le16(64) + le16(64) + le16(1) + le16(EATT))
        emit(event="eatt-case", name="enhanced bearer, unencrypted", got=await answer(SIGNALING, 2.0))
        pairing["on"] = True
        try:
            await asyncio.wait_for(connection.pair(), 20)
        except Exception as e:
            emit(event="pairing-error", error=type(e).__name__, detail=str(e))
        pairing["on"] = False
        emit(event="paired", encrypted=connection.is_encrypted)
        # On the encrypted link, an enhanced ATT bearer with a single credit for our
        # host, then: a read it can answer; a second read whose answer must wait for a
        # credit while the unenhanced bearer still answers at once; two credits, which
        # release that answer and leave one for Exchange MTU, refused on an enhanced
        # bearer. Each prints {"event": "eatt-case", "name", "got"}: the K-frame payload
        # our host sent on the channel (SDU length and ATT PDU) within the wait, or null.
        drain_all(inbound)
        connection.send_l2cap_pdu(SIGNALING, b"\x17\x40\x0a\x00" + le16(0x0027) + le16(64) + le16(64) + le16(1) + le16(EATT))
        response = await answer(SIGNALING, 2.0)
        emit(event="eatt-case", name="enhanced bearer", got=response)
        if response and response.startswith("1840"):
            dcid = int.from_bytes(bytes.fromhex(response[-4:]), "little")

            def sdu(pdu):
                return le16(len(pdu)) + pdu

            connection.send_l2cap_pdu(dcid, sdu(b"\x0a" + le16(value)))
            emit(event="eatt-case", name="read on the one credit", got=await answer(EATT, 2.0))
            connection.send_l2cap_pdu(dcid, sdu(b"\x0a" + le16(value)))
            emit(event="eatt-case", name="read with no credit left", got=await answer(EATT, 1.5))
            connection.send_l2cap_pdu(ATT, b"\x0a" + le16(value))
            emit(event="eatt-case", name="meanwhile on the unenhanced bearer", got=await answer(ATT, 2.0))
            connection.send_l2cap_pdu(SIGNALING, b"\x16\x41\x04\x00" + le16(EATT) + le16(2))
            emit(event="eatt-case", name="after two credits", got=await answer(EATT, 2.0))
            connection.send_l2cap_pdu(dcid, sdu(b"\x02" + le16(64)))
            emit(event="eatt-case", name="exchange MTU on the enhanced bearer", got=await answer(EATT, 2.0))
        await connection.disconnect()
        emit(event="done")


if __name__ == "__main__":
    asyncio.run(main())
