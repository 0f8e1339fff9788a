"""Bumble's Security Manager (bumble.smp with a PairingConfig and a PairingDelegate)
against ours, for InteropTests (BumbleSMPTests).

Usage:
  bumble_smp_peer.py HCI_PORT peripheral SC MITM IO PASSKEY
      Advertises as F1:F2:F3:F4:F5:F6 (random static), accepts pairing with
      PairingConfig(sc=SC, mitm=MITM, bonding=True) and IO capability IO (one of
      none, display, display-yes-no, keyboard, keyboard-display); displays and types
      the fixed PASSKEY. Serves one characteristic (service 0x180F-like UUID
      3f3e0001-..., handle given in the "ready" event) readable only over an
      authenticated link. Keeps its keys in memory across links; re-advertises after
      the first link ends and exits when the second ends.
  bumble_smp_peer.py HCI_PORT peripheral-request SC MITM IO PASSKEY
      As peripheral, and asks each central that connects to pair: a Security
      Request 1 s after the connection (connection.request_pairing()), so the
      pairing starts on the central's side with no command of its own.
  bumble_smp_peer.py HCI_PORT peripheral-private SC MITM IO PASSKEY
      As peripheral, with Bumble's LE privacy on: advertises from a resolvable private
      address made with its IRK, and from a new one after the first link ends (the
      "advertising" events give each); distributes its IRK and identity when paired.
  bumble_smp_peer.py HCI_PORT peripheral-ctkd SC MITM IO PASSKEY h6|h7
      As peripheral, distributing and asking for LinkKey as well (cross-transport key
      derivation); with h7 Bumble's session also offers CT2 (Bumble leaves it off by
      default). The "paired" event carries the link key Bumble derived.
  bumble_smp_peer.py HCI_PORT peripheral-oob SC MITM IO PASSKEY R C TK
      As peripheral, with OOB data: the central's LE Secure Connections random R and
      confirm C (hex, least significant octet first, as the AD types carry them) and a
      legacy TK (hex, same order). Bumble's own OOB data is made but not handed out.
  bumble_smp_peer.py HCI_PORT central SC MITM IO PASSKEY ADDRESS
      Connects to ADDRESS (public), pairs (connection.pair()), disconnects,
      reconnects and encrypts from the stored keys (connection.encrypt()), then
      disconnects.
  bumble_smp_peer.py HCI_PORT central-subscribe SC MITM IO PASSKEY ADDRESS
      As central, but on the first link subscribes (CCCD write) to Battery Level
      (0x2A19) after pairing; on the second it only encrypts and waits up to 10 s for
      a notification it did not subscribe to again on that link (its GATT client's
      notification handler is replaced, so it sees every Handle Value Notification).
  bumble_smp_peer.py HCI_PORT central-channel SC MITM IO PASSKEY ADDRESS [ROUNDS]
      As central, with LE credit-based channels to SPSM 0x0085 (MTU 100, MPS 50, 2
      credits): on each of ROUNDS links (default 2) it first asks for a channel unencrypted (the
      "refused" event names the result Bumble's l2cap.L2capError gives), then pairs
      (first link) or encrypts from the stored keys (second), asks again ("channel"
      when it opens) and disconnects.
  bumble_smp_peer.py HCI_PORT central-service-changed SC MITM IO PASSKEY ADDRESS
      As central, bonded across two links: on the first it pairs and subscribes to
      Service Changed (0x2A05) indications ("subscribed"), then disconnects and waits
      2 s (the test changes the database meanwhile); on the second it only encrypts
      from the stored keys and waits up to 10 s for an indication ("indication", with
      its handle and value; its GATT client's indication handler is replaced, and it
      confirms by hand), then disconnects.
  bumble_smp_peer.py HCI_PORT central-robust-caching SC MITM IO PASSKEY ADDRESS
      As central, bonded across two links: on the first it pairs, writes 0x01 (robust
      caching) to Client Supported Features (0x2B29) and finds Battery Level (0x2A19);
      then disconnects and waits 2 s as above. On the second it only encrypts and
      reads Battery Level ("read": the value, or the ATT error code), reads the
      Database Hash by UUID ("hash"), and reads Battery Level again.
  bumble_smp_peer.py HCI_PORT central-indicate-pair SC MITM IO PASSKEY ADDRESS
      As central, on one link: subscribes to indications of 6E400003-B5A3-F393-E0A9-
      E50E24DCCA9E (btctl's docs/examples/battery.json) unencrypted ("subscribed"),
      and when the first indication comes ("indication") pairs before it confirms it
      (its GATT client's indication handler is replaced): the server's indication
      waits on a pairing its user must answer. Then confirms ("confirmed"), waits up
      to 60 s for the server to end the link, else ends it.
  bumble_smp_peer.py HCI_PORT central-private SC MITM IO PASSKEY NAME
      Against a peripheral with privacy: scans for the advertiser named NAME, connects
      to the private address it uses, pairs with bonding and reports the identity
      address and IRK it received and whether bumble.smp.AddressResolver resolves the
      link's address with that IRK; disconnects; scans again until NAME advertises
      from another address, reports what Bumble's own resolver (built from its key
      store after the pairing) makes of it, connects to it and encrypts from the
      stored keys (found through the identity), then disconnects.
  bumble_smp_peer.py HCI_PORT peripheral-sign SC MITM IO PASSKEY
      As peripheral, distributing and asking for CSRKs (Bumble distributes an all-zero
      CSRK, the "ready" event says which). Serves a characteristic 3f3e0003-... with the
      Authenticated Signed Writes property; Bumble's GATT server ignores Signed Write
      Commands, so this script verifies them itself (bumble.crypto.aes_cmac, with the
      CSRK the central distributed) and reports each as a "signed-write" event. On the
      second link, not encrypted, it finds the central's characteristic 3f3e0005-...
      and sends Signed Write Commands signed with its own CSRK: B0 (counter 0), B1
      (counter 1), that PDU again (a replay), and BF under a wrong signature.
  bumble_smp_peer.py HCI_PORT peripheral-channel SC MITM IO PASSKEY
      As peripheral, for four links, with an echo server on SPSM 0x0085 (MTU 1024,
      MPS 100, 4 credits; "channel" events say whether the link was encrypted when the
      channel opened). Bumble's own LE server takes any link, so this script refuses a
      request on an unencrypted link in front of it, as Vol 3, Part C, §10.3.1 says a
      server that needs security does: "insufficient encryption" (0x0008) when it holds
      keys for the central, else "insufficient authentication" (0x0005); each refusal
      is a "refusing" event.
In peripheral mode the "connected" events carry the central's address as Bumble's
device reports it (resolved to an identity once Bumble holds the central's IRK) and
the private address it resolved, if any.
Prints one JSON object per line.
"""

