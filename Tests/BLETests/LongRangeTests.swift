// Long range: advertising on LE Coded (`AdvertisingPHYs`, the primary and secondary
// advertising PHYs of §7.8.53), scanning it (`scan(phys:)`, Scanning_PHYs of
// §7.8.64) and connecting through it (`connect(phys:)`, Initiating_PHYs of §7.8.66).
// A scanner hears an advertisement only on the primary PHY it came on; a link starts
// on the advertisement's secondary PHY. On the virtual radio and on Rootcanal, which
// checks the primary PHY against the scanner's as the virtual controller does.

import BLE
import BLETesting
import HCI
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct LongRangeTests {
    /// The names heard in `results`, with the primary PHY each came on.
    static func names(_ results: [ScanResult]) -> Set<String> {
        Set(results.compactMap { r in r.advertisement.data.localName.map { "\($0) \(r.primaryPHY)" } })
    }

    @Test func aLongRangeSetIsHeardOnLECodedAlone() async throws {
        let phys = ScanCommandLog()
        let room = try await Room(peripherals: 1, extendedAdvertising: true, watchCentral: { phys.record($0) })
        defer { Task { await room.close() } }
        let p = room.peripherals[0].peripheral
        try await p.startAdvertising(AdvertisingSetsTests.named("near"))
        let far = try await p.addAdvertisingSet(AdvertisingSetsTests.named("far"), phys: .longRange)
        let central = room.central.central
        #expect(Self.names(try await central.scan(for: .milliseconds(200))) == ["near LE 1M"])
        let coded = try await central.scan(for: .milliseconds(200), phys: [.leCoded])
        #expect(Self.names(coded) == ["far LE Coded"])
        #expect(coded.first?.secondaryPHY == .leCoded)
        #expect(Self.names(try await central.scan(for: .milliseconds(200), phys: [.le1M, .leCoded])) == ["near LE 1M", "far LE Coded"])
        #expect(phys.parameters.map(\.phys) == [0x01, 0x04, 0x05])
        // A scan on LE 1M and one on LE Coded at once: the controller scans both, and
        // each scan gets its own PHY's reports.
        let near = ScanReader(try await central.scan())
        #expect(Self.names(await near.take(on: room.central)) == ["near LE 1M"])
        #expect(Self.names(try await central.scan(for: .milliseconds(200), phys: [.leCoded])) == ["far LE Coded"])
        #expect(Self.names(await near.take(on: room.central)).isSubset(of: ["near LE 1M"]))
        #expect(phys.parameters.map(\.phys) == [0x01, 0x04, 0x05, 0x01, 0x05, 0x01])
        // The set moves to LE 1M: heard there.
        try await p.updateAdvertisingSet(far, data: AdvertisingSetsTests.named("far"))
        #expect(Self.names(await near.take(on: room.central)).contains("far LE 1M"))
        withExtendedLifetime(near) {}
    }

    @Test func aCentralReachesALongRangePeripheralOnLECoded() async throws {
        let room = try await Room(peripherals: 1, extendedAdvertising: true)
        defer { Task { await room.close() } }
        try await room.peripherals[0].peripheral.startAdvertising(AdvertisingSetsTests.named("far"), phys: .longRange)
        let central = room.central.central
        // Initiating on LE 1M alone, the advertisement is never heard.
        await #expect(throws: BLEError.connectionTimeout(room.addresses[0], within: .milliseconds(300))) {
            try await central.connect(to: room.addresses[0], within: .milliseconds(300))
        }
        let remote = try await central.connect(to: room.addresses[0], within: .seconds(5), phys: [.le1M, .leCoded])
        #expect(try await remote.phy() == LinkPHY(tx: .leCoded, rx: .leCoded))
        _ = try await remote.disconnect()
        // From a scan result: on the PHYs it came on.
        let heard = try #require(try await central.scan(for: .milliseconds(200), phys: [.leCoded]).first)
        let again = try await central.connect(to: heard, within: .seconds(5))
        #expect(try await again.phy() == LinkPHY(tx: .leCoded, rx: .leCoded))
    }

    /// Periodic advertising on a long-range set: found by a scan on LE Coded, and
    /// followed from that result (the sync's scan listens on LE Coded; before, it
    /// listened on LE 1M and never found the set).
    @Test func aLongRangeSetsPeriodicAdvertisingIsFollowed() async throws {
        let room = try await Room(peripherals: 1, extendedAdvertising: true)
        defer { Task { await room.close() } }
        let p = room.peripherals[0].peripheral
        let far = try await p.addAdvertisingSet(AdvertisingSetsTests.named("far-pa"), phys: .longRange)
        var data = AdvertisingData()
        data.manufacturerData = [.init(companyIdentifier: 0xFFFF, data: [1, 2, 3])]
        try await p.startPeriodicAdvertising(on: far, data: data, intervalMilliseconds: 50)
        let heard = try #require(try await room.central.central.scan(for: .milliseconds(200), phys: [.leCoded]).first {
            $0.advertisement.periodicAdvertisingInterval != nil
        })
        #expect(heard.primaryPHY == .leCoded)
        let sync = try await room.central.central.synchronize(to: heard, within: .seconds(2))
        let packets = try await PeriodicAdvertisingTests.next(1, on: sync, radio: room.radio)
        #expect(packets.first?.data.manufacturerData.first?.data == [1, 2, 3])
        try await sync.terminate()
    }

    @Test func whatTheControllerCannotDoIsRefusedBeforeItIsAsked() async throws {
        let legacy = try await Room(peripherals: 1)
        defer { Task { await legacy.close() } }
        await #expect(throws: BLEError.self) { _ = try await legacy.central.central.scan(phys: [.leCoded]) }
        await #expect(throws: BLEError.self) { try await legacy.peripherals[0].peripheral.startAdvertising(AdvertisingSetsTests.named("x"), phys: .longRange) }
        await #expect(throws: BLEError.self) { _ = try await legacy.central.central.connect(to: legacy.addresses[0], phys: [.leCoded]) }
        let room = try await Room(peripherals: 1, extendedAdvertising: true)
        defer { Task { await room.close() } }
        await #expect(throws: BLEError.self) { _ = try await room.central.central.scan(phys: [.le2M]) }
        await #expect(throws: BLEError.self) { _ = try await room.central.central.scan(phys: []) }
        await #expect(throws: BLEError.self) {
            try await room.peripherals[0].peripheral.startAdvertising(AdvertisingSetsTests.named("x"), phys: AdvertisingPHYs(primary: .le2M))
        }
        await #expect(throws: BLEError.self) { _ = try await room.central.central.connect(to: room.addresses[0], phys: [.le2M]) }
    }

    /// On Rootcanal, which hears an advertisement only on the primary PHY it came on.
    @Test func onRootcanalALongRangeSetIsHeardOnLECodedAlone() async throws {
        guard let rc = try await Bench.rootcanalHosts(2) else { return }
        defer { rc.stop() }
        let (scanner, advertiser) = (rc.hosts[0], rc.hosts[1])
        try await advertiser.peripheral.startAdvertising(AdvertisingSetsTests.named("rc-near"))
        _ = try await advertiser.peripheral.addAdvertisingSet(AdvertisingSetsTests.named("rc-far"), phys: .longRange)
        let near = Self.names(try await scanner.central.scan(for: .seconds(1)))
        #expect(near.contains("rc-near LE 1M") && !near.contains { $0.hasPrefix("rc-far") }, "\(near)")
        let far = Self.names(try await scanner.central.scan(for: .seconds(1), phys: [.leCoded]))
        #expect(far == ["rc-far LE Coded"], "\(far)")
    }
}
