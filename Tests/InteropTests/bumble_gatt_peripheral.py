"""Bumble as a GATT server (peripheral) for our GATT client, for InteropTests.

Usage: bumble_gatt_peripheral.py HCI_PORT [--forever] [--includes] [--discover-central] [--burst N] [--write-commands]
Advertises as F1:F2:F3:F4:F5:F6 (random static) on Rootcanal (tcp-client:127.0.0.1:HCI_PORT)
with service FFF0: FFF1 read/write, FFF2 read/notify, FFF3 indicate, FFF4 read/write
(200 bytes, for long reads and long writes). Notifies FFF2 / indicates FFF3 as soon
as a client subscribes. Prints one JSON object per line; exits after the client
disconnects (or after 60 s). With --forever (benchmarks) it re-advertises after each
disconnection and runs for 300 s. FFF5 sends 200 notifications of 200 bytes to each
client that subscribes (N with --burst N); with --burst it then reads the central's
Device Name, whose answer comes after the central took every notification sent before
the request (ATT on one link is in order), and prints a "burst-sent" event. With --includes a primary service FFE0 (FFE1 read, FFE2
read refused: Insufficient Authorization) includes a secondary service FFE8 (FFE9
read), FFF0, and a primary service with a 128-bit UUID (FFEA read). With --discover-central
Bumble discovers the central's services once connected. With --write-commands FFF0 also
has FFF6 (Write Without Response only), and each value written to it is printed as a
"write-command" event, in the order Bumble took them.
"""
import asyncio
import json
import sys

from bumble.core import UUID
from bumble.device import Device, Peer
from bumble.gatt import Characteristic, CharacteristicValue, Service
from bumble.hci import Address
from bumble.transport import open_transport

P = Characteristic.Properties


def emit(**kw):
    print(json.dumps(kw), flush=True)


async def main(port: str) -> None:
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as (source, sink):
        device = Device.with_hci("bumble-peripheral", Address("F1:F2:F3:F4:F5:F6"), source, sink)
        state = {"FFF1": b"bumble", "FFF4": bytes(i & 0xFF for i in range(200))}

        def reader(key):
            return lambda connection: state[key]

        def writer(key):
            def write(connection, value):
                state[key] = bytes(value)
                emit(event="written", uuid=key, value=bytes(value).hex())
            return write

        rw = Characteristic("FFF1", P.READ | P.WRITE, Characteristic.READABLE | Characteristic.WRITEABLE,
                            CharacteristicValue(read=reader("FFF1"), write=writer("FFF1")))
        notify = Characteristic("FFF2", P.READ | P.NOTIFY, Characteristic.READABLE, bytes([1]))
        indicate = Characteristic("FFF3", P.INDICATE, Characteristic.READABLE, bytes([0]))
        long = Characteristic("FFF4", P.READ | P.WRITE, Characteristic.READABLE | Characteristic.WRITEABLE,
                              CharacteristicValue(read=reader("FFF4"), write=writer("FFF4")))
        burst = Characteristic("FFF5", P.NOTIFY, Characteristic.READABLE, bytes(200))
        characteristics = [rw, notify, indicate, long, burst]
        if "--write-commands" in sys.argv:
            def on_write_command(connection, value):
                emit(event="write-command", value=bytes(value).hex())
            characteristics.append(Characteristic("FFF6", P.WRITE_WITHOUT_RESPONSE, Characteristic.WRITEABLE,
                                                  CharacteristicValue(write=on_write_command)))
        primary = Service("FFF0", characteristics)
        device.add_service(primary)
        if "--includes" in sys.argv:
            # Added first: Bumble would otherwise put a service it has not seen inside
            # the group of the service including it, just after its declaration.
            secondary = Service("FFE8", [Characteristic("FFE9", P.READ, Characteristic.READABLE, b"secondary")], primary=False)
            device.add_service(secondary)
            # Bumble writes a 128-bit included service's UUID into the include declaration
            # cut to its first two octets (struct '2s'), where Vol 3 Part G 3.2 leaves it out.
            wide = Service("6E40BBBB-B5A3-F393-E0A9-E50E24DCCA9E", [Characteristic("FFEA", P.READ, Characteristic.READABLE, b"wide")])
            device.add_service(wide)
            device.add_service(Service("FFE0", [Characteristic("FFE1", P.READ, Characteristic.READABLE, b"including"),
                                                Characteristic("FFE2", P.READ, Characteristic.READ_REQUIRES_AUTHORIZATION, b"x")],
                                       included_services=[secondary, primary, wide]))
        forever = "--forever" in sys.argv

        bursts = int(sys.argv[sys.argv.index("--burst") + 1]) if "--burst" in sys.argv else 200

        def on_burst_subscription(bearer, notify_enabled, indicate_enabled):
            if notify_enabled:
                async def send():
                    for i in range(bursts):
                        await device.notify_subscribers(burst, bytes([i & 0xFF]) * 200)
                    if "--burst" in sys.argv:
                        await Peer(links[-1]).read_characteristics_by_uuid(UUID.from_16_bits(0x2A00))
                        emit(event="burst-sent", count=bursts)
                asyncio.ensure_future(send())

        burst.on("subscription", on_burst_subscription)

        def on_notify_subscription(bearer, notify_enabled, indicate_enabled):
            emit(event="subscription", uuid="FFF2", notify=notify_enabled, indicate=indicate_enabled)
            if notify_enabled:
                asyncio.ensure_future(device.notify_subscribers(notify, bytes([0x42])))

        def on_indicate_subscription(bearer, notify_enabled, indicate_enabled):
            emit(event="subscription", uuid="FFF3", notify=notify_enabled, indicate=indicate_enabled)
            if indicate_enabled:
                async def send():
                    await device.indicate_subscribers(indicate, bytes([0x43, 0x43]))
                    emit(event="indication-confirmed")
                asyncio.ensure_future(send())

        notify.on("subscription", on_notify_subscription)
        indicate.on("subscription", on_indicate_subscription)
        disconnected = asyncio.Event()
        links = []

        def on_connection(connection):
            links.append(connection)
            emit(event="connected", peer=str(connection.peer_address))
            connection.on("disconnection", lambda reason: disconnected.set())
            if "--discover-central" in sys.argv:
                async def discover():
                    try:
                        peer = Peer(connection)
                        await peer.discover_services()
                        emit(event="central-services", uuids=[str(s.uuid) for s in peer.services])
                        names = await peer.read_characteristics_by_uuid(UUID.from_16_bits(0x2A00))
                        emit(event="central-name", name=bytes(names[0]).decode() if names else None)
                    except Exception as e:
                        emit(event="central-discovery-failed", error=repr(e))
                asyncio.ensure_future(discover())

        device.on("connection", on_connection)
        await device.power_on()
        await device.start_advertising(auto_restart=forever)
        emit(event="advertising", address=str(device.random_address))
        try:
            if forever:
                await asyncio.sleep(300)
            await asyncio.wait_for(disconnected.wait(), 60)
        except asyncio.TimeoutError:
            emit(event="timeout")
        emit(event="done")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
