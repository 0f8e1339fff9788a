import ATT
import BLECrypto
import HCI
import Logging
import Testing
import Synchronization
@testable import GATT

@Suite(.timeLimit(.minutes(3)))
struct CMACTests {
    // RFC 4493 §4, AES-128 key 2b7e1516 28aed2a6 abf71588 09cf4f3c.
    static let key = [UInt8](hex: "2b7e151628aed2a6abf7158809cf4f3c")!
    static let m = [UInt8](hex: "6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e5130c81c46a35ce411e5fbc1191a0a52eff69f2445df4f9b17ad2b417be66c3710")!

    @Test(arguments: [
        (0, "bb1d6929e95937287fa37d129b756746"),
        (16, "070a16b46b4d4144f79bdd9dd04a287c"),
        (40, "dfa66747de9ae63030ca32611497c827"),
        (64, "51f0bebf7e3b9d92fc49741779363cfe"),
    ])
    func rfc4493Vectors(length: Int, mac: String) throws {
        #expect(try BLECrypto.cmac(key: Self.key, Array(Self.m.prefix(length))).hexString == mac)
    }

    @Test func wrongLengthsThrow() {
        #expect(throws: BLECryptoError.wrongLength(key: 3, block: 16)) { try BLECrypto.e(key: [1, 2, 3], [UInt8](repeating: 0, count: 16)) }
    }
}

@Suite(.timeLimit(.minutes(3)))
struct MandatoryServicesTests {
    static let logger = Logger(label: "t") { _ in SwiftLogNoOpLogHandler() }

    @Test func gapAndGattServicesComeFirstAndTheHashTracksStructureNotValues() throws {
        var db = AttributeDatabase()
        let m = try db.addMandatoryServices(deviceName: "swift")
        #expect(db.attribute(1)?.value == [0x00, 0x18])  // GAP service at handle 1
        #expect(db.attribute(m.deviceName)?.value == Array("swift".utf8))
        let h0 = try db.databaseHash()
        #expect(db.attribute(m.databaseHash)?.value == h0)
        db.setValue([9], at: m.deviceName)
        #expect(try db.databaseHash() == h0)  // values of characteristics are not hashed
        try db.add(GATTService(uuid: BluetoothUUID(0x180F), characteristics: [GATTCharacteristic(uuid: BluetoothUUID(0x2A19), properties: [.read])]))
        #expect(try db.databaseHash() != h0)
    }

    /// Peripheral Preferred Connection Parameters (Vol 3, Part C, §12.3): four
    /// little-endian 16-bit fields, the last characteristic of the GAP service.
    @Test func preferredConnectionParametersEndTheGAPService() throws {
        let p = PreferredConnectionParameters(intervalMin: 0x0018, intervalMax: 0x0028, latency: 4, supervisionTimeout: 0x01F4)
        #expect(p.value == [0x18, 0x00, 0x28, 0x00, 0x04, 0x00, 0xF4, 0x01])
        #expect(PreferredConnectionParameters(value: p.value) == p && p.isValid)
        #expect(PreferredConnectionParameters(value: Array(p.value.dropLast())) == nil && PreferredConnectionParameters(value: p.value + [0]) == nil)
        var db = AttributeDatabase()
        _ = try db.addMandatoryServices(deviceName: "swift", preferredConnectionParameters: p)
        // GAP 1; Device Name 2–3; Appearance 4–5; PPCP 6–7; GATT from 8.
        #expect(db.attribute(6)?.value == [0x02, 0x07, 0x00, 0x04, 0x2A])
        #expect(db.attribute(7)?.value == p.value && db.attribute(8)?.value == [0x01, 0x18])
        // §12.3's ranges; 0xFFFF is "no preference" where the spec allows it.
        let none = PreferredConnectionParameters.noPreference
        let valid = [p, PreferredConnectionParameters(intervalMin: none, intervalMax: none, latency: 0, supervisionTimeout: none),
                     PreferredConnectionParameters(intervalMin: 6, intervalMax: 6, latency: 0, supervisionTimeout: 10),
                     PreferredConnectionParameters(intervalMin: 6, intervalMax: 3200, latency: 0, supervisionTimeout: 3200),
                     PreferredConnectionParameters(intervalMin: 6, intervalMax: 6, latency: 499, supervisionTimeout: 3200)]
        let invalid = [PreferredConnectionParameters(intervalMin: 5, intervalMax: 40, supervisionTimeout: 500),
                       PreferredConnectionParameters(intervalMin: 40, intervalMax: 24, supervisionTimeout: 500),
                       PreferredConnectionParameters(intervalMin: 24, intervalMax: 3201, supervisionTimeout: 500),
                       PreferredConnectionParameters(intervalMin: 24, intervalMax: 40, latency: 500, supervisionTimeout: 500),
                       PreferredConnectionParameters(intervalMin: 24, intervalMax: 40, supervisionTimeout: 9),
                       PreferredConnectionParameters(intervalMin: 24, intervalMax: 40, latency: none, supervisionTimeout: 500),
                       // 100 ms timeout against 3 × 50 ms × 2: the link would time out between events.
                       PreferredConnectionParameters(intervalMin: 24, intervalMax: 40, latency: 2, supervisionTimeout: 10)]
        #expect(valid.allSatisfy(\.isValid) && !invalid.contains(where: \.isValid))
    }

