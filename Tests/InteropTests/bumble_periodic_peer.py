"""Bumble's periodic advertising (bumble.device.AdvertisingSet.start_periodic and
Device.create_periodic_advertising_sync) against ours, for InteropTests.

Usage:
  bumble_periodic_peer.py HCI_PORT advertise
      As F1:F2:F3:F4:F5:F7 (random static): an extended, non-connectable advertising
      set with SID 3 named "bumble-pa", and a periodic train every 30 ms carrying
      manufacturer data (company 0xFFFF, then bytes 0, 1, 2, ... 199). Runs 60 s.
  bumble_periodic_peer.py HCI_PORT sync ADDRESS SID COUNT
      Scans (extended), synchronises to the periodic advertising of ADDRESS (public)
      with SID, prints the first COUNT packets' data, then terminates the sync.
Prints one JSON object per line.
"""

import asyncio
import json
import logging
import os
import sys

from bumble.core import AdvertisingData
from bumble.device import AdvertisingEventProperties, AdvertisingParameters, Device, PeriodicAdvertisingParameters
from bumble.hci import Address
from bumble.transport import open_transport


def emit(**kw):
    print(json.dumps(kw), flush=True)


PERIODIC = bytes([203, 0xFF, 0xFF, 0xFF]) + bytes(range(200))


async def advertise(device):
    name = bytes(AdvertisingData([(AdvertisingData.COMPLETE_LOCAL_NAME, b"bumble-pa")]))
    s = await device.create_advertising_set(
        advertising_parameters=AdvertisingParameters(
            advertising_event_properties=AdvertisingEventProperties(is_connectable=False, is_scannable=False, is_legacy=False),
            primary_advertising_interval_min=100, primary_advertising_interval_max=100, advertising_sid=3),
        advertising_data=name,
        # Bumble takes intervals in milliseconds.
        periodic_advertising_parameters=PeriodicAdvertisingParameters(periodic_advertising_interval_min=30,
                                                                      periodic_advertising_interval_max=30),
        periodic_advertising_data=PERIODIC)
    await s.start_periodic()
    emit(event="advertising", data=PERIODIC.hex())
    # The test stops this process when it is done.
    await asyncio.sleep(60)
    emit(event="timeout")


async def sync(device, address, sid, count):
    target = Address(address, Address.PUBLIC_DEVICE_ADDRESS)
    found = asyncio.get_running_loop().create_future()

    def on_advertisement(a):
        if a.address == target and a.sid == sid and not found.done():
            found.set_result(a)

    device.on("advertisement", on_advertisement)
    await device.start_scanning(legacy=False, active=False)
    await asyncio.wait_for(found, 20)
    emit(event="heard", sid=sid)
    # Creating the sync starts establishing it.
    s = await device.create_periodic_advertising_sync(target, sid)
    packets = asyncio.Queue()
    s.on("periodic_advertisement", lambda p: packets.put_nowait(p))
    s.on("loss", lambda: emit(event="lost"))
    for i in range(count):
        p = await asyncio.wait_for(packets.get(), 20)
        if i == 0:
            # Established by now (the event may have come before the handlers were set).
            emit(event="established", interval=s.periodic_advertising_interval)
        emit(event="packet", data=p.data_bytes.hex(), truncated=p.is_truncated)
    await s.terminate()
    emit(event="terminated")


async def main():
    if os.environ.get("BUMBLE_LOGLEVEL"):
        logging.basicConfig(level=os.environ["BUMBLE_LOGLEVEL"].upper())
    port, mode = sys.argv[1], sys.argv[2]
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as (source, sink):
        device = Device.with_hci("bumble-pa", Address("F1:F2:F3:F4:F5:F7"), source, sink)
        await device.power_on()
        if mode == "advertise":
            await advertise(device)
        else:
            await sync(device, sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        emit(event="done")


if __name__ == "__main__":
    asyncio.run(main())
