// The daemon's CI: the monitor replayed against a session recorded on Rootcanal
// (`battery-daemon monitor tcp:127.0.0.1:PORT --record ...` against
// `battery-daemon peripheral` on the same Rootcanal). No controller, no radio: the
// replay plays the recorded controller and checks every packet the monitor sends.

import BLE
import BLETesting
import BatteryKit
import Foundation
import Testing

@Suite struct BatteryMonitorReplayTests {
    static var capture: String {
        Bundle.module.path(forResource: "rootcanal-battery-monitor", ofType: "btsnoop", inDirectory: "Fixtures") ?? "missing fixture"
    }

    @Test func theMonitorReplaysTheRecordedSession() async throws {
        let replay = try ReplayTransport(contentsOf: Self.capture)
        let host = BluetoothHost(transport: replay)
        try await host.start()
        let reading = try await BatteryMonitor(host: host).read(updates: 3)
        #expect(reading == BatteryMonitor.Reading(name: "Battery", initial: 100, updates: [99, 98, 97]))
        await host.close()
        // Every recorded frame was played: the monitor sent all it sent then, and nothing else.
        try await replay.finished()
    }
}
