"""Bumble as the fire-alarm receiver, against our FireAlarmSender (the BLE facade).

Usage: bumble_firealarm_receiver.py HCI_PORT TARGET_ADDRESS
Connects over Rootcanal to TARGET_ADDRESS (public), exchanges MTU (247), finds the
fire-alarm service, subscribes to the alarm state (indications) and waits for the
alarm; then reads the text, reads the floor-plan header (size, CRC-32), subscribes
to the floor plan and collects notifications until the size, checks the CRC,
writes "bumble" to acknowledge and disconnects. Prints one JSON object per step.
"""
import asyncio
import json
import struct
import sys
import zlib

from bumble.device import Device, Peer
from bumble.hci import Address
from bumble.transport import open_transport

SERVICE = "F1DE0000-2C4B-4D5E-8F60-7A8B9CADBEEF"


def emit(**kw):
    print(json.dumps(kw), flush=True)


def uuid(n):
    return f"F1DE000{n}-2C4B-4D5E-8F60-7A8B9CADBEEF"


async def main(port: str, target: str) -> None:
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as (source, sink):
        device = Device.with_hci("bumble-receiver", Address("F4:F5:F6:F7:F8:F9"), source, sink)
        await device.power_on()
        connection = await asyncio.wait_for(device.connect(f"{target}/P"), 15)
        peer = Peer(connection)
        mtu = await peer.request_mtu(247)
        emit(event="connected", mtu=mtu)
        await peer.discover_services()
        service = next(s for s in peer.services if str(s.uuid).upper() == SERVICE)
        await service.discover_characteristics()
        chars = {str(c.uuid).upper(): c for c in service.characteristics}
        for c in service.characteristics:
            await c.discover_descriptors()

        alarm = asyncio.get_running_loop().create_future()

        def on_state(value):
            if bytes(value) == b"\x01" and not alarm.done():
                alarm.set_result(True)

        await peer.subscribe(chars[uuid(1)], on_state, prefer_notify=False)
        emit(event="subscribed")
        await asyncio.wait_for(alarm, 15)
        emit(event="alarm")
        text = bytes(await peer.read_value(chars[uuid(2)])).decode()
        emit(event="text", text=text)
        size, crc = struct.unpack("<II", bytes(await peer.read_value(chars[uuid(3)])))
        image = bytearray()
        done = asyncio.get_running_loop().create_future()
        pieces = 0

        def on_piece(value):
            nonlocal pieces
            image.extend(bytes(value))
            pieces += 1
            if len(image) >= size and not done.done():
                done.set_result(True)

        await peer.subscribe(chars[uuid(3)], on_piece, prefer_notify=True)
        await asyncio.wait_for(done, 15)
        await peer.unsubscribe(chars[uuid(3)], on_piece)
        emit(event="floor-plan", bytes=len(image), size=size, pieces=pieces,
             crc_ok=(zlib.crc32(bytes(image)) & 0xFFFFFFFF) == crc and len(image) == size)
        await peer.write_value(chars[uuid(4)], b"bumble", with_response=True)
        emit(event="acknowledged")
        await connection.disconnect()
        emit(event="done")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
