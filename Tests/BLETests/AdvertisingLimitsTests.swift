// Advertising that ends by itself: a duration and a maximum number of advertising
// events (LE Set Extended Advertising Enable's Duration and
// Max_Extended_Advertising_Events; on a legacy-driven controller the host's timer).
// The end reaches the application as `PeripheralEvent.advertisingEnded`, the set stays
// configured but off air, and restarts by the host (after a link the set made) take
// only what is left of the duration. On the virtual radio (whose ticks are advertising
// events and whose Duration runs on the loop's clock) and on Rootcanal.

import BLE
import BLETesting
import Foundation
import GAP
@testable import HCI
import NIOEmbedded
import Testing

@Suite(.timeLimit(.minutes(3))) struct AdvertisingLimitsTests {
    /// The first `.advertisingEnded` on `events` within `limit` of wall-clock time.
    static func ended(_ events: BufferedStream<PeripheralEvent>, within limit: Duration = .seconds(10)) async -> (AdvertisingSet, AdvertisingEndReason)? {
        await firstElement(events.compactMap { e -> (AdvertisingSet, AdvertisingEndReason)? in
            if case let .advertisingEnded(s, reason) = e { return (s, reason) }
            return nil
        }, within: limit)
    }

    /// The ends among `events` (taken from a stream's buffer, `takeBuffered`).
    static func ends(_ events: [PeripheralEvent]) -> [(AdvertisingSet, AdvertisingEndReason)] {
        events.compactMap { e in
            if case let .advertisingEnded(s, reason) = e { return (s, reason) }
            return nil
        }
    }

    static func names(heardBy host: BluetoothHost) async throws -> Set<String> {
        Set(try await AdvertisingSetsTests.heard(by: host).values.flatMap { $0 })
    }

    /// A set with an event limit sends that many advertising events (the radio's first
    /// one when it is enabled, one per tick) and ends with Limit Reached; set 0 goes on.
    /// It keeps its handle, and an update starts it again.
    @Test func anEventLimitEndsASet() async throws {
        let room = try await Room(peripherals: 1, extendedAdvertising: true)
        defer { Task { await room.close() } }
        let p = room.peripherals[0].peripheral
        let events = p.events()
        try await p.startAdvertising(AdvertisingSetsTests.named("main"))
        let burst = try await p.addAdvertisingSet(AdvertisingSetsTests.named("burst"), maximumEvents: 3)
        #expect(try await Self.names(heardBy: room.central) == ["main", "burst"])
        await room.radio.tick()
        await room.radio.tick()
        let end = try #require(await Self.ended(events))
        #expect(end.0 == burst && end.1 == .eventLimitReached(events: 3))
        #expect(try await Self.names(heardBy: room.central) == ["main"])
        #expect(await p.advertisingSets == [burst])
        try await p.updateAdvertisingSet(burst, data: AdvertisingSetsTests.named("burst-2"))
        #expect(try await Self.names(heardBy: room.central) == ["main", "burst-2"])
        // One event: the radio's controller ends the set right after answering the
        // enable; that end is this enabling's, and is reported.
        let once = try await p.addAdvertisingSet(AdvertisingSetsTests.named("once"), maximumEvents: 1)
        let end1 = try #require(await Self.ended(events))
        #expect(end1.0 == once && end1.1 == .eventLimitReached(events: 1))
    }

    /// A radio ticking on its own (`tick(every:)`) ticks on its loop's clock: on a
    /// testing loop, the set's third event (enabling, the tick at once, the tick 100 ms
    /// on) comes when the test moves the time to 100 ms, and not a millisecond before;
    /// once the task is cancelled, no tick comes.
    @Test func theRadiosOwnTicksAreItsLoopsTimers() async throws {
        let loop = NIOAsyncTestingEventLoop()
        let room = try await Room(peripherals: 1, radio: VirtualRadio(loop: loop), extendedAdvertising: true)
        defer { Task { await room.close() } }
        let p = room.peripherals[0].peripheral
        let events = p.events()
        let burst = try await p.addAdvertisingSet(AdvertisingSetsTests.named("burst"), maximumEvents: 3)
        let ticker = room.radio.tick(every: .milliseconds(100))
        await loop.advanceTime(by: .milliseconds(99))
        #expect(Self.ends(events.takeBuffered()).isEmpty)
        await loop.advanceTime(by: .milliseconds(1))
        let end = try #require(Self.ends(events.takeBuffered()).first)
        #expect(end.0 == burst && end.1 == .eventLimitReached(events: 3))
        // Enabled again for 2 events (the enabling is one): cancelled, the ticker sends
        // not the other.
        ticker.cancel()
        try await p.updateAdvertisingSet(burst, data: AdvertisingSetsTests.named("burst-2"), maximumEvents: 2)
        await loop.advanceTime(by: .seconds(1))
        #expect(Self.ends(events.takeBuffered()).isEmpty)
    }

    /// A set with a duration ends with Advertising Timeout when it elapses.
    @Test func aDurationEndsASet() async throws {
        let loop = NIOAsyncTestingEventLoop()
        let room = try await Room(peripherals: 1, radio: VirtualRadio(loop: loop), extendedAdvertising: true)
        defer { Task { await room.close() } }
        let p = room.peripherals[0].peripheral
        let events = p.events(), early = p.events()
        try await p.startAdvertising(AdvertisingSetsTests.named("main"))
        let short = try await p.addAdvertisingSet(AdvertisingSetsTests.named("short"), duration: .milliseconds(1_500))
        try await Self.endsAfter(.milliseconds(1_500), of: loop, early: early) { () async throws in
            #expect(try await Self.names(heardBy: room.central, on: loop) == ["main", "short"])
        }
        let end = try #require(await Self.ended(events))
        #expect(end.0 == short && end.1 == .durationElapsed)
        #expect(try await Self.names(heardBy: room.central, on: loop) == ["main"])
    }

    /// A controller driven with the legacy commands keeps no duration: the host's timer
    /// stops the advertisement. It counts no events: a limit is refused.
    @Test func onLegacyCommandsTheHostKeepsTheDuration() async throws {
        let loop = NIOAsyncTestingEventLoop()
        let room = try await Room(peripherals: 1, radio: VirtualRadio(loop: loop))
        defer { Task { await room.close() } }
        let p = room.peripherals[0].peripheral
        let events = p.events(), early = p.events()
        await #expect { try await p.startAdvertising(AdvertisingSetsTests.named("legacy"), maximumEvents: 5) } throws: { error in
            guard case let BLEError.notSupported(why) = error else { return false }
            return why.contains("extended commands")
        }
        try await p.startAdvertising(AdvertisingSetsTests.named("legacy"), duration: .milliseconds(1_500))
        try await Self.endsAfter(.milliseconds(1_500), of: loop, early: early) { () async throws in
            #expect(try await Self.names(heardBy: room.central, on: loop) == ["legacy"])
        }
        let end = try #require(await Self.ended(events))
        #expect(end.0.handle == 0 && end.1 == .durationElapsed)
        #expect(try await Self.names(heardBy: room.central, on: loop).isEmpty)
        // Started again, it advertises again.
        try await p.startAdvertising(AdvertisingSetsTests.named("legacy-2"))
        #expect(try await Self.names(heardBy: room.central, on: loop) == ["legacy-2"])
    }

    @Test func limitsOutsideTheirRangesAreRefused() async throws {
        let room = try await Room(peripherals: 1, extendedAdvertising: true)
        defer { Task { await room.close() } }
        let p = room.peripherals[0].peripheral
        let ad = AdvertisingSetsTests.named("x")
        for d in [Duration.milliseconds(5), .seconds(656), .zero, .seconds(-1)] {
            await #expect(throws: BLEError.self) { try await p.startAdvertising(ad, duration: d) }
        }
        for m in [0, 256, -1] {
            await #expect(throws: BLEError.self) { try await p.addAdvertisingSet(ad, maximumEvents: m) }
        }
        #expect(await p.advertisingSets.isEmpty)
        #expect(try await Self.names(heardBy: room.central).isEmpty)
        // The ends of the ranges are taken.
        try await p.startAdvertising(ad, duration: .milliseconds(655_350), maximumEvents: 255)
        _ = try await p.addAdvertisingSet(ad, duration: .milliseconds(10), maximumEvents: 1)
    }

    /// A connectable set with a duration stops for a link it made; the link outlives
    /// the duration, so when it ends the set does not resume: it ends, reported once.
    @Test func aSetWhoseDurationRanOutDuringItsLinkEnds() async throws {
        let loop = NIOAsyncTestingEventLoop()
        let room = try await Room(peripherals: 1, radio: VirtualRadio(loop: loop), extendedAdvertising: true)
        defer { Task { await room.close() } }
        let host = room.peripherals[0]
        let events = host.peripheral.events()
        let links = host.connectionEvents()
        let door = try await host.peripheral.addAdvertisingSet(AdvertisingSetsTests.named("door"), connectable: true, duration: .seconds(3))
        let remote = try await room.central.central.connect(to: room.addresses[0], within: .seconds(5))
        await loop.advanceTime(by: .milliseconds(3_010))
        try await remote.disconnect()
        for await e in links { if case .disconnected = e { break } }
        // Heard at once if it resumed (with its whole duration, it would go on for 3 s).
        #expect(try await Self.names(heardBy: room.central, on: loop).isEmpty)
        let end = try #require(await Self.ended(events))
        #expect(end.0 == door && end.1 == .durationElapsed)
        #expect(await host.peripheral.advertisingSets == [door])
    }

    /// On Rootcanal: a 20 ms set with 5 events and a set with 2 s both end by
    /// themselves and are not heard after. Rootcanal 1.10 reports the event limit with
    /// Advertising Timeout (0x3C) instead of Limit Reached (0x43); the host still says
    /// which limit it was.
    @Test func onRootcanalLimitsEndSets() async throws {
        guard let rc = try await Bench.rootcanalHosts(2) else { return }
        defer { rc.stop() }
        let (p, c) = (rc.hosts[0], rc.hosts[1])
        let events = p.peripheral.events()
        try await p.peripheral.startAdvertising(AdvertisingSetsTests.named("rc-main"))
        let burst = try await p.peripheral.addAdvertisingSet(AdvertisingSetsTests.named("rc-burst"), intervalMilliseconds: 20, maximumEvents: 5)
        let e1 = try #require(await Self.ended(events))
        #expect(e1.0 == burst)
        guard case let .eventLimitReached(n) = e1.1 else { Issue.record("\(e1.1)"); return }
        #expect(n == 5)
        let short = try await p.peripheral.addAdvertisingSet(AdvertisingSetsTests.named("rc-short"), duration: .seconds(2))
        // The ended set keeps its handle.
        #expect(short.handle == 2)
        func names() async throws -> Set<String> {
            Set(try await c.central.scan(for: .milliseconds(300)).compactMap { $0.advertisement.data.localName }.filter { $0.hasPrefix("rc-") })
        }
        #expect(try await names() == ["rc-main", "rc-short"])
        let e2 = try #require(await Self.ended(events))
        #expect(e2.0 == short && e2.1 == .durationElapsed)
        #expect(try await names() == ["rc-main"])
    }
}
