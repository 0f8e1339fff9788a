// Periodic advertising through the facade: a peripheral adds a train to an advertising
// set, a central hears the set's pointer to it in an extended advertisement, follows
// the train (`Central.synchronize`) and receives each packet's data until it
// terminates the sync or the train stops (Sync Lost). On the virtual radio (a tick is
// one periodic event of every train) and on Rootcanal.

import BLE
import BLETesting
import GAP
import HCI
import Synchronization
import Testing

@Suite(.timeLimit(.minutes(3))) struct PeriodicAdvertisingTests {
    /// Manufacturer data of `n` octets in all (its AD structures, each at most 255).
    static func payload(_ n: Int, seed: UInt8 = 1) -> AdvertisingData {
        var ad = AdvertisingData()
        var left = n
        var i = 0
        while left > 0 {
            let chunk = min(left, 255)
            // An AD structure: length, type 0xFF, company 0xFFFF, bytes.
            let body = (0..<(chunk - 4)).map { UInt8(truncatingIfNeeded: $0 + i + Int(seed)) }
            ad.manufacturerData.append(.init(companyIdentifier: 0xFFFF, data: body))
            left -= chunk
            i += 1
        }
        return ad
    }

    /// The first scan result from `address` that points to periodic advertising.
    static func periodicResult(_ central: BluetoothHost, from address: BluetoothAddress) async throws -> ScanResult? {
        try await central.central.scan(for: .milliseconds(300)).first { $0.address == address && $0.advertisement.periodicAdvertisingInterval != nil }
    }

    /// The next `n` packets on `sync`, ticking the radio until they came (bounded).
    static func next(_ n: Int, on sync: PeriodicAdvertisingSync, radio: VirtualRadio) async throws -> [PeriodicAdvertisement] {
        var out: [PeriodicAdvertisement] = []
        for _ in 0..<n {
            await radio.tick()
            guard let a = await firstElement(sync.advertisements, within: .seconds(5)) else { break }
            out.append(a)
        }
        return out
    }

    @Test func aCentralFollowsASetsPeriodicAdvertising() async throws {
        let room = try await Room(peripherals: 1, extendedAdvertising: true)
        defer { Task { await room.close() } }
        let p = room.peripherals[0].peripheral
        try await p.startAdvertising(AdvertisingSetsTests.named("main"))
        let plain = try await p.addAdvertisingSet(AdvertisingSetsTests.named("plain"))
        let beacon = try await p.addAdvertisingSet(AdvertisingSetsTests.named("beacon"))
        // 600 octets: three commands to the controller, three reports from the scanner's.
        let data = Self.payload(600)
        try await p.startPeriodicAdvertising(on: beacon, data: data, intervalMilliseconds: 50)
        let heard = try await room.central.central.scan(for: .milliseconds(300)).filter { $0.address == room.addresses[0] }
        // Only the set with a train points to one; the legacy-PDU sets have no SID.
        #expect(heard.filter { $0.advertisement.periodicAdvertisingInterval != nil }.compactMap(\.advertisement.data.localName) == ["beacon"])
        #expect(heard.first { $0.advertisement.data.localName == "main" }?.advertisement.advertisingSID == nil)
        _ = plain
        let result = try #require(heard.first { $0.advertisement.periodicAdvertisingInterval != nil })
        #expect(result.advertisement.periodicAdvertisingInterval == 40)
        let sync = try await room.central.central.synchronize(to: result, within: .seconds(5))
        #expect(sync.advertiser == room.addresses[0] && sync.interval == .milliseconds(50))
        let first = try await Self.next(2, on: sync, radio: room.radio)
        #expect(first.map(\.raw) == [data.bytes, data.bytes])
        #expect(first.allSatisfy { !$0.isTruncated && $0.rssi != nil })
        // Whole data of up to 252 octets changes on air; the train goes on.
        let short = Self.payload(40, seed: 9)
        try await p.startPeriodicAdvertising(on: beacon, data: short, intervalMilliseconds: 50)
        #expect(try await Self.next(1, on: sync, radio: room.radio).map(\.raw) == [short.bytes])
        try await sync.terminate()
        var rest: [PeriodicAdvertisement] = []
        for try await a in sync.advertisements { rest.append(a) }
        #expect(rest.isEmpty)
        // The set goes, its train stopped first (the controller refuses otherwise).
        try await p.removeAdvertisingSet(beacon)
    }

    @Test func aSyncEndsWhenItsTrainStops() async throws {
        let room = try await Room(peripherals: 1, extendedAdvertising: true)
        defer { Task { await room.close() } }
        let p = room.peripherals[0].peripheral
        let beacon = try await p.addAdvertisingSet(AdvertisingSetsTests.named("beacon"))
        try await p.startPeriodicAdvertising(on: beacon, data: Self.payload(20))
        let result = try #require(try await Self.periodicResult(room.central, from: room.addresses[0]))
        let sync = try await room.central.central.synchronize(to: result, timeout: .milliseconds(200))
        #expect(try await Self.next(1, on: sync, radio: room.radio).count == 1)
        try await p.stopPeriodicAdvertising(on: beacon)
        // No packet within the sync timeout: the controller says the sync is lost.
        let lost = await firstElement(AsyncStream<(any Error)?> { k in
            Task {
                do { for try await _ in sync.advertisements {}; k.yield(nil) } catch { k.yield(error) }
                k.finish()
            }
        }, within: .seconds(5))
        guard case let BLEError.periodicSyncLost(a)? = (lost ?? nil) as? BLEError else { Issue.record("\(String(describing: lost))"); return }
        #expect(a.address == room.addresses[0] && a.sid == sync.sid && a == sync.source)
    }

    @Test func aSyncThatFindsNothingTimesOutAndTheNextOneWorks() async throws {
        // The central's commands as they go to its controller: the second Create Sync
        // is cancelled by its caller the moment it goes out.
        let sent = Mutex<[HCIOpcode]>([])
        let looking = Mutex<Task<PeriodicAdvertisingSync, any Error>?>(nil)
        let room = try await Room(peripherals: 1, extendedAdvertising: true, watchCentral: { r in
            guard case let .command(op, _)? = r.packet, op == .lePeriodicAdvertisingCreateSync || op == .lePeriodicAdvertisingCreateSyncCancel else { return }
            let creates = sent.withLock { $0.append(op); return $0.filter { $0 == .lePeriodicAdvertisingCreateSync }.count }
            if op == .lePeriodicAdvertisingCreateSync, creates == 2 { looking.withLock { $0?.cancel() } }
        })
        defer { Task { await room.close() } }
        let central = room.central.central
        let nobody = BluetoothAddress("C0:00:00:00:0F:0F")!
        await #expect { try await central.synchronize(to: nobody, type: .public, sid: 1, within: .milliseconds(300)) } throws: { error in
            guard case let BLEError.periodicSyncTimeout(a, _) = error else { return false }
            return a == [PeriodicAdvertiser(address: nobody, type: .public, sid: 1)]
        }
        // Cancelled while looking: CancellationError, and the controller stops looking.
        let (go, start) = AsyncStream<Void>.makeStream()
        let t = Task {
            for await _ in go { break }
            return try await central.synchronize(to: nobody, type: .public, sid: 2, within: .seconds(30))
        }
        looking.withLock { $0 = t }
        start.yield()
        await #expect(throws: CancellationError.self) { try await t.value }
        #expect(sent.withLock { $0 } == [.lePeriodicAdvertisingCreateSync, .lePeriodicAdvertisingCreateSyncCancel,
                                          .lePeriodicAdvertisingCreateSync, .lePeriodicAdvertisingCreateSyncCancel])
        // The controller was told to stop looking each time: a new Create Sync is accepted.
        let p = room.peripherals[0].peripheral
        let beacon = try await p.addAdvertisingSet(AdvertisingSetsTests.named("beacon"))
        try await p.startPeriodicAdvertising(on: beacon, data: Self.payload(10))
        let result = try #require(try await Self.periodicResult(room.central, from: room.addresses[0]))
        let sync = try await central.synchronize(to: result)
        #expect(try await Self.next(1, on: sync, radio: room.radio).map(\.raw) == [Self.payload(10).bytes])
    }

    /// Through the Periodic Advertiser List: the host fills it with the advertisers
    /// asked for (Clear, then one Add each) and sends Create Sync with Options bit 0;
    /// the sync says which train the controller found. A train the host follows is
    /// left out of the next list; one left is asked for directly.
    @Test func aCentralFollowsAnyOfSeveralAdvertisers() async throws {
        let sent = Mutex<[HCIOpcode]>([])
        let list: Set<HCIOpcode> = [.leReadPeriodicAdvertiserListSize, .leClearPeriodicAdvertiserList, .leAddDeviceToPeriodicAdvertiserList,
                                    .lePeriodicAdvertisingCreateSync]
        let room = try await Room(peripherals: 2, extendedAdvertising: true, watchCentral: { r in
            guard case let .command(op, _)? = r.packet, list.contains(op) else { return }
            sent.withLock { $0.append(op) }
        })
        defer { Task { await room.close() } }
        var sids: [UInt8] = []
        for (i, peripheral) in room.peripherals.enumerated() {
            let beacon = try await peripheral.peripheral.addAdvertisingSet(AdvertisingSetsTests.named("beacon-\(i)"))
            try await peripheral.peripheral.startPeriodicAdvertising(on: beacon, data: Self.payload(20, seed: UInt8(i)), intervalMilliseconds: 50)
            sids.append(beacon.handle & 0x0F)
        }
        let central = room.central.central
        let nobody = PeriodicAdvertiser(address: BluetoothAddress("C0:00:00:00:0F:0F")!, type: .public, sid: 1)
        let first = PeriodicAdvertiser(address: room.addresses[0], type: .public, sid: sids[0])
        let second = PeriodicAdvertiser(address: room.addresses[1], type: .public, sid: sids[1])
        let one = try await central.synchronize(toAnyOf: [nobody, first, nobody], within: .seconds(5))
        #expect(one.source == first)
        #expect(sent.withLock { $0 } == [.leReadPeriodicAdvertiserListSize, .leClearPeriodicAdvertiserList, .leAddDeviceToPeriodicAdvertiserList,
                                          .leAddDeviceToPeriodicAdvertiserList, .lePeriodicAdvertisingCreateSync])
        #expect(try await Self.next(1, on: one, radio: room.radio).map(\.raw) == [Self.payload(20, seed: 0).bytes])
        // The first is followed: only the second is left, and asked for directly.
        sent.withLock { $0.removeAll() }
        let two = try await central.synchronize(toAnyOf: [first, second], within: .seconds(5))
        #expect(two.source == second)
        #expect(sent.withLock { $0 } == [.lePeriodicAdvertisingCreateSync])
        #expect(try await Self.next(1, on: two, radio: room.radio).map(\.raw) == [Self.payload(20, seed: 1).bytes])
        // Both followed: nothing to look for.
        await #expect(throws: BLEError.periodicSyncFailed([first, second], .connectionAlreadyExists)) {
            _ = try await central.synchronize(toAnyOf: [first, second])
        }
        // Nothing found: the timeout names every advertiser looked for.
        try await one.terminate()
        try await two.terminate()
        let third = PeriodicAdvertiser(address: BluetoothAddress("C0:00:00:00:0F:0E")!, type: .random, sid: 4)
        await #expect(throws: BLEError.periodicSyncTimeout([nobody, third], within: .milliseconds(300))) {
            _ = try await central.synchronize(toAnyOf: [nobody, third], within: .milliseconds(300))
        }
        // The list is read once; more advertisers than it holds, none, or a bad SID are refused.
        let nine = (0..<9).map { PeriodicAdvertiser(address: BluetoothAddress(value: 0xC000_0000_0100 + UInt64($0)), type: .public, sid: 0) }
        for bad in [nine, [], [PeriodicAdvertiser(address: room.addresses[0], type: .public, sid: 16), first]] {
            await #expect { _ = try await central.synchronize(toAnyOf: bad) } throws: { error in
                if case BLEError.invalidArgument = error { return true }
                return false
            }
        }
        #expect(sent.withLock { $0.filter { $0 == .leReadPeriodicAdvertiserListSize }.count } == 0)
        // Found after all: the list's entries were replaced, not added to.
        sent.withLock { $0.removeAll() }
        let again = try await central.synchronize(toAnyOf: [second, first], within: .seconds(5))
        #expect([first, second].contains(again.source))
        #expect(sent.withLock { $0 } == [.leClearPeriodicAdvertiserList, .leAddDeviceToPeriodicAdvertiserList,
                                          .leAddDeviceToPeriodicAdvertiserList, .lePeriodicAdvertisingCreateSync])
    }

    /// A set whose short data went out as legacy PDUs, ended by its event limit: its
    /// train starts anyway (the set is set up again with extended PDUs, not enabled;
    /// the controller refused periodic parameters on the legacy set before). Scanners
    /// find the train once the set advertises again.
    @Test func aTrainStartsOnASetALimitEnded() async throws {
        let room = try await Room(peripherals: 1, extendedAdvertising: true)
        defer { Task { await room.close() } }
        let p = room.peripherals[0].peripheral
        let events = p.events()
        let burst = try await p.addAdvertisingSet(AdvertisingSetsTests.named("burst"), maximumEvents: 2)
        let ended = Task {
            await firstElement(events.filter { if case .advertisingEnded = $0 { return true } else { return false } }, within: .seconds(5))
        }
        for _ in 0..<3 { await room.radio.tick() }
        #expect(await ended.value != nil)
        try await p.startPeriodicAdvertising(on: burst, data: Self.payload(30), intervalMilliseconds: 50)
        #expect(try await Self.periodicResult(room.central, from: room.addresses[0]) == nil)
        try await p.updateAdvertisingSet(burst, data: AdvertisingSetsTests.named("burst"))
        let result = try #require(try await Self.periodicResult(room.central, from: room.addresses[0]))
        let sync = try await room.central.central.synchronize(to: result, within: .seconds(5))
        #expect(try await Self.next(1, on: sync, radio: room.radio).map(\.raw) == [Self.payload(30).bytes])
    }

    @Test func periodicAdvertisingNeedsASetThatIsNeitherConnectableNorScannable() async throws {
        let room = try await Room(peripherals: 1, extendedAdvertising: true)
        defer { Task { await room.close() } }
        let p = room.peripherals[0].peripheral
        func refused(_ body: () async throws -> Void) async -> Bool {
            do { try await body() } catch BLEError.invalidArgument { return true } catch { Issue.record("\(error)") }
            return false
        }
        let door = try await p.addAdvertisingSet(AdvertisingSetsTests.named("door"), connectable: true)
        #expect(await refused { try await p.startPeriodicAdvertising(on: door, data: Self.payload(10)) })
        let scannable = try await p.addAdvertisingSet(AdvertisingSetsTests.named("s"), scanResponse: AdvertisingSetsTests.named("more"))
        #expect(await refused { try await p.startPeriodicAdvertising(on: scannable, data: Self.payload(10)) })
        let beacon = try await p.addAdvertisingSet(AdvertisingSetsTests.named("beacon"))
        #expect(await refused { try await p.startPeriodicAdvertising(on: beacon, data: Self.payload(10), intervalMilliseconds: 5) })
        try await p.startPeriodicAdvertising(on: beacon, data: Self.payload(10))
        // The set keeps its train through an update, which may not make it connectable.
        #expect(await refused { try await p.updateAdvertisingSet(beacon, data: AdvertisingSetsTests.named("beacon"), connectable: true) })
        try await p.updateAdvertisingSet(beacon, data: AdvertisingSetsTests.named("beacon-2"))
        let result = try #require(try await Self.periodicResult(room.central, from: room.addresses[0]))
        #expect(result.advertisement.data.localName == "beacon-2")
        try await p.removeAdvertisingSet(door)
        await #expect(throws: BLEError.unknownAdvertisingSet(door.handle)) {
            try await p.startPeriodicAdvertising(on: door, data: Self.payload(10))
        }
    }

    @Test func aLegacyDrivenControllerHasNoPeriodicAdvertising() async throws {
        let room = try await Room(peripherals: 0)
        defer { Task { await room.close() } }
        await #expect { try await room.central.central.synchronize(to: BluetoothAddress("C0:00:00:00:0F:0F")!, type: .public, sid: 0) } throws: { error in
            if case BLEError.notSupported = error { return true }
            return false
        }
    }

    /// On Rootcanal: a train of 400 octets reaches the central whole (Rootcanal's
    /// scanner sends it in pieces of 247), and terminating the sync ends the stream.
    /// Rootcanal 1.10 handles periodic packets only while its scanner is on (a real
    /// controller follows a train without scanning), so the test keeps a scan running.
    @Test func onRootcanalACentralFollowsPeriodicAdvertising() async throws {
        guard let rc = try await Bench.rootcanalHosts(2) else { return }
        defer { rc.stop() }
        let (p, c, pAddress) = (rc.hosts[0], rc.hosts[1], rc.addresses[0])
        let beacon = try await p.peripheral.addAdvertisingSet(AdvertisingSetsTests.named("rc-beacon"), intervalMilliseconds: 50)
        let data = Self.payload(400)
        try await p.peripheral.startPeriodicAdvertising(on: beacon, data: data, intervalMilliseconds: 30)
        let result = try #require(try await c.central.scan(for: .milliseconds(500)).first {
            $0.address == pAddress && $0.advertisement.data.localName == "rc-beacon"
        })
        let scan = try await c.central.scan(filter: ScanFilter(addresses: [pAddress]), active: false, capacity: 1)
        let sync = try await c.central.synchronize(to: result.address, type: result.addressType, sid: try #require(result.advertisement.advertisingSID))
        var got: [PeriodicAdvertisement] = []
        for _ in 0..<3 { if let a = await firstElement(sync.advertisements, within: .seconds(5)) { got.append(a) } }
        #expect(got.map(\.raw) == Array(repeating: data.bytes, count: 3))
        try await sync.terminate()
        #expect(await ends(sync.advertisements, within: .seconds(1)))
        // Through Rootcanal's Periodic Advertiser List: whichever listed train it finds.
        let nobody = PeriodicAdvertiser(address: BluetoothAddress("C0:00:00:00:0F:0F")!, type: .public, sid: 2)
        let any = try await c.central.synchronize(toAnyOf: [nobody, try #require(PeriodicAdvertiser(result))])
        #expect(any.source == PeriodicAdvertiser(result))
        #expect(await firstElement(any.advertisements, within: .seconds(5))?.raw == data.bytes)
        try await any.terminate()
        withExtendedLifetime(scan) {}
    }
}
