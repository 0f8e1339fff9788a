import ATT
import HCI
import Testing
@testable import GATT

@Suite(.timeLimit(.minutes(3)))
struct GATTServerTests {
    static let custom = BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!

    /// Battery service (1–5 with CCCD 5... see below), a custom service with a long value,
    /// a write-only and an encrypted characteristic, and a secondary service included by it.
    static func make() throws -> (GATTServerState, battery: ServiceHandles, custom: ServiceHandles, secondary: ServiceHandles) {
        var db = AttributeDatabase()
        let battery = try db.add(GATTService(uuid: BluetoothUUID(0x180F), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0x2A19), properties: [.read, .notify], value: [100],
                               descriptors: [.userDescription("Battery")]),
        ]))
        let secondary = try db.add(GATTService(uuid: BluetoothUUID(0x1801), isPrimary: false))
        let custom = try db.add(GATTService(uuid: Self.custom, includes: [secondary.start], characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0x2A00), properties: [.read, .write], value: Array(repeating: 0x41, count: 100)),
            GATTCharacteristic(uuid: BluetoothUUID(0x2A01), properties: [.write], maximumLength: 4),
            GATTCharacteristic(uuid: BluetoothUUID(0x2A02), properties: [.read, .indicate], permissions: [.readEncrypted], value: [1]),
        ]))
        return (GATTServerState(database: db, prepareQueueLimit: 3), battery, custom, secondary)
    }

    @Test func layoutFollowsTheSpec() throws {
        let (s, battery, custom, secondary) = try Self.make()
        // Service, characteristic declaration, value, CCCD, user description.
        #expect(battery.start == 1 && battery.end == 5)
        #expect(battery.characteristicValues == [3] && battery.clientConfigurations == [4])
        let decl = try #require(s.database.attribute(2))
        #expect(decl.value == [0x12, 0x03, 0x00, 0x19, 0x2A])  // read|notify, value handle 3, UUID 2A19
        #expect(secondary.start == 6 && secondary.end == 6)
        let include = try #require(s.database.attribute(custom.start + 1))
        #expect(include.type == GATTType.include)
        #expect(include.value == [0x06, 0x00, 0x06, 0x00, 0x01, 0x18])
    }

    /// What a bond kept is put back for the connection: handles that are not a CCCD any
    /// more are skipped, bits the characteristic no longer allows dropped, an unchanged
    /// value reported no second time; a written value is what the bond gets next.
    @Test func aBondsClientConfigurationsAreRestored() throws {
        var (s, battery, custom, _) = try Self.make()
        let indicateCCCD = try #require(custom.clientConfigurations[2])
        // Battery Level's CCCD (4) with notify and indicate stored (it only notifies), the
        // indicating characteristic's CCCD, a handle that is a value (3), one past the end.
        let effects = s.restoreClientConfigurations([4: 3, indicateCCCD: 2, 3: 1, 0x0FFF: 1], connection: 7)
        #expect(effects == [.subscription(valueHandle: 3, connection: 7, notify: true, indicate: false),
                            .subscription(valueHandle: indicateCCCD - 1, connection: 7, notify: false, indicate: true)])
        #expect(s.clientConfigurations(connection: 7) == [4: 1, indicateCCCD: 2])
        #expect(s.configuration(valueHandle: 3, connection: 7) == (true, false))
        #expect(s.restoreClientConfigurations([4: 1], connection: 7).isEmpty)
        #expect(s.clientConfigurations(connection: 8).isEmpty)
        _ = s.handle(.writeRequest(handle: 4, value: [0, 0]), connection: 7, mtu: 23)
        #expect(s.clientConfigurations(connection: 7) == [indicateCCCD: 2])
        #expect(battery.clientConfigurations == [4])
    }

    @Test func primaryServiceDiscoveryInGroupsOfEqualLength() throws {
        var (s, _, custom, _) = try Self.make()
        // 16-bit services come first; the 128-bit one needs its own response.
        let (r1, _) = s.handle(.readByGroupTypeRequest(start: 1, end: 0xFFFF, type: GATTType.primaryService), connection: 1, mtu: 23)
        #expect(r1 == .readByGroupTypeResponse([.init(handle: 1, groupEnd: 5, value: [0x0F, 0x18])]))
        let (r2, _) = s.handle(.readByGroupTypeRequest(start: 6, end: 0xFFFF, type: GATTType.primaryService), connection: 1, mtu: 23)
        #expect(r2 == .readByGroupTypeResponse([.init(handle: custom.start, groupEnd: custom.end, value: Self.custom.littleEndianBytes)]))
        let (r3, _) = s.handle(.readByGroupTypeRequest(start: custom.end + 1, end: 0xFFFF, type: GATTType.primaryService), connection: 1, mtu: 23)
        #expect(r3 == .errorResponse(request: .readByGroupTypeRequest, handle: custom.end + 1, error: .attributeNotFound))
        let (r4, _) = s.handle(.readByGroupTypeRequest(start: 1, end: 0xFFFF, type: GATTType.characteristic), connection: 1, mtu: 23)
        #expect(r4 == .errorResponse(request: .readByGroupTypeRequest, handle: 1, error: .unsupportedGroupType))
        let (r5, _) = s.handle(.findByTypeValueRequest(start: 1, end: 0xFFFF, type: 0x2800, value: [0x0F, 0x18]), connection: 1, mtu: 23)
        #expect(r5 == .findByTypeValueResponse([.init(found: 1, groupEnd: 5)]))
    }

    @Test func invalidRangesAndHandles() throws {
        var (s, _, _, _) = try Self.make()
        #expect(s.handle(.findInformationRequest(start: 0, end: 5), connection: 1, mtu: 23).response
                == .errorResponse(request: .findInformationRequest, handle: 0, error: .invalidHandle))
        #expect(s.handle(.readByTypeRequest(start: 9, end: 2, type: GATTType.characteristic), connection: 1, mtu: 23).response
                == .errorResponse(request: .readByTypeRequest, handle: 9, error: .invalidHandle))
        #expect(s.handle(.readRequest(handle: 0x0FFF), connection: 1, mtu: 23).response
                == .errorResponse(request: .readRequest, handle: 0x0FFF, error: .invalidHandle))
        #expect(s.handle(.readMultipleRequest(handles: [3, 0x0FFF]), connection: 1, mtu: 23).response
                == .errorResponse(request: .readMultipleRequest, handle: 0x0FFF, error: .invalidHandle))
    }

    @Test func permissionsAreEnforcedWithTheSpecsCodes() throws {
        var (s, _, custom, _) = try Self.make()
        let writeOnly = custom.characteristicValues[1], encrypted = custom.characteristicValues[2]
        #expect(s.handle(.readRequest(handle: writeOnly), connection: 1, mtu: 23).response
                == .errorResponse(request: .readRequest, handle: writeOnly, error: .readNotPermitted))
        // Unencrypted: Insufficient Authentication when the peer has no stored key to
        // encrypt with (it must pair), Insufficient Encryption when it has one (Vol 3,
        // Part C, §10.3.1).
        #expect(s.handle(.readRequest(handle: encrypted), connection: 1, mtu: 23).response
                == .errorResponse(request: .readRequest, handle: encrypted, error: .insufficientAuthentication))
        #expect(s.handle(.readRequest(handle: encrypted), connection: 1, mtu: 23, security: LinkSecurity(keyAvailable: true)).response
                == .errorResponse(request: .readRequest, handle: encrypted, error: .insufficientEncryption))
        #expect(s.handle(.readRequest(handle: encrypted), connection: 1, mtu: 23, security: LinkSecurity(encrypted: true)).response
                == .readResponse(value: [1]))
        #expect(s.handle(.writeRequest(handle: 3, value: [1]), connection: 1, mtu: 23).response
                == .errorResponse(request: .writeRequest, handle: 3, error: .writeNotPermitted))
        #expect(s.handle(.writeRequest(handle: writeOnly, value: [1, 2, 3, 4, 5]), connection: 1, mtu: 23).response
                == .errorResponse(request: .writeRequest, handle: writeOnly, error: .invalidAttributeValueLength))
        let (ok, effects) = s.handle(.writeRequest(handle: writeOnly, value: [1, 2]), connection: 1, mtu: 23)
        #expect(ok == .writeResponse)
        #expect(effects == [.written(handle: writeOnly, value: [1, 2], connection: 1)])
        // Write Command to a characteristic without Write Without Response: silently ignored.
        #expect(s.handle(.writeCommand(handle: writeOnly, value: [9]), connection: 1, mtu: 23) == (nil, []))
    }

    /// An attribute that asks for an authenticated key: an unencrypted link is refused
    /// as for encryption (by whether the peer has a stored key), an encrypted one with an
    /// unauthenticated key with Insufficient Authentication, a short key with Encryption
    /// Key Size Too Short; writes are judged the same way, and the Security Request a
    /// refusal calls for asks for authentication only where the attribute does.
    @Test func authenticatedAttributesAreRefusedInTheSpecsOrder() throws {
        var db = AttributeDatabase()
        let svc = try db.add(GATTService(uuid: BluetoothUUID(0xFFF0), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF1), properties: [.read, .write], permissions: [.readAuthenticated, .writeEncrypted], value: [5]),
        ]))
        var s = GATTServerState(database: db)
        let h = svc.characteristicValues[0]
        func read(_ security: LinkSecurity) -> ATTPDU? { s.handle(.readRequest(handle: h), connection: 1, mtu: 23, security: security).response }
        func write(_ security: LinkSecurity) -> ATTPDU? { s.handle(.writeRequest(handle: h, value: [6]), connection: 1, mtu: 23, security: security).response }
        #expect(read(LinkSecurity()) == .errorResponse(request: .readRequest, handle: h, error: .insufficientAuthentication))
        #expect(read(LinkSecurity(keyAvailable: true)) == .errorResponse(request: .readRequest, handle: h, error: .insufficientEncryption))
        #expect(read(LinkSecurity(encrypted: true)) == .errorResponse(request: .readRequest, handle: h, error: .insufficientAuthentication))
        #expect(read(LinkSecurity(encrypted: true, authenticated: true, keySize: 6)) == .errorResponse(request: .readRequest, handle: h, error: .encryptionKeySizeTooShort))
        #expect(read(LinkSecurity(encrypted: true, authenticated: true)) == .readResponse(value: [5]))
        #expect(write(LinkSecurity()) == .errorResponse(request: .writeRequest, handle: h, error: .insufficientAuthentication))
        #expect(write(LinkSecurity(keyAvailable: true)) == .errorResponse(request: .writeRequest, handle: h, error: .insufficientEncryption))
        #expect(write(LinkSecurity(encrypted: true)) == .writeResponse)
        #expect(s.needsAuthentication(.readRequest(handle: h), at: h))
        #expect(!s.needsAuthentication(.writeRequest(handle: h, value: [6]), at: h))
    }

    @Test func longValuesAreReadInMTUSizedPiecesWithOffsets() throws {
        var (s, _, custom, _) = try Self.make()
        let long = custom.characteristicValues[0]
        #expect(s.handle(.readRequest(handle: long), connection: 1, mtu: 23).response == .readResponse(value: Array(repeating: 0x41, count: 22)))
        #expect(s.handle(.readBlobRequest(handle: long, offset: 88), connection: 1, mtu: 23).response == .readBlobResponse(value: Array(repeating: 0x41, count: 12)))
        #expect(s.handle(.readBlobRequest(handle: long, offset: 100), connection: 1, mtu: 23).response == .readBlobResponse(value: []))
        #expect(s.handle(.readBlobRequest(handle: long, offset: 101), connection: 1, mtu: 23).response
                == .errorResponse(request: .readBlobRequest, handle: long, error: .invalidOffset))
        // Read By Type truncates to MTU - 4.
        guard case let .readByTypeResponse(list)? = s.handle(.readByTypeRequest(start: custom.start, end: custom.end, type: BluetoothUUID(0x2A00)), connection: 1, mtu: 23).response else {
            Issue.record("no Read By Type Response"); return
        }
        #expect(list.first?.value.count == 19)
    }

    /// A CCCD is per connection. A value asking for what the characteristic's
    /// properties do not offer is refused with 0xFD, Client Characteristic
    /// Configuration Descriptor Improperly Configured, as BlueZ refuses it (§3.3.1.1:
    /// only a property's bit permits its action), by a Write Request and by an executed
    /// prepared write alike, and changes nothing; the reserved bits above are ignored.
    @Test func cccdIsPerConnectionAndRefusesWhatThePropertiesDoNotOffer() throws {
        var (s, battery, custom, _) = try Self.make()
        let cccd = try #require(battery.clientConfigurations[0])
        // Battery Level has notify only: asking for indications too is refused.
        let (refused, none) = s.handle(.writeRequest(handle: cccd, value: [0x03, 0x00]), connection: 1, mtu: 23)
        #expect(refused == .errorResponse(request: .writeRequest, handle: cccd, error: .cccdImproperlyConfigured))
        #expect(none.isEmpty)
        #expect(s.handle(.readRequest(handle: cccd), connection: 1, mtu: 23).response == .readResponse(value: [0, 0]))
        // Notifications, with reserved bits set beside them: the reserved bits are ignored.
        let (r, effects) = s.handle(.writeRequest(handle: cccd, value: [0x05, 0x80]), connection: 1, mtu: 23)
        #expect(r == .writeResponse)
        #expect(effects == [.subscription(valueHandle: 3, connection: 1, notify: true, indicate: false)])
        #expect(s.handle(.readRequest(handle: cccd), connection: 1, mtu: 23).response == .readResponse(value: [1, 0]))
        #expect(s.handle(.readRequest(handle: cccd), connection: 2, mtu: 23).response == .readResponse(value: [0, 0]))
        #expect(s.configuration(valueHandle: 3, connection: 1) == (true, false))
        #expect(s.handle(.writeRequest(handle: cccd, value: [1]), connection: 1, mtu: 23).response
                == .errorResponse(request: .writeRequest, handle: cccd, error: .invalidAttributeValueLength))
        // The same refusal when the value comes in a prepared write, at its execution.
        #expect(s.handle(.prepareWriteRequest(handle: cccd, offset: 0, value: [0x02, 0x00]), connection: 1, mtu: 23).response
                == .prepareWriteResponse(handle: cccd, offset: 0, value: [0x02, 0x00]))
        guard case let .failure(refusal) = s.takePreparedWrites(connection: 1) else { Issue.record("the prepared CCCD value was taken"); return }
        #expect(refusal.error == .cccdImproperlyConfigured && refusal.handle == cccd)
        #expect(s.configuration(valueHandle: 3, connection: 1) == (true, false))
        s.disconnected(1)
        #expect(s.configuration(valueHandle: 3, connection: 1) == (false, false))
        _ = custom
    }

    @Test func preparedWritesQueueBoundedAndExecuteAtomically() throws {
        var (s, _, custom, _) = try Self.make()
        let long = custom.characteristicValues[0], small = custom.characteristicValues[1]
        for i in 0..<3 {
            #expect(s.handle(.prepareWriteRequest(handle: long, offset: UInt16(i * 2), value: [0x30 + UInt8(i), 0x30]), connection: 1, mtu: 23).response
                    == .prepareWriteResponse(handle: long, offset: UInt16(i * 2), value: [0x30 + UInt8(i), 0x30]))
        }
        #expect(s.handle(.prepareWriteRequest(handle: long, offset: 6, value: [1]), connection: 1, mtu: 23).response
                == .errorResponse(request: .prepareWriteRequest, handle: long, error: .prepareQueueFull))
        let (r, effects) = s.handle(.executeWriteRequest(flags: 1), connection: 1, mtu: 23)
        #expect(r == .executeWriteResponse)
        #expect(effects.count == 1)
        #expect(s.database.attribute(long)?.value.prefix(6) == [0x30, 0x30, 0x31, 0x30, 0x32, 0x30])
        // Too long for the 4-byte characteristic: nothing is written.
        _ = s.handle(.prepareWriteRequest(handle: small, offset: 0, value: [1, 2, 3]), connection: 1, mtu: 23)
        _ = s.handle(.prepareWriteRequest(handle: small, offset: 3, value: [4, 5]), connection: 1, mtu: 23)
        #expect(s.handle(.executeWriteRequest(flags: 1), connection: 1, mtu: 23).response
                == .errorResponse(request: .executeWriteRequest, handle: small, error: .invalidAttributeValueLength))
        #expect(s.database.attribute(small)?.value == [])
        // Cancel discards.
        _ = s.handle(.prepareWriteRequest(handle: small, offset: 0, value: [7]), connection: 1, mtu: 23)
        #expect(s.handle(.executeWriteRequest(flags: 0), connection: 1, mtu: 23) == (.executeWriteResponse, []))
        #expect(s.database.attribute(small)?.value == [])
        // Reserved flags (§3.4.6.3) get Invalid PDU, as on the wire, and are no cancel: the queue stays.
        _ = s.handle(.prepareWriteRequest(handle: small, offset: 0, value: [8]), connection: 1, mtu: 23)
        #expect(s.handle(.executeWriteRequest(flags: 2), connection: 1, mtu: 23)
                == (.errorResponse(request: .executeWriteRequest, handle: 0, error: .invalidPDU), []))
        #expect(s.handle(.executeWriteRequest(flags: 1), connection: 1, mtu: 23).response == .executeWriteResponse)
        #expect(s.database.attribute(small)?.value == [8])
    }

    /// §3.4.6.1: a prepared value is judged when the queue is executed, not when it is
    /// queued, so a Client Characteristic Configuration can be written with prepared
    /// writes like any writable attribute; at execution it must be 2 octets whole.
    @Test func aPreparedValueIsJudgedWhenTheQueueIsExecuted() throws {
        var (s, battery, _, _) = try Self.make()
        let cccd = try #require(battery.clientConfigurations[0])
        let notify: [UInt8] = [0x01, 0x00]
        #expect(s.handle(.prepareWriteRequest(handle: cccd, offset: 0, value: [0x01]), connection: 1, mtu: 23).response
                == .prepareWriteResponse(handle: cccd, offset: 0, value: [0x01]))
        #expect(s.handle(.prepareWriteRequest(handle: cccd, offset: 1, value: [0x00]), connection: 1, mtu: 23).response
                == .prepareWriteResponse(handle: cccd, offset: 1, value: [0x00]))
        let done = s.handle(.executeWriteRequest(flags: 1), connection: 1, mtu: 23)
        #expect(done.response == .executeWriteResponse)
        #expect(done.effects == [.subscription(valueHandle: battery.characteristicValues[0], connection: 1, notify: true, indicate: false)])
        #expect(s.handle(.readRequest(handle: cccd), connection: 1, mtu: 23).response == .readResponse(value: notify))
        // One octet is no configuration: refused at execution, with nothing changed.
        _ = s.handle(.prepareWriteRequest(handle: cccd, offset: 0, value: [0x00]), connection: 1, mtu: 23)
        let short = s.handle(.executeWriteRequest(flags: 1), connection: 1, mtu: 23)
        #expect(short.response == .errorResponse(request: .executeWriteRequest, handle: cccd, error: .invalidAttributeValueLength))
        #expect(short.effects.isEmpty)
        #expect(s.handle(.readRequest(handle: cccd), connection: 1, mtu: 23).response == .readResponse(value: notify))
        // A piece at a nonzero offset lands on this connection's configuration, not on
        // the declaration's stored value: the first octet stays 0x01.
        _ = s.handle(.prepareWriteRequest(handle: cccd, offset: 1, value: [0x00]), connection: 1, mtu: 23)
        #expect(s.handle(.executeWriteRequest(flags: 1), connection: 1, mtu: 23).response == .executeWriteResponse)
        #expect(s.handle(.readRequest(handle: cccd), connection: 1, mtu: 23).response == .readResponse(value: notify))
    }

    @Test func findInformationFillsTheMTUAndNoMore() throws {
        var (s, _, custom, _) = try Self.make()
        guard case let .findInformationResponse(list)? = s.handle(.findInformationRequest(start: 1, end: 0xFFFF), connection: 1, mtu: 23).response else {
            Issue.record("no response"); return
        }
        #expect(list.count == 5)  // (23 - 2) / 4
        #expect(list.map(\.handle) == [1, 2, 3, 4, 5])
        _ = custom
    }

    @Test func removingAServiceLeavesTheOthersHandles() throws {
        var (s, battery, custom, _) = try Self.make()
        try s.database.removeService(at: battery.start)
        #expect(s.database.attribute(3) == nil)
        #expect(s.database.attribute(custom.start)?.type == GATTType.primaryService)
        #expect(s.handle(.readRequest(handle: 3), connection: 1, mtu: 23).response == .errorResponse(request: .readRequest, handle: 3, error: .invalidHandle))
    }
}

