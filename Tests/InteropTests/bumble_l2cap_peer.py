"""Bumble's LE credit-based channels (bumble.l2cap.LeCreditBasedChannel) against ours,
for InteropTests.

Usage:
  bumble_l2cap_peer.py HCI_PORT server
      Advertises as F1:F2:F3:F4:F5:F6 (random static) and listens on SPSM 0x0080
      (MTU 1024, MPS 100, 4 credits); echoes every SDU back on the same channel.
      SPSM 0x0081 has no server (Bumble refuses it). Exits after the link goes down.
  bumble_l2cap_peer.py HCI_PORT client ADDRESS TOTAL
      Connects to ADDRESS (public), opens a channel to SPSM 0x0082 (MTU 512, MPS 60,
      3 credits), sends SDUs of 1, 23, 100, 512, 300, ... bytes (TOTAL bytes in all),
      reads as many bytes back (our side echoes), then disconnects the channel and
      the link.
  bumble_l2cap_peer.py HCI_PORT enhanced-client ADDRESS
      Connects to ADDRESS (public), opens two channels to SPSM 0x0082 with one Credit
      Based Connection Request (enhanced mode: MTU 512, MPS 64, 3 credits), sends
      three SDUs on each and reads the echoes, then sends on the first channel only
      the first K-frame of a 400-byte SDU (its length and 40 bytes) and disconnects
      the link in the middle of that SDU.
The server also takes enhanced-mode requests (Bumble serves both on one SPSM).
Prints one JSON object per line.
"""

import asyncio
import json
import logging
import os
import struct
import sys

from bumble import l2cap
from bumble.device import Device
from bumble.hci import Address
from bumble.transport import open_transport


def emit(**kw):
    print(json.dumps(kw), flush=True)


def sizes(total, mtu):
    pattern = [1, 23, 100, mtu, 300, 7, mtu - 1, 64]
    out, i = [], 0
    while total > 0:
        n = min(pattern[i % len(pattern)], total)
        out.append(n)
        total -= n
        i += 1
    return out


async def server(device):
    disconnected = asyncio.Event()

    def on_channel(channel):
        emit(event="channel", mtu=channel.peer_mtu, mps=channel.peer_mps, credits=channel.peer_credits)
        received = {"sdus": 0, "bytes": 0}

        def sink(sdu):
            received["sdus"] += 1
            received["bytes"] += len(sdu)
            channel.write(sdu)

        channel.sink = sink
        channel.on("close", lambda: emit(event="channel-closed", **received))

    device.create_l2cap_server(spec=l2cap.LeCreditBasedChannelSpec(psm=0x80, mtu=1024, mps=100, max_credits=4), handler=on_channel)
    device.on("connection", lambda c: c.on("disconnection", lambda reason: (emit(event="disconnected", reason=reason), disconnected.set())))
    await device.start_advertising(auto_restart=False)
    emit(event="advertising")
    try:
        await asyncio.wait_for(disconnected.wait(), 120)
    except asyncio.TimeoutError:
        emit(event="timeout")


async def client(device, address, total):
    connection = await device.connect(Address(address, Address.PUBLIC_DEVICE_ADDRESS))
    emit(event="connected")
    channel = await device.create_l2cap_channel(connection, l2cap.LeCreditBasedChannelSpec(psm=0x82, mtu=512, mps=60, max_credits=3))
    emit(event="channel", mtu=channel.peer_mtu, mps=channel.peer_mps, credits=channel.peer_credits)
    back = bytearray()
    done = asyncio.Event()
    expected = total

    def sink(sdu):
        back.extend(sdu)
        if len(back) >= expected:
            done.set()

    channel.sink = sink
    sent = bytearray()
    for i, n in enumerate(sizes(total, min(512, channel.peer_mtu))):
        sdu = bytes((i + k) & 0xFF for k in range(n))
        sent.extend(sdu)
        channel.write(sdu)
        await channel.drain()
    await asyncio.wait_for(done.wait(), 120)
    emit(event="echoed", bytes=len(back), same=bytes(back) == bytes(sent))
    await channel.disconnect()
    emit(event="channel-closed")
    await connection.disconnect()


async def enhanced_client(device, address):
    connection = await device.connect(Address(address, Address.PUBLIC_DEVICE_ADDRESS))
    emit(event="connected")
    spec = l2cap.LeCreditBasedChannelSpec(psm=0x82, mtu=512, mps=64, max_credits=3)
    channels = await device.l2cap_channel_manager.create_enhanced_credit_based_channels(connection, spec, 2)
    emit(event="channels", count=len(channels), mtu=[c.peer_mtu for c in channels], mps=[c.peer_mps for c in channels],
         cids=[c.destination_cid for c in channels])
    sdus = {i: [bytes([i + 1]) * n for n in (10, 200, 512)] for i in range(len(channels))}
    back = {i: bytearray() for i in range(len(channels))}
    done = asyncio.Event()
    total = sum(len(s) for v in sdus.values() for s in v)

    def sink_for(i):
        def sink(sdu):
            back[i].extend(sdu)
            if sum(len(b) for b in back.values()) >= total:
                done.set()
        return sink

    for i, c in enumerate(channels):
        c.sink = sink_for(i)
    for i, c in enumerate(channels):
        for sdu in sdus[i]:
            c.write(sdu)
        await c.drain()
    await asyncio.wait_for(done.wait(), 60)
    emit(event="echoed", same=all(bytes(back[i]) == b"".join(sdus[i]) for i in back))
    # The first K-frame of a 400-byte SDU (SDU length, then 40 bytes), then the link goes.
    channels[0].send_pdu(struct.pack("<H", 400) + bytes(40))
    await asyncio.sleep(0.5)
    await connection.disconnect()
    emit(event="disconnected-mid-sdu")


async def main():
    if os.environ.get("BUMBLE_LOGLEVEL"):
        logging.basicConfig(level=os.environ["BUMBLE_LOGLEVEL"].upper())
    port, mode = sys.argv[1], sys.argv[2]
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as (source, sink):
        device = Device.with_hci("bumble-l2cap", Address("F1:F2:F3:F4:F5:F6"), source, sink)
        await device.power_on()
        if mode == "server":
            await server(device)
        elif mode == "enhanced-client":
            await enhanced_client(device, sys.argv[3])
        else:
            await client(device, sys.argv[3], int(sys.argv[4]))
        emit(event="done")


if __name__ == "__main__":
    asyncio.run(main())