import asyncio
import json
import logging
import os
import sys

from bumble import att, gatt
from bumble.crypto import aes_cmac
from bumble.core import UUID
from bumble.device import Device, Peer
from bumble.hci import Address
from bumble.keys import MemoryKeyStore
from bumble.pairing import OobSharedData, PairingConfig, PairingDelegate
from bumble import smp
from bumble.smp import AddressResolver
from bumble.transport import open_transport

IO = {
    "none": PairingDelegate.NO_OUTPUT_NO_INPUT,
    "display": PairingDelegate.DISPLAY_OUTPUT_ONLY,
    "display-yes-no": PairingDelegate.DISPLAY_OUTPUT_AND_YES_NO_INPUT,
    "keyboard": PairingDelegate.KEYBOARD_INPUT_ONLY,
    "keyboard-display": PairingDelegate.DISPLAY_OUTPUT_AND_KEYBOARD_INPUT,
}


def emit(**kw):
    print(json.dumps(kw), flush=True)


class Delegate(PairingDelegate):
    def __init__(self, io, passkey):
        super().__init__(io_capability=io)
        self.passkey = passkey

    async def generate_passkey(self):
        return self.passkey

    async def get_number(self):
        emit(event="enter-passkey", passkey=self.passkey)
        return self.passkey

    async def display_number(self, number, digits):
        emit(event="display", number=number)

    async def compare_numbers(self, number, digits):
        emit(event="compare", number=number)
        return True


