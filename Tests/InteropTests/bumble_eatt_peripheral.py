"""Bumble as an EATT-capable GATT server (DeviceConfiguration.eatt_enabled) for our
GATT client, for InteropTests.

Usage: bumble_eatt_peripheral.py HCI_PORT
Advertises as F1:F2:F3:F4:F5:F6 (random static) on Rootcanal with service EA00:
EA01 read (each read answered after 0.5 s, so reads on different bearers overlap;
the most answered at once is reported), EA02 notify and EA03 indicate. When a
client subscribes to EA02, every enhanced bearer of the link gets a notification
(value E0 + its index); when it subscribes to EA03, an indication goes on the first
enhanced bearer, its confirmation is reported and Bumble disconnects. Prints one JSON object per line;
exits after the client disconnects (or after 60 s).
"""
import asyncio
import json
import sys

from bumble import att
from bumble.device import Device, DeviceConfiguration
from bumble.gatt import Characteristic, CharacteristicValue, Service
from bumble.hci import Address
from bumble.transport import open_transport

P = Characteristic.Properties


def emit(**kw):
    print(json.dumps(kw), flush=True)


def kind(bearer):
    return "eatt" if att.is_enhanced_bearer(bearer) else "att"


async def main(port: str) -> None:
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as (source, sink):
        config = DeviceConfiguration()
        config.name = "bumble-eatt-peripheral"
        config.address = Address("F1:F2:F3:F4:F5:F6")
        config.eatt_enabled = True
        device = Device.from_config_with_hci(config, source, sink)
        busy = {"now": 0, "most": 0}

        async def slow_read(connection):
            busy["now"] += 1
            busy["most"] = max(busy["most"], busy["now"])
            emit(event="read")  # Bumble hands a read the connection, not its bearer
            await asyncio.sleep(0.5)
            busy["now"] -= 1
            return bytes([0x0E, 0xA0])

        value = Characteristic("EA01", P.READ, Characteristic.READABLE, CharacteristicValue(read=slow_read))
        notify = Characteristic("EA02", P.NOTIFY, Characteristic.READABLE, bytes([0]))
        indicate = Characteristic("EA03", P.INDICATE, Characteristic.READABLE, bytes([0]))
        device.add_service(Service("EA00", [value, notify, indicate]))
        disconnected = asyncio.Event()

        def link(bearer):
            """The connection any of its bearers belongs to."""
            return bearer.connection if att.is_enhanced_bearer(bearer) else bearer

        def enhanced(bearer):
            return [c for c in device.l2cap_channel_manager.le_coc_channels.get(link(bearer).handle, {}).values()
                    if c.psm == att.EATT_PSM]

        def on_notify_subscription(bearer, notify_enabled, indicate_enabled):
            emit(event="subscription", uuid="EA02", bearer=kind(bearer), notify=notify_enabled)
            if notify_enabled:
                async def send():
                    bearers = enhanced(bearer)
                    for i, b in enumerate(bearers):
                        await device.gatt_server.notify_subscriber(b, notify, bytes([0xE0 + i]), force=True)
                    emit(event="notified", bearers=len(bearers))
                asyncio.ensure_future(send())

        def on_indicate_subscription(bearer, notify_enabled, indicate_enabled):
            emit(event="subscription", uuid="EA03", bearer=kind(bearer), indicate=indicate_enabled)
            if indicate_enabled:
                async def send():
                    bearers = enhanced(bearer)
                    try:
                        await device.gatt_server.indicate_subscriber(bearers[0], indicate, bytes([0x1D]), force=True)
                        emit(event="indication-confirmed", bearer="eatt")
                    except Exception as e:
                        emit(event="indication-failed", error=repr(e))
                    await link(bearer).disconnect()
                asyncio.ensure_future(send())

        notify.on("subscription", on_notify_subscription)
        indicate.on("subscription", on_indicate_subscription)

        def on_connection(connection):
            emit(event="connected", peer=str(connection.peer_address))
            connection.on("disconnection", lambda reason: disconnected.set())

        device.on("connection", on_connection)
        await device.power_on()
        await device.start_advertising()
        emit(event="advertising", address=str(device.random_address))
        try:
            await asyncio.wait_for(disconnected.wait(), 60)
        except asyncio.TimeoutError:
            emit(event="timeout")
        emit(event="most-reads-at-once", count=busy["most"])
        emit(event="done")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
