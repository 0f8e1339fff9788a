"""Bumble's side of the L2CAP channel benchmark (GATTBenchmark part 3), on Rootcanal.

Usage: bumble_l2cap_bench.py HCI_PORT TOTAL
Advertises as F1:F2:F3:F4:F5:F6 (random static), listens on SPSM 0x0080 in LE
credit-based mode (MTU 4096, MPS 247, 32 credits). On the first channel: receives
TOTAL bytes, then sends TOTAL bytes back in SDUs of the peer's MTU (at most 4096),
waiting for credits (channel.drain). Prints one JSON line with Bumble's own CPU
time (time.process_time) and wall time for each direction, then waits for the link
to go.
"""
import asyncio
import json
import sys
import time

from bumble import l2cap
from bumble.device import Device
from bumble.hci import Address
from bumble.transport import open_transport


async def main(port: str, total: int) -> None:
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as (source, sink):
        device = Device.with_hci("bumble-bench", Address("F1:F2:F3:F4:F5:F6"), source, sink)
        done = asyncio.Event()
        disconnected = asyncio.Event()

        def on_channel(channel):
            state = {"got": 0, "cpu": None, "wall": None}

            async def send_back(rx_cpu, rx_wall):
                cpu0, wall0 = time.process_time(), time.monotonic()
                piece = min(4096, channel.peer_mtu)
                sent = 0
                while sent < total:
                    n = min(piece, total - sent)
                    channel.write(bytes([sent & 0xFF]) * n)
                    await channel.drain()
                    sent += n
                print(json.dumps({"event": "figures", "rx_cpu": rx_cpu, "rx_wall": rx_wall,
                                  "tx_cpu": time.process_time() - cpu0, "tx_wall": time.monotonic() - wall0}), flush=True)
                done.set()

            def on_sdu(sdu):
                if state["cpu"] is None:
                    state["cpu"], state["wall"] = time.process_time(), time.monotonic()
                state["got"] += len(sdu)
                if state["got"] >= total:
                    rx_cpu, rx_wall = time.process_time() - state["cpu"], time.monotonic() - state["wall"]
                    state["got"] = -(1 << 62)  # once
                    asyncio.ensure_future(send_back(rx_cpu, rx_wall))

            channel.sink = on_sdu

        device.create_l2cap_server(spec=l2cap.LeCreditBasedChannelSpec(psm=0x80, mtu=4096, mps=247, max_credits=32), handler=on_channel)
        device.on("connection", lambda c: c.on("disconnection", lambda reason: disconnected.set()))
        await device.power_on()
        await device.start_advertising(auto_restart=False)
        try:
            await asyncio.wait_for(disconnected.wait(), 600)
        except asyncio.TimeoutError:
            print(json.dumps({"event": "timeout"}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
