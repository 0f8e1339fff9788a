// The host takes a link's events as the controller reports them, on the loop, with
// nothing between the L2CAP host and the facade to fall behind or drop. Before, a
// task followed them through a stream that kept the newest 1024: a controller that
// reported two links and then more than 1024 events of the first in one read (a
// firmware stuck re-reporting a Data Length Change does) left the facade without the
// second link (its report was dropped from the middle), which then stayed up with
// nobody to end it.

@testable import BLE
import BLETesting
import HCI
import Testing

@Suite(.timeLimit(.minutes(3))) struct LinkEventBurstTests {
    static let handle: UInt16 = 0x0777, second: UInt16 = 0x0778
    static let central = BluetoothAddress("C0:00:00:00:04:09")!, other = BluetoothAddress("C0:00:00:00:04:0A")!

    static func link(_ handle: UInt16, _ peer: BluetoothAddress) -> HCIEvent {
        .le(.connectionComplete(LEConnectionComplete(connectionHandle: handle, role: .peripheral, peerAddressType: .public, peerAddress: peer)))
    }

    static func dataLength(_ octets: UInt16) -> HCIEvent {
        .le(.dataLengthChange(LEDataLengthChange(connectionHandle: handle, maxTxOctets: octets, maxTxTime: 2120,
                                                 maxRxOctets: octets, maxRxTime: 2120)))
    }

    @Test func twoLinksAndThousandsOfEventsInOneReadAllReachTheFacade() async throws {
        let radio = VirtualRadio()
        let t = Interposer(await radio.makeController(address: BluetoothAddress("C0:00:00:00:04:01")!))
        let host = BluetoothHost(transport: t, logger: Bench.logger)
        try await host.start()
        defer { Task { await host.close(); _ = radio } }
        let events = host.connectionEvents()
        // 27 + 1 … 27 + 2000: the last says 2027 octets, which no one before did.
        let burst = (1...2000).map { Self.dataLength(27 + UInt16($0)) }
        // One read, handled in one turn of the loop: no task runs in between.
        try await host.loop.submit { t.injectNow([Self.link(Self.handle, Self.central), Self.link(Self.second, Self.other)] + burst) }.get()
        #expect(await host.connections.map(\.handle) == [Self.handle, Self.second], "a link did not reach the facade")
        let conn = try #require(await host.connections.first { $0.handle == Self.handle })
        #expect(conn.peer == Self.central && conn.role == .peripheral)
        #expect(try await host.dataLength(of: conn) == DataLength(LEDataLengthChange(connectionHandle: Self.handle, maxTxOctets: 2027, maxTxTime: 2120,
                                                                                     maxRxOctets: 2027, maxRxTime: 2120)))
        // The application's stream keeps its newest 256 and says what it dropped; the
        // link's start was among what it dropped, its end is not.
        try await host.loop.submit {
            t.injectNow([.disconnectionComplete(DisconnectionComplete(connectionHandle: Self.handle, reason: .remoteUserTerminatedConnection))])
        }.get()
        #expect(await host.connections.map(\.handle) == [Self.second])
        let ended = await firstElement(events.filter {
            if case .disconnected = $0 { return true } else { return false }
        }, within: .seconds(5))
        guard case let .disconnected(c, reason)? = ended else {
            Issue.record("no end reported")
            return
        }
        #expect(c == conn && reason == .remoteUserTerminatedConnection)
        #expect(events.dropped.count > 0)
    }
}
