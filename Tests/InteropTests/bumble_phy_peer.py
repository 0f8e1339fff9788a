"""Bumble as a peripheral whose link changes PHY, for InteropTests (BumbleLinkTests).

Usage: bumble_phy_peer.py HCI_PORT [ask]
Advertises (legacy, connectable) as F1:F2:F3:F4:F5:F8 (random static), named
"bumble-phy", on Rootcanal (tcp-client:127.0.0.1:HCI_PORT). Reports each PHY update
of the link (Bumble's connection_phy_update) and each data length change. With "ask",
once connected it asks for LE 2M both ways itself (Connection.set_phy), then reads
the PHYs back (LE Read PHY). Prints one JSON object per line; exits when the central
disconnects (or after 60 s).
"""
import asyncio
import json
import sys

from bumble import hci
from bumble.core import AdvertisingData
from bumble.device import Device
from bumble.hci import Address
from bumble.transport import open_transport


def emit(**kw):
    print(json.dumps(kw), flush=True)


async def main(port: str, ask: bool) -> None:
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as (source, sink):
        device = Device.with_hci("bumble-phy", Address("F1:F2:F3:F4:F5:F8"), source, sink)
        disconnected = asyncio.Event()
        connected = asyncio.get_running_loop().create_future()

        def on_connection(connection):
            emit(event="connected", handle=connection.handle)
            connection.on("connection_phy_update", lambda phy: emit(event="phy", tx=int(phy.tx_phy), rx=int(phy.rx_phy)))
            connection.on("connection_phy_update_failure", lambda error: emit(event="phy_failed", error=int(error)))
            connection.on("disconnection", lambda reason: disconnected.set())
            if not connected.done():
                connected.set_result(connection)

        device.on("connection", on_connection)
        await device.power_on()
        device.advertising_data = bytes(AdvertisingData([(AdvertisingData.COMPLETE_LOCAL_NAME, b"bumble-phy")]))
        await device.start_advertising()
        emit(event="advertising", address=str(device.random_address))
        connection = await asyncio.wait_for(connected, 60)
        if ask:
            await asyncio.sleep(0.3)
            await connection.set_phy(tx_phys=[hci.Phy.LE_2M], rx_phys=[hci.Phy.LE_2M])
            emit(event="asked")
        try:
            await asyncio.wait_for(disconnected.wait(), 60)
            emit(event="disconnected")
        except asyncio.TimeoutError:
            emit(event="timeout")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], "ask" in sys.argv[2:]))
