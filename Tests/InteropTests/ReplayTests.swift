// Replays a session recorded from Rootcanal with `btctl gatt read --name btctl-battery
// --uuid 2A19 --btsnoop Fixtures/rootcanal-gatt-read.btsnoop` (against `btctl gatt
// serve docs/examples/battery.json`): the replay plays the recorded controller, and the
// same facade calls btctl makes must send exactly the host frames recorded, byte for
// byte — initialisation, scan by name, connection, MTU exchange, full discovery, the
// read and the disconnection.

import BLE
import BLETesting
import Foundation
import HCI
import Snoop
import Testing

struct ReplayTests {
    static let fixture = Interop.root + "/Fixtures/rootcanal-gatt-read.btsnoop"

    /// The recording played up to the connection: host started, btctl-battery found by
    /// name and connected (MTU exchanged), as `btctl gatt read --name` does.
    static func connected() async throws -> (ReplayTransport, BluetoothHost, RemotePeripheral) {
        // Generous bounds: they only stop a broken test, and with the whole suite sharing
        // two cores (Rootcanal, Bumble and btctl processes starting) a step can wait
        // seconds for a thread; the recording, not the timing, is under test.
        let replay = try ReplayTransport(contentsOf: fixture, options: ReplayOptions(timeout: .seconds(30)))
        let host = BluetoothHost(transport: replay, logger: Interop.logger, commandTimeout: .seconds(30))
        try await host.start()
        let found = try #require(try await host.central.first(matching: ScanFilter(names: ["btctl-battery"]), within: .seconds(15)))
        return (replay, host, try await host.central.connect(to: found, within: .seconds(15)))
    }

    @Test func gattReadSessionReplaysExactly() async throws {
        let (replay, host, peripheral) = try await Self.connected()
        let level = try await peripheral.characteristic(BluetoothUUID(0x2A19))
        #expect(try await peripheral.read(handle: level.valueHandle) == [0x64])
        // The initiator's controller reports the end as its own host's (Vol 4, Part E, §7.1.6).
        #expect(try await peripheral.disconnect() == .connectionTerminatedByLocalHost)
        await host.close()
        // Every recorded frame was played, and the stack sent nothing the recording lacks.
        try await replay.finished(within: .seconds(5))
    }

    @Test func aReplayThatSkipsTheDiscoveryFailsAtTheFirstFrameItChanges() async throws {
        let (replay, host, peripheral) = try await Self.connected()
        // btctl discovered first; a read by handle goes straight to the Read Request.
        await #expect(throws: (any Error).self) { _ = try await peripheral.read(handle: 0x0010) }
        let mismatch = try #require(replay.mismatch)
        #expect(mismatch.expectedDecoded?.contains("Read By Group Type Request") == true, "\(mismatch)")
        #expect(mismatch.actualDecoded?.contains("Read Request") == true, "\(mismatch)")
        await host.close()
    }
}
