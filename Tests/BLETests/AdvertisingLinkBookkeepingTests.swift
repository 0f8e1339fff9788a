// What the host keeps about the links its advertising sets make. LE Advertising Set
// Terminated (on the HCI event stream) and the link's connection (on the L2CAP link
// stream) reach the host separately. A Set Terminated whose link came and went
// before the host handled it leaves nothing holding the set off air: the set starts
// again at once, and no `.advertisingConnected` names a link that is gone.

@testable import BLE
import BLETesting
import GAP
@testable import HCI
import Synchronization
import Testing

extension BluetoothHost {
    func advertisingLinkForTest(_ set: UInt8) -> UInt16? { peripheralState.advertisingLinks[set] }
}

@Suite(.timeLimit(.minutes(3))) struct AdvertisingLinkBookkeepingTests {
    @Test func aSetWhoseLinkAlreadyEndedStartsAgain() async throws {
        let enables = Mutex<[[UInt8]]>([])
        let room = try await Room(peripherals: 1, extendedAdvertising: true, watchCentral: { r in
            if case let .command(op, p)? = r.packet, op == .leSetExtendedAdvertisingEnable { enables.withLock { $0.append(p) } }
        })
        defer { Task { await room.close() } }
        let host = room.central
        let door = try await host.peripheral.addAdvertisingSet(AdvertisingSetsTests.named("door"), connectable: true)
        // The controller stopped the set for a link (as it does at a connection) ...
        try await Advertiser.stopExtended(host.controller, handles: [door.handle])
        let me = try await host.controller.send(ReadBDADDR()).address
        #expect(try await AdvertisingSetsTests.heard(by: room.peripherals[0])[me] == nil)
        let events = host.peripheral.events()
        enables.withLock { $0.removeAll() }
        // ... whose end the host handled before the LE Advertising Set Terminated.
        await host.handle(.le(.advertisingSetTerminated(LEAdvertisingSetTerminated(advertisingHandle: door.handle, connectionHandle: 0x0777))))
        #expect(await host.advertisingLinkForTest(door.handle) == nil)
        // Enable = 1, one set, the door.
        #expect(enables.withLock { $0 }.last?.prefix(3) == [0x01, 0x01, door.handle], "\(enables.withLock { $0 })")
        #expect(try await AdvertisingSetsTests.heard(by: room.peripherals[0])[me] == ["door"])
        try await host.peripheral.removeAdvertisingSet(door)
        // The host takes the controller's events as they come, on the loop: what this
        // one made the application hear is in the stream's buffer already.
        #expect(!events.takeBuffered().contains {
            if case .advertisingConnected = $0 { return true } else { return false }
        })
    }
}
