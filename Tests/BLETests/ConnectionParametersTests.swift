// The connection parameters a central asks for (`Central.connect(parameters:)`): the
// link starts with them on both sides (the controller takes the maximum interval, as
// Rootcanal does), and values outside the specification's ranges are refused before
// anything goes to the controller, at connect and at `updateParameters` alike. On the
// virtual radio, with both command sets, and on Rootcanal.

import BLE
import BLETesting
import HCI
import Snoop
import Synchronization
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct ConnectionParametersTests {
    /// 20 to 30 ms, 3 events of latency, 4 s of supervision timeout.
    static let asked = LEConnectionParameters(connectionIntervalMin: 16, connectionIntervalMax: 24, maxLatency: 3, supervisionTimeout: 400)

    @Test(arguments: [false, true])
    func aLinkStartsWithTheParametersTheCentralAskedFor(extended: Bool) async throws {
        let room = try await Room(peripherals: 1, extendedAdvertising: extended)
        defer { Task { await room.close() } }
        try await room.peripherals[0].peripheral.startAdvertising(AdvertisingSetsTests.named("params"))
        let remote = try await room.central.central.connect(to: room.addresses[0], within: .seconds(5), parameters: Self.asked)
        let expected = ConnectionParameters(interval: 24, latency: 3, supervisionTimeout: 400)
        // Known as soon as the link is (before, connect could return and `connections`
        // name the link while its parameters were still on their way: "disconnected").
        #expect(try await remote.parameters() == expected)
        let link = try #require(await room.peripherals[0].connections.first)
        #expect(try await room.peripherals[0].parameters(of: link) == expected)
    }

    /// Each field out of its range, and fields that disagree: refused by the host,
    /// which sends no LE Create Connection (nor LE Connection Update) for them.
    @Test func parametersOutsideTheirRangesAreRefusedBeforeAnythingIsSent() async throws {
        let sent = Mutex<[HCIOpcode]>([])
        let room = try await Room(peripherals: 1, watchCentral: { r in
            if case let .packet(.command(op, _)) = r.content { sent.withLock { $0.append(op) } }
        })
        defer { Task { await room.close() } }
        try await room.peripherals[0].peripheral.startAdvertising(AdvertisingSetsTests.named("params"))
        let wrong: [LEConnectionParameters] = [
            LEConnectionParameters(connectionIntervalMin: 5, connectionIntervalMax: 24),
            LEConnectionParameters(connectionIntervalMin: 16, connectionIntervalMax: 3201),
            LEConnectionParameters(connectionIntervalMin: 24, connectionIntervalMax: 16),
            LEConnectionParameters(maxLatency: 500),
            LEConnectionParameters(supervisionTimeout: 9),
            LEConnectionParameters(supervisionTimeout: 3201),
            // 4 × 100 ms = 400 ms is not longer than (1 + 1) × 100 ms × 2.
            LEConnectionParameters(connectionIntervalMin: 80, connectionIntervalMax: 80, maxLatency: 1, supervisionTimeout: 40),
        ]
        for p in wrong {
            #expect(p.fault != nil, "\(p)")
            await #expect(throws: BLEError.self, "\(p)") {
                _ = try await room.central.central.connect(to: room.addresses[0], within: .seconds(1), parameters: p)
            }
        }
        #expect(!sent.withLock { $0 }.contains(.leCreateConnection))
        // The bounds themselves are taken.
        let edge = LEConnectionParameters(connectionIntervalMin: 6, connectionIntervalMax: 3200, maxLatency: 0, supervisionTimeout: 3200)
        #expect(edge.fault == nil)
        let remote = try await room.central.central.connect(to: room.addresses[0], within: .seconds(5), parameters: edge)
        #expect(try await remote.parameters().interval == 3200)
        // An update asks within the same rules.
        let link = remote.connection
        await #expect(throws: BLEError.self) {
            try await room.central.updateParameters(link, intervalMin: 80, intervalMax: 80, latency: 1, supervisionTimeout: 40)
        }
        #expect(!sent.withLock { $0 }.contains(.leConnectionUpdate))
        let updated = try await room.central.updateParameters(link, intervalMin: 24, intervalMax: 40, latency: 1, supervisionTimeout: 300)
        #expect(updated == ConnectionParameters(interval: 40, latency: 1, supervisionTimeout: 300))
    }

    /// On Rootcanal: the link starts with the maximum interval, the latency and the
    /// timeout asked for, on both sides.
    @Test func onRootcanalALinkStartsWithTheParametersTheCentralAskedFor() async throws {
        guard let rc = try await Bench.rootcanalHosts(2) else { return }
        defer { rc.stop() }
        try await rc.hosts[1].peripheral.startAdvertising(AdvertisingSetsTests.named("rc-params"))
        let remote = try await rc.hosts[0].central.connect(to: rc.addresses[1], within: .seconds(10), parameters: Self.asked)
        let expected = ConnectionParameters(interval: 24, latency: 3, supervisionTimeout: 400)
        #expect(try await remote.parameters() == expected)
        let link = try #require(await rc.hosts[1].connections.first)
        #expect(try await rc.hosts[1].parameters(of: link) == expected)
    }
}