# What bumble.smp distributes as its own CSRK (smp.py: "csrk = bytes(16)").
BUMBLE_CSRK = bytes(16)
peer_csrk = {}


def signature(csrk, message, counter):
    """Vol 3, Part H, §2.4.5: SignCounter, then the 64 most significant bits of
    AES-CMAC_CSRK(message || SignCounter); the toolbox works most significant octet
    first, the PDU least significant first."""
    count = counter.to_bytes(4, "little")
    mac = aes_cmac(bytes(reversed(message + count)), bytes(reversed(csrk)))
    return count + bytes(reversed(mac[:8]))


def watch(connection, disconnected):
    def on_pairing(keys):
        if keys.csrk:
            peer_csrk["key"] = keys.csrk.value
        # Bumble has just filed the link under the identity address the peer gave
        # (peer_address), keeping the address the link was made with beside it.
        irk = keys.irk.value if keys.irk else None
        identity = connection.peer_address if irk else None
        on_air = connection.peer_resolvable_address or connection.peer_address
        emit(event="paired", ltk=keys.ltk is not None or keys.ltk_central is not None or keys.ltk_peripheral is not None,
             irk=irk is not None, authenticated=bool(keys.ltk.authenticated) if keys.ltk else
             bool(keys.ltk_peripheral.authenticated) if keys.ltk_peripheral else None,
             irk_value=irk.hex() if irk else None, identity=identity.to_string(False) if identity else None,
             identity_public=identity.address_type in (Address.PUBLIC_DEVICE_ADDRESS, Address.PUBLIC_IDENTITY_ADDRESS) if identity else None,
             # bumble.smp's own ah() on the address this link was made with.
             link_resolves=bool(irk and AddressResolver([(irk, identity)]).resolve(on_air)),
             link_key=keys.link_key.value.hex() if keys.link_key else None)
    connection.on("pairing", lambda keys: bonded.add(str(connection.peer_address)))
    connection.on("pairing", on_pairing)
    connection.on("pairing_failure", lambda reason: emit(event="pairing-failure", reason=int(reason)))
    connection.on("connection_encryption_change", lambda: emit(event="encryption", encrypted=connection.is_encrypted,
                                                               key_size=connection.encryption_key_size if hasattr(connection, "encryption_key_size") else None))
    connection.on("connection_encryption_key_refresh", lambda: emit(event="key-refresh"))
    connection.on("disconnection", lambda reason: (emit(event="disconnected", reason=reason), disconnected.set()))


def serve_signed_writes(device):
    """Bumble's server has no handler for Signed Write Commands (its PDU class keeps
    the signature in attribute_value): verify them here, counters increasing."""
    last = {}

    def on_signed_write(server, bearer, pdu):
        raw = bytes(pdu)
        message, sent = raw[:-12], raw[-12:]
        counter = int.from_bytes(sent[:4], "little")
        key = peer_csrk.get("key")
        verified = key is not None and signature(key, message, counter) == sent and counter > last.get("counter", -1)
        if verified:
            last["counter"] = counter
        emit(event="signed-write", handle=pdu.attribute_handle, value=pdu.attribute_value[:-12].hex(), counter=counter,
             verified=verified, encrypted=bearer.is_encrypted)

    device.gatt_server.__class__.on_att_signed_write_command = on_signed_write


async def send_signed_writes(connection):
    """On an unencrypted link: Signed Write Commands to the central's characteristic."""
    await asyncio.sleep(0.5)
    peer = Peer(connection)
    await peer.discover_services()
    found = await peer.discover_characteristics(uuids=[UUID("3f3e0005-0000-1000-8000-00805f9b34fb")])
    if not found:
        emit(event="error", error="no signed-write characteristic on the central")
        return
    handle = found[0].handle
    sent = []
    for value, counter in ((b"\xb0", 0), (b"\xb1", 1)):
        message = bytes([0xD2]) + handle.to_bytes(2, "little") + value
        pdu = att.ATT_Signed_Write_Command(attribute_handle=handle, attribute_value=value + signature(BUMBLE_CSRK, message, counter))
        await connection.gatt_client.send_command(pdu)
        sent.append(pdu)
    await connection.gatt_client.send_command(sent[-1])  # a replay
    forged = bytearray(signature(BUMBLE_CSRK, bytes([0xD2]) + handle.to_bytes(2, "little") + b"\xbf", 2))
    forged[-1] ^= 1
    await connection.gatt_client.send_command(att.ATT_Signed_Write_Command(attribute_handle=handle, attribute_value=b"\xbf" + bytes(forged)))
    emit(event="sent-signed", handle=handle)


