// Which advertisement an LE Advertising Set Terminated ended. The controller's order
// says: an end that came before the controller answered the command that enabled
// the set again is the earlier advertisement's, one that came after is the new
// one's. The task that sent the command may resume before or after either, so the
// host takes the events and answers as they arrive (`BluetoothHost.followController`),
// not by which of its tasks ran first.

@testable import BLE
import BLETesting
import GAP
@testable import HCI
import NIOCore
import Synchronization
import Testing

extension Interposer {
    enum Moment { case beforeFirst, beforeEnable, afterEnable }

    /// Whether something armed is still to come.
    final class Pending: Sendable {
        private let value = Mutex(true)
        var armed: Bool { value.withLock { $0 } }
        /// True the first time only.
        func take() -> Bool { value.withLock { v in defer { v = false }; return v } }
    }

    /// The first LE Set Extended Advertising Enable naming `set` that the host sends
    /// (`.beforeEnable`, `.afterEnable`: the first that enables it) is preceded (followed,
    /// `.afterEnable`), on the way back, by `events` (by default an LE Advertising Set
    /// Terminated for the set, Advertising Timeout).
    @discardableResult
    func arm(_ set: UInt8, _ moment: Moment = .beforeFirst, events: [HCIEvent]? = nil) -> Pending {
        let end = HCIEvent.le(.advertisingSetTerminated(LEAdvertisingSetTerminated(status: .advertisingTimeout, advertisingHandle: set, connectionHandle: 0)))
        let pending = Pending()
        let events = events ?? [end]
        intercept { packet in
            guard case let .command(op, p) = packet, op == .leSetExtendedAdvertisingEnable else { return nil }
            // Enable, Num_Sets, then each set's Advertising_Handle, Duration (2), Max_Extended_Advertising_Events.
            let names = stride(from: 2, to: p.count, by: 4).map { p[$0] }
            guard names.contains(set), moment == .beforeFirst || p.first == 1, pending.take() else { return nil }
            return moment == .afterEnable ? Interception(after: events) : Interception(before: events)
        }
        return pending
    }

    /// The parameters of every LE Set Extended Advertising Enable passed on.
    var enables: [[UInt8]] { commands.filter { $0.0 == .leSetExtendedAdvertisingEnable }.map(\.1) }
}

