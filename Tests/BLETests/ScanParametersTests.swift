// Scans side by side, each with its own parameters (`Central.scan`): the controller
// scans for all of them at once (actively while any is active, filtering duplicates
// only while every one does, the `ScanTiming` that listens the most, every PHY any
// asks for) and is stopped and started again as that changes; each scan is handed
// what it asked for (a passive scan no scan responses, a scan that filters duplicates
// each PDU once, whatever the controller does). On the virtual radio, with
// both command sets, and on Rootcanal.

import BLE
import BLETesting
import HCI
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct ScanParametersTests {
    /// "name" for an advertisement, "name rsp" for a scan response.
    static func described(_ results: [ScanResult]) -> Set<String> {
        Set(results.map { ($0.name ?? "?") + ($0.advertisement.isScanResponse ? " rsp" : "") })
    }

    @Test(arguments: [false, true])
    func scansSideBySideEachGetWhatTheyAskedFor(extended: Bool) async throws {
        let sent = ScanCommandLog()
        let room = try await Room(peripherals: 1, extendedAdvertising: extended, watchCentral: { sent.record($0) })
        defer { Task { await room.close() } }
        var rsp = AdvertisingData()
        rsp.serviceUUIDs = [BluetoothUUID("180F")!]
        try await room.peripherals[0].peripheral.startAdvertising(AdvertisingSetsTests.named("dev"), scanResponse: rsp)
        let central = room.central.central
        // A passive, duplicate-filtering, low-power scan: no scan requests, so no scan responses.
        let quiet = ScanReader(try await central.scan(active: false, filterDuplicates: true, timing: .lowPower))
        #expect(Self.described(await quiet.take(on: room.central)) == ["dev"])
        #expect(sent.lines == ["passive 8192/819", "on dup"])
        // An active scan for every report beside it: the controller scans actively,
        // without duplicate filtering, with the timing that listens the most.
        let loud = ScanReader(try await central.scan(active: true, filterDuplicates: false, timing: .standard))
        #expect(Self.described(await loud.take(on: room.central)) == ["dev", "dev rsp"])
        // The passive one was handed that advertisement already.
        #expect(await quiet.take(on: room.central).isEmpty)
        #expect(sent.lines == ["passive 8192/819", "on dup", "off", "active 96/48", "on all"])
        // The active one ends: back to what the passive one asked for.
        _ = consume loud
        #expect(await sent.wait { $0.count >= 8 }, "\(sent.lines)")
        _ = try await central.scan(for: .milliseconds(50), active: false, timing: .lowPower)
        #expect(sent.lines.prefix(8) == ["passive 8192/819", "on dup", "off", "active 96/48", "on all", "off", "passive 8192/819", "on dup"])
        withExtendedLifetime(quiet) {}
    }

    /// A scan that filters duplicates gets each PDU once, also while the controller
    /// scans without filtering for another scan, and across the restarts of the
    /// controller's scanning (which make it forget what it reported); data that
    /// changes is reported again.
    @Test(arguments: [false, true])
    func aScanThatFiltersDuplicatesGetsEachPDUOnce(extended: Bool) async throws {
        let sent = ScanCommandLog()
        let room = try await Room(peripherals: 1, extendedAdvertising: extended, watchCentral: { sent.record($0) })
        defer { Task { await room.close() } }
        let peripheral = room.peripherals[0].peripheral
        try await peripheral.startAdvertising(AdvertisingSetsTests.named("dev"))
        let central = room.central.central
        func ticks(_ n: Int) async { for _ in 0..<n { await room.radio.tick() } }
        let once = ScanReader(try await central.scan(active: false, filterDuplicates: true))
        await ticks(5)
        #expect(await once.take(on: room.central).map(\.name) == ["dev"])
        // Another scan, for every report: the controller restarts without filtering.
        let every = ScanReader(try await central.scan(active: false, filterDuplicates: false))
        await ticks(5)
        #expect(await every.take(on: room.central).count == 6)
        #expect(await once.take(on: room.central).isEmpty)
        // It ends: the controller restarts filtering, having forgotten what it reported.
        let before = sent.lines.count
        _ = consume every
        #expect(await sent.wait { $0.count > before && $0.last == "on dup" }, "\(sent.lines)")
        await ticks(5)
        #expect(await once.take(on: room.central).isEmpty)
        // New data is new.
        try await peripheral.startAdvertising(AdvertisingSetsTests.named("dev2"))
        await ticks(5)
        #expect(await once.take(on: room.central).map(\.name) == ["dev2"])
    }

    /// On Rootcanal, whose controller stops filtering duplicates while the other scan
    /// runs: the scan that filters them still gets the advertisement once.
    @Test func onRootcanalAScanThatFiltersDuplicatesGetsEachPDUOnce() async throws {
        guard let rc = try await Bench.rootcanalHosts(2) else { return }
        defer { rc.stop() }
        try await rc.hosts[1].peripheral.startAdvertising(AdvertisingSetsTests.named("rc-dup"), intervalMilliseconds: 20)
        let host = rc.hosts[0]
        let once = ScanReader(try await host.central.scan(filter: ScanFilter(names: ["rc-dup"]), active: false, filterDuplicates: true))
        let every = ScanReader(try await host.central.scan(filter: ScanFilter(names: ["rc-dup"]), active: false))
        let heard = await every.take(after: .milliseconds(600), on: host)
        #expect(heard.count > 3)
        #expect(await once.take(on: host).map(\.name) == ["rc-dup"])
    }

    @Test func aTimingOutsideItsRangeIsRefused() async throws {
        let room = try await Room(peripherals: 0)
        defer { Task { await room.close() } }
        for t in [ScanTiming(interval: .milliseconds(10), window: .milliseconds(20)), ScanTiming(interval: .milliseconds(2), window: .milliseconds(2)),
                  ScanTiming(interval: .milliseconds(10_241), window: .milliseconds(10))] {
            await #expect(throws: BLEError.self) { _ = try await room.central.central.scan(timing: t) }
        }
        // The bounds themselves are taken.
        _ = try await room.central.central.scan(for: .milliseconds(10), timing: ScanTiming(interval: .milliseconds(10_240), window: .microseconds(2500)))
    }

    /// On Rootcanal: each preset is taken, and a scan with it hears an advertiser.
    @Test func onRootcanalEveryTimingIsTaken() async throws {
        guard let rc = try await Bench.rootcanalHosts(2) else { return }
        defer { rc.stop() }
        try await rc.hosts[1].peripheral.startAdvertising(AdvertisingSetsTests.named("rc-timing"))
        for t in [ScanTiming.lowLatency, .standard, .lowPower] {
            let heard = try await rc.hosts[0].central.scan(for: .seconds(1), timing: t)
            #expect(heard.contains { $0.name == "rc-timing" }, "\(t)")
        }
    }
}
