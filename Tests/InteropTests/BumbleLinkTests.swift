// A link between our host and Bumble's on Rootcanal: we connect to Bumble through the
// Filter Accept List among addresses nobody has (`connect(toAnyOf:)`); we ask for LE 2M
// as central and Bumble's host hears of the update; Bumble asks as peripheral and ours
// reports it (`ConnectionEvent.phyUpdated`).

import BLE
import BLETesting
import Foundation
import HCI
import Transports
import Testing

@Suite(.serialized, .liveTimeLimit) struct BumbleLinkTests {
    static let bumble = BluetoothAddress("F1:F2:F3:F4:F5:F8")!

    /// Runs `body` with Bumble advertising as a peripheral (bumble_phy_peer.py with
    /// `arguments`) and our host started, both on one Rootcanal; stops them after.
    static func withBumble(_ arguments: [String] = [], _ body: (LiveProcess, BluetoothHost) async throws -> Void) async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let peer = try LiveProcess(python, [Interop.root + "/Tests/InteropTests/bumble_phy_peer.py", String(rc.hciPort)] + arguments)
        #expect(await peer.waitForOutput { $0.contains("\"event\": \"advertising\"") }, "\(peer.output)")
        let host = try BluetoothHost.open(rc.transportSpec, logger: Interop.logger)
        defer { Task { await host.close() } }
        try await host.start()
        try await body(peer, host)
        _ = await peer.stop()
    }

    @Test func weConnectToBumbleThroughTheFilterAcceptList() async throws {
        try await Self.withBumble { peer, host in
            let nobody = [DeviceAddress(BluetoothAddress("C0:00:00:00:0F:0F")!), DeviceAddress(BluetoothAddress("F1:F2:F3:F4:F5:F9")!, type: .random)]
            let remote = try await host.central.connect(toAnyOf: nobody + [DeviceAddress(Self.bumble, type: .random)], within: .seconds(10))
            #expect(remote.connection.peer == Self.bumble && remote.connection.peerType == .random)
            #expect(await peer.waitForOutput { $0.contains("\"event\": \"connected\"") }, "\(peer.output)")
            try await remote.disconnect()
            #expect(await peer.waitForOutput { $0.contains("\"event\": \"disconnected\"") }, "\(peer.output)")
        }
    }

    @Test func weMoveTheLinkToLE2MAndBumbleHearsOfIt() async throws {
        try await Self.withBumble { peer, host in
            let remote = try await host.central.connect(to: Self.bumble, type: .random, within: .seconds(10))
            #expect(try await remote.updatePHY() == LinkPHY(tx: .le2M, rx: .le2M))
            #expect(await peer.waitForOutput(within: .seconds(10)) { $0.contains("\"event\": \"phy\", \"tx\": 2, \"rx\": 2") }, "\(peer.output)")
            #expect(try await remote.phy() == LinkPHY(tx: .le2M, rx: .le2M))
            try await remote.disconnect()
            #expect(await peer.waitForOutput { $0.contains("\"event\": \"disconnected\"") }, "\(peer.output)")
        }
    }

    @Test func bumbleMovesTheLinkToLE2MAndWeHearOfIt() async throws {
        try await Self.withBumble(["ask"]) { peer, host in
            let events = host.connectionEvents()
            let remote = try await host.central.connect(to: Self.bumble, type: .random, within: .seconds(10))
            let update = await firstElement(events.compactMap { e -> (Connection, LinkPHY)? in
                if case let .phyUpdated(c, p) = e { return (c, p) } else { return nil }
            }, within: .seconds(10))
            #expect(update?.0 == remote.connection && update?.1 == LinkPHY(tx: .le2M, rx: .le2M), "\(peer.output)")
            #expect(await peer.waitForOutput(within: .seconds(10)) { $0.contains("\"event\": \"phy\", \"tx\": 2, \"rx\": 2") }, "\(peer.output)")
            try await remote.disconnect()
        }
    }

    /// Our peripheral, with preferred connection parameters it asks for, and Bumble as
    /// central: 5 s (TGAP(conn_pause_peripheral)) after the link came up, our L2CAP
    /// Connection Parameter Update Request reaches Bumble's host, which accepts it and
    /// updates the link; both sides then know the new parameters.
    @Test func bumbleGivesOurPeripheralItsPreferredParameters() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let prefers = PreferredConnectionParameters(intervalMin: 24, intervalMax: 32, latency: 1, supervisionTimeout: 600)
        let host = BluetoothHost(transport: try TransportSpec(parsing: rc.transportSpec).open(logger: Interop.logger), logger: Interop.logger,
                                 preferredConnectionParameters: prefers, requestsPreferredParameters: true)
        defer { Task { await host.close() } }
        let address = try await host.start().address
        try await host.peripheral.startAdvertising(AdvertisingData())
        let events = host.connectionEvents()
        let central = try LiveProcess(python, [Interop.root + "/Tests/InteropTests/bumble_params_central.py", String(rc.hciPort), address.description])
        #expect(await central.waitForOutput(within: .seconds(20)) { $0.contains("\"event\": \"done\"") }, "\(central.output)")
        _ = await central.stop()
        let lines = central.output.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        let update = lines.first { $0["event"] as? String == "parameters" }
        #expect((24...32).contains(update?["interval"] as? Int ?? 0) && update?["latency"] as? Int == 1 && update?["timeout"] as? Int == 600,
                "\(central.output)")
        let ours = await firstElement(events.compactMap { e -> (UInt16, UInt16, UInt16)? in
            if case let .parametersUpdated(_, i, l, t) = e { return (i, l, t) } else { return nil }
        }, within: .seconds(5))
        #expect(ours.map { Int($0.0) } == update?["interval"] as? Int && ours?.1 == 1 && ours?.2 == 600)
    }
}