bonded = set()


def serve_protected_channels(device, spsm):
    from bumble import l2cap
    manager = device.l2cap_channel_manager
    accept = manager.on_l2cap_le_credit_based_connection_request

    def check(connection, cid, request):
        if request.le_psm == spsm and not connection.is_encrypted:
            result = 0x0008 if str(connection.peer_address) in bonded else 0x0005
            emit(event="refusing", result=result)
            manager.send_control_frame(connection, cid, l2cap.L2CAP_LE_Credit_Based_Connection_Response(
                identifier=request.identifier, destination_cid=0, mtu=23, mps=23, initial_credits=0, result=result))
            return
        accept(connection, cid, request)

    manager.on_l2cap_le_credit_based_connection_request = check

    def on_channel(channel):
        emit(event="channel", encrypted=channel.connection.is_encrypted, mtu=channel.peer_mtu)
        received = {"bytes": 0}

        def sink(sdu):
            received["bytes"] += len(sdu)
            channel.write(sdu)

        channel.sink = sink
        channel.on("close", lambda: emit(event="channel-closed", **received))

    device.create_l2cap_server(spec=l2cap.LeCreditBasedChannelSpec(psm=spsm, mtu=1024, mps=100, max_credits=4), handler=on_channel)


async def peripheral(device, private=False, sign=False, request=False, rounds=2):
    protected = gatt.Characteristic(
        "3f3e0002-0000-1000-8000-00805f9b34fb", gatt.Characteristic.Properties.READ,
        gatt.Characteristic.READ_REQUIRES_AUTHENTICATION, bytes([0x42, 0x43]))
    characteristics = [protected]
    if sign:
        signed = gatt.Characteristic(
            "3f3e0003-0000-1000-8000-00805f9b34fb", gatt.Characteristic.Properties.AUTHENTICATED_SIGNED_WRITES,
            gatt.Characteristic.WRITEABLE, bytes([0]))
        characteristics.append(signed)
    device.add_service(gatt.Service("3f3e0001-0000-1000-8000-00805f9b34fb", characteristics))
    if sign:
        serve_signed_writes(device)
        emit(event="ready", csrk=BUMBLE_CSRK.hex(), signed_handle=signed.handle)
    for round in range(rounds):
        disconnected = asyncio.Event()
        connected = asyncio.Event()

        def on_connection(connection):
            rpa = connection.peer_resolvable_address
            emit(event="connected", round=round, peer=connection.peer_address.to_string(False),
                 rpa=rpa.to_string(False) if rpa else None)
            watch(connection, disconnected)
            connected.set()
            if sign and round > 0:
                asyncio.get_running_loop().create_task(send_signed_writes(connection))
            if request:
                asyncio.get_running_loop().call_later(1.0, connection.request_pairing)

        device.once("connection", on_connection)
        if private and round > 0:
            device.random_address = Address.generate_private_address(device.irk)
        await device.start_advertising(auto_restart=False)
        emit(event="advertising", round=round, value_handle=protected.handle, address=device.random_address.to_string(False))
        try:
            await asyncio.wait_for(disconnected.wait(), 60)
        except asyncio.TimeoutError:
            emit(event="timeout")
            return


async def pair_or_encrypt(connection, round, disconnected):
    """Round 0 pairs, later rounds encrypt from the stored keys; then the link ends
    (left to the peer when encryption failed on a later round)."""
    watch(connection, disconnected)
    try:
        if round == 0:
            await connection.pair()
        else:
            await connection.encrypt()
        emit(event="secured", round=round, encrypted=connection.is_encrypted)
    except Exception as e:
        emit(event="error", round=round, error=type(e).__name__, detail=str(e))
    await asyncio.sleep(0.2)
    if connection.is_encrypted or round == 0:
        await connection.disconnect()
    await asyncio.wait_for(disconnected.wait(), 10)


