// What the host remembers of a link between its end and the GATT server's last event
// from it. The server's events (a write, a subscription) and the link's end come on
// two streams, each followed by a task of its own; on a loaded machine the end can be
// handled first (`btctl demo` once lost the receiver's acknowledgement that way: the
// write was answered, but its event found no link and was dropped). The host keeps
// the ended link until the server's stream says it forgot it.

@testable import BLE
import HCI
import Testing

@Suite struct LinkBookkeepingTests {
    static func link(_ handle: UInt16, id: UInt64) -> Connection {
        Connection(handle: handle, role: .peripheral, peer: BluetoothAddress("C0:00:00:00:00:0\(id)")!, peerType: .public, id: id)
    }

    @Test func anEndedLinkNamesTheServersLastEventsUntilTheServerForgetsIt() {
        var links = BluetoothHost.LinkState()
        let old = Self.link(0x40, id: 1), new = Self.link(0x40, id: 2)
        links.active[0x40] = old
        #expect(links.serverLink(0x40) == old)
        #expect(links.remove(0x40) == old)
        #expect(links.remove(0x40) == nil)
        // The write the server took before the end still finds its link.
        #expect(links.serverLink(0x40) == old)
        // The controller gives the handle to a new link before the server's stream is
        // followed to its end: events ahead of that end are the old link's.
        links.active[0x40] = new
        #expect(links.serverLink(0x40) == old)
        links.serverForgot(0x40)
        #expect(links.serverLink(0x40) == new)
        #expect(links.departing.isEmpty)
    }
}