@Suite(.timeLimit(.minutes(3))) struct AdvertisingEndAttributionTests {
    /// A peripheral host whose controller is wrapped in an `Interposer`, and a
    /// central host that listens.
    struct Rig {
        let radio = VirtualRadio()
        let transport: Interposer
        let peripheral: BluetoothHost
        let central: BluetoothHost

        /// `privacy`: the peripheral advertises from private addresses.
        init(privacy: Bool = false) async throws {
            transport = Interposer(await radio.makeController(address: BluetoothAddress("C0:00:00:00:02:01")!, extendedAdvertising: true))
            peripheral = BluetoothHost(transport: transport, logger: Bench.logger,
                                       security: privacy ? SecurityOptions(random: .seeded(73), privacy: PrivacyOptions()) : SecurityOptions())
            try await peripheral.start()
            central = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:02:02")!, extendedAdvertising: true),
                                    logger: Bench.logger)
            try await central.start()
        }

        func close() async {
            await peripheral.close()
            await central.close()
        }

        func ends(_ events: BufferedStream<PeripheralEvent>, within limit: Duration) async -> PeripheralEvent? {
            await firstElement(events.filter {
                if case .advertisingEnded = $0 { return true } else { return false }
            }, within: limit)
        }

        /// The first `.advertisingConnected` on `events`, within 5 s.
        func announced(_ events: BufferedStream<PeripheralEvent>) async -> PeripheralEvent? {
            await firstElement(events.filter {
                if case .advertisingConnected = $0 { return true } else { return false }
            }, within: .seconds(5))
        }

        /// A central's link 0x0777 made by `set`, as the controller reports it: LE
        /// Connection Complete, then LE Advertising Set Terminated.
        static func link(madeBy set: AdvertisingSet) -> [HCIEvent] {
            [.le(.connectionComplete(LEConnectionComplete(connectionHandle: 0x0777, role: .peripheral, peerAddressType: .public,
                                                          peerAddress: BluetoothAddress("C0:00:00:00:02:09")!))),
             .le(.advertisingSetTerminated(LEAdvertisingSetTerminated(advertisingHandle: set.handle, connectionHandle: 0x0777)))]
        }
    }

    @Test func anEndBeforeTheChangeIsTheReplacedAdvertisements() async throws {
        let rig = try await Rig()
        defer { Task { await rig.close() } }
        let me = BluetoothAddress("C0:00:00:00:02:01")!
        let door = try await rig.peripheral.peripheral.addAdvertisingSet(AdvertisingSetsTests.named("door"), duration: .seconds(60))
        let events = rig.peripheral.peripheral.events()
        // The set's first enabling ends (its duration, as the controller says) just
        // before the controller takes the change's first command.
        let pending = rig.transport.arm(door.handle)
        try await rig.peripheral.peripheral.updateAdvertisingSet(door, data: AdvertisingSetsTests.named("door 2"), duration: .seconds(60))
        #expect(!pending.armed, "the end was not reported")
        // That end was the replaced advertisement's: the new one stays on air, and
        // the application hears of no end.
        // (The host took the end as it came, on the loop, before the change's answers:
        // had it reported it, it would be in the stream's buffer.)
        #expect(AdvertisingLimitsTests.ends(events.takeBuffered()).isEmpty)
        #expect(try await AdvertisingSetsTests.heard(by: rig.central)[me] == ["door 2"])
        // Enable = 1, one set, this one: the change's enable is the last command.
        #expect(rig.transport.enables.last?.prefix(3) == [0x01, 0x01, door.handle], "\(rig.transport.enables)")
        // An end of the new advertisement is reported.
        let end = HCIEvent.le(.advertisingSetTerminated(LEAdvertisingSetTerminated(status: .advertisingTimeout, advertisingHandle: door.handle, connectionHandle: 0)))
        try await rig.transport.inject([end])
        guard case let .advertisingEnded(set, reason)? = await rig.ends(events, within: .seconds(5)) else {
            Issue.record("the new advertisement's end was not reported")
            return
        }
        #expect(set == door && reason == .durationElapsed)
    }

    /// The same end, just before the host re-enables the set from its next private
    /// address: the set goes on, from the new address, with what is left of its duration.
    @Test func anEndDuringANewPrivateAddressIsTheReplacedAdvertisements() async throws {
        let rig = try await Rig(privacy: true)
        defer { Task { await rig.close() } }
        let door = try await rig.peripheral.peripheral.addAdvertisingSet(AdvertisingSetsTests.named("door"), duration: .seconds(60))
        let events = rig.peripheral.peripheral.events()
        let heardBefore = try await AdvertisingSetsTests.heard(by: rig.central)
        let pending = rig.transport.arm(door.handle)
        await rig.peripheral.rotatePrivateAddress()
        #expect(!pending.armed, "the end was not reported")
        #expect(AdvertisingLimitsTests.ends(events.takeBuffered()).isEmpty)
        #expect(rig.transport.enables.last?.prefix(3) == [0x01, 0x01, door.handle], "\(rig.transport.enables)")
        let heardAfter = try await AdvertisingSetsTests.heard(by: rig.central)
        #expect(heardAfter.values.contains(["door"]) && Set(heardAfter.keys).isDisjoint(with: heardBefore.keys), "\(heardBefore) then \(heardAfter)")
    }

    @Test func anEndAfterTheChangesEnableIsTheNewAdvertisements() async throws {
        let rig = try await Rig()
        defer { Task { await rig.close() } }
        let door = try await rig.peripheral.peripheral.addAdvertisingSet(AdvertisingSetsTests.named("door"), duration: .seconds(60))
        let events = rig.peripheral.peripheral.events()
        // The new advertisement ends as soon as the controller has enabled it, while
        // the change may still be under way in the host.
        let pending = rig.transport.arm(door.handle, .afterEnable)
        try await rig.peripheral.peripheral.updateAdvertisingSet(door, data: AdvertisingSetsTests.named("door 2"), duration: .seconds(60))
        #expect(!pending.armed, "the end was not reported")
        // Reported by the time the change returns: the host takes each controller event
        // as it comes, and the change's last answer came after this end.
        let ends = AdvertisingLimitsTests.ends(events.takeBuffered())
        #expect(ends.count == 1 && ends.first?.0 == door && ends.first?.1 == .durationElapsed, "\(ends)")
        // The host sends nothing more: the controller has the set off air already.
        #expect(rig.transport.enables.last?.prefix(3) == [0x01, 0x01, door.handle], "\(rig.transport.enables)")
    }

    /// A central connected to the set's earlier advertisement just before the controller
    /// took the change's enable: the controller advertises the set again after that
    /// link, so the link does not hold it off air. A later change goes to the
    /// controller at once (held, it would wait for that link's end), and the link's
    /// end starts no advertising again (set 0's, which a link no set names would).
    @Test func aLinkToTheReplacedAdvertisementDoesNotHoldTheNewOne() async throws {
        let rig = try await Rig()
        defer { Task { await rig.close() } }
        let me = BluetoothAddress("C0:00:00:00:02:01")!
        try await rig.peripheral.peripheral.startAdvertising(AdvertisingSetsTests.named("main"))
        let door = try await rig.peripheral.peripheral.addAdvertisingSet(AdvertisingSetsTests.named("door"), connectable: true)
        let events = rig.peripheral.peripheral.events()
        let pending = rig.transport.arm(door.handle, .beforeEnable, events: Rig.link(madeBy: door))
        try await rig.peripheral.peripheral.updateAdvertisingSet(door, data: AdvertisingSetsTests.named("door 2"), connectable: true)
        #expect(!pending.armed, "the link was not reported")
        let connected = await rig.announced(events)
        guard case let .advertisingConnected(set, central)? = connected else {
            Issue.record("the link was not announced")
            return
        }
        #expect(set == door && central.handle == 0x0777)
        #expect(await rig.peripheral.advertisingLinkForTest(door.handle) == nil)
        try await rig.peripheral.peripheral.updateAdvertisingSet(door, data: AdvertisingSetsTests.named("door 3"), connectable: true)
        #expect(try await AdvertisingSetsTests.heard(by: rig.central)[me] == ["main", "door 3"])
        let before = rig.transport.enables.count
        let links = rig.peripheral.connectionEvents()
        try await rig.transport.inject([.disconnectionComplete(DisconnectionComplete(connectionHandle: 0x0777, reason: .remoteUserTerminatedConnection))])
        #expect(await firstElement(links.filter {
            if case .disconnected = $0 { return true } else { return false }
        }, within: .seconds(5)) != nil)
        await rig.peripheral.quiesce()
        #expect(rig.transport.enables.count == before, "\(rig.transport.enables.suffix(from: before))")
    }

    /// The same link made just after the change's enable was answered: it was made to
    /// the new advertisement, which the controller stopped for it, so it holds the set
    /// until it ends.
    @Test func aLinkToTheNewAdvertisementHoldsIt() async throws {
        let rig = try await Rig()
        defer { Task { await rig.close() } }
        let door = try await rig.peripheral.peripheral.addAdvertisingSet(AdvertisingSetsTests.named("door"), connectable: true)
        let events = rig.peripheral.peripheral.events()
        let pending = rig.transport.arm(door.handle, .afterEnable, events: Rig.link(madeBy: door))
        try await rig.peripheral.peripheral.updateAdvertisingSet(door, data: AdvertisingSetsTests.named("door 2"), connectable: true)
        #expect(!pending.armed, "the link was not reported")
        let connected = await rig.announced(events)
        #expect(connected != nil, "the link was not announced")
        #expect(await rig.peripheral.advertisingLinkForTest(door.handle) == 0x0777)
    }
}
