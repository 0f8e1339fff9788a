// GATT over the kernel's L2CAP ATT socket, in the QEMU guest (BLE_GUEST=1) against
// btvirt's hci0 and hci1: our server on the kernel socket with our client over our
// user-space L2CAP, and the reverse. Both sides are our GATT code; the transport in
// between is the real kernel's HCI and L2CAP on one side.

import ATT
import BLETesting
import BlueZATT
import Foundation
import GATT
import HCI
import L2CAP
import Logging
import Testing
import Transports

// Part of the serialized KernelTests suite: every kernel test needs the adapters alone.
extension KernelTests {
    static let logger = Guest.logger

    static func database() throws -> (AttributeDatabase, ServiceHandles) {
        var db = AttributeDatabase()
        let s = try db.add(GATTService(uuid: BluetoothUUID(0xFFF0), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF1), properties: [.read, .write], value: (0..<60).map { UInt8($0) }),
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF2), properties: [.read, .notify, .indicate], value: [0]),
        ]))
        return (db, s)
    }

    /// Discovers FFF0 and exercises read (long at MTU 23), write and a subscription.
    static func exercise(_ client: GATTClient, server: GATTServer, handles: ServiceHandles, indications: Bool) async throws {
        await client.start()
        let services = try await client.discoverPrimaryServices(uuid: BluetoothUUID(0xFFF0))
        let service = try #require(services.first)
        let chars = try await client.discoverCharacteristics(of: service)
        #expect(chars.map(\.valueHandle) == handles.characteristicValues)
        #expect(try await client.read(chars[0].valueHandle) == (0..<60).map { UInt8($0) })
        try await client.write(chars[0].valueHandle, value: Array("kernel".utf8))
        #expect(await server.database.attribute(chars[0].valueHandle)?.value == Array("kernel".utf8))
        let cccd = try #require(try await client.discoverDescriptors(of: chars[1]).first { $0.uuid == GATTType.clientCharacteristicConfiguration })
        let values = try await client.subscribe(chars[1], cccd: cccd.handle, indications: indications)
        // The CCCD write has been answered, so the server holds the subscription: push.
        let pushed = indications ? await server.indicate(chars[1].valueHandle, value: [9, 9]) : await server.notify(chars[1].valueHandle, value: [9, 9])
        #expect(pushed.count == 1)
        #expect(await firstElement(values, within: .seconds(60)) == [9, 9])
        _ = try await client.exchangeMTU()
    }

    static func userChannel(_ index: UInt16) async throws -> (HCIController, L2CAPHost, BluetoothAddress) {
        let c = HCIController(transport: try BlueZ.open(index: index, channel: .user, logger: logger), logger: logger)
        let info = try await c.initialize()
        let host = L2CAPHost(controller: c, logger: logger)
        await host.start()
        return (c, host, info.address)
    }

    static func address(of index: UInt16) throws -> BluetoothAddress {
        try #require(try BlueZ.adapters().first { $0.index == index }?.address)
    }

    @Test func serverOnKernelSocketClientInUserSpace() async throws {
        guard Guest.active, !Guest.unprivileged else { return }
        let (db, handles) = try Self.database()
        let server = GATTServer(database: db, logger: Self.logger)
        try BlueZ.setPower(index: 1, on: true)
        let hci1 = try Self.address(of: 1)
        let listener = try KernelATTSocket.listen(on: hci1)
        defer { listener.close() }
        // hci1 advertises (connectable) through the raw channel, driven by our stack.
        let adv = HCIController(transport: try BlueZ.open(index: 1, channel: .raw, logger: Self.logger), logger: Self.logger)
        try await adv.initialize(reset: false)
        do { try await adv.send(LESetAdvertisingEnable(advertisingEnable: false)) } catch HCIError.commandFailed(_, .commandDisallowed) {}
        try await adv.send(LESetAdvertisingParameters(advertisingIntervalMin: 0x20, advertisingIntervalMax: 0x20, advertisingType: 0))
        try await adv.send(LESetAdvertisingEnable(advertisingEnable: true))
        let accepted = Task { try await KernelATTChannel.accept(on: listener) }

        let (central, host, _) = try await Self.userChannel(0)
        let connections = await host.newConnections()
        try await central.send(LECreateConnection(peerAddressType: .public, peerAddress: hci1))
        let link = try #require(await firstElement(connections, within: .seconds(60)))
        let channel = try await accepted.value
        await server.attach(ATTBearer(channel: channel, logger: Self.logger), connection: 1)
        let client = GATTClient(bearer: ATTBearer(channel: L2CAPATTChannel(host: host, handle: link.handle), logger: Self.logger))
        try await Self.exercise(client, server: server, handles: handles, indications: true)
        // End the link and wait for it: a link left up on the kernel's side would be
        // reused, dead, by the next test's connect.
        await Self.disconnect(link.handle, controller: central, host: host)
        channel.close()
        await central.close()
        await adv.close()
    }

    @Test func serverInUserSpaceClientOnKernelSocket() async throws {
        guard Guest.active, !Guest.unprivileged else { return }
        let (db, handles) = try Self.database()
        let server = GATTServer(database: db, logger: Self.logger)
        let (peripheral, host, hci0) = try await Self.userChannel(0)
        let connections = await host.newConnections()
        let acceptor = Task { () -> UInt16? in
            for await c in connections {
                await server.attach(ATTBearer(channel: L2CAPATTChannel(host: host, handle: c.handle), logger: Self.logger), connection: c.handle)
                return c.handle
            }
            return nil
        }
        try await peripheral.send(LESetAdvertisingParameters(advertisingIntervalMin: 0x20, advertisingIntervalMax: 0x20, advertisingType: 0))
        try await peripheral.send(LESetAdvertisingEnable(advertisingEnable: true))
        try BlueZ.setPower(index: 1, on: true)
        // The kernel on hci1 creates the LE link and the ATT channel for us.
        let channel = try await KernelATTChannel.connect(to: hci0, type: .public, from: try Self.address(of: 1))
        let client = GATTClient(bearer: ATTBearer(channel: channel, logger: Self.logger))
        try await Self.exercise(client, server: server, handles: handles, indications: false)
        if let handle = await acceptor.value { await Self.disconnect(handle, controller: peripheral, host: host) }
        channel.close()
        await peripheral.close()
    }
}
