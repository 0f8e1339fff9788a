"""Bumble as a GATT client (central) against our GATT server, for InteropTests.

Usage: bumble_gatt_central.py HCI_PORT TARGET_ADDRESS
Connects over Rootcanal (tcp-client:127.0.0.1:HCI_PORT) to TARGET_ADDRESS (public),
discovers everything, reads every readable characteristic (long reads included),
writes the first writable one, subscribes to every notify/indicate characteristic,
waits for one value on each, disconnects. Prints one JSON object per line on stdout.
"""
import asyncio
import json
import sys

from bumble.device import Device, Peer
from bumble.hci import Address
from bumble.transport import open_transport


def emit(**kw):
    print(json.dumps(kw), flush=True)


async def main(port: str, target: str) -> None:
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as (source, sink):
        device = Device.with_hci("bumble-central", Address("F0:F1:F2:F3:F4:F5"), source, sink)
        await device.power_on()
        connection = await asyncio.wait_for(device.connect(f"{target}/P"), 15)
        peer = Peer(connection)
        mtu = await peer.request_mtu(247)
        emit(event="mtu", mtu=mtu)
        await peer.discover_services()
        received = {}
        waiters = []
        for service in peer.services:
            await service.discover_characteristics()
            emit(event="service", uuid=str(service.uuid), start=service.handle, end=service.end_group_handle)
            for c in service.characteristics:
                await c.discover_descriptors()
                emit(event="characteristic", service=str(service.uuid), uuid=str(c.uuid), handle=c.handle,
                     properties=int(c.properties), descriptors=[str(d.type) for d in c.descriptors])
                if c.properties & 0x02:
                    value = await peer.read_value(c)
                    emit(event="read", uuid=str(c.uuid), value=bytes(value).hex())
                if c.properties & 0x08:
                    await peer.write_value(c, b"from-bumble", with_response=True)
                    emit(event="write", uuid=str(c.uuid))
                if c.properties & 0x30:
                    future = asyncio.get_running_loop().create_future()
                    uuid = str(c.uuid)

                    def on_value(value, uuid=uuid, future=future):
                        if not future.done():
                            future.set_result(bytes(value).hex())

                    await peer.subscribe(c, on_value, prefer_notify=bool(c.properties & 0x10))
                    emit(event="subscribed", uuid=uuid)
                    waiters.append((uuid, future))
        for uuid, future in waiters:
            value = await asyncio.wait_for(future, 10)
            emit(event="value", uuid=uuid, value=value)
        await connection.disconnect()
        emit(event="done")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
