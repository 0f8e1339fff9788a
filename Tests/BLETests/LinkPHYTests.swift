// A link's PHYs through the facade: `updatePHY` (LE Set PHY) returns what LE PHY
// Update Complete says, `phy(of:)` reads it (LE Read PHY), both sides hear
// `ConnectionEvent.phyUpdated` of a change, `setPreferredPHYs` (LE Set Default PHY)
// limits what a peer's update can land on. On the virtual radio's Bluetooth 5
// controllers (LE 1M and LE 2M, modelled on Rootcanal's PHY update procedure) and on
// Rootcanal. Data length: DataLengthTests.

import BLE
import BLETesting
import HCI
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct LinkPHYTests {
    /// The first `.phyUpdated` on `events` within 5 s.
    static func phyUpdate(_ events: BufferedStream<ConnectionEvent>) async -> (Connection, LinkPHY)? {
        await firstElement(events.compactMap { e -> (Connection, LinkPHY)? in
            if case let .phyUpdated(c, p) = e { return (c, p) } else { return nil }
        }, within: .seconds(5))
    }

    @Test func eitherSideMovesTheLinkToLE2M() async throws {
        let room = try await Room(peripherals: 1, extendedAdvertising: true)
        defer { Task { await room.close() } }
        let peripheral = room.peripherals[0]
        try await peripheral.peripheral.startAdvertising(AdvertisingSetsTests.named("phy"))
        let peripheralSide = peripheral.connectionEvents()
        let remote = try await room.central.central.connect(to: room.addresses[0], within: .seconds(5))
        #expect(try await remote.phy() == LinkPHY(tx: .le1M, rx: .le1M))
        // The central asks: both ways LE 2M; the peripheral's host hears of the change.
        let centralSide = room.central.connectionEvents()
        #expect(try await remote.updatePHY() == LinkPHY(tx: .le2M, rx: .le2M))
        #expect(await Self.phyUpdate(centralSide)?.1 == LinkPHY(tx: .le2M, rx: .le2M))
        let heard = await Self.phyUpdate(peripheralSide)
        #expect(heard?.1 == LinkPHY(tx: .le2M, rx: .le2M) && heard?.0.role == .peripheral)
        let link = try #require(heard?.0)
        #expect(try await peripheral.phy(of: link) == LinkPHY(tx: .le2M, rx: .le2M))
        // The peripheral asks for LE 1M out only: the central's host hears of it.
        #expect(try await peripheral.updatePHY(link, tx: [.le1M], rx: [.le2M]) == LinkPHY(tx: .le1M, rx: .le2M))
        #expect(await Self.phyUpdate(centralSide)?.1 == LinkPHY(tx: .le2M, rx: .le1M))
        #expect(try await remote.phy() == LinkPHY(tx: .le2M, rx: .le1M))
        // Nothing changes: only the side that asked hears of it.
        let quiet = peripheral.connectionEvents()
        #expect(try await remote.updatePHY(tx: [.le2M], rx: [.le1M]) == LinkPHY(tx: .le2M, rx: .le1M))
        // LE Coded, for range, both ways (the peer's defaults allow every PHY): the
        // peripheral's host hears of it, and of nothing before it.
        #expect(try await remote.updatePHY(tx: [.leCoded], rx: [.leCoded]) == LinkPHY(tx: .leCoded, rx: .leCoded))
        #expect(await Self.phyUpdate(quiet)?.1 == LinkPHY(tx: .leCoded, rx: .leCoded))
        #expect(try await peripheral.phy(of: link) == LinkPHY(tx: .leCoded, rx: .leCoded))
        await #expect(throws: BLEError.self) { try await remote.updatePHY(tx: [], rx: [.le1M]) }
    }

    /// A peripheral that allows LE 1M only keeps the link there whatever the central asks.
    @Test func preferredPHYsLimitWhatAPeerCanAskFor() async throws {
        let room = try await Room(peripherals: 1, extendedAdvertising: true)
        defer { Task { await room.close() } }
        let peripheral = room.peripherals[0]
        try await peripheral.setPreferredPHYs(tx: [.le1M], rx: [.le1M])
        // Kept across a reset (the controller forgets it).
        try await peripheral.reset()
        try await peripheral.peripheral.startAdvertising(AdvertisingSetsTests.named("phy"))
        let remote = try await room.central.central.connect(to: room.addresses[0], within: .seconds(5))
        #expect(try await remote.updatePHY() == LinkPHY(tx: .le1M, rx: .le1M))
        await #expect(throws: BLEError.self) { try await peripheral.setPreferredPHYs(tx: [PHY(rawValue: 9)], rx: [.le1M]) }
    }

    /// On Rootcanal: the central moves the link to LE 2M both ways; LE Read PHY on
    /// either side says so.
    @Test func onRootcanalTheCentralMovesTheLinkToLE2M() async throws {
        guard let rc = try await Bench.rootcanalHosts(2) else { return }
        defer { rc.stop() }
        let (p, c, pAddress) = (rc.hosts[0], rc.hosts[1], rc.addresses[0])
        try await p.peripheral.startAdvertising(AdvertisingSetsTests.named("rc-phy"))
        let peripheralSide = p.connectionEvents()
        let remote = try await c.central.connect(to: pAddress, within: .seconds(10))
        #expect(try await remote.phy() == LinkPHY(tx: .le1M, rx: .le1M))
        #expect(try await remote.updatePHY() == LinkPHY(tx: .le2M, rx: .le2M))
        let heard = await Self.phyUpdate(peripheralSide)
        #expect(heard?.1 == LinkPHY(tx: .le2M, rx: .le2M))
        if let link = heard?.0 { #expect(try await p.phy(of: link) == LinkPHY(tx: .le2M, rx: .le2M)) }
        #expect(try await remote.phy() == LinkPHY(tx: .le2M, rx: .le2M))
    }
}
