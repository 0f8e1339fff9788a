// Our GATT client against Bumble's GATT server, both on Rootcanal: we scan for
// Bumble's advertisement, connect as central with LE Create Connection, and run
// discovery, read, read long, write, write long, and notification and indication
// subscriptions from our own HCI, L2CAP, ATT and GATT layers.

import ATT
import BLETesting
import Foundation
import GAP
import GATT
import HCI
import L2CAP
import Logging
import Testing
import Transports

@Suite(.serialized, .liveTimeLimit) struct BumbleGATTClientTests {
    static let bumble = BluetoothAddress("F1:F2:F3:F4:F5:F6")!

    @Test func ourCentralUsesBumblesGATTServer() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let logger = Interop.logger
        let controller = HCIController(transport: try StreamTransports.tcp(host: "127.0.0.1", port: rc.hciPort, logger: logger), logger: logger)
        try await controller.initialize()
        let host = L2CAPHost(controller: controller, logger: logger)
        await host.start()

        let peripheral = Process()
        peripheral.executableURL = URL(fileURLWithPath: python)
        peripheral.arguments = [Interop.root + "/Tests/InteropTests/bumble_gatt_peripheral.py", String(rc.hciPort)]
        let out = Pipe()
        peripheral.standardOutput = out
        peripheral.standardError = FileHandle.nullDevice
        try peripheral.run()
        defer { RootcanalProcess.kill(peripheral) }

        // Find Bumble's advertisement, then connect to it.
        let events = await controller.events()
        try await controller.send(LESetScanParameters(scanType: 0))
        try await controller.send(LESetScanEnable(scanEnable: true))
        let seen = await firstElement(events.filter { e in
            if case let .le(.advertisingReport(r)) = e { return r.reports.contains { $0.address == Self.bumble } }
            return false
        }, within: .seconds(20)) != nil
        try await controller.send(LESetScanEnable(scanEnable: false))
        try #require(seen, "no advertisement from Bumble")
        let connections = await host.newConnections()
        try await controller.send(LECreateConnection(peerAddressType: .random, peerAddress: Self.bumble))
        var it = connections.makeAsyncIterator()
        let connection = try #require(await it.next())
        #expect(connection.role == .central && connection.peer == Self.bumble)

        let client = GATTClient(bearer: ATTBearer(channel: L2CAPATTChannel(host: host, handle: connection.handle), logger: logger))
        await client.start()
        let services = try await client.discoverPrimaryServices()
        let service = try #require(services.first { $0.uuid == BluetoothUUID(0xFFF0) }, "services: \(services.map(\.uuid))")
        let chars = try await client.discoverCharacteristics(of: service)
        #expect(chars.map(\.uuid) == [0xFFF1, 0xFFF2, 0xFFF3, 0xFFF4, 0xFFF5].map { BluetoothUUID($0) })
        func char(_ u: UInt16) throws -> DiscoveredCharacteristic { try #require(chars.first { $0.uuid == BluetoothUUID(u) }) }
        func cccd(_ c: DiscoveredCharacteristic) async throws -> UInt16 {
            try #require(try await client.discoverDescriptors(of: c).first { $0.uuid == GATTType.clientCharacteristicConfiguration }?.handle)
        }

        // At the default ATT_MTU of 23: 200 bytes need Read Blob, 100 need prepared writes.
        #expect(try await client.read(try char(0xFFF1).valueHandle) == Array("bumble".utf8))
        #expect(try await client.read(try char(0xFFF4).valueHandle) == (0..<200).map { UInt8($0) })
        try await client.write(try char(0xFFF1).valueHandle, value: Array("swift".utf8))
        let long = (0..<100).map { UInt8(200 - $0) }
        try await client.write(try char(0xFFF4).valueHandle, value: long)
        #expect(try await client.read(try char(0xFFF4).valueHandle) == long)

        let notifications = try await client.subscribe(try char(0xFFF2), cccd: try await cccd(try char(0xFFF2)))
        var n = notifications.makeAsyncIterator()
        #expect(await n.next() == [0x42])
        let indications = try await client.subscribe(try char(0xFFF3), cccd: try await cccd(try char(0xFFF3)), indications: true)
        var i = indications.makeAsyncIterator()
        #expect(await i.next() == [0x43, 0x43])

        let mtu = try await client.exchangeMTU()
        #expect(mtu > 23)

        try await controller.send(Disconnect(connectionHandle: connection.handle))
        _ = await Interop.exit(of: peripheral, timeout: 10)
        let lines = String(decoding: await Interop.readAll(out), as: UTF8.self)
            .split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        await controller.close()
        let written = lines.filter { $0["event"] as? String == "written" }
        #expect(written.contains { $0["uuid"] as? String == "FFF1" && $0["value"] as? String == Array("swift".utf8).hexString })
        #expect(written.contains { $0["uuid"] as? String == "FFF4" && $0["value"] as? String == long.hexString })
        #expect(lines.contains { $0["event"] as? String == "indication-confirmed" }, "Bumble saw no confirmation")
        #expect(lines.contains { $0["event"] as? String == "done" })
    }
}
