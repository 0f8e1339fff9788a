"""Bumble's central running the seed's speed test, measured the way
Benchmarks/SpeedTestBenchmark measures ours.

Usage: bumble_speed_test_central.py HCI_PORT TARGET N
N sessions against TARGET (random address) over Rootcanal: scan until TARGET
advertises, connect, exchange MTU (517), discover every service, characteristic and
descriptor, read FFF1, disconnect. Prints one JSON object: per phase, the wall and
CPU seconds of each session (CPU is this process's, time.process_time()).
"""
import asyncio
import json
import sys
import time

from bumble.device import Device, Peer
from bumble.hci import Address
from bumble.transport import open_transport

PHASES = ["scan", "connect", "discover", "read", "disconnect"]


async def main(port: str, target: str, n: int) -> None:
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as (source, sink):
        device = Device.with_hci("bumble-speed", Address("F3:F4:F5:F6:F7:F8"), source, sink)
        await device.power_on()
        out = {p: [] for p in PHASES}
        out["session"] = []
        target_address = Address(target)

        for _ in range(n):
            s_wall, s_cpu = time.perf_counter(), time.process_time()

            def mark(name, w0, c0):
                out[name].append({"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0})
                return time.perf_counter(), time.process_time()

            w, c = time.perf_counter(), time.process_time()
            seen = asyncio.get_running_loop().create_future()

            def on_advertisement(adv):
                if adv.address == target_address and not seen.done():
                    seen.set_result(adv.address)

            device.on("advertisement", on_advertisement)
            await device.start_scanning(active=False, filter_duplicates=False)
            address = await asyncio.wait_for(seen, 20)
            await device.stop_scanning()
            device.remove_listener("advertisement", on_advertisement)
            w, c = mark("scan", w, c)

            connection = await asyncio.wait_for(device.connect(address), 20)
            peer = Peer(connection)
            await peer.request_mtu(517)
            w, c = mark("connect", w, c)

            await peer.discover_services()
            for service in peer.services:
                await service.discover_characteristics()
                for characteristic in service.characteristics:
                    await characteristic.discover_descriptors()
            w, c = mark("discover", w, c)

            rw = [ch for s in peer.services for ch in s.characteristics if ch.uuid.to_hex_str() == "FFF1"][0]
            await peer.read_value(rw)
            w, c = mark("read", w, c)

            await connection.disconnect()
            w, c = mark("disconnect", w, c)
            out["session"].append({"wall": time.perf_counter() - s_wall, "cpu": time.process_time() - s_cpu})
        print(json.dumps(out), flush=True)


asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
