"""Bumble's EATT client (bumble.gatt_client.Client.connect_eatt) against our GATT
server, for InteropTests.

Usage:
  bumble_eatt_central.py HCI_PORT ADDRESS
      Connects to ADDRESS (public). On the unenhanced bearer reads Server Supported
      Features (0x2B3A). Asks for two enhanced ATT bearers on the unencrypted link
      (an EATT channel shall be encrypted, Vol 3, Part G, §5.3.2: "refused" names
      the result Bumble's l2cap.L2capError gives), pairs (Just Works), then opens two
      enhanced ATT bearers with one Credit Based Connection Request to SPSM 0x0027, reads characteristic 0xEA01 by UUID on both
      at once, discovers the primary services on the second, and tries Exchange MTU
      on the first (not allowed on an enhanced bearer). Then disconnects.
Prints one JSON object per line.
"""

import asyncio
import json
import logging
import os
import sys

from bumble import att, l2cap
from bumble.core import UUID
from bumble.device import Device, Peer
from bumble.gatt_client import Client
from bumble.hci import Address
from bumble.transport import open_transport


def emit(**kw):
    print(json.dumps(kw), flush=True)


async def main():
    if os.environ.get("BUMBLE_LOGLEVEL"):
        logging.basicConfig(level=os.environ["BUMBLE_LOGLEVEL"].upper())
    port, address = sys.argv[1], sys.argv[2]
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as (source, sink):
        device = Device.with_hci("bumble-eatt", Address("F1:F2:F3:F4:F5:F6"), source, sink)
        await device.power_on()
        connection = await device.connect(Address(address, Address.PUBLIC_DEVICE_ADDRESS))
        emit(event="connected")
        peer = Peer(connection)
        features = await peer.gatt_client.read_characteristics_by_uuid(UUID.from_16_bits(0x2B3A), None)
        emit(event="server-features", values=[bytes(v).hex() for v in features])
        try:
            early = await Client.connect_eatt(connection, count=2)
            emit(event="eatt-unencrypted", count=len(early))
        except l2cap.L2capError as e:
            emit(event="refused", result=e.error_code, name=e.error_name)
        await connection.pair()
        emit(event="paired", encrypted=connection.is_encrypted)
        bearers = await Client.connect_eatt(connection, count=2)
        emit(event="eatt", count=len(bearers))
        reads = await asyncio.gather(*(b.read_characteristics_by_uuid(UUID.from_16_bits(0xEA01), None) for b in bearers))
        emit(event="read", values=[[bytes(v).hex() for v in r] for r in reads])
        services = await bearers[1].discover_services()
        emit(event="services", uuids=[str(s.uuid) for s in services])
        response = await bearers[0].send_request(att.ATT_Exchange_MTU_Request(client_rx_mtu=512))
        emit(event="exchange-mtu", response=type(response).__name__, error=int(getattr(response, "error_code", -1)))
        await connection.disconnect()
        emit(event="done")


if __name__ == "__main__":
    asyncio.run(main())
