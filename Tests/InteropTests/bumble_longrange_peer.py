"""Bumble's long range (LE Coded advertising, scanning and connecting) against ours,
for InteropTests.

Usage:
  bumble_longrange_peer.py HCI_PORT advertise
      As F1:F2:F3:F4:F5:F8 (random static): an extended, connectable advertising set
      named "bumble-far" on LE Coded (primary and secondary PHY). When a central
      connects, prints the link's PHYs; then its end. Runs 60 s.
  bumble_longrange_peer.py HCI_PORT scan NAME
      Scans LE Coded alone (extended) until it hears NAME, prints the report's
      primary and secondary PHY, connects initiating on LE Coded alone, prints the
      link's PHYs and disconnects.
Prints one JSON object per line.
"""

import asyncio
import json
import logging
import os
import sys

from bumble import hci
from bumble.core import AdvertisingData
from bumble.device import AdvertisingEventProperties, AdvertisingParameters, ConnectionParametersPreferences, Device
from bumble.hci import Address
from bumble.transport import open_transport


def emit(**kw):
    print(json.dumps(kw), flush=True)


async def advertise(device):
    name = bytes(AdvertisingData([(AdvertisingData.COMPLETE_LOCAL_NAME, b"bumble-far")]))
    ended = asyncio.get_running_loop().create_future()

    def on_connection(connection):
        async def report():
            phy = await connection.get_phy()
            emit(event="connected", tx_phy=int(phy.tx_phy), rx_phy=int(phy.rx_phy))
        connection.on("disconnection", lambda reason: ended.done() or ended.set_result(reason))
        asyncio.ensure_future(report())

    device.on("connection", on_connection)
    await device.create_advertising_set(
        advertising_parameters=AdvertisingParameters(
            advertising_event_properties=AdvertisingEventProperties(is_connectable=True, is_scannable=False, is_legacy=False),
            primary_advertising_interval_min=100, primary_advertising_interval_max=100,
            primary_advertising_phy=hci.Phy.LE_CODED, secondary_advertising_phy=hci.Phy.LE_CODED),
        advertising_data=name)
    emit(event="advertising")
    reason = await asyncio.wait_for(ended, 60)
    emit(event="disconnected", reason=int(reason))


async def scan(device, wanted):
    found = asyncio.get_running_loop().create_future()

    def on_advertisement(a):
        # (Bumble gives the name as text; older versions as bytes.)
        if a.data.get(AdvertisingData.COMPLETE_LOCAL_NAME) in (wanted, wanted.encode()) and not found.done():
            found.set_result(a)

    device.on("advertisement", on_advertisement)
    await device.start_scanning(legacy=False, active=False, scanning_phys=[hci.HCI_LE_CODED_PHY])
    a = await asyncio.wait_for(found, 20)
    emit(event="heard", primary_phy=int(a.primary_phy), secondary_phy=int(a.secondary_phy))
    await device.stop_scanning()
    connection = await device.connect_le(
        a.address, connection_parameters_preferences={hci.Phy.LE_CODED: ConnectionParametersPreferences()}, timeout=20)
    phy = await connection.get_phy()
    emit(event="connected", tx_phy=int(phy.tx_phy), rx_phy=int(phy.rx_phy))
    await connection.disconnect()
    emit(event="disconnected")


async def main():
    if os.environ.get("BUMBLE_LOGLEVEL"):
        logging.basicConfig(level=os.environ["BUMBLE_LOGLEVEL"].upper())
    port, mode = sys.argv[1], sys.argv[2]
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as (source, sink):
        device = Device.with_hci("bumble-far", Address("F1:F2:F3:F4:F5:F8"), source, sink)
        await device.power_on()
        if mode == "advertise":
            await advertise(device)
        else:
            await scan(device, sys.argv[3])
        emit(event="done")


if __name__ == "__main__":
    asyncio.run(main())
