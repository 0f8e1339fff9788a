// Our GATT server against Bumble's GATT client (Google's Python host), both on
// Rootcanal: Bumble connects to our advertisement, discovers our database, reads,
// writes and subscribes; we answer from our own HCI, L2CAP, ATT and GATT layers.

import ATT
import BLETesting
import Foundation
import GATT
import HCI
import L2CAP
import Logging
import Testing
import Transports

@Suite(.serialized, .liveTimeLimit) struct BumbleGATTTests {
    static let custom = BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!
    static let longValue = (0..<300).map { UInt8($0 & 0xFF) }

    static func python() throws -> String? {
        let p = Interop.root + "/.venv/bin/python"
        if FileManager.default.isExecutableFile(atPath: p) { return p }
        if Interop.required { throw RootcanalProcess.LaunchError.didNotStart("no .venv/bin/python (run Scripts/setup.sh)") }
        return nil
    }

    @Test func bumbleCentralUsesOurGATTServer() async throws {
        guard let binary = try Interop.rootcanal(), let python = try Self.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let logger = Interop.logger
        let controller = HCIController(transport: try StreamTransports.tcp(host: "127.0.0.1", port: rc.hciPort, logger: logger), logger: logger)
        let info = try await controller.initialize()
        let host = L2CAPHost(controller: controller, logger: logger)
        await host.start()

        var db = AttributeDatabase()
        let battery = try db.add(GATTService(uuid: BluetoothUUID(0x180F), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0x2A19), properties: [.read, .notify], value: [100],
                               descriptors: [.userDescription("Battery Level")]),
        ]))
        let custom = try db.add(GATTService(uuid: Self.custom, characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0x2B00), properties: [.read], value: Self.longValue),
            GATTCharacteristic(uuid: BluetoothUUID(0x2B01), properties: [.read, .write], value: Array("hello".utf8)),
            GATTCharacteristic(uuid: BluetoothUUID(0x2B02), properties: [.indicate], value: []),
        ]))
        let server = GATTServer(database: db, loop: host.loop, logger: logger)
        let connections = await host.newConnections()
        let events = server.events

        // Accept connections: a bearer per connection, served by the server.
        let acceptor = Task {
            for await c in connections {
                let bearer = ATTBearer(channel: L2CAPATTChannel(host: host, handle: c.handle), logger: logger)
                await server.attach(bearer, connection: c.handle)
            }
        }
        // Push a value whenever a client subscribes; remember what it wrote.
        let pusher = Task { () -> [UInt8]? in
            var written: [UInt8]?
            for await e in events {
                switch e {
                case let .subscription(h, _, notify, indicate):
                    if notify { await server.notify(h, value: [42]) }
                    if indicate { await server.indicate(h, value: [7, 7]) }
                case let .written(_, v, _): written = v
                case .disconnected: return written
                default: break
                }
            }
            return written
        }

        let name = Array("swift-gatt".utf8)
        try await controller.send(LESetAdvertisingParameters(advertisingIntervalMin: 0x20, advertisingIntervalMax: 0x20, advertisingType: 0))
        try await controller.send(LESetAdvertisingData(data: ADStructure.encode([ADStructure(type: 1, data: [6]), ADStructure(type: 9, data: name)])))
        try await controller.send(LESetAdvertisingEnable(advertisingEnable: true))

        let output = try await Interop.execute(python, [Interop.root + "/Tests/InteropTests/bumble_gatt_central.py", String(rc.hciPort), info.address.description], timeout: 60).out
        if ProcessInfo.processInfo.environment["BLE_SHOW_BUMBLE"] == "1" { print(output) }
        let lines = output.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        func all(_ event: String) -> [[String: Any]] { lines.filter { $0["event"] as? String == event } }

        let written = await withTaskGroup(of: [UInt8]?.self) { g in
            g.addTask { await pusher.value }
            g.addTask { try? await Task.sleep(for: .seconds(5)); return nil }
            let first = await g.next() ?? nil
            g.cancelAll()
            return first
        }
        acceptor.cancel()
        await controller.close()

        #expect(all("done").count == 1, "Bumble did not finish: \(output)")
        #expect((all("mtu").first?["mtu"] as? Int) == 247)
        let services = all("service").compactMap { $0["uuid"] as? String }.map { $0.uppercased() }
        #expect(services.contains { $0.contains("180F") }, "\(services)")
        #expect(services.contains { $0.contains("6E400001-B5A3-F393-E0A9-E50E24DCCA9E") }, "\(services)")
        let starts = all("service").compactMap { $0["start"] as? Int }
        #expect(starts.contains(Int(battery.start)) && starts.contains(Int(custom.start)))
        let reads = Dictionary(all("read").compactMap { r -> (String, String)? in
            guard let u = r["uuid"] as? String, let v = r["value"] as? String else { return nil }
            return (u.uppercased(), v)
        }, uniquingKeysWith: { a, _ in a })
        #expect(reads.first { $0.key.contains("2A19") }?.value == "64")
        // 300 bytes with ATT_MTU 247: Bumble needs Read Request then Read Blob Request at offset 246.
        #expect(reads.first { $0.key.contains("2B00") }?.value == Self.longValue.hexString)
        #expect(reads.first { $0.key.contains("2B01") }?.value == Array("hello".utf8).hexString)
        #expect(written == Array("from-bumble".utf8))
        let values = Dictionary(all("value").compactMap { r -> (String, String)? in
            guard let u = r["uuid"] as? String, let v = r["value"] as? String else { return nil }
            return (u.uppercased(), v)
        }, uniquingKeysWith: { a, _ in a })
        #expect(values.first { $0.key.contains("2A19") }?.value == "2a")
        #expect(values.first { $0.key.contains("2B02") }?.value == "0707")
        let batteryChar = all("characteristic").first { ($0["uuid"] as? String)?.uppercased().contains("2A19") == true }
        #expect((batteryChar?["descriptors"] as? [String])?.map { $0.uppercased() }.contains { $0.contains("2902") } == true)
    }
}
