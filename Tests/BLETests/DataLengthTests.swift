// A link's data length through the facade. Each side chooses what it sends per PDU
// (Vol 6, Part B, §4.5.10): `updateDataLength` (LE Set Data Length) returns the
// lengths in force after LE Data Length Change, `dataLength(of:)` keeps them, and
// `setPreferredDataLength` (LE Write Suggested Default Data Length) makes every new
// link start long, as BlueZ and Bumble set their controllers up. On the virtual
// radio, whose controllers run the data length update; Rootcanal 1.10 takes the
// suggested default but never changes a link's length.

import BLE
import BLETesting
import HCI
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct DataLengthTests {
    /// The first `.dataLengthChanged` on `events` within 5 s.
    static func dataLength(_ events: BufferedStream<ConnectionEvent>) async -> (Connection, DataLength)? {
        await firstElement(events.compactMap { e -> (Connection, DataLength)? in
            if case let .dataLengthChanged(c, d) = e { return (c, d) } else { return nil }
        }, within: .seconds(5))
    }

    static func length(tx: Int, rx: Int) -> DataLength {
        DataLength(maxTxOctets: tx, maxTxTimeMicroseconds: (tx + 14) * 8, maxRxOctets: rx, maxRxTimeMicroseconds: (rx + 14) * 8)
    }

    @Test func eachSideChoosesWhatItSends() async throws {
        let room = try await Room(peripherals: 1)
        defer { Task { await room.close() } }
        let peripheral = room.peripherals[0]
        try await peripheral.peripheral.startAdvertising(AdvertisingSetsTests.named("dle"))
        let peripheralSide = peripheral.connectionEvents()
        let remote = try await room.central.central.connect(to: room.addresses[0], within: .seconds(5))
        let link = try #require(await firstElement(peripheralSide.compactMap { e -> Connection? in
            if case let .connected(c) = e { return c } else { return nil }
        }, within: .seconds(5)))
        #expect(try await remote.dataLength() == .initial)
        // The central sends 251-octet PDUs; the peripheral still sends 27.
        #expect(try await remote.updateDataLength() == Self.length(tx: 251, rx: 27))
        let heard = await Self.dataLength(peripheralSide)
        #expect(heard?.0 == link && heard?.1 == Self.length(tx: 27, rx: 251))
        #expect(try await peripheral.dataLength(of: link) == Self.length(tx: 27, rx: 251))
        #expect(try await remote.dataLength() == Self.length(tx: 251, rx: 27))
        // The peripheral asks for 100 octets; its time bounds what it gets.
        #expect(try await peripheral.updateDataLength(link, txOctets: 100, txTime: (100 + 14) * 8) == Self.length(tx: 100, rx: 251))
        #expect(try await peripheral.updateDataLength(link, txOctets: 251, txTime: (60 + 14) * 8) == Self.length(tx: 60, rx: 251))
        // Asking for what is in force returns at once (no event comes).
        let start = ContinuousClock.now
        #expect(try await remote.updateDataLength(within: .seconds(30)) == Self.length(tx: 251, rx: 60))
        #expect(ContinuousClock.now - start < .seconds(10))
        // Outside the spec's ranges: refused before any command.
        for (octets, time) in [(26, 2120), (252, 2120), (251, 327), (251, 17041), (-1, 2120)] {
            await #expect(throws: BLEError.self) { try await remote.updateDataLength(txOctets: octets, txTime: time) }
        }
        _ = try await remote.disconnect()
        await #expect(throws: BLEError.self) { try await remote.dataLength() }
        await #expect(throws: BLEError.self) { try await remote.updateDataLength() }
    }

    @Test func aPreferredDataLengthStartsEveryLinkLong() async throws {
        let room = try await Room(peripherals: 1, extendedAdvertising: true)
        defer { Task { await room.close() } }
        let peripheral = room.peripherals[0]
        try await peripheral.setPreferredDataLength()
        await #expect(throws: BLEError.self) { try await peripheral.setPreferredDataLength(txOctets: 300) }
        for round in 0..<2 {
            // Kept across a reset (the controller forgets it).
            if round == 1 { try await peripheral.reset() }
            try await peripheral.peripheral.startAdvertising(AdvertisingSetsTests.named("dle"))
            let centralSide = room.central.connectionEvents(), peripheralSide = peripheral.connectionEvents()
            let remote = try await room.central.central.connect(to: room.addresses[0], within: .seconds(5))
            // The controllers agree as the link comes up: the peripheral sends 251.
            let mine = await Self.dataLength(centralSide)
            #expect(mine?.0 == remote.connection && mine?.1 == Self.length(tx: 27, rx: 251), "round \(round)")
            #expect(await Self.dataLength(peripheralSide)?.1 == Self.length(tx: 251, rx: 27), "round \(round)")
            #expect(try await remote.dataLength() == Self.length(tx: 27, rx: 251), "round \(round)")
            _ = try await remote.disconnect()
        }
    }

    /// On Rootcanal 1.10: LE Write Suggested Default Data Length is taken, but LE Set
    /// Data Length is an Unknown HCI Command (`updateDataLength` says nil, not an
    /// error), and the link keeps 27 octets: Rootcanal does not run the data length
    /// update.
    @Test func onRootcanalTheLinkKeepsItsLength() async throws {
        guard let rc = try await Bench.rootcanalHosts(2) else { return }
        defer { rc.stop() }
        let (p, c, pAddress) = (rc.hosts[0], rc.hosts[1], rc.addresses[0])
        try await p.setPreferredDataLength()
        try await p.peripheral.startAdvertising(AdvertisingSetsTests.named("rc-dle"))
        let remote = try await c.central.connect(to: pAddress, within: .seconds(10))
        let got = try await remote.updateDataLength(within: .milliseconds(500))
        #expect(got == nil, "\(String(describing: got))")
        #expect(try await remote.dataLength() == .initial)
    }
}