async def central(device, address):
    for round in range(2):
        disconnected = asyncio.Event()
        connection = await device.connect(Address(address, Address.PUBLIC_DEVICE_ADDRESS))
        emit(event="connected", round=round)
        await pair_or_encrypt(connection, round, disconnected)


async def central_channel(device, address, rounds):
    from bumble import l2cap
    spec = l2cap.LeCreditBasedChannelSpec(psm=0x85, mtu=100, mps=50, max_credits=2)

    async def ask(connection, round, when):
        try:
            channel = await device.create_l2cap_channel(connection, spec)
            emit(event="channel", round=round, when=when, mtu=channel.peer_mtu)
        except l2cap.L2capError as e:
            emit(event="refused", round=round, when=when, result=e.error_code, name=e.error_name)

    for round in range(rounds):
        disconnected = asyncio.Event()
        connection = await device.connect(Address(address, Address.PUBLIC_DEVICE_ADDRESS))
        emit(event="connected", round=round)
        watch(connection, disconnected)
        try:
            await ask(connection, round, "unencrypted")
            if round == 0:
                await connection.pair()
            else:
                await connection.encrypt()
            emit(event="secured", round=round, encrypted=connection.is_encrypted)
            await ask(connection, round, "encrypted")
        except Exception as e:
            emit(event="error", round=round, error=type(e).__name__, detail=str(e))
        await connection.disconnect()
        await asyncio.wait_for(disconnected.wait(), 10)


async def central_subscribe(device, address):
    handle = None
    for round in range(2):
        disconnected = asyncio.Event()
        connection = await device.connect(Address(address, Address.PUBLIC_DEVICE_ADDRESS))
        emit(event="connected", round=round)
        watch(connection, disconnected)
        notified = asyncio.Event()

        def on_notification(pdu, round=round):
            emit(event="notification", round=round, handle=pdu.attribute_handle, value=bytes(pdu.attribute_value).hex())
            notified.set()

        connection.gatt_client.on_att_handle_value_notification = on_notification
        try:
            if round == 0:
                await connection.pair()
                peer = Peer(connection)
                await peer.discover_services()
                battery = [c for c in await peer.discover_characteristics(uuids=[UUID.from_16_bits(0x2A19)])]
                await battery[0].discover_descriptors()
                await battery[0].subscribe(lambda value: None)
                handle = battery[0].handle
                emit(event="subscribed", round=round, handle=handle)
                await asyncio.sleep(0.5)
            else:
                await connection.encrypt()
                emit(event="secured", round=round, encrypted=connection.is_encrypted)
                await asyncio.wait_for(notified.wait(), 10)
        except Exception as e:
            emit(event="error", round=round, error=type(e).__name__, detail=str(e))
        await connection.disconnect()
        await asyncio.wait_for(disconnected.wait(), 10)


async def central_bonded_twice(device, address, first, second, prepare=None):
    """Two links to ADDRESS: `first(connection)` after pairing on the first, then 2 s
    apart, `prepare(connection)` before encrypting from the stored keys on the second
    and `second(connection)` after."""
    for round in range(2):
        disconnected = asyncio.Event()
        connection = await device.connect(Address(address, Address.PUBLIC_DEVICE_ADDRESS))
        emit(event="connected", round=round)
        watch(connection, disconnected)
        try:
            if round == 0:
                await connection.pair()
                await first(connection)
            else:
                if prepare:
                    prepare(connection)
                await connection.encrypt()
                emit(event="secured", round=round, encrypted=connection.is_encrypted)
                await second(connection)
        except Exception as e:
            emit(event="error", round=round, error=type(e).__name__, detail=str(e))
        await connection.disconnect()
        await asyncio.wait_for(disconnected.wait(), 10)
        emit(event="disconnected", round=round)
        if round == 0:
            await asyncio.sleep(2)


