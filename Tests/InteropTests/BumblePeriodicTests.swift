// Periodic advertising between our host and Bumble's on Rootcanal: we follow
// Bumble's train (its set's SID, its data), and Bumble follows ours. Rootcanal 1.10
// handles periodic packets only while its scanner is on, so our side keeps a scan
// running while it receives (Bumble's does, since it scans to find the set).

import BLE
import BLETesting
import Foundation
import GAP
import HCI
import Testing

@Suite(.serialized, .liveTimeLimit) struct BumblePeriodicTests {
    static let bumble = BluetoothAddress("F1:F2:F3:F4:F5:F7")!
    /// What bumble_periodic_peer.py's train carries.
    static let bumbleData: [UInt8] = [203, 0xFF, 0xFF, 0xFF] + (0..<200).map { UInt8($0) }

    @Test func weFollowBumblesPeriodicAdvertising() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let (peer, out) = try Interop.launchBumble(python, "bumble_periodic_peer.py", port: rc.hciPort, ["advertise"])
        defer { RootcanalProcess.kill(peer) }
        let host = try BluetoothHost.open(rc.transportSpec, logger: Interop.logger)
        try await host.start()
        defer { Task { await host.close() } }
        // Held, not read, for as long as the sync is followed (reading it to its end, or
        // letting go of it, stops the scan).
        let scan = try await host.central.scan(filter: ScanFilter(addresses: [Self.bumble]), active: false, capacity: 1)
        let found = try await host.central.first(matching: ScanFilter(addresses: [Self.bumble]), within: .seconds(20))
        let heard = try #require(found)
        #expect(heard.advertisement.periodicAdvertisingInterval != nil)
        #expect(heard.advertisement.advertisingSID == 3 && heard.advertisement.data.localName == "bumble-pa")
        #expect(heard.advertisement.periodicAdvertisingInterval == 24)
        let sync = try await host.central.synchronize(to: heard)
        #expect(sync.sid == 3 && sync.advertiser == Self.bumble && sync.interval == .milliseconds(30))
        var got: [PeriodicAdvertisement] = []
        for _ in 0..<3 { if let a = await firstElement(sync.advertisements, within: .seconds(5)) { got.append(a) } }
        #expect(got.map(\.raw) == Array(repeating: Self.bumbleData, count: 3))
        #expect(got.first?.data.manufacturerData.first?.companyIdentifier == 0xFFFF)
        try await sync.terminate()
        // Again through the Periodic Advertiser List, Bumble's set among others.
        let others = [PeriodicAdvertiser(address: Self.bumble, type: heard.addressType, sid: 2),
                      PeriodicAdvertiser(address: BluetoothAddress("C0:00:00:00:0F:0F")!, type: .public, sid: 3)]
        let any = try await host.central.synchronize(toAnyOf: others + [try #require(PeriodicAdvertiser(heard))])
        #expect(any.source == PeriodicAdvertiser(heard))
        #expect(await firstElement(any.advertisements, within: .seconds(5))?.raw == Self.bumbleData)
        try await any.terminate()
        withExtendedLifetime(scan) {}
        _ = out
    }

    @Test func bumbleFollowsOurPeriodicAdvertising() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let host = try BluetoothHost.open(rc.transportSpec, logger: Interop.logger)
        let info = try await host.start()
        defer { Task { await host.close() } }
        var name = AdvertisingData()
        name.localName = "ours-pa"
        let beacon = try await host.peripheral.addAdvertisingSet(name, intervalMilliseconds: 50)
        var data = AdvertisingData()
        data.manufacturerData = [.init(companyIdentifier: 0xFFFF, data: (0..<240).map { UInt8($0) })]
        try await host.peripheral.startPeriodicAdvertising(on: beacon, data: data, intervalMilliseconds: 30)
        let (peer, out) = try Interop.launchBumble(python, "bumble_periodic_peer.py", port: rc.hciPort,
                                                   ["sync", info.address.description, String(beacon.handle), "3"])
        defer { RootcanalProcess.kill(peer) }
        #expect(await Interop.exit(of: peer, timeout: 60) == 0)
        let events = await BumbleL2CAPTests.lines(out)
        let packets = events.filter { $0["event"] as? String == "packet" }.compactMap { $0["data"] as? String }
        #expect(packets == Array(repeating: data.bytes.map { String(format: "%02x", $0) }.joined(), count: 3), "\(events)")
        #expect(events.contains { $0["event"] as? String == "established" && $0["interval"] as? Double == 30 }, "\(events)")
        #expect(events.last?["event"] as? String == "done", "\(events)")
    }
}
