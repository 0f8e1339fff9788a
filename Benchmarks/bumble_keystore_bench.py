# Bumble's JsonKeyStore under the same load as BondStoreBenchmark: N bonds (an LTK,
# an IRK and the identity address each), then UPDATES updates of one of them, each a
# full load and rewrite of the file as Bumble does it. Prints one JSON line:
# {"bonds": N, "ms_per_update": ..., "bytes": ...}. Usage: bumble_keystore_bench.py DIR N UPDATES
import asyncio, json, os, sys, time
from bumble.keys import JsonKeyStore, PairingKeys
from bumble.hci import Address


async def main(directory: str, n: int, updates: int) -> None:
    path = os.path.join(directory, f"bumble-keys-{n}.json")
    if os.path.exists(path):
        os.remove(path)
    store = JsonKeyStore(namespace="C0:FF:EE:00:00:01", filename=path)
    def keys(i: int) -> PairingKeys:
        address = Address(f"00:10:00:00:{(i >> 8) & 0xFF:02X}:{i & 0xFF:02X}")
        return PairingKeys(
            address_type=Address.PUBLIC_DEVICE_ADDRESS,
            ltk=PairingKeys.Key(value=bytes([7] * 16), authenticated=False),
            irk=PairingKeys.Key(value=bytes([9] * 16)),
        )
    names = [f"00:10:00:00:{(i >> 8) & 0xFF:02X}:{i & 0xFF:02X}/P" for i in range(n)]
    # Filled in one write (filling one by one is O(n^2) and not what is measured).
    db, key_map = await store.load()
    for i, name in enumerate(names):
        key_map[name] = keys(i).to_dict()
    await store.save(db)
    target = names[n // 2]
    start = time.perf_counter()
    for u in range(updates):
        k = keys(n // 2)
        k.ltk = PairingKeys.Key(value=bytes([u & 0xFF] * 16), authenticated=False)
        await store.update(target, k)
    elapsed = time.perf_counter() - start
    print(json.dumps({"bonds": n, "ms_per_update": elapsed * 1000 / updates, "bytes": os.path.getsize(path)}))
    os.remove(path)


asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
