"""Bumble as a central that stays on a link, for InteropTests (BumbleLinkTests).

Usage: bumble_params_central.py HCI_PORT TARGET [SECONDS]
Connects over Rootcanal (tcp-client:127.0.0.1:HCI_PORT) to TARGET (a public address)
and reports the link's parameters as it came up (a "connected" event), then each
connection parameter update ("parameters": interval in 1.25 ms units, latency,
timeout in 10 ms units): a peripheral's L2CAP Connection Parameter Update Request is
accepted by Bumble's host, which sends LE Connection Update. Disconnects after the
first update, or after SECONDS (default 12). Prints one JSON object per line.
"""
import asyncio
import json
import sys

from bumble.device import Device
from bumble.hci import Address
from bumble.transport import open_transport


def emit(**kw):
    print(json.dumps(kw), flush=True)


def units(parameters):
    return dict(interval=round(parameters.connection_interval / 1.25), latency=parameters.peripheral_latency,
                timeout=round(parameters.supervision_timeout / 10))


async def main(port: str, target: str, seconds: float) -> None:
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as (source, sink):
        device = Device.with_hci("bumble-params", Address("F0:F1:F2:F3:F4:F7"), source, sink)
        await device.power_on()
        connection = await asyncio.wait_for(device.connect(f"{target}/P"), 15)
        emit(event="connected", **units(connection.parameters))
        updated = asyncio.Event()

        def on_update():
            emit(event="parameters", **units(connection.parameters))
            updated.set()

        connection.on("connection_parameters_update", on_update)
        try:
            await asyncio.wait_for(updated.wait(), seconds)
        except asyncio.TimeoutError:
            emit(event="no-update")
        await connection.disconnect()
        emit(event="done")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 12.0))