    /// A bonded client's record put back at reconnection (`GATTServer.restoreClient`):
    /// its Service Changed subscription comes back; with the hash it knew still ours,
    /// nothing is indicated; with another, Service Changed for 0x0001–0xFFFF is, and
    /// once confirmed the client's record holds the new hash (reported).
    @Test func aRestoredClientIsToldOnlyOfAChangeWhileItWasAway() async throws {
        var db = AttributeDatabase()
        let m = try db.addMandatoryServices(deviceName: "swift")
        let server = GATTServer(database: db, logger: Self.logger)
        let events = server.events
        let (clientEnd, serverEnd) = ChannelEnd.pair()
        await server.attach(ATTBearer(channel: serverEnd, logger: Self.logger), connection: 1)
        let client = GATTClient(bearer: ATTBearer(channel: clientEnd, logger: Self.logger))
        await client.start()
        let known = try await client.read(m.databaseHash)
        let subscribed = [m.serviceChangedConfiguration: UInt16(0x0002)]
        func indications() -> [[UInt8]] { serverEnd.sent.withLock { $0.filter { $0.first == 0x1D } } }
        await server.restoreClient(GATTServerState.ClientRecord(configurations: subscribed, awareOfHash: known), connection: 1)
        #expect(await server.configuration(valueHandle: m.serviceChanged, connection: 1).indicate)
        _ = try await client.read(m.deviceName)  // a round trip: anything indicated is out by now
        #expect(indications().isEmpty)
        // The hash it knew is not ours: told at once, for the whole range.
        await server.restoreClient(GATTServerState.ClientRecord(configurations: subscribed, awareOfHash: [UInt8](repeating: 7, count: 16)), connection: 1)
        _ = try await client.read(m.deviceName)
        let sc = [UInt8(m.serviceChanged & 0xFF), UInt8(m.serviceChanged >> 8)]
        #expect(indications() == [[0x1D] + sc + [0x01, 0x00, 0xFF, 0xFF]])
        // Confirmed (by the client's bearer, at once): aware again, and reported so.
        let aware = events.filter { if case .clientRecordChanged(1) = $0 { return true } else { return false } }
        #expect(await firstElement(aware, within: .seconds(5), on: server.loop) != nil)
        #expect(await server.clientRecord(connection: 1).awareOfHash == known)
    }

