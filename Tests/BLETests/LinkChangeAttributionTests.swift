// A link-layer change belongs to the link that has the handle when the controller
// reports it. Controllers give an ended link's handle to the next one at once, so a
// Disconnection Complete, the next LE Connection Complete with the same handle and that
// new link's PHY, data length and parameter changes can come in one transport read.
// The host must name the new link in each change, never the one that ended.

import BLE
import BLETesting
import HCI
import NIOCore
import Testing

@Suite(.timeLimit(.minutes(3))) struct LinkChangeAttributionTests {
    static func described(_ e: ConnectionEvent) -> String? {
        switch e {
        case let .connected(c): return "connected \(c.peer)"
        case let .disconnected(c, _): return "disconnected \(c.peer)"
        case let .phyUpdated(c, p): return "phy \(c.peer) \(p)"
        case let .dataLengthChanged(c, d): return "data length \(c.peer) \(d.maxTxOctets)"
        case let .parametersUpdated(c, i, _, _): return "parameters \(c.peer) \(i)"
        default: return nil
        }
    }

    @Test func aChangeAfterTheHandleIsReusedNamesTheNewLink() async throws {
        let radio = VirtualRadio()
        let transport = InjectingTransport(await radio.makeController(address: BluetoothAddress("C0:00:00:00:0A:01")!))
        let host = BluetoothHost(transport: transport, logger: Bench.logger)
        try await host.start()
        defer { Task { await host.close() } }
        let events = host.connectionEvents()
        let first = BluetoothAddress("C0:00:00:00:0A:02")!, second = BluetoothAddress("C0:00:00:00:0A:03")!
        let handle: UInt16 = 0x0041
        func connection(_ peer: BluetoothAddress) -> HCIPacket {
            HCIEvent.le(.connectionComplete(LEConnectionComplete(connectionHandle: handle, role: .peripheral, peerAddressType: .random,
                                                                 peerAddress: peer))).packet
        }
        try await transport.inject([connection(first)])
        let up = await firstElement(events.compactMap(Self.described), within: .seconds(5))
        #expect(up == "connected \(first)")
        try await transport.inject([
            HCIEvent.disconnectionComplete(DisconnectionComplete(connectionHandle: handle, reason: .remoteUserTerminatedConnection)).packet,
            connection(second),
            HCIEvent.le(.phyUpdateComplete(LEPHYUpdateComplete(connectionHandle: handle, txPHY: 2, rxPHY: 2))).packet,
            HCIEvent.le(.dataLengthChange(LEDataLengthChange(connectionHandle: handle, maxTxOctets: 251, maxTxTime: 2120, maxRxOctets: 251,
                                                             maxRxTime: 2120))).packet,
            HCIEvent.le(.connectionUpdateComplete(LEConnectionUpdateComplete(connectionHandle: handle, connectionInterval: 0x18,
                                                                             peripheralLatency: 0, supervisionTimeout: 0x100))).packet,
        ])
        var seen: [String] = []
        for await e in events.compactMap(Self.described) {
            seen.append(e)
            if seen.count == 5 { break }
        }
        #expect(seen == ["disconnected \(first)", "connected \(second)", "phy \(second) LE 2M", "data length \(second) 251",
                         "parameters \(second) 24"])
        withExtendedLifetime(radio) {}
    }
}
