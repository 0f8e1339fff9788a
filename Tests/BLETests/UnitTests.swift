// The seed's unit tests UT01–UT13 on the facade: managing connected and known
// peripherals, wrapping remote peripherals, and adding, publishing and removing
// services (with included secondary services), characteristics and descriptors.
// Publication is checked from the other side: a connected central discovers it.

import BLE
import BLETesting
import GAP
import GATT
import HCI
import NIOCore
import Snoop
import Testing

/// A radio with one central and `count` peripherals, each publishing the test service and advertising.
struct Room {
    let radio: VirtualRadio
    let central: BluetoothHost
    let peripherals: [BluetoothHost]
    let addresses: [BluetoothAddress]
    /// The central's controller, and each peripheral's, in `peripherals`' order.
    let centralController: VirtualController
    let peripheralControllers: [VirtualController]

    /// `radio`: by default one on NIO's shared loops. `watchCentral` sees each packet
    /// between the central's host and its controller, in order per direction.
    /// `extendedAdvertising`: every controller has the Bluetooth 5 advertising commands.
    /// `hostLoops`: the loops the hosts run on (the central on the first, peripheral i
    /// on the (i + 1)th, round the list); by default the radio's.
    init(peripherals count: Int, enhancedATT: Bool = false, radio: VirtualRadio = VirtualRadio(), extendedAdvertising: Bool = false,
         hostLoops: [any EventLoop] = [], watchCentral: (@Sendable (TraceRecord) -> Void)? = nil) async throws {
        self.radio = radio
        let hostLoop = { (i: Int) in hostLoops.isEmpty ? nil : hostLoops[i % hostLoops.count] }
        let controller = await radio.makeController(address: BluetoothAddress("C0:00:00:00:00:01")!, extendedAdvertising: extendedAdvertising,
                                                    hostLoop: hostLoop(0))
        centralController = controller
        central = BluetoothHost(transport: watchCentral.map { RecordingTransport(wrapping: controller, sink: $0) } ?? controller, logger: Bench.logger)
        try await central.start()
        var ps: [BluetoothHost] = [], addrs: [BluetoothAddress] = [], controllers: [VirtualController] = []
        for i in 0..<count {
            let a = BluetoothAddress("C0:00:00:00:01:0\(i)")!
            let c = await radio.makeController(address: a, extendedAdvertising: extendedAdvertising, hostLoop: hostLoop(i + 1))
            let h = BluetoothHost(transport: c, logger: Bench.logger, enhancedATT: enhancedATT)
            try await h.start()
            ps.append(h)
            addrs.append(a)
            controllers.append(c)
        }
        peripherals = ps
        addresses = addrs
        peripheralControllers = controllers
    }

    func close() async {
        await central.close()
        for p in peripherals { await p.close() }
    }
}

/// One central connected to one peripheral whose services the test edits.
struct Pair {
    let room: Room
    var server: BluetoothHost { room.peripherals[0] }
    let remote: RemotePeripheral

    init(radio: VirtualRadio = VirtualRadio(), hostLoops: [any EventLoop] = []) async throws {
        room = try await Room(peripherals: 1, radio: radio, hostLoops: hostLoops)
        var ad = AdvertisingData()
        ad.localName = "UT"
        try await room.peripherals[0].peripheral.startAdvertising(ad)
        remote = try await room.central.central.connect(to: room.addresses[0], within: .seconds(5))
    }

    /// The services the central finds now (primary services, by UUID).
    func remoteServices() async throws -> [RemoteService] { try await remote.discoverServices(refresh: true) }
}

let uuidA = BluetoothUUID("0000AAAA-0000-1000-8000-00805F9B34FB")!
let uuidB = BluetoothUUID("0000BBBB-0000-1000-8000-00805F9B34FB")!
let uuidC = BluetoothUUID("0000CCCC-0000-1000-8000-00805F9B34FB")!