    /// A bonded client back from a database this server had is told, at reconnection,
    /// of the handles changed since (§7.1), not of 0x0001–0xFFFF.
    @Test func aRestoredClientIsToldOnlyWhatChangedSinceTheDatabaseItKnew() async throws {
        var db = AttributeDatabase()
        let m = try db.addMandatoryServices(deviceName: "swift")
        let server = GATTServer(database: db, logger: Self.logger)
        let known = try #require(await server.database.attribute(m.databaseHash)?.value)
        // Changed with no one connected.
        let added = try await server.addService(GATTService(uuid: BluetoothUUID(0xFFE0), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0xFFE1), properties: [.read], value: [1]),
        ]))
        let (clientEnd, serverEnd) = ChannelEnd.pair()
        await server.attach(ATTBearer(channel: serverEnd, logger: Self.logger), connection: 1)
        let client = GATTClient(bearer: ATTBearer(channel: clientEnd, logger: Self.logger))
        await client.start()
        await server.restoreClient(GATTServerState.ClientRecord(configurations: [m.serviceChangedConfiguration: 0x0002], awareOfHash: known), connection: 1)
        _ = try await client.read(m.deviceName)
        let sc = [UInt8(m.serviceChanged & 0xFF), UInt8(m.serviceChanged >> 8)]
        let range = [UInt8(added.start & 0xFF), UInt8(added.start >> 8), UInt8(added.end & 0xFF), UInt8(added.end >> 8)]
        #expect(serverEnd.sent.withLock { $0.filter { $0.first == 0x1D } } == [[0x1D] + sc + range])
    }

    @Test func addingAServiceIndicatesServiceChangedToSubscribers() async throws {
        var db = AttributeDatabase()
        let m = try db.addMandatoryServices(deviceName: "swift")
        let server = GATTServer(database: db, logger: Self.logger)
        let (clientEnd, serverEnd) = ChannelEnd.pair()
        await server.attach(ATTBearer(channel: serverEnd, logger: Self.logger), connection: 1)
        let client = GATTClient(bearer: ATTBearer(channel: clientEnd, logger: Self.logger))
        await client.start()
        let hashBefore = try await client.read(m.databaseHash)
        let gatt = try #require(try await client.discoverPrimaryServices(uuid: BluetoothUUID(0x1801)).first)
        let sc = try #require(try await client.discoverCharacteristics(of: gatt, uuid: GATTCharacteristicType.serviceChanged).first)
        let changes = try await client.subscribe(sc, cccd: m.serviceChangedConfiguration, indications: true)
        let added = try await server.addService(GATTService(uuid: BluetoothUUID(0x180F), characteristics: [GATTCharacteristic(uuid: BluetoothUUID(0x2A19), properties: [.read], value: [50])]))
        var it = changes.makeAsyncIterator()
        #expect(await it.next() == [UInt8(added.start & 0xFF), UInt8(added.start >> 8), UInt8(added.end & 0xFF), UInt8(added.end >> 8)])
        #expect(try await client.read(m.databaseHash) != hashBefore)
        try await server.removeService(at: added.start)
        #expect(await it.next() == [UInt8(added.start & 0xFF), UInt8(added.start >> 8), UInt8(added.end & 0xFF), UInt8(added.end >> 8)])
        #expect(try await client.read(m.databaseHash) == hashBefore)
    }
}

@Suite(.timeLimit(.minutes(3)))
struct RobustCachingTests {
    static let logger = Logger(label: "t") { _ in SwiftLogNoOpLogHandler() }