async def central_service_changed(device, address):
    indicated = asyncio.Event()

    async def first(connection):
        peer = Peer(connection)
        await peer.discover_services()
        found = await peer.discover_characteristics(uuids=[UUID.from_16_bits(0x2A05)])
        await found[0].discover_descriptors()
        await found[0].subscribe(lambda value: None, prefer_notify=False)
        emit(event="subscribed", round=0, handle=found[0].handle)
        await asyncio.sleep(0.5)

    def prepare(connection):
        # In place before the link is encrypted: the server tells at once.
        client = connection.gatt_client

        def on_indication(pdu):
            emit(event="indication", round=1, handle=pdu.attribute_handle, value=bytes(pdu.attribute_value).hex())
            client.send_confirmation(att.ATT_Handle_Value_Confirmation())
            indicated.set()

        client.on_att_handle_value_indication = on_indication

    async def second(connection):
        await asyncio.wait_for(indicated.wait(), 10)
        await asyncio.sleep(0.5)

    await central_bonded_twice(device, address, first, second, prepare)


async def central_robust_caching(device, address):
    level = {}

    async def first(connection):
        peer = Peer(connection)
        await peer.discover_services()
        features = await peer.discover_characteristics(uuids=[UUID.from_16_bits(0x2B29)])
        await features[0].write_value(b"\x01", with_response=True)
        emit(event="features", round=0, written="01")
        found = await peer.discover_characteristics(uuids=[UUID.from_16_bits(0x2A19)])
        level["handle"] = found[0].handle
        await asyncio.sleep(0.5)

    async def read(connection, what):
        try:
            value = await connection.gatt_client.read_value(level["handle"])
            emit(event="read", round=1, what=what, value=bytes(value).hex())
        except att.ATT_Error as e:
            emit(event="read", round=1, what=what, error=e.error_code)

    async def second(connection):
        # The server restores the client's record once it hears of the encryption.
        await asyncio.sleep(0.3)
        await read(connection, "before")
        hashes = await connection.gatt_client.read_characteristics_by_uuid(UUID.from_16_bits(0x2B2A), None)
        emit(event="hash", round=1, values=[bytes(v).hex() for v in hashes])
        await read(connection, "after")

    await central_bonded_twice(device, address, first, second)


async def central_indicate_pair(device, address):
    disconnected = asyncio.Event()
    connection = await device.connect(Address(address, Address.PUBLIC_DEVICE_ADDRESS))
    emit(event="connected", round=0)
    watch(connection, disconnected)
    client = connection.gatt_client

    async def pair_then_confirm(pdu):
        emit(event="indication", handle=pdu.attribute_handle, value=bytes(pdu.attribute_value).hex())
        try:
            await connection.pair()
            emit(event="secured", round=0, encrypted=connection.is_encrypted)
        except Exception as e:
            emit(event="error", round=0, error=type(e).__name__, detail=str(e))
        client.send_confirmation(att.ATT_Handle_Value_Confirmation())
        emit(event="confirmed", handle=pdu.attribute_handle)

    client.on_att_handle_value_indication = lambda pdu: asyncio.get_running_loop().create_task(pair_then_confirm(pdu))
    try:
        peer = Peer(connection)
        await peer.discover_services()
        found = await peer.discover_characteristics(uuids=[UUID("6E400003-B5A3-F393-E0A9-E50E24DCCA9E")])
        await found[0].discover_descriptors()
        await found[0].subscribe(lambda value: None, prefer_notify=False)
        emit(event="subscribed", round=0, handle=found[0].handle)
    except Exception as e:
        emit(event="error", round=0, error=type(e).__name__, detail=str(e))
    try:
        await asyncio.wait_for(disconnected.wait(), 60)
    except asyncio.TimeoutError:
        await connection.disconnect()
        await asyncio.wait_for(disconnected.wait(), 10)


async def find(device, name, other=None, within=20):
    """The first advertiser named `name` whose address is not `other`."""
    found = asyncio.get_running_loop().create_future()

    def on_advertisement(advertisement):
        if advertisement.data.get(0x09) in (name, name.encode()) and advertisement.address != other and not found.done():
            found.set_result(advertisement.address)

    device.on("advertisement", on_advertisement)
    await device.start_scanning(filter_duplicates=False)
    try:
        return await asyncio.wait_for(found, within)
    finally:
        device.remove_listener("advertisement", on_advertisement)
        await device.stop_scanning()


