// Long range against Bumble on Rootcanal: Bumble's LE Coded advertising set is heard
// by our scan on LE Coded alone and reached by our connect on the PHYs it came on;
// Bumble's scan on LE Coded alone hears ours and connects to it on LE Coded.
// (Rootcanal 1.10 then reports the link on LE 1M: it does not model the PHY a
// connection request went on. The virtual radio starts such a link on its
// advertisement's secondary PHY, as the Link Layer does: LongRangeTests.)

import BLE
import BLETesting
import Foundation
import HCI
import Testing

@Suite(.serialized, .liveTimeLimit) struct BumbleLongRangeTests {
    static let bumble = BluetoothAddress("F1:F2:F3:F4:F5:F8")!

    @Test func weHearAndReachBumblesLongRangeAdvertising() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let (peer, out) = try Interop.launchBumble(python, "bumble_longrange_peer.py", port: rc.hciPort, ["advertise"])
        defer { RootcanalProcess.kill(peer) }
        let host = try BluetoothHost.open(rc.transportSpec, logger: Interop.logger)
        try await host.start()
        defer { Task { await host.close() } }
        let named = ScanFilter(names: ["bumble-far"])
        let heard = try #require(await firstElement(try await host.central.scan(filter: named, phys: [.leCoded]), within: .seconds(20)))
        #expect(heard.address == Self.bumble && heard.primaryPHY == .leCoded && heard.secondaryPHY == .leCoded)
        // On LE 1M alone it is not heard.
        #expect(try await host.central.scan(for: .seconds(1), filter: named).isEmpty)
        let remote = try await host.central.connect(to: heard, within: .seconds(20))
        #expect(remote.connection.peer == Self.bumble)
        _ = try await remote.disconnect()
        #expect(await Interop.exit(of: peer, timeout: 20) == 0)
        let events = await BumbleL2CAPTests.lines(out)
        #expect(events.contains { $0["event"] as? String == "connected" }, "\(events)")
        #expect(events.last?["event"] as? String == "done", "\(events)")
    }

    @Test func bumbleHearsAndReachesOurLongRangeAdvertising() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let host = try BluetoothHost.open(rc.transportSpec, logger: Interop.logger)
        try await host.start()
        defer { Task { await host.close() } }
        var name = AdvertisingData()
        name.localName = "ours-far"
        try await host.peripheral.startAdvertising(name, phys: .longRange)
        let (peer, out) = try Interop.launchBumble(python, "bumble_longrange_peer.py", port: rc.hciPort, ["scan", "ours-far"])
        defer { RootcanalProcess.kill(peer) }
        #expect(await Interop.exit(of: peer, timeout: 60) == 0)
        let events = await BumbleL2CAPTests.lines(out)
        let heard = events.first { $0["event"] as? String == "heard" }
        #expect(heard?["primary_phy"] as? Int == 3 && heard?["secondary_phy"] as? Int == 3, "\(events)")
        #expect(events.contains { $0["event"] as? String == "connected" }, "\(events)")
        #expect(events.last?["event"] as? String == "done", "\(events)")
    }
}
