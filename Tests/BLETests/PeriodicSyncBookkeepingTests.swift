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

@Suite(.timeLimit(.minutes(3))) struct PeriodicSyncBookkeepingTests {
    static let cancelled = LEPeriodicAdvertisingSyncEstablished(status: .operationCancelledByHost, syncHandle: 0, advertisingSID: 0,
                                                               advertiserAddressType: .public, advertiserAddress: .zero, advertiserPHY: 0,
                                                               periodicAdvertisingInterval: 0)

    /// A room whose central says each LE Periodic Advertising Create Sync as it goes to
    /// the controller (the host waits for the outcome by then: it registers its wait
    /// before the command goes out).
    static func room() async throws -> (Room, AsyncStream<Void>) {
        let (sent, says) = AsyncStream<Void>.makeStream()
        let room = try await Room(peripherals: 0, extendedAdvertising: true, watchCentral: { r in
            if case let .command(op, _)? = r.packet, op == .lePeriodicAdvertisingCreateSync { says.yield() }
        })
        return (room, sent)
    }

    /// Starts a sync to nobody (looking for up to 60 s, longer than any test here runs)
    /// and returns once its Create Sync went out, so the host waits for the controller.
    static func waiting(_ host: BluetoothHost, _ sent: AsyncStream<Void>) async throws -> Task<PeriodicAdvertisingSync, any Error> {
        let t = Task { try await host.central.synchronize(to: BluetoothAddress("C0:00:00:00:0F:0F")!, type: .public, sid: 1, within: .seconds(60)) }
        #expect(await firstElement(sent, within: .seconds(10)) != nil)
        #expect(await host.syncWaitingForTest)
        return t
    }

    @Test func aCancelsLateAnswerDoesNotEndTheNextWait() async throws {
        let (room, sent) = try await Self.room()
        defer { Task { await room.close() } }
        let host = room.central
        let t = try await Self.waiting(host, sent)
        await host.oweCancelAnswerForTest()
        await host.syncEstablished(Self.cancelled)
        #expect(await host.cancelsOwedForTest == 0)
        #expect(await host.syncWaitingForTest)
        // The wait goes on until its caller gives up.
        t.cancel()
        await #expect(throws: CancellationError.self) { _ = try await t.value }
    }

    /// A controller that resolved the advertiser's private address names its identity
    /// (Advertiser_Address_Type 2 or 3): the sync is the one waited for. A train from
    /// another address is not (a late establishment after its own wait ended).
    @Test func anEstablishmentNamingTheIdentityIsTheOneWaitedFor() async throws {
        let (room, sent) = try await Self.room()
        defer { Task { await room.close() } }
        let host = room.central
        let t = try await Self.waiting(host, sent)
        func established(_ address: String, type: AddressType) -> LEPeriodicAdvertisingSyncEstablished {
            LEPeriodicAdvertisingSyncEstablished(syncHandle: 7, advertisingSID: 1, advertiserAddressType: type,
                                                 advertiserAddress: BluetoothAddress(address)!, periodicAdvertisingInterval: 80)
        }
        await host.syncEstablished(established("C0:00:00:00:0E:0E", type: .random))
        #expect(await host.syncWaitingForTest)
        await host.syncEstablished(established("C0:00:00:00:0D:0D", type: AddressType(rawValue: 0x03)))
        let sync = try await t.value
        #expect(sync.handle == 7 && sync.advertiser == BluetoothAddress("C0:00:00:00:0D:0D")! && sync.interval == .milliseconds(100))
    }

    @Test func anAnswerNobodyOwesEndsTheWait() async throws {
        let (room, sent) = try await Self.room()
        defer { Task { await room.close() } }
        let host = room.central
        let t = try await Self.waiting(host, sent)
        await host.syncEstablished(Self.cancelled)
        await #expect(throws: BLEError.periodicSyncFailed([PeriodicAdvertiser(address: BluetoothAddress("C0:00:00:00:0F:0F")!, type: .public, sid: 1)], .operationCancelledByHost)) {
            _ = try await t.value
        }
    }
}
