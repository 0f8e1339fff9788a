// `Central.connect(toAnyOf:)`: the host fills the controller's Filter Accept List with
// the peers not connected already (LE Clear Filter Accept List, then one LE Add Device
// To Filter Accept List each) and sends LE (Extended) Create Connection with
// Initiator_Filter_Policy 1; the controller connects to whichever advertises first, at
// once or when it starts. On the virtual radio (both command sets), Rootcanal and
// against Bumble.

import BLE
import BLETesting
import HCI
import Synchronization
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct ConnectAnyTests {
    static let nobody = DeviceAddress(BluetoothAddress("C0:00:00:00:0F:0F")!)

    @Test func aCentralConnectsToWhicheverPeerAdvertisesFirst() async throws {
        // The central's list and connect commands, with a connect's Initiator_Filter_Policy.
        let sent = Mutex<[String]>([])
        let (creates, created) = AsyncStream<Void>.makeStream()
        let watched: Set<HCIOpcode> = [.leReadFilterAcceptListSize, .leClearFilterAcceptList, .leAddDeviceToFilterAcceptList]
        let room = try await Room(peripherals: 2, extendedAdvertising: true, watchCentral: { r in
            guard case let .command(op, p)? = r.packet else { return }
            if watched.contains(op) { sent.withLock { $0.append("\(op)") } }
            if op == .leExtendedCreateConnection {
                sent.withLock { $0.append("create policy \(p.first ?? 0xFF)") }
                created.yield()
            }
        })
        defer { Task { await room.close() } }
        let central = room.central.central
        let (a0, a1) = (DeviceAddress(room.addresses[0]), DeviceAddress(room.addresses[1]))
        let read = "\(HCIOpcode.leReadFilterAcceptListSize)", clear = "\(HCIOpcode.leClearFilterAcceptList)"
        let add = "\(HCIOpcode.leAddDeviceToFilterAcceptList)"
        // Only the second advertises: the controller connects to it.
        try await room.peripherals[1].peripheral.startAdvertising(AdvertisingSetsTests.named("second"))
        let second = try await central.connect(toAnyOf: [Self.nobody, a0, a1, a0], within: .seconds(5))
        #expect(second.connection.peer == a1.address)
        #expect(sent.withLock { $0 } == [read, clear, add, add, add, "create policy 1"])
        // The second is connected: left out. The first starts advertising while the
        // connect is pending, and is connected to then.
        sent.withLock { $0.removeAll() }
        let later = Task { try await central.connect(toAnyOf: [Self.nobody, a0, a1], within: .seconds(5)) }
        #expect(await firstElement(creates, within: .seconds(5)) != nil)
        try await room.peripherals[0].peripheral.startAdvertising(AdvertisingSetsTests.named("first"))
        let first = try await later.value
        #expect(first.connection.peer == a0.address)
        #expect(sent.withLock { $0 } == [clear, add, add, "create policy 1"])
        // Both connected: nothing to connect to.
        await #expect { _ = try await central.connect(toAnyOf: [a0, a1]) } throws: { e in
            if case BLEError.invalidArgument = e { return true } else { return false }
        }
        // Nobody advertising: the timeout names them all, and the controller stops trying.
        let other = DeviceAddress(BluetoothAddress("C0:00:00:00:0F:0E")!, type: .random)
        await #expect(throws: BLEError.noConnection(toAnyOf: [Self.nobody, other], within: .milliseconds(200))) {
            _ = try await central.connect(toAnyOf: [Self.nobody, other], within: .milliseconds(200))
        }
        // More peers than the list holds (16 here), or none: refused before anything goes out.
        sent.withLock { $0.removeAll() }
        let many = (0..<17).map { DeviceAddress(BluetoothAddress(value: 0xC000_0000_0200 + UInt64($0))) }
        for bad in [many, []] {
            await #expect { _ = try await central.connect(toAnyOf: bad) } throws: { e in
                if case BLEError.invalidArgument = e { return true } else { return false }
            }
        }
        #expect(sent.withLock { $0 }.allSatisfy { $0 != add && !$0.hasPrefix("create") })
        try await first.disconnect()
        try await second.disconnect()
    }

    /// A controller driven with the legacy commands: LE Create Connection through the list.
    @Test func theLegacyCommandsConnectThroughTheListToo() async throws {
        let room = try await Room(peripherals: 2)
        defer { Task { await room.close() } }
        try await room.peripherals[0].peripheral.startAdvertising(AdvertisingSetsTests.named("only"))
        let r = try await room.central.central.connect(toAnyOf: [Self.nobody, DeviceAddress(room.addresses[0]), DeviceAddress(room.addresses[1])],
                                                       within: .seconds(5))
        #expect(r.connection.peer == room.addresses[0])
        #expect(try await r.read(handle: 0x0003).isEmpty == false)
    }

    /// On Rootcanal: of two hosts advertising and one address nobody has, the central
    /// connects to one of the two through Rootcanal's Filter Accept List, then to the
    /// other.
    @Test func onRootcanalACentralConnectsToAnyOfSeveral() async throws {
        guard let rc = try await Bench.rootcanalHosts(3) else { return }
        defer { rc.stop() }
        let (p1, p2, c) = (rc.hosts[0], rc.hosts[1], rc.hosts[2])
        let (a1, a2) = (rc.addresses[0], rc.addresses[1])
        try await p1.peripheral.startAdvertising(AdvertisingSetsTests.named("rc-one"))
        try await p2.peripheral.startAdvertising(AdvertisingSetsTests.named("rc-two"))
        let peers = [Self.nobody, DeviceAddress(a1), DeviceAddress(a2)]
        let one = try await c.central.connect(toAnyOf: peers, within: .seconds(10))
        let two = try await c.central.connect(toAnyOf: peers, within: .seconds(10))
        #expect(Set([one.connection.peer, two.connection.peer]) == [a1, a2])
        #expect(try await one.read(handle: 0x0003).isEmpty == false)
        #expect(try await two.read(handle: 0x0003).isEmpty == false)
    }

    /// An attempt right after one that timed out: the first's LE Create Connection
    /// Cancel ends it with LE Connection Complete (Unknown Connection Identifier), which
    /// is not the second's end (before, the second failed with it), with both command sets.
    @Test(arguments: [false, true])
    func theCancelOfATimedOutAttemptDoesNotEndTheNext(extended: Bool) async throws {
        let room = try await Room(peripherals: 1, extendedAdvertising: extended)
        defer { Task { await room.close() } }
        try await room.peripherals[0].peripheral.startAdvertising(AdvertisingSetsTests.named("next"))
        await #expect(throws: BLEError.connectionTimeout(Self.nobody.address, within: .milliseconds(200))) {
            try await room.central.central.connect(to: Self.nobody.address, within: .milliseconds(200))
        }
        let remote = try await room.central.central.connect(to: room.addresses[0], within: .seconds(5))
        #expect(remote.connection.peer == room.addresses[0])
    }
}
