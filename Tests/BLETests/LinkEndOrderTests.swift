// A write a central made just before its link ended is the ended link's, even when the
// controller gives the handle to a new link in the same read. The GATT server's events
// and the links' ends reach the facade as the layers take each packet, on the loop, so
// the facade keeps nothing of an ended link for late events. (When a task followed the
// server's events through a stream, an ended link waited in `links.departing` until
// the server's stream said it forgot it: `btctl demo` once lost the receiver's
// acknowledgement on a loaded machine, its write handled after the end found no link.)

@testable import BLE
import BLETesting
import HCI
import Testing

@Suite(.timeLimit(.minutes(3))) struct LinkEndOrderTests {
    static let handle: UInt16 = 0x0042
    static let first = BluetoothAddress("C0:00:00:00:05:01")!, second = BluetoothAddress("C0:00:00:00:05:02")!

    static func connected(_ peer: BluetoothAddress) -> HCIPacket {
        HCIEvent.le(.connectionComplete(LEConnectionComplete(connectionHandle: handle, role: .peripheral, peerAddressType: .public,
                                                             peerAddress: peer))).packet
    }

    static let ended = HCIEvent.disconnectionComplete(DisconnectionComplete(connectionHandle: handle, reason: .remoteUserTerminatedConnection)).packet

    /// An ATT Write Command to `attribute` on the fixed ATT channel (CID 0x0004).
    static func writeCommand(_ attribute: UInt16, _ value: [UInt8]) -> HCIPacket {
        let att = [0x52, UInt8(attribute & 0xFF), UInt8(attribute >> 8)] + value
        let l2cap = [UInt8(att.count), 0, 0x04, 0x00] + att
        return .acl(ACLDataPacket(handle: handle, boundary: .firstFlushable, data: l2cap))
    }

    @Test func aWriteJustBeforeTheEndIsTheEndedLinksAndTheNextLinksWriteIsItsOwn() async throws {
        let radio = VirtualRadio()
        let t = Interposer(await radio.makeController(address: BluetoothAddress("C0:00:00:00:05:0F")!))
        let host = BluetoothHost(transport: t, logger: Bench.logger)
        try await host.start()
        defer { Task { await host.close(); _ = radio } }
        let c = Characteristic(uuid: BluetoothUUID(0xFFE1), properties: [.read, .writeWithoutResponse], value: [0])
        try await host.peripheral.add(Service(uuid: BluetoothUUID(0xFFE0), characteristics: [c]))
        let value = try await host.peripheral.handles(of: c).value
        let events = host.peripheral.events()
        let links = host.connectionEvents()
        // One read: the first central connects, writes and goes; the second takes the
        // same handle and writes.
        try await host.loop.submit {
            t.injectNow(packets: [Self.connected(Self.first), Self.writeCommand(value, [1]), Self.ended,
                                  Self.connected(Self.second), Self.writeCommand(value, [2])])
        }.get()
        let seen = await collect(links, count: 3, within: .seconds(5))
        guard seen.count == 3, case let .connected(a) = seen[0], case .disconnected(a, _) = seen[1], case let .connected(b) = seen[2] else {
            Issue.record("links reported: \(seen)")
            return
        }
        #expect(a.peer == Self.first && b.peer == Self.second && a.handle == b.handle && a != b)
        let written = await collect(events.filter { if case .written = $0 { true } else { false } }, count: 2, within: .seconds(5))
        #expect(written == [.written(c, value: [1], central: a), .written(c, value: [2], central: b)])
        #expect(try await host.peripheral.value(of: c) == [2])
    }
}
