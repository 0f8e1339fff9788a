// What the host keeps while it creates a periodic advertising sync. A Create Sync
// Cancel the controller accepted owes one LE Periodic Advertising Sync Established
// with Operation Cancelled by Host; on a loaded machine it may be handled after the
// next sync has begun waiting, and must not end that wait. An Operation Cancelled by
// Host nobody owes is the controller ending this wait, and does.

@testable import BLE
import BLETesting
import HCI
import Testing

extension BluetoothHost {
    func oweCancelAnswerForTest() { syncState.cancelsOwed += 1 }
    var syncWaitingForTest: Bool { syncState.waiter != nil }
    var cancelsOwedForTest: Int { syncState.cancelsOwed }
}

@Suite struct PeriodicSyncBookkeepingTests {
    static let cancelled = LEPeriodicAdvertisingSyncEstablished(status: .operationCancelledByHost, syncHandle: 0, advertisingSID: 0,
                                                               advertiserAddressType: .public, advertiserAddress: .zero, advertiserPHY: 0,
                                                               periodicAdvertisingInterval: 0)

    /// Starts a sync to nobody and returns once the host waits for the controller (bounded).
    static func waiting(_ host: BluetoothHost, within limit: Duration) async throws -> Task<PeriodicAdvertisingSync, any Error> {
        let t = Task { try await host.central.synchronize(to: BluetoothAddress("C0:00:00:00:0F:0F")!, type: .public, sid: 1, within: limit) }
        for _ in 0..<1000 where await !host.syncWaitingForTest { try await Task.sleep(for: .milliseconds(2)) }
        #expect(await host.syncWaitingForTest)
        return t
    }

    @Test func aCancelsLateAnswerDoesNotEndTheNextWait() async throws {
        let room = try await Room(peripherals: 0, extendedAdvertising: true)
        defer { Task { await room.close() } }
        let host = room.central
        let t = try await Self.waiting(host, within: .milliseconds(800))
        await host.oweCancelAnswerForTest()
        await host.syncEstablished(Self.cancelled)
        #expect(await host.cancelsOwedForTest == 0)
        #expect(await host.syncWaitingForTest)
        // The wait ends by its own limit.
        await #expect { _ = try await t.value } throws: { error in
            if case BLEError.periodicSyncTimeout = error { return true }
            return false
        }
    }

    @Test func anAnswerNobodyOwesEndsTheWait() async throws {
        let room = try await Room(peripherals: 0, extendedAdvertising: true)
        defer { Task { await room.close() } }
        let host = room.central
        let t = try await Self.waiting(host, within: .seconds(10))
        await host.syncEstablished(Self.cancelled)
        await #expect(throws: BLEError.periodicSyncFailed(BluetoothAddress("C0:00:00:00:0F:0F")!, sid: 1, .operationCancelledByHost)) {
            _ = try await t.value
        }
    }
}
