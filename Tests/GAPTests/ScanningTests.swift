import BLETesting
@testable import HCI
import Logging
import Testing
@testable import GAP

@Suite(.timeLimit(.minutes(3)))
struct ScanningTests {
    static let logger = Logger(label: "t") { _ in SwiftLogNoOpLogHandler() }

    @Test func advertiserAndScannerOverTheVirtualRadio() async throws {
        let radio = VirtualRadio()
        let a = BluetoothAddress("00:00:00:00:00:0A")!, b = BluetoothAddress("00:00:00:00:00:0B")!
        await radio.setDistance(10, between: a, and: b)
        let advertiser = HCIController(transport: await radio.makeController(address: a), logger: Self.logger)
        let scanner = HCIController(transport: await radio.makeController(address: b), logger: Self.logger)
        try await advertiser.initialize(); try await scanner.initialize()

        var data = AdvertisingData()
        data.flags = 0x06
        data.manufacturerData = [IBeacon(uuid: BluetoothUUID("E2C56DB5-DFFB-48D2-B060-D0F5A71096E0")!, major: 1, minor: 2, measuredPower: -41).manufacturerData]
        var rsp = AdvertisingData()
        rsp.localName = "fire-alarm-sender"
        rsp.serviceUUIDs = [BluetoothUUID(0x180F)]
        try await Advertiser.start(advertiser, data: data, scanResponse: rsp)

        let ads = try await Scanner.start(scanner, active: true)
        let two = await collect(ads, count: 2, within: .seconds(5))
        let first = try #require(two.first), second = try #require(two.dropFirst().first)
        #expect(first.address == a && first.isConnectable && !first.isScanResponse)
        #expect(first.data.iBeacon?.major == 1)
        // 0 dBm at 10 m on the radio's model → −61 dBm; the iBeacon's −41 dBm at 1 m gives 10 m back.
        #expect(first.rssi == -61)
        #expect(abs((first.estimatedMetres ?? 0) - 10) < 0.01)
        #expect(second.isScanResponse && second.data.localName == "fire-alarm-sender")
        try await Scanner.stop(scanner)
        #expect(ads.dropped.count == 0)

        // Filters: a name that is not there yields nothing; the right one passes.
        let none = try await Scanner.start(scanner, filter: ScanFilter(names: ["nobody"]))
        await radio.tick()
        #expect(await firstElement(none, within: .milliseconds(200)) == nil)
        try await Scanner.stop(scanner)
        let named = try await Scanner.start(scanner, filter: ScanFilter(names: ["fire-alarm-sender"], minimumRSSI: -70))
        #expect(await firstElement(named, within: .seconds(5))?.data.localName == "fire-alarm-sender")
        try await Scanner.stop(scanner)
        await scanner.close()
        await advertiser.close()
    }

    @Test func advertisingTooMuchSaysHowMuchFits() async throws {
        let radio = VirtualRadio()
        let c = HCIController(transport: await radio.makeController(address: BluetoothAddress("00:00:00:00:00:01")!), logger: Self.logger)
        try await c.initialize()
        var d = AdvertisingData()
        d.localName = String(repeating: "x", count: 30)
        await #expect(throws: AdvertisingDataError.tooLong(length: 32, limit: 31)) { try await Advertiser.start(c, data: d) }
        await c.close()
    }

    /// A scan the controller refuses (LE Set Scan Parameters while it scans: Command
    /// Disallowed, §7.8.10, which the virtual controller now answers as controllers do)
    /// throws, and the event follower it started lets go (its stream, never handed
    /// out, cancels it) instead of following the controller until its transport ends.
    @Test func aRefusedScanLeavesNoFollowerBehind() async throws {
        let radio = VirtualRadio()
        let scanner = HCIController(transport: await radio.makeController(address: BluetoothAddress("00:00:00:00:00:0C")!), logger: Self.logger)
        try await scanner.initialize()
        let first = try await Scanner.start(scanner)
        let following = try #require(await firstElement(scanner.eventSubscriberCounts(), within: .seconds(5)))
        await #expect(throws: HCIError.self) { _ = try await Scanner.start(scanner) }
        // The refused scan's follower lets go from a task of its own: the controller
        // tells each change of the count, so the test waits for it, not a poll.
        let left = await firstElement(scanner.eventSubscriberCounts().filter { $0 <= following }, within: .seconds(5))
        #expect(left == following, "\(left.map(String.init) ?? "more") event followers 5 s on, \(following) before the refused scan")
        _ = first
        await scanner.close()
    }
}