async def central_private(device, name):
    first = None
    for round in range(2):
        disconnected = asyncio.Event()
        # The address may change between the scan and the connection (the peer's
        # period ends): then the attempt times out and we look again, as a phone would.
        # A timed-out attempt may leave the controller busy a moment (a scan or a new
        # connection refused with an HCI error): a short pause, then look again.
        for attempt in range(8):
            address = None
            try:
                address = await find(device, name, other=first)
                connection = await device.connect(address, timeout=5)
                break
            except Exception as e:
                emit(event="retry", round=round, address=address.to_string(False) if address else None, error=type(e).__name__)
                await asyncio.sleep(0.5)
        resolver = device.address_resolver
        emit(event="found", round=round, address=address.to_string(False), resolvable=address.is_resolvable,
             resolved=str(resolver.resolve(address).to_string(False)) if resolver and resolver.resolve(address) else None)
        first = first or address
        emit(event="connected", round=round, peer=connection.peer_address.to_string(False))
        await pair_or_encrypt(connection, round, disconnected)


async def main():
    if os.environ.get("BUMBLE_LOGLEVEL"):
        logging.basicConfig(level=os.environ["BUMBLE_LOGLEVEL"].upper())
    port, mode, sc, mitm, io, passkey = sys.argv[1:7]
    async with await open_transport(f"tcp-client:127.0.0.1:{port}") as (source, sink):
        device = Device.with_hci("bumble-smp", Address("F1:F2:F3:F4:F5:F6"), source, sink)
        device.keystore = MemoryKeyStore()
        delegate = Delegate(IO[io], int(passkey))
        if mode == "peripheral-sign":
            both = PairingDelegate.DEFAULT_KEY_DISTRIBUTION | PairingDelegate.KeyDistribution.DISTRIBUTE_SIGNING_KEY
            delegate.local_initiator_key_distribution = both
            delegate.local_responder_key_distribution = both
        if mode == "peripheral-ctkd":
            both = PairingDelegate.DEFAULT_KEY_DISTRIBUTION | PairingDelegate.KeyDistribution.DISTRIBUTE_LINK_KEY
            delegate.local_initiator_key_distribution = both
            delegate.local_responder_key_distribution = both
            if sys.argv[7] == "h7":
                session_init = smp.Session.__init__

                def with_ct2(self, *args, **kwargs):
                    session_init(self, *args, **kwargs)
                    self.ct2 = True
                smp.Session.__init__ = with_ct2
        oob = None
        if mode == "peripheral-oob":
            r, c, tk = (bytes.fromhex(a) for a in sys.argv[7:10])
            oob = PairingConfig.OobConfig(our_context=smp.OobContext(), peer_data=OobSharedData(c=c, r=r),
                                          legacy_context=smp.OobLegacyContext(tk=tk))
        config = PairingConfig(sc=sc == "1", mitm=mitm == "1", bonding=True, delegate=delegate, oob=oob)
        device.pairing_config_factory = lambda connection: config
        if mode == "peripheral-private":
            device.le_privacy_enabled = True
            device.le_rpa_timeout = 0  # the script picks the moment it changes
        await device.power_on()
        if mode == "peripheral-channel":
            serve_protected_channels(device, 0x85)
            await peripheral(device, rounds=4)
        elif mode in ("peripheral", "peripheral-private", "peripheral-ctkd", "peripheral-oob", "peripheral-sign", "peripheral-request"):
            await peripheral(device, private=mode == "peripheral-private", sign=mode == "peripheral-sign", request=mode == "peripheral-request")
        elif mode == "central-private":
            await central_private(device, sys.argv[7])
        elif mode == "central-channel":
            await central_channel(device, sys.argv[7], int(sys.argv[8]) if len(sys.argv) > 8 else 2)
        elif mode == "central-indicate-pair":
            await central_indicate_pair(device, sys.argv[7])
        elif mode == "central-subscribe":
            await central_subscribe(device, sys.argv[7])
        elif mode == "central-service-changed":
            await central_service_changed(device, sys.argv[7])
        elif mode == "central-robust-caching":
            await central_robust_caching(device, sys.argv[7])
        else:
            await central(device, sys.argv[7])
        emit(event="done")


if __name__ == "__main__":
    asyncio.run(main())
