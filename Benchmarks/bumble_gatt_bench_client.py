"""Bumble's GATT client, measured the way Benchmarks/GATTBenchmark measures ours.

Usage: bumble_gatt_bench_client.py HCI_PORT TARGET N
Connects to TARGET (random) over Rootcanal, exchanges MTU, discovers everything
(counting ATT requests), reads FFF1 N times, writes FFF1 N times, subscribes to FFF5
and takes 200 notifications of 200 bytes. Prints one JSON object: request count and
wall/CPU seconds per phase (CPU is this process's, time.process_time()).
"""
import asyncio
import json
import sys
import time

from bumble.device import Device, Peer
from bumble.hci import Address
from bumble.transport import open_transport


async def main(port: str, target: str, n: int) -> None:
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as (source, sink):
        device = Device.with_hci("bumble-bench", Address("F2:F3:F4:F5:F6:F7"), source, sink)
        await device.power_on()
        connection = await asyncio.wait_for(device.connect(target), 20)
        peer = Peer(connection)
        await peer.request_mtu(517)
        client = connection.gatt_client
        requests = 0
        original = client.send_request

        async def counting(request):
            nonlocal requests
            requests += 1
            return await original(request)

        client.send_request = counting
        out = {}

        def phase(name, w0, c0):
            out[name] = {"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0}

        w0, c0 = time.perf_counter(), time.process_time()
        await peer.discover_services()
        for s in peer.services:
            await s.discover_characteristics()
            for c in s.characteristics:
                await c.discover_descriptors()
        phase("discover", w0, c0)
        out["discover_requests"] = requests
        rw = peer.get_characteristics_by_uuid("FFF1")[0]
        burst = peer.get_characteristics_by_uuid("FFF5")[0]
        w0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            await peer.read_value(rw)
        phase("read", w0, c0)
        w0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            await peer.write_value(rw, b"benchmark!", with_response=True)
        phase("write", w0, c0)
        got = 0
        done = asyncio.get_running_loop().create_future()

        def on_value(value):
            nonlocal got
            got += len(value)
            if got >= 200 * 200 and not done.done():
                done.set_result(None)

        w0, c0 = time.perf_counter(), time.process_time()
        await peer.subscribe(burst, on_value)
        await asyncio.wait_for(done, 60)
        phase("notify", w0, c0)
        out["notified_bytes"] = got
        await connection.disconnect()
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