    func setUp() async throws -> (GATTClient, GATTServer, MandatoryHandles, ServiceHandles) {
        var db = AttributeDatabase()
        let m = try db.addMandatoryServices(deviceName: "swift")
        let battery = try db.add(GATTService(uuid: BluetoothUUID(0x180F), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0x2A19), properties: [.read], value: [50]),
            GATTCharacteristic(uuid: BluetoothUUID(0x2A1A), properties: [.read], value: [1, 2]),
        ]))
        let server = GATTServer(database: db, logger: Self.logger)
        let (clientEnd, serverEnd) = ChannelEnd.pair()
        await server.attach(ATTBearer(channel: serverEnd, logger: Self.logger), connection: 1)
        let client = GATTClient(bearer: ATTBearer(channel: clientEnd, logger: Self.logger))
        await client.start()
        return (client, server, m, battery)
    }

    @Test func changeUnawareClientGetsDatabaseOutOfSyncUntilItReadsTheHash() async throws {
        let (client, server, m, battery) = try await setUp()
        try await client.write(m.clientSupportedFeatures, value: [0x01])  // robust caching
        #expect(try await client.read(m.clientSupportedFeatures) == [0x01])
        try await server.addService(GATTService(uuid: BluetoothUUID(0x1809)))  // not subscribed to Service Changed
        await #expect(throws: GATTClientError.att(.errorResponse(request: .readRequest, handle: 0, error: .databaseOutOfSync))) {
            try await client.read(battery.characteristicValues[0])
        }
        _ = try await client.read(m.databaseHash)  // now change-aware
        #expect(try await client.read(battery.characteristicValues[0]) == [50])
    }

    /// §2.5.2.1: a change-unaware client is sent no notification (nor indication) but
    /// Service Changed until it is aware again; then it is.
    @Test func aChangeUnawareClientIsNotNotifiedUntilItIsAware() async throws {
        var db = AttributeDatabase()
        let m = try db.addMandatoryServices(deviceName: "swift")
        let level = try db.add(GATTService(uuid: BluetoothUUID(0x180F), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0x2A19), properties: [.read, .notify], value: [50]),
        ]))
        let server = GATTServer(database: db, logger: Self.logger)
        let (clientEnd, serverEnd) = ChannelEnd.pair()
        await server.attach(ATTBearer(channel: serverEnd, logger: Self.logger), connection: 1)
        let client = GATTClient(bearer: ATTBearer(channel: clientEnd, logger: Self.logger))
        await client.start()
        try await client.write(m.clientSupportedFeatures, value: [0x01])
        let service = try #require(try await client.discoverPrimaryServices(uuid: BluetoothUUID(0x180F)).first)
        let c = try #require(try await client.discoverCharacteristics(of: service).first)
        let values = try await client.subscribe(c, cccd: try #require(level.clientConfigurations[0]))
        try await server.addService(GATTService(uuid: BluetoothUUID(0x1809)))
        #expect(await server.notify(level.characteristicValues[0], value: [1]).isEmpty)
        _ = try await client.read(m.databaseHash)
        _ = try await client.read(level.characteristicValues[0])  // the request after the hash: aware
        #expect(await server.notify(level.characteristicValues[0], value: [2]) == [1])
        var it = values.makeAsyncIterator()
        #expect(await it.next() == [2])
    }

    @Test func clientWithoutRobustCachingIsNeverOutOfSync() async throws {
        let (client, server, _, battery) = try await setUp()
        try await server.addService(GATTService(uuid: BluetoothUUID(0x1809)))
        #expect(try await client.read(battery.characteristicValues[0]) == [50])
    }

    @Test func serviceChangedInvalidatesDiscoveredServicesInRange() async throws {
        let (client, server, _, battery) = try await setUp()
        let before = try await client.discoverAll()
        #expect(before.contains { $0.0.uuid == BluetoothUUID(0x180F) })
        let changes = try #require(try await client.trackServiceChanges())
        try await server.removeService(at: battery.start)
        var it = changes.makeAsyncIterator()
        #expect(await it.next() == battery.start...battery.end)
        let after = await client.discovered
        #expect(!after.contains { $0.0.uuid == BluetoothUUID(0x180F) })
        #expect(after.count == before.count - 1)
    }

    @Test func readMultipleConcatenatesValues() async throws {
        let (client, _, _, battery) = try await setUp()
        #expect(try await client.readMultiple(battery.characteristicValues) == [50, 1, 2])
    }
}

/// A server whose user takes its events by observer (the facade) buffers none: its
/// `events` stream is over at once, and what happens reaches the observer alone.
@Suite(.timeLimit(.minutes(3)))
struct ObservedServerTests {
    @Test func aServerWithoutAnEventStreamHandsEveryEventToItsObservers() async throws {
        var db = AttributeDatabase()
        let h = try db.add(GATTService(uuid: BluetoothUUID(0xFFF0), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF1), properties: [.read, .write], value: [0]),
        ])).characteristicValues[0]
        let server = GATTServer(database: db, streamsEvents: false, logger: MandatoryServicesTests.logger)
        let seen = Mutex<[GATTServer.Event]>([])
        await server.addEventObserver { e in seen.withLock { $0.append(e) } }
        let (clientEnd, serverEnd) = ChannelEnd.pair()
        await server.attach(ATTBearer(channel: serverEnd, logger: MandatoryServicesTests.logger), connection: 1)
        let client = GATTClient(bearer: ATTBearer(channel: clientEnd, logger: MandatoryServicesTests.logger))
        await client.start()
        try await client.write(h, value: [7])
        // A round trip: the server has finished with the write (it reports it after its answer).
        #expect(try await client.read(h) == [7])
        #expect(seen.withLock { $0 } == [.connected(1), .written(handle: h, value: [7], connection: 1)])
        var events = server.events.makeAsyncIterator()
        #expect(await events.next() == nil)
        #expect(server.events.dropped.count == 0)
    }
}
