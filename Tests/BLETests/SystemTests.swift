// The seed's system tests ST01–ST11, automated: each runs on the virtual radio and
// on Rootcanal, through the facade only, with our stack in both roles.

import BLE
import BLETesting
import GAP
import GATT
import HCI
import Testing

/// The peripheral every system test talks to.
struct TestPeripheral {
    static let serviceUUID = BluetoothUUID("5A1E0001-8F3C-4E8A-9B2D-0C1E2F3A4B5C")!
    static let name = "ST-Peripheral"
    let service: Service
    let text = Characteristic(uuid: BluetoothUUID("5A1E0002-8F3C-4E8A-9B2D-0C1E2F3A4B5C")!, properties: [.read],
                              value: Array("hello from the peripheral".utf8), descriptors: [.userDescription("Greeting")])
    let long = Characteristic(uuid: BluetoothUUID("5A1E0003-8F3C-4E8A-9B2D-0C1E2F3A4B5C")!, properties: [.read],
                              value: (0..<300).map { UInt8($0 & 0xFF) })
    let writable = Characteristic(uuid: BluetoothUUID("5A1E0004-8F3C-4E8A-9B2D-0C1E2F3A4B5C")!, properties: [.read, .write, .writeWithoutResponse])
    let counter = Characteristic(uuid: BluetoothUUID("5A1E0005-8F3C-4E8A-9B2D-0C1E2F3A4B5C")!, properties: [.read, .notify, .indicate], value: [0])

    init() { service = Service(uuid: Self.serviceUUID, characteristics: [text, long, writable, counter]) }

    static var advertisement: AdvertisingData {
        var ad = AdvertisingData()
        ad.flags = 0x06
        ad.localName = name
        ad.txPowerLevel = 0
        return ad
    }

    static var scanResponse: AdvertisingData {
        var r = AdvertisingData()
        r.serviceUUIDs = [serviceUUID]
        return r
    }

    /// Publishes the service and advertises.
    @discardableResult
    static func start(on host: BluetoothHost) async throws -> TestPeripheral {
        let p = TestPeripheral()
        try await host.peripheral.add(p.service)
        try await host.peripheral.startAdvertising(advertisement, scanResponse: scanResponse)
        return p
    }
}

/// Connects the bench's central to its peripheral.
func connect(_ b: Bench) async throws -> RemotePeripheral {
    await b.tick()
    return try await b.central.central.connect(to: b.peripheralAddress, within: .seconds(10))
}

