// Peripheral Preferred Connection Parameters through the facade: a peripheral host
// states them in its GAP service, a central reads them and gives the link what they
// ask (BlueZ reads them; Bumble reads ours in BtctlServeTests), and a value outside
// §12.3's ranges is refused at start, never served.

import BLE
import BLETesting
import GATT
import HCI
import NIOEmbedded
import Testing

@Suite(.timeLimit(.minutes(3))) struct PreferredParametersTests {
    @Test func aCentralGivesThePeripheralTheConnectionItPrefers() async throws {
        let radio = VirtualRadio()
        let none = PreferredConnectionParameters.noPreference
        let prefers = PreferredConnectionParameters(intervalMin: 24, intervalMax: 40, latency: 2, supervisionTimeout: none)
        let central = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:0C:21")!), logger: Bench.logger)
        let address = BluetoothAddress("C0:00:00:00:0C:22")!, plain = BluetoothAddress("C0:00:00:00:0C:23")!
        let peripheral = BluetoothHost(transport: await radio.makeController(address: address), logger: Bench.logger,
                                       preferredConnectionParameters: prefers)
        let other = BluetoothHost(transport: await radio.makeController(address: plain), logger: Bench.logger)
        for h in [central, peripheral, other] { try await h.start() }
        defer { Task { for h in [central, peripheral, other] { await h.close() } } }
        try await peripheral.peripheral.startAdvertising(AdvertisingSetsTests.named("ppcp"))
        try await other.peripheral.startAdvertising(AdvertisingSetsTests.named("plain"))
        let remote = try await central.central.connect(to: address, within: .seconds(5))
        #expect(try await remote.preferredConnectionParameters() == prefers)
        // The virtual controller takes the longest interval allowed; no timeout
        // preference: 5 s, more than (1 + 2) × 50 ms × 2.
        #expect(try await remote.updateToPreferredParameters() == ConnectionParameters(interval: 40, latency: 2, supervisionTimeout: 500))
        let plainRemote = try await central.central.connect(to: plain, within: .seconds(5))
        #expect(try await plainRemote.preferredConnectionParameters() == nil)
        #expect(try await plainRemote.updateToPreferredParameters() == nil)
        withExtendedLifetime(radio) {}
    }

    /// With `requestsPreferredParameters`, a peripheral asks its central for them
    /// TGAP(conn_pause_peripheral) (5 s) after the link came up, unless the link meets
    /// them already; our central takes the request (LE Connection Update).
    @Test func aPeripheralAsksForItsPreferredParametersAfterFiveSeconds() async throws {
        // The loop's time is the test's: 5 s pass when the test says so.
        let loop = NIOAsyncTestingEventLoop()
        let radio = VirtualRadio(loop: loop)
        let central = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:0C:31")!), logger: Bench.logger)
        let asking = BluetoothAddress("C0:00:00:00:0C:32")!, content = BluetoothAddress("C0:00:00:00:0C:33")!
        let none = PreferredConnectionParameters.noPreference
        // The first prefers 30 ms; the second what the link has already (50 ms, latency 0, 5 s).
        let p1 = BluetoothHost(transport: await radio.makeController(address: asking), logger: Bench.logger,
                               preferredConnectionParameters: PreferredConnectionParameters(intervalMin: 24, intervalMax: 24, supervisionTimeout: none),
                               requestsPreferredParameters: true)
        let p2 = BluetoothHost(transport: await radio.makeController(address: content), logger: Bench.logger,
                               preferredConnectionParameters: PreferredConnectionParameters(intervalMin: 32, intervalMax: 48, supervisionTimeout: 500),
                               requestsPreferredParameters: true)
        for h in [central, p1, p2] { try await h.start() }
        defer { Task { for h in [central, p1, p2] { await h.close() } } }
        try await p1.peripheral.startAdvertising(AdvertisingSetsTests.named("asking"))
        try await p2.peripheral.startAdvertising(AdvertisingSetsTests.named("content"))
        let r1 = try await central.central.connect(to: asking, within: .seconds(5))
        let r2 = try await central.central.connect(to: content, within: .seconds(5))
        let initial = ConnectionParameters(interval: 40, latency: 0, supervisionTimeout: 500)
        let early = Self.updates(central), updates = Self.updates(central), later = Self.updates(central)
        // Just short of TGAP(conn_pause_peripheral): nobody asks (nothing comes in
        // 300 ms of wall-clock time; a request would come in a few).
        await loop.advanceTime(by: .milliseconds(4_999))
        #expect(await firstElement(early, within: .milliseconds(300)) == nil)
        #expect(try await r1.parameters() == initial)
        await loop.advanceTime(by: .milliseconds(1))
        let updated = await firstElement(updates, within: .seconds(10))
        #expect(updated?.0 == r1.connection && updated?.1 == 24 && updated?.2 == 0 && updated?.3 == 500)
        #expect(try await r1.parameters() == ConnectionParameters(interval: 24, latency: 0, supervisionTimeout: 500))
        // The link that met its peripheral's preference is left alone.
        #expect(await firstElement(later.filter { $0.0 == r2.connection }, within: .milliseconds(300)) == nil)
        #expect(try await r2.parameters() == initial)
        withExtendedLifetime(radio) {}
    }

    /// `host`'s connection parameter updates as they come.
    static func updates(_ host: BluetoothHost) -> some AsyncSequence<(Connection, UInt16, UInt16, UInt16), Never> & Sendable {
        host.connectionEvents().compactMap { e -> (Connection, UInt16, UInt16, UInt16)? in
            if case let .parametersUpdated(c, i, l, t) = e { return (c, i, l, t) } else { return nil }
        }
    }

    @Test func valuesOutsideTheSpecsRangesAreRefusedAtStart() async throws {
        let radio = VirtualRadio()
        let host = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:0C:24")!), logger: Bench.logger,
                                 preferredConnectionParameters: PreferredConnectionParameters(intervalMin: 40, intervalMax: 24, supervisionTimeout: 500))
        defer { Task { await host.close() } }
        await #expect { try await host.start() } throws: { e in
            if case BLEError.invalidArgument = e { return true } else { return false }
        }
        withExtendedLifetime(radio) {}
    }
}
