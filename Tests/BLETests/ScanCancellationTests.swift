// A scan whose caller is cancelled while the controller is answering its scan enable.
// The command is on its way by then and the controller will scan: the host must count
// it as scanning (and stop it when the caller lets go), or the next scan's parameters
// are refused (Command Disallowed while scanning). A fresh-clone CI run, loaded, hit
// this when a periodic sync was cancelled while its scan was starting. HCIController
// waits for a sent command's answer whatever its caller's cancellation
// (ControllerTests.cancellingWithdrawsAQueuedCommandAndWaitsForOneSent).

import BLE
import BLETesting
import HCI
import Snoop
import Synchronization
import Testing

@Suite(.timeLimit(.minutes(3))) struct ScanCancellationTests {
    @Test func aScanCancelledAsItsEnableGoesOutLeavesTheHostInStepWithTheController() async throws {
        let scanning = Mutex<Task<Void, Never>?>(nil)
        let room = try await Room(peripherals: 0, extendedAdvertising: true, watchCentral: { r in
            // The first enable has just gone to the controller: the caller gives up now,
            // before the answer comes.
            guard case let .command(op, parameters)? = r.packet, op == .leSetExtendedScanEnable, parameters.first == 1 else { return }
            scanning.withLock { $0?.cancel(); $0 = nil }
        })
        defer { Task { await room.close() } }
        let central = room.central.central
        let (go, start) = AsyncStream<Void>.makeStream()
        let t = Task {
            for await _ in go { break }
            _ = try? await central.scan(filter: ScanFilter(), active: false)
        }
        scanning.withLock { $0 = t }
        start.yield()
        await t.value
        #expect(scanning.withLock { $0 == nil }, "the scan enable went out")
        // The next scan starts: the host stopped the controller's scan first.
        _ = try await central.scan(for: .milliseconds(10))
    }
}