@Suite(.serialized, .timeLimit(.minutes(3))) struct SystemTests {
    @Test("ST01 hardware state", arguments: BenchKind.allCases)
    func st01HardwareState(_ kind: BenchKind) async throws {
        guard let b = try await Bench.make(kind) else { return }
        // A running host says ready; closing its transport says so and ends the stream.
        let states = b.central.states()
        await b.stopAll()
        let seen = await collect(states, count: 10, within: .seconds(5))
        #expect(seen.first == .ready)
        guard case .transportClosed? = seen.last else { Issue.record("last state \(String(describing: seen.last))"); return }
        #expect(seen.count == 2)
        // Operations now fail with the state, not a hang.
        await #expect(throws: BLEError.self) { _ = try await b.central.central.scan() }
    }

    @Test("ST02 scan for peripherals", arguments: BenchKind.allCases)
    func st02Scan(_ kind: BenchKind) async throws {
        guard let b = try await Bench.make(kind) else { return }
        defer { b.stopProcesses(); Task { await b.stopAll() } }
        try await TestPeripheral.start(on: b.peripheral)
        // The name is in the advertisement, the service UUID in the scan response: the filter sees both.
        let results = try await b.central.central.scan(filter: ScanFilter(serviceUUIDs: [TestPeripheral.serviceUUID]))
        await b.tick()
        let found = await firstElement(results, within: .seconds(10))
        let r = try #require(found)
        #expect(r.address == b.peripheralAddress)
        #expect(r.name == TestPeripheral.name)
        #expect(r.device.merged.serviceUUIDs == [TestPeripheral.serviceUUID])
        #expect(r.device.merged.txPowerLevel == 0)
        #expect(r.rssi < 0)
        let known = await b.central.central.knownPeripheral(b.peripheralAddress)
        #expect(known?.name == TestPeripheral.name)
        #expect(results.dropped.count == 0)
    }

    @Test("ST03 connect and disconnect", arguments: BenchKind.allCases)
    func st03ConnectDisconnect(_ kind: BenchKind) async throws {
        guard let b = try await Bench.make(kind) else { return }
        defer { b.stopProcesses(); Task { await b.stopAll() } }
        try await TestPeripheral.start(on: b.peripheral)
        let peripheralEvents = b.peripheral.connectionEvents()
        let remote = try await connect(b)
        #expect(remote.connection.role == .central)
        #expect(await b.central.central.connectedPeripherals.map(\.address) == [b.peripheralAddress])
        #expect(await b.central.central.knownPeripheral(b.peripheralAddress)?.connection == remote.connection.handle)
        let reason = try await remote.disconnect()
        #expect(reason == .connectionTerminatedByLocalHost)
        #expect(await b.central.central.connectedPeripherals.isEmpty)
        let ev = await collect(peripheralEvents, count: 2, within: .seconds(5))
        guard ev.count == 2, case let .connected(c) = ev[0], case let .disconnected(_, r) = ev[1] else {
            Issue.record("peripheral saw \(ev)")
            return
        }
        #expect(c.role == .peripheral)
        #expect(r == .remoteUserTerminatedConnection)
        // A read on the dead link says why it died.
        await #expect(throws: BLEError.disconnected(reason: .connectionTerminatedByLocalHost)) {
            _ = try await remote.read(RemoteCharacteristic(uuid: BluetoothUUID(0x2A00), properties: [.read], declarationHandle: 1, valueHandle: 2, endHandle: 2, descriptors: []))
        }
        // Reconnecting works, and the known device counts both connections.
        let again = try await connect(b)
        #expect(await b.central.central.knownPeripheral(b.peripheralAddress)?.connectionCount == 2)
        try await again.disconnect()
    }

    @Test("ST04 advertise data", arguments: BenchKind.allCases)
    func st04Advertise(_ kind: BenchKind) async throws {
        guard let b = try await Bench.make(kind) else { return }
        defer { b.stopProcesses(); Task { await b.stopAll() } }
        var ad = AdvertisingData()
        ad.flags = 0x06
        ad.localName = "Beacon-ST04"
        ad.manufacturerData = [.init(companyIdentifier: 0x05F1, data: [1, 2, 3, 4])]
        try await b.peripheral.peripheral.startAdvertising(ad, connectable: false)
        let results = try await b.central.central.scan(filter: ScanFilter(names: ["Beacon-ST04"]))
        await b.tick()
        let r = try #require(await firstElement(results, within: .seconds(10)))
        #expect(r.advertisement.data.manufacturerData == ad.manufacturerData)
        #expect(!r.advertisement.isConnectable)
        // Over 31 bytes: extended advertising where the controller has it (Rootcanal), heard
        // whole by the extended scanner; otherwise (the virtual radio) an error saying what fits.
        var big = AdvertisingData()
        big.flags = 0x06
        big.localName = "Extended-ST04-" + String(repeating: "x", count: 60)
        big.manufacturerData = [.init(companyIdentifier: 0x05F1, data: Array(0..<100))]
        if await b.peripheral.usesExtendedCommands {
            #expect(big.bytes.count > 150)
            try await b.peripheral.peripheral.startAdvertising(big)
            let bigResults = try await b.central.central.scan(filter: ScanFilter(names: [big.localName ?? ""]))
            let got = try #require(await firstElement(bigResults, within: .seconds(10)))
            #expect(got.advertisement.raw == big.bytes)
            #expect(got.advertisement.isConnectable)
            // Connectable extended advertising is one AUX_ADV_IND: exactly 246 octets are taken
            // (by Rootcanal too), one more is refused before the controller is asked.
            let limit = Advertiser.connectableExtendedDataLength
            #expect((await b.peripheral.info?.maximumAdvertisingDataLength ?? 0) >= limit)
            big.manufacturerData = [.init(companyIdentifier: 0x05F1, data: [])]
            let room = limit - big.bytes.count
            big.manufacturerData = [.init(companyIdentifier: 0x05F1, data: Array(repeating: 0, count: room))]
            #expect(big.bytes.count == limit)
            try await b.peripheral.peripheral.startAdvertising(big)
            big.manufacturerData = [.init(companyIdentifier: 0x05F1, data: Array(repeating: 0, count: room + 1))]
            await #expect(throws: AdvertisingDataError.tooLong(length: limit + 1, limit: limit)) { try await b.peripheral.peripheral.startAdvertising(big) }
        } else {
            await #expect(throws: AdvertisingDataError.tooLong(length: big.bytes.count, limit: 31)) { try await b.peripheral.peripheral.startAdvertising(big) }
        }
    }

    @Test("ST05 send indications and notifications", arguments: BenchKind.allCases)
    func st05NotifyIndicate(_ kind: BenchKind) async throws {
        guard let b = try await Bench.make(kind) else { return }
        defer { b.stopProcesses(); Task { await b.stopAll() } }
        let p = try await TestPeripheral.start(on: b.peripheral)
        let remote = try await connect(b)
        let counter = try await remote.characteristic(p.counter.uuid)
        let events = b.peripheral.peripheral.events()
        let notifications = try await remote.subscribe(to: counter)
        _ = await collect(events, count: 1, within: .seconds(5))
        let notified = try await b.peripheral.peripheral.notify(p.counter, value: [1])
        #expect(notified.count == 1)
        #expect(await collect(notifications, count: 1, within: .seconds(5)) == [[1]])
        let indications = try await remote.subscribe(to: counter, indications: true)
        _ = await collect(events, count: 1, within: .seconds(5))
        // An indication returns once the central confirmed it.
        let confirmed = try await b.peripheral.peripheral.indicate(p.counter, value: [2])
        let centralAddress = await b.central.info?.address
        #expect(confirmed.map(\.peer) == [centralAddress].compactMap { $0 })
        #expect(await collect(indications, count: 1, within: .seconds(5)) == [[2]])
        // The second subscription replaced the first, whose sequence has ended.
        #expect(await collect(notifications, count: 1, within: .seconds(3)).isEmpty)
        try await remote.disconnect()
    }

    @Test("ST06 discover services", arguments: BenchKind.allCases)
    func st06Discover(_ kind: BenchKind) async throws {
        guard let b = try await Bench.make(kind) else { return }
        defer { b.stopProcesses(); Task { await b.stopAll() } }
        let p = try await TestPeripheral.start(on: b.peripheral)
        let remote = try await connect(b)
        let services = try await remote.discoverServices()
        #expect(services.map(\.uuid).contains(BluetoothUUID(0x1800)))
        #expect(services.map(\.uuid).contains(BluetoothUUID(0x1801)))
        let s = try #require(services.first { $0.uuid == TestPeripheral.serviceUUID })
        #expect(s.characteristics.map(\.uuid) == [p.text.uuid, p.long.uuid, p.writable.uuid, p.counter.uuid])
        #expect(s.characteristics[3].properties == [.read, .notify, .indicate])
        #expect(s.characteristics[3].clientConfiguration != nil)
        #expect(s.characteristics[0].descriptors.map(\.uuid) == [GATTType.userDescription])
        try await remote.disconnect()
    }

    @Test("ST07 read a characteristic", arguments: BenchKind.allCases)
    func st07Read(_ kind: BenchKind) async throws {
        guard let b = try await Bench.make(kind) else { return }
        defer { b.stopProcesses(); Task { await b.stopAll() } }
        let p = try await TestPeripheral.start(on: b.peripheral)
        let remote = try await connect(b)
        #expect(try await remote.read(try await remote.characteristic(p.text.uuid)) == p.text.initialValue)
        // 300 bytes: Read, then Read Blob until the end.
        #expect(try await remote.read(try await remote.characteristic(p.long.uuid)) == p.long.initialValue)
        // A value the peripheral changed later.
        try await b.peripheral.peripheral.setValue([9, 9], of: p.counter)
        #expect(try await remote.read(try await remote.characteristic(p.counter.uuid)) == [9, 9])
        try await remote.disconnect()
    }

    @Test("ST08 write a characteristic", arguments: BenchKind.allCases)
    func st08Write(_ kind: BenchKind) async throws {
        guard let b = try await Bench.make(kind) else { return }
        defer { b.stopProcesses(); Task { await b.stopAll() } }
        let p = try await TestPeripheral.start(on: b.peripheral)
        let remote = try await connect(b)
        let events = b.peripheral.peripheral.events()
        let w = try await remote.characteristic(p.writable.uuid)
        try await remote.write(Array("with response".utf8), to: w)
        try await remote.write(Array("without".utf8), to: w, withResponse: false)
        let long = (0..<200).map { UInt8($0) }
        try await remote.write(long, to: w)
        let seen = await collect(events, count: 3, within: .seconds(5))
        #expect(seen.map { if case let .written(c, v, _) = $0, c === p.writable { v } else { [] } } == [Array("with response".utf8), Array("without".utf8), long])
        #expect(try await b.peripheral.peripheral.value(of: p.writable) == long)
        // A read-only characteristic: the peer's Error Response, typed.
        await #expect(throws: BLEError.att(.writeNotPermitted, handle: try await remote.characteristic(p.text.uuid).valueHandle)) {
            try await remote.write([1], to: try await remote.characteristic(p.text.uuid))
        }
        try await remote.disconnect()
    }

    @Test("ST09 subscribe to a characteristic", arguments: BenchKind.allCases)
    func st09Subscribe(_ kind: BenchKind) async throws {
        guard let b = try await Bench.make(kind) else { return }
        defer { b.stopProcesses(); Task { await b.stopAll() } }
        let p = try await TestPeripheral.start(on: b.peripheral)
        let remote = try await connect(b)
        let events = b.peripheral.peripheral.events()
        let counter = try await remote.characteristic(p.counter.uuid)
        // The consumer takes three values and lets the sequence go: the subscription is written off.
        let firstThree: [[UInt8]] = try await {
            let values = try await remote.subscribe(to: counter)
            let sub = await collect(events, count: 1, within: .seconds(5))
            guard case let .subscriptionChanged(c, _, notify, indicate)? = sub.first else { Issue.record("no subscription: \(sub)"); return [] }
            #expect(c === p.counter && notify && !indicate)
            #expect(try await b.peripheral.peripheral.subscribers(of: p.counter).count == 1)
            for i in 1...5 { try await b.peripheral.peripheral.notify(p.counter, value: [UInt8(i)]) }
            return await collect(values, count: 3, within: .seconds(5))
        }()
        #expect(firstThree == [[1], [2], [3]])
        let off = await collect(events, count: 1, within: .seconds(5))
        guard case let .subscriptionChanged(_, _, n2, i2)? = off.first else { Issue.record("no unsubscription: \(off) \(events.dropped.count)"); return }
        #expect(!n2 && !i2)
        // A subscription ends with the link, throwing the reason.
        let again = try await remote.subscribe(to: try await remote.characteristic(p.counter.uuid))
        for c in await b.peripheral.connections { try await b.peripheral.disconnect(c) }
        do {
            for try await _ in again {}
            Issue.record("the stream ended without an error")
        } catch let e as BLEError {
            #expect(e == .disconnected(reason: .remoteUserTerminatedConnection))
        }
    }

    @Test("ST10 read a descriptor", arguments: BenchKind.allCases)
    func st10Descriptor(_ kind: BenchKind) async throws {
        guard let b = try await Bench.make(kind) else { return }
        defer { b.stopProcesses(); Task { await b.stopAll() } }
        let p = try await TestPeripheral.start(on: b.peripheral)
        let remote = try await connect(b)
        let text = try await remote.characteristic(p.text.uuid)
        let d = try #require(text.descriptors.first { $0.uuid == GATTType.userDescription })
        #expect(try await remote.read(d) == Array("Greeting".utf8))
        let counter = try await remote.characteristic(p.counter.uuid)
        #expect(try await remote.read(try #require(counter.clientConfiguration)) == [0, 0])
        try await remote.disconnect()
    }

    @Test("ST11 RSSI and distance", arguments: BenchKind.allCases)
    func st11RSSIDistance(_ kind: BenchKind) async throws {
        guard let b = try await Bench.make(kind) else { return }
        defer { b.stopProcesses(); Task { await b.stopAll() } }
        await b.setDistance(10)
        try await TestPeripheral.start(on: b.peripheral)
        let results = try await b.central.central.scan(filter: ScanFilter(names: [TestPeripheral.name]))
        await b.tick()
        let r = try #require(await firstElement(results, within: .seconds(10)))
        let remote = try await b.central.central.connect(to: r)
        let (measured, metres) = try await remote.estimateDistance()
        let rssi = try #require(measured)
        #expect(rssi < 0)
        let m = try #require(metres)
        #expect(m > 0)
        if b.modelsDistance {
            // TX power 0 dBm, −41 dB at 1 m, −20 dB per decade: −61 dBm ↔ 10 m.
            #expect(rssi == -61)
            #expect(abs(m - 10) < 0.01)
            #expect(abs((r.estimatedMetres ?? 0) - 10) < 0.01)
        }
        try await remote.disconnect()
    }
}