/// Multiple Handle Value Notification (Vol 3, Part F, §3.4.7.4; Part G, §4.10.2):
/// values packed while they fit ATT_MTU, at least two per PDU, and only for a client
/// whose Client Supported Features asks for them.
@Suite(.timeLimit(.minutes(3)))
struct MultipleNotificationTests {
    @Test func valuesArePackedWhileTheyFit() {
        let long = [UInt8](repeating: 0xEE, count: 30)
        let pdus = GATTServerState.packNotifications([(3, [1, 2]), (5, [3]), (7, long), (9, Array(long.prefix(15))), (11, Array(long.prefix(15)))], mtu: 23)
        #expect(pdus.map(\.bytes) == [
            // 0x23, then handle, length, value per entry: 1 + 6 + 5 = 12 octets.
            [0x23, 0x03, 0x00, 0x02, 0x00, 0x01, 0x02, 0x05, 0x00, 0x01, 0x00, 0x03],
            // Too long to share a PDU: alone, truncated to ATT_MTU - 3.
            [0x1B, 0x07, 0x00] + long.prefix(20),
            // 1 + 19 + 19 > 23: each alone.
            [0x1B, 0x09, 0x00] + long.prefix(15),
            [0x1B, 0x0B, 0x00] + long.prefix(15),
        ])
    }

    /// What a bond keeps of a client (`ClientRecord`): its Client Supported Features,
    /// reported when they change, and the Database Hash it is aware of. Back after the
    /// database changed, a robust-caching client is change-unaware: Database Out Of
    /// Sync, its record keeps the hash it knew, until it reads the hash, which is
    /// reported.
    @Test func aClientRecordKeepsFeaturesAndTheHashItIsAwareOf() throws {
        var db = AttributeDatabase()
        let m = try db.addMandatoryServices(deviceName: "x")
        let level = try db.add(GATTService(uuid: BluetoothUUID(0x180F), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0x2A19), properties: [.read], value: [80]),
        ])).characteristicValues[0]
        var s = GATTServerState(database: db)
        let known = try #require(s.databaseHashValue)
        #expect(s.handle(.writeRequest(handle: m.clientSupportedFeatures, value: [0x01]), connection: 1, mtu: 23).effects == [.clientRecordChanged(connection: 1)])
        #expect(s.handle(.writeRequest(handle: m.clientSupportedFeatures, value: [0x01]), connection: 1, mtu: 23).effects.isEmpty)
        let record = s.clientRecord(connection: 1)
        #expect(record.supportedFeatures == 0x01 && record.awareOfHash == known)
        s.disconnected(1)
        // The database changes while the client is away; it comes back on connection 2.
        var changed = s.database
        try changed.add(GATTService(uuid: BluetoothUUID(0xFFE0)))
        try changed.refreshDatabaseHash(at: m.databaseHash)
        s.database = changed
        #expect(s.databaseHashValue != known)
        s.restoreClientFeatures(record.supportedFeatures, connection: 2)
        // This state did not see the change happen: it tells of the whole range.
        #expect(s.changedWhileAway(connection: 2, known: known) == 0x0001...0xFFFF)
        #expect(s.handle(.readRequest(handle: level), connection: 2, mtu: 23).response
                == .errorResponse(request: .readRequest, handle: 0, error: .databaseOutOfSync))
        #expect(s.clientRecord(connection: 2).awareOfHash == known)
        let (hash, effects) = s.handle(.readRequest(handle: m.databaseHash), connection: 2, mtu: 23)
        #expect(hash == .readResponse(value: s.databaseHashValue ?? []) && effects == [.clientRecordChanged(connection: 2)])
        #expect(s.clientRecord(connection: 2).awareOfHash == s.databaseHashValue)
        #expect(s.handle(.readRequest(handle: level), connection: 2, mtu: 23).response == .readResponse(value: [80]))
        // Without robust caching a client is never change-unaware.
        s.changedWhileAway(connection: 3, known: known)
        #expect(s.handle(.readRequest(handle: level), connection: 3, mtu: 23).response == .readResponse(value: [80]))
    }

    /// A client back from a database this server had is told of the handles changed
    /// since (§7.1: one range covering them), not of 0x0001–0xFFFF; a database older
    /// than the changes kept, or one this server never had, gets the whole range.
    @Test func aClientBackFromAKnownDatabaseIsToldWhatChangedSince() throws {
        var db = AttributeDatabase()
        _ = try db.addMandatoryServices(deviceName: "x")
        var s = GATTServerState(database: db)
        func add(_ uuid: UInt16) throws -> ClosedRange<UInt16> {
            let h = try s.database.add(GATTService(uuid: BluetoothUUID(uuid), characteristics: [
                GATTCharacteristic(uuid: BluetoothUUID(uuid + 1), properties: [.read], value: [1]),
            ]))
            s.databaseChanged(h.start...h.end, connections: [])
            return h.start...h.end
        }
        let h0 = try #require(s.databaseHashValue)
        let a = try add(0xFFE0)
        let h1 = try #require(s.databaseHashValue)
        let b = try add(0xFFF0)
        #expect(h1 != h0 && s.databaseHashValue != h1)
        #expect(s.changes(since: h1) == b && s.changes(since: h0) == a.lowerBound...b.upperBound)
        #expect(s.changes(since: try #require(s.databaseHashValue)) == nil)
        let since = s.changedWhileAway(connection: 1, known: h0)
        #expect(since == a.lowerBound...b.upperBound)
        #expect(s.clientRecord(connection: 1).awareOfHash == h0)
        let unknown = s.changedWhileAway(connection: 2, known: [UInt8](repeating: 7, count: 16))
        #expect(unknown == 0x0001...0xFFFF)
        // Removing B is a change too, back to h1's layout.
        s.databaseChanged(try s.database.removeService(at: b.lowerBound), connections: [])
        #expect(s.databaseHashValue == h1 && s.changes(since: h0) == a.lowerBound...b.upperBound)
        // Past `changesKept` changes, h0 is forgotten; h1 (seen again since) is not.
        for _ in 0..<GATTServerState.changesKept / 2 {
            let c = try add(0xFFF0)
            s.databaseChanged(try s.database.removeService(at: c.lowerBound), connections: [])
        }
        #expect(s.changes(since: h0) == nil)
        let whole = s.changedWhileAway(connection: 3, known: h0)
        #expect(whole == 0x0001...0xFFFF)
        let c = try add(0xFFF0)
        #expect(s.changes(since: h1) == c)
    }

    /// A connected client behind a change keeps, in its record, the hash it last knew,
    /// until it takes the change in: it confirms Service Changed (for the changes up
    /// to when it was sent), or reads the Database Hash. A client that caches robustly
    /// on enhanced bearers stays change-unaware after a confirmation (§2.5.2.1: on
    /// more than one bearer only reading the hash makes it aware).
    @Test func aConnectedClientTakesAChangeInWhenItConfirmsOrReadsTheHash() throws {
        var db = AttributeDatabase()
        let m = try db.addMandatoryServices(deviceName: "x")
        var s = GATTServerState(database: db)
        // 1: one bearer; 2: robust caching, enhanced bearers; 3: enhanced bearers;
        // 4: reads the hash; 5: robust caching, one bearer.
        for c: UInt16 in [2, 5] { _ = s.handle(.writeRequest(handle: m.clientSupportedFeatures, value: [0x01]), connection: c, mtu: 23) }
        let h0 = try #require(s.databaseHashValue)
        func add(_ uuid: UInt16) throws -> [UInt8] {
            let h = try s.database.add(GATTService(uuid: BluetoothUUID(uuid)))
            s.databaseChanged(h.start...h.end, connections: [1, 2, 3, 4, 5])
            return try #require(s.databaseHashValue)
        }
        let h1 = try add(0xFFE0)
        #expect([UInt16](1...5).allSatisfy { s.clientRecord(connection: $0).awareOfHash == h0 })
        let h2 = try add(0xFFF0)
        func confirm(_ c: UInt16, _ hash: [UInt8], singleBearer: Bool = true) -> Bool {
            s.confirmedServiceChanged(connection: c, hash: hash, singleBearer: singleBearer)
        }
        // The first change's indication confirmed, then the second's.
        #expect(confirm(1, h1) && s.clientRecord(connection: 1).awareOfHash == h1)
        #expect(confirm(1, h2) && s.clientRecord(connection: 1).awareOfHash == h2)
        #expect(!confirm(1, h2))
        #expect(!confirm(2, h2, singleBearer: false))
        #expect(!s.isChangeAware(2) && s.clientRecord(connection: 2).awareOfHash == h0)
        #expect(confirm(3, h2, singleBearer: false) && s.clientRecord(connection: 3).awareOfHash == h2)
        let (hash, effects) = s.handle(.readRequest(handle: m.databaseHash), connection: 4, mtu: 23)
        #expect(hash == .readResponse(value: h2) && effects == [.clientRecordChanged(connection: 4)])
        #expect(s.clientRecord(connection: 4).awareOfHash == h2)
        #expect(confirm(5, h2) && s.isChangeAware(5))
        #expect(s.clientRecord(connection: 5).awareOfHash == h2)
    }

    /// §2.5.2.1, as the Core Specification words it: a change-unaware client's
    /// discovery over ranges is answered; a request at handles gets Database Out Of Sync
    /// once, and on one bearer its next request makes it change-aware (answered, and
    /// reported); with enhanced bearers every such request gets it until the client
    /// reads the Database Hash, and its next request after that makes it aware.
    /// Commands are ignored meanwhile.
    @Test func aChangeUnawareClientIsToldOnceAndDiscoversMeanwhile() throws {
        var db = AttributeDatabase()
        let m = try db.addMandatoryServices(deviceName: "x")
        let level = try db.add(GATTService(uuid: BluetoothUUID(0x180F), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0x2A19), properties: [.read, .write, .writeWithoutResponse], value: [80]),
        ])).characteristicValues[0]
        var s = GATTServerState(database: db)
        for c: UInt16 in [1, 2] {
            _ = s.handle(.writeRequest(handle: m.clientSupportedFeatures, value: [0x01]), connection: c, mtu: 23)
            s.changedWhileAway(connection: c, known: [UInt8](repeating: 7, count: 16))
        }
        let outOfSync = { (op: ATTOpcode) in ATTPDU.errorResponse(request: op, handle: 0, error: .databaseOutOfSync) }
        // Discovery over ranges is answered.
        guard case .readByGroupTypeResponse? = s.handle(.readByGroupTypeRequest(start: 1, end: 0xFFFF, type: BluetoothUUID(0x2800)), connection: 1, mtu: 23).response,
              case .findInformationResponse? = s.handle(.findInformationRequest(start: 1, end: 0xFFFF), connection: 1, mtu: 23).response,
              case .readByTypeResponse? = s.handle(.readByTypeRequest(start: 1, end: 0xFFFF, type: BluetoothUUID(0x2803)), connection: 1, mtu: 23).response
        else { Issue.record("discovery was refused"); return }
        // A command is ignored: the value stays.
        #expect(s.handle(.writeCommand(handle: level, value: [1]), connection: 1, mtu: 23) == (nil, []))
        // Read By Type of a value over part of the range, then anything: told once, then aware.
        #expect(s.handle(.readByTypeRequest(start: level, end: level, type: BluetoothUUID(0x2A19)), connection: 1, mtu: 23).response == outOfSync(.readByTypeRequest))
        let (r, effects) = s.handle(.readRequest(handle: level), connection: 1, mtu: 23)
        #expect(r == .readResponse(value: [80]) && effects == [.clientRecordChanged(connection: 1)])
        #expect(s.isChangeAware(1))
        // With enhanced bearers: told at every request until it reads the hash.
        for _ in 0..<2 { #expect(s.handle(.readRequest(handle: level), connection: 2, mtu: 23, singleBearer: false).response == outOfSync(.readRequest)) }
        let (hash, none) = s.handle(.readByTypeRequest(start: 1, end: 0xFFFF, type: BluetoothUUID(0x2B2A)), connection: 2, mtu: 23, singleBearer: false)
        guard case .readByTypeResponse? = hash else { Issue.record("\(String(describing: hash))"); return }
        #expect(none.isEmpty && !s.isChangeAware(2))
        #expect(s.handle(.readRequest(handle: level), connection: 2, mtu: 23, singleBearer: false) == (.readResponse(value: [80]), [.clientRecordChanged(connection: 2)]))
        #expect(s.isChangeAware(2))
    }

    @Test func onlyAClientThatSaysSoGetsThem() throws {
        var (s, _, _, _) = try GATTServerTests.make()
        var db = s.database
        let m = try db.addMandatoryServices(deviceName: "x")
        s = GATTServerState(database: db)
        #expect(s.clientSupportedFeatures(connection: 1) == 0)
        _ = s.handle(.writeRequest(handle: m.clientSupportedFeatures, value: [0x06]), connection: 1, mtu: 23)
        #expect(s.clientSupportedFeatures(connection: 1) == ClientSupportedFeatures.eatt | ClientSupportedFeatures.multipleHandleValueNotifications)
        // Bits stay set (§7.2: "the client shall not clear any bits it has set"): a
        // write without one is refused with Value Not Allowed, as BlueZ refuses it, and
        // changes nothing; one that keeps them adds its own.
        let csf = m.clientSupportedFeatures
        #expect(s.handle(.writeRequest(handle: csf, value: [0x01]), connection: 1, mtu: 23).response
                == .errorResponse(request: .writeRequest, handle: csf, error: .valueNotAllowed))
        #expect(s.clientSupportedFeatures(connection: 1) == 0x06)
        #expect(s.handle(.writeRequest(handle: csf, value: [0x07]), connection: 1, mtu: 23).response == .writeResponse)
        #expect(s.clientSupportedFeatures(connection: 1) == 0x07)
        // Reserved bits are no client's to set, and clearing them is no clearing.
        #expect(s.handle(.writeRequest(handle: csf, value: [0xF7]), connection: 1, mtu: 23).response == .writeResponse)
        #expect(s.handle(.writeRequest(handle: csf, value: [0x07]), connection: 1, mtu: 23).response == .writeResponse)
        #expect(s.clientSupportedFeatures(connection: 1) == 0x07)
        #expect(s.clientSupportedFeatures(connection: 2) == 0)
        // The same refusal for a prepared write, at its execution.
        _ = s.handle(.prepareWriteRequest(handle: csf, offset: 0, value: [0x02]), connection: 1, mtu: 23)
        #expect(s.handle(.executeWriteRequest(flags: 1), connection: 1, mtu: 23).response
                == .errorResponse(request: .executeWriteRequest, handle: csf, error: .valueNotAllowed))
        #expect(s.clientSupportedFeatures(connection: 1) == 0x07)
    }
}