@Suite(.timeLimit(.minutes(3))) struct UnitTests {
    @Test("UT01 manage connected peripherals") func ut01Connected() async throws {
        let room = try await Room(peripherals: 3)
        defer { Task { await room.close() } }
        for p in room.peripherals { try await p.peripheral.startAdvertising(AdvertisingData()) }
        var remotes: [RemotePeripheral] = []
        for a in room.addresses { remotes.append(try await room.central.central.connect(to: a, within: .seconds(5))) }
        #expect(await room.central.central.connectedPeripherals.map(\.address) == room.addresses)
        #expect(await room.central.connections.count == 3)
        let peripheralSide = room.peripherals[1].connectionEvents()
        try await remotes[1].disconnect()
        #expect(await room.central.central.connectedPeripherals.map(\.address) == [room.addresses[0], room.addresses[2]])
        // The peripheral side ended too (its host runs on its own loop: wait for it), with the reason the central gave.
        for await e in peripheralSide {
            if case let .disconnected(_, reason) = e { #expect(reason == .remoteUserTerminatedConnection); break }
        }
        #expect(await room.peripherals[1].connections.isEmpty)
        // Both roles at once: peripheral 0 (connected to the central) connects as central to peripheral 2.
        let both = try await room.peripherals[0].central.connect(to: room.addresses[2], within: .seconds(5))
        let roles = Set(await room.peripherals[0].connections.map(\.role))
        #expect(roles == [.central, .peripheral])
        try await both.disconnect()
    }

    @Test("UT02 manage known peripherals") func ut02Known() async throws {
        let room = try await Room(peripherals: 2)
        defer { Task { await room.close() } }
        for (i, p) in room.peripherals.enumerated() {
            var ad = AdvertisingData()
            ad.localName = "Known-\(i)"
            try await p.peripheral.startAdvertising(ad)
        }
        let results = try await room.central.central.scan()
        await room.radio.tick()
        _ = await collect(results, count: 4, within: .seconds(5))
        let known = await room.central.central.knownPeripherals
        #expect(Set(known.map(\.address)) == Set(room.addresses))
        #expect(Set(known.compactMap(\.name)) == ["Known-0", "Known-1"])
        // Kept across connection and disconnection, with the connection counted.
        let r = try await room.central.central.connect(to: room.addresses[0], within: .seconds(5))
        #expect(await room.central.central.knownPeripheral(room.addresses[0])?.connection != nil)
        try await r.disconnect()
        let after = try #require(await room.central.central.knownPeripheral(room.addresses[0]))
        #expect(after.connection == nil && after.connectionCount == 1 && after.name == "Known-0")
    }

    @Test("UT03 wrap remote peripherals") func ut03Wrap() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        #expect(pair.remote.address == pair.room.addresses[0])
        #expect(pair.remote.connection.role == .central)
        // Connecting again to a connected peripheral gives the same object.
        let again = try await pair.room.central.central.connect(to: pair.room.addresses[0])
        #expect(again === pair.remote)
        #expect(await pair.remote.mtu == 517)
    }

    @Test("UT04 add a service") func ut04AddService() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        let s = Service(uuid: uuidA, characteristics: [Characteristic(uuid: uuidB, properties: [.read], value: [7])])
        try await pair.server.peripheral.add(s)
        #expect(await pair.server.peripheral.services.contains(s))
        let found = try #require(try await pair.remoteServices().first { $0.uuid == uuidA })
        #expect(try await pair.remote.read(try #require(found.characteristic(uuidB))) == [7])
    }

    @Test("UT05 add a service including a secondary service") func ut05AddWithSecondary() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        let secondary = Service(uuid: uuidC, isPrimary: false, characteristics: [Characteristic(uuid: uuidB, properties: [.read], value: [1])])
        let primary = Service(uuid: uuidA, includedServices: [secondary])
        try await pair.server.peripheral.add(primary)
        #expect(Set(await pair.server.peripheral.services).isSuperset(of: [primary, secondary]))
        // The central finds the primary (not the secondary) and, through the include, the secondary.
        let services = try await pair.remoteServices()
        #expect(!services.contains { $0.uuid == uuidC })
        let p = try #require(services.first { $0.uuid == uuidA })
        let includes = try await pair.remote.includedServices(of: p)
        #expect(includes.map(\.uuid) == [uuidC])
        #expect(includes.first?.isPrimary == false)
        let c = try #require(includes.first?.characteristic(uuidB))
        #expect(try await pair.remote.read(c) == [1])
    }

    /// `includes()`: every include in the database, from one Read By Type: a secondary
    /// service included twice is discovered once, an included primary is the one
    /// `discoverServices()` found.
    @Test("every include of the database") func allIncludes() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        let secondary = Service(uuid: uuidC, isPrimary: false, characteristics: [Characteristic(uuid: uuidB, properties: [.read], value: [1])])
        let plain = Service(uuid: uuidB)
        try await pair.server.peripheral.add(plain)
        let first = Service(uuid: uuidA, includedServices: [secondary, plain])
        try await pair.server.peripheral.add(first)
        try await pair.server.peripheral.add(Service(uuid: BluetoothUUID(0xFFE0), includedServices: [secondary]))
        let services = try await pair.remoteServices()
        let includes = try await pair.remote.includes()
        #expect(includes.map(\.service.uuid) == [uuidC, uuidB, uuidC])
        #expect(includes[0].service == includes[2].service && includes[0].service.isPrimary == false)
        #expect(includes[0].service.characteristic(uuidB) != nil)
        #expect(services.contains(includes[1].service), "the primary as discovered")
        // Each include lies in the service that holds it.
        let holders = includes.map { i in services.first { ($0.startHandle...$0.endHandle).contains(i.handle) }?.uuid }
        #expect(holders == [uuidA, uuidA, BluetoothUUID(0xFFE0)])
        #expect(try await pair.remote.read(try #require(includes[2].service.characteristic(uuidB))) == [1])
    }

    /// Subscriptions let go just before a disconnection: each CCCD write is queued on the
    /// bearer (one request outstanding at a time), and `disconnect()` sends them all,
    /// each after the answer before it, before the Disconnect. It used to send the first
    /// only: the peer kept the others enabled (for a bonded peer, into the next link).
    @Test("subscriptions let go reach the peer before the disconnection") func unsubscribeBeforeDisconnect() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        let chars = [uuidB, uuidC, BluetoothUUID(0xFFE1)].map { Characteristic(uuid: $0, properties: [.notify]) }
        try await pair.server.peripheral.add(Service(uuid: uuidA, characteristics: chars))
        let events = pair.server.peripheral.events()
        let remote = try #require(try await pair.remoteServices().first { $0.uuid == uuidA })
        var readers: [Task<Void, Never>] = []
        for c in remote.characteristics {
            let values = try await pair.remote.subscribe(to: c)
            readers.append(Task { do { for try await _ in values {} } catch {} })
        }
        #expect(await collect(events, count: 3, within: .seconds(5)).count == 3)
        for r in readers { r.cancel() }
        for r in readers { await r.value }
        _ = try await pair.remote.disconnect()
        let off = await collect(events, count: 3, within: .seconds(5))
        let written = off.compactMap { e -> Characteristic? in
            guard case let .subscriptionChanged(c, _, notify, indicate) = e, !notify, !indicate else { return nil }
            return c
        }
        #expect(Set(written.map(ObjectIdentifier.init)) == Set(chars.map(ObjectIdentifier.init)), "\(off)")
    }

    @Test("UT06 remove a service") func ut06RemoveService() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        let s = Service(uuid: uuidA)
        try await pair.server.peripheral.add(s)
        let changes = try #require(try await pair.remote.serviceChanges())
        try await pair.server.peripheral.remove(s)
        #expect(await collect(changes, count: 1, within: .seconds(5)).count == 1)
        #expect(try await !pair.remoteServices().contains { $0.uuid == uuidA })
        #expect(await !pair.server.peripheral.services.contains(s))
        await #expect(throws: BLEError.notPublished("service \(uuidA)")) { try await pair.server.peripheral.remove(s) }
    }

    @Test("UT07 remove a service including a secondary service") func ut07RemoveWithSecondary() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        let secondary = Service(uuid: uuidC, isPrimary: false)
        let primary = Service(uuid: uuidA, includedServices: [secondary])
        try await pair.server.peripheral.add(primary)
        // The secondary cannot go while the primary includes it.
        await #expect(throws: BLEError.self) { try await pair.server.peripheral.remove(secondary) }
        try await pair.server.peripheral.remove(primary)
        let left = await pair.server.peripheral.services
        #expect(!left.contains(primary) && !left.contains(secondary))
        // A secondary published on its own stays when an includer goes.
        let shared = Service(uuid: uuidC, isPrimary: false)
        try await pair.server.peripheral.add(shared)
        let includer = Service(uuid: uuidA, includedServices: [shared])
        try await pair.server.peripheral.add(includer)
        try await pair.server.peripheral.remove(includer)
        #expect(await pair.server.peripheral.services.contains(shared))
    }

    @Test("UT08 add a characteristic") func ut08AddCharacteristic() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        let c1 = Characteristic(uuid: uuidB, properties: [.read], value: [1])
        let s = Service(uuid: uuidA, characteristics: [c1])
        try await pair.server.peripheral.add(s)
        let c2 = Characteristic(uuid: uuidC, properties: [.read, .notify], value: [2])
        try await pair.server.peripheral.add(c2, to: s)
        #expect(try await pair.server.peripheral.characteristics(of: s) == [c1, c2])
        #expect(try await pair.server.peripheral.handles(of: c2).clientConfiguration != nil)
        // Not published: a characteristic of no service.
        await #expect(throws: BLEError.self) { try await pair.server.peripheral.notify(Characteristic(uuid: uuidC, properties: [.notify]), value: []) }
    }

    @Test("UT09 publish a characteristic") func ut09PublishCharacteristic() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        let s = Service(uuid: uuidA)
        try await pair.server.peripheral.add(s)
        let changes = try #require(try await pair.remote.serviceChanges())
        let c = Characteristic(uuid: uuidB, properties: [.read, .notify], value: Array("new".utf8))
        try await pair.server.peripheral.add(c, to: s)
        #expect(await collect(changes, count: 1, within: .seconds(5)).count == 1)
        let rc = try await pair.remote.characteristic(uuidB, in: uuidA)
        #expect(try await pair.remote.read(rc) == Array("new".utf8))
        // Published means usable: the central subscribes and gets a notification.
        let values = try await pair.remote.subscribe(to: rc)
        try await pair.server.peripheral.notify(c, value: [42])
        #expect(await collect(values, count: 1, within: .seconds(5)) == [[42]])
    }

    @Test("UT10 remove a characteristic") func ut10RemoveCharacteristic() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        let c1 = Characteristic(uuid: uuidB, properties: [.read]), c2 = Characteristic(uuid: uuidC, properties: [.read])
        let s = Service(uuid: uuidA, characteristics: [c1, c2])
        try await pair.server.peripheral.add(s)
        try await pair.server.peripheral.remove(c1)
        #expect(try await pair.server.peripheral.characteristics(of: s) == [c2])
        let found = try #require(try await pair.remoteServices().first { $0.uuid == uuidA })
        #expect(found.characteristics.map(\.uuid) == [uuidC])
        await #expect(throws: BLEError.notPublished("characteristic \(uuidB)")) { try await pair.server.peripheral.remove(c1) }
    }

    @Test("UT11 add a descriptor") func ut11AddDescriptor() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        let c = Characteristic(uuid: uuidB, properties: [.read], descriptors: [.userDescription("first")])
        try await pair.server.peripheral.add(Service(uuid: uuidA, characteristics: [c]))
        let d = Descriptor(uuid: GATTType.presentationFormat, value: [0x04, 0, 0, 0x27, 1, 0, 0])
        try await pair.server.peripheral.add(d, to: c)
        #expect(try await pair.server.peripheral.descriptors(of: c).map(\.uuid) == [GATTType.userDescription, GATTType.presentationFormat])
    }

    @Test("UT12 publish a descriptor") func ut12PublishDescriptor() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        let c = Characteristic(uuid: uuidB, properties: [.read, .indicate])
        try await pair.server.peripheral.add(Service(uuid: uuidA, characteristics: [c]))
        let d = Descriptor(uuid: GATTType.userDescription, value: Array("added live".utf8))
        try await pair.server.peripheral.add(d, to: c)
        let rc = try await pair.remote.characteristic(uuidB, in: uuidA)
        #expect(rc.descriptors.map(\.uuid) == [GATTType.clientCharacteristicConfiguration, GATTType.userDescription])
        #expect(try await pair.remote.read(try #require(rc.descriptors.last)) == Array("added live".utf8))
    }

    @Test("UT13 remove a descriptor") func ut13RemoveDescriptor() async throws {
        let pair = try await Pair()
        defer { Task { await pair.room.close() } }
        let d1 = Descriptor.userDescription("one"), d2 = Descriptor(uuid: GATTType.presentationFormat, value: [0x04, 0, 0, 0x27, 1, 0, 0])
        let c = Characteristic(uuid: uuidB, properties: [.read], descriptors: [d1, d2])
        try await pair.server.peripheral.add(Service(uuid: uuidA, characteristics: [c]))
        try await pair.server.peripheral.remove(d1)
        #expect(try await pair.server.peripheral.descriptors(of: c) == [d2])
        let rc = try await pair.remote.characteristic(uuidB, in: uuidA)
        #expect(rc.descriptors.map(\.uuid) == [GATTType.presentationFormat])
        await #expect(throws: BLEError.notPublished("descriptor \(GATTType.userDescription)")) { try await pair.server.peripheral.remove(d1) }
    }
}
