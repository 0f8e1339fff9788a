"""Bumble as a GATT client (central) against our GATT server, for InteropTests.

Usage: bumble_gatt_central.py HCI_PORT TARGET [--no-subscribe] [--collect N]
Connects over Rootcanal (tcp-client:127.0.0.1:HCI_PORT) to TARGET: a public address, or
name:NAME to scan (actively) for the device advertising that local name first and report
what its advertising and scan response data carry (an "advertisement" event). Then it
discovers everything, reads every readable characteristic (long reads included),
writes every writable one outside the GAP and GATT services, subscribes to every notify/indicate characteristic,
waits for one value on each, reads the device name once more (so the server has
every confirmation), disconnects. Prints one JSON object per line on stdout. With
--no-subscribe it subscribes to nothing (a session whose server sends nothing
unasked, for a recording that replays). With --collect N it waits for N values on each
characteristic it subscribed to (instead of one) and prints them all, in the order
they came, in one "values" event.
"""
import asyncio
import json
import sys

from bumble.core import AdvertisingData
from bumble.device import Device, Peer
from bumble.gatt import (GATT_DEVICE_NAME_CHARACTERISTIC, GATT_GENERIC_ACCESS_SERVICE, GATT_GENERIC_ATTRIBUTE_SERVICE,
                         GATT_SERVICE_CHANGED_CHARACTERISTIC)
from bumble.hci import Address
from bumble.transport import open_transport


def emit(**kw):
    print(json.dumps(kw), flush=True)


async def main(port: str, target: str) -> None:
    collect = int(sys.argv[sys.argv.index("--collect") + 1]) if "--collect" in sys.argv else 1
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as (source, sink):
        device = Device.with_hci("bumble-central", Address("F0:F1:F2:F3:F4:F5"), source, sink)
        await device.power_on()
        if target.startswith("name:"):
            name = target[len("name:"):]
            found = asyncio.get_running_loop().create_future()

            def on_advertisement(advertisement):
                if advertisement.data.get(AdvertisingData.COMPLETE_LOCAL_NAME) == name and not found.done():
                    found.set_result(advertisement)

            device.on("advertisement", on_advertisement)
            await device.start_scanning(active=True, filter_duplicates=False)
            advertisement = await asyncio.wait_for(found, 15)
            await device.stop_scanning()
            uuids = []
            for kind in (AdvertisingData.COMPLETE_LIST_OF_16_BIT_SERVICE_CLASS_UUIDS,
                         AdvertisingData.INCOMPLETE_LIST_OF_16_BIT_SERVICE_CLASS_UUIDS,
                         AdvertisingData.COMPLETE_LIST_OF_128_BIT_SERVICE_CLASS_UUIDS,
                         AdvertisingData.INCOMPLETE_LIST_OF_128_BIT_SERVICE_CLASS_UUIDS):
                uuids += [str(u) for u in (advertisement.data.get(kind) or [])]
            emit(event="advertisement", name=name, connectable=advertisement.is_connectable, uuids=uuids,
                 flags=advertisement.data.get(AdvertisingData.FLAGS))
            connection = await asyncio.wait_for(device.connect(advertisement.address), 15)
        else:
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
                # The GAP and GATT services' writable characteristics (Client Supported
                # Features) take defined values, not test bytes.
                if c.properties & 0x08 and service.uuid not in (GATT_GENERIC_ACCESS_SERVICE, GATT_GENERIC_ATTRIBUTE_SERVICE):
                    await peer.write_value(c, b"from-bumble", with_response=True)
                    emit(event="write", uuid=str(c.uuid))
                if c.properties & 0x30 and "--no-subscribe" not in sys.argv:
                    future = asyncio.get_running_loop().create_future()
                    uuid = str(c.uuid)

                    values = []

                    def on_value(value, uuid=uuid, future=future, values=values):
                        values.append(bytes(value).hex())
                        if not future.done() and len(values) >= collect:
                            future.set_result(values[0] if collect == 1 else list(values))

                    await peer.subscribe(c, on_value, prefer_notify=bool(c.properties & 0x10))
                    emit(event="subscribed", uuid=uuid)
                    # Service Changed is indicated only when the database changes.
                    if c.uuid != GATT_SERVICE_CHANGED_CHARACTERISTIC:
                        waiters.append((uuid, future))
        for uuid, future in waiters:
            value = await asyncio.wait_for(future, 10 if collect == 1 else 30)
            if collect == 1:
                emit(event="value", uuid=uuid, value=value)
            else:
                emit(event="values", uuid=uuid, values=value)
        # Bumble confirms an indication after handing its value over; a disconnection
        # right away can overtake that confirmation in the controller (seen under load:
        # the server's indication ended unconfirmed). One more request on the same bearer
        # makes sure the server has had it: ATT PDUs of a bearer arrive in order.
        names = [c for s in peer.services for c in s.characteristics if c.uuid == GATT_DEVICE_NAME_CHARACTERISTIC]
        if names:
            await peer.read_value(names[0])
        await connection.disconnect()
        emit(event="done")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
