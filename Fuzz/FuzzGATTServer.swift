// libFuzzer target: the GATT server (`GATTServerState`) under a client that sends
// anything, on two connections, at any link security. The input's first byte picks
// ATT_MTU (23...517); then records follow, each a control byte, a length byte and
// that many bytes decoded as an ATT PDU (undecodable ones are the bearer's to answer
// and are skipped). The control byte picks the connection (bit 0), the link's
// encryption, authentication and authorization (bits 1–3; authentication without
// encryption: unencrypted, with a stored key for the peer), its key size (bits 4–5:
// 16, 7, 6, 16) and whether the database changed (bit 6, heeded on every eighth
// record) or the connection ended (bit 7) before the PDU. Battery Level stands for a value the application answers
// itself: by turns the stored one, one the application supplies and its refusal
// (application error 0x80), as `GATTServer` passes them for a manual value.
//
// Besides not trapping, every answer must be what Vol 3 Part F §3.4 allows:
// - a request no longer than ATT_MTU gets exactly one response, no longer than ATT_MTU:
//   its own response opcode or an Error Response naming that request (never, for a
//   Prepare Write Request, one about the value, which is judged at execution, §3.4.6.1);
// - anything else (commands, notifications, confirmations, responses) gets none;
// - discovery responses list handles inside the requested range, strictly increasing,
//   of the requested type, with one entry length per response;
// - a read returns a prefix of what the attribute holds;
// - a refusal for security names what the link lacks (Vol 3 Part C §10.3.1);
// - a write or a subscription happens only on an attribute that exists, takes writes
//   and, for a subscription, whose characteristic allows the bits set; a written value
//   is no longer than the attribute's maximum and is then what the attribute holds.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let first = bytes.first else { return 0 }
    let mtu = Swift.min(517, 23 + Int(first) * 2)
    var (server, level) = fresh
    var i = 1, record = 0
    while i + 1 < bytes.count {
        let control = bytes[i], n = Int(bytes[i + 1])
        let end = Swift.min(bytes.count, i + 2 + n)
        let pduBytes = Array(bytes[(i + 2)..<end])
        i = end
        record += 1
        let supplied: GATTServerState.SuppliedValues = switch record % 3 {
        case 1: [level: .success([UInt8](repeating: UInt8(truncatingIfNeeded: record), count: record % 40))]
        case 2: [level: .failure(ATTErrorCode(rawValue: 0x80))]
        default: [:]
        }
        let connection: UInt16 = control & 1 == 0 ? 0x0040 : 0x0041
        // A change recomputes the Database Hash (AES-CMAC over the database): on a
        // record in eight, so the target keeps its pace.
        if control & 0x40 != 0, record % 8 == 0 { server.databaseChanged(0x0001...0xFFFF, connections: [0x0040, 0x0041]) }
        if control & 0x80 != 0 { server.disconnected(connection) }
        // Authenticated without encryption stands for an unencrypted link whose peer has
        // a stored key (`keyAvailable`).
        let security = LinkSecurity(encrypted: control & 2 != 0, authenticated: control & 4 != 0, authorized: control & 8 != 0,
                                    keySize: [16, 7, 6, 16][Int(control >> 4) & 3], keyAvailable: control & 6 == 4)
        guard let pdu = try? ATTPDU(bytes: pduBytes) else { continue }
        // The bearer answers a request longer than ATT_MTU with Invalid PDU itself.
        if pdu.opcode.kind == .request, pduBytes.count > mtu { continue }
        let before = server.database
        let (response, effects) = server.handle(pdu, connection: connection, mtu: mtu, security: security, supplied: supplied)
        check(pdu, response, mtu: mtu, database: before, supplied: supplied)
        check(response, security: security)
        for effect in effects { check(effect, server: server, before: before) }
    }
    return 0
}

/// The server every input starts from (a value: each input gets its own copy), built
/// once, and Battery Level's value handle.
private let fresh: (GATTServerState, UInt16) = {
    do { return try FuzzServer.make() } catch { fatalError("the fuzz target's database: \(error)") }
}()

enum FuzzServer {
    static func make() throws -> (GATTServerState, UInt16) {
        var db = AttributeDatabase()
        _ = try db.addMandatoryServices(deviceName: "fuzz", serverFeatures: 1)
        let battery = try db.add(GATTService(uuid: BluetoothUUID(0x180F), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0x2A19), properties: [.read, .notify], value: [100],
                               descriptors: [.userDescription("Battery")]),
        ]))
        let secondary = try db.add(GATTService(uuid: BluetoothUUID(0x181C), isPrimary: false, characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0x2A8A), properties: [.read, .write], permissions: [.readAuthorized, .writeAuthorized], value: [1, 2]),
        ]))
        _ = try db.add(GATTService(uuid: BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!, includes: [secondary.start], characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0x2A00), properties: [.read, .write, .writeWithoutResponse, .extendedProperties],
                               value: Array(repeating: 0x41, count: 100),
                               descriptors: [GATTDescriptor(uuid: GATTType.extendedProperties, value: [1, 0])]),
            GATTCharacteristic(uuid: BluetoothUUID(0x2A01), properties: [.write], maximumLength: 4),
            GATTCharacteristic(uuid: BluetoothUUID(0x2A02), properties: [.read, .indicate], permissions: [.readEncrypted], value: [1]),
            GATTCharacteristic(uuid: BluetoothUUID("6E400002-B5A3-F393-E0A9-E50E24DCCA9E")!, properties: [.read, .write, .notify, .indicate, .authenticatedSignedWrites],
                               permissions: [.readAuthenticated, .writeAuthenticated], value: [7, 7, 7]),
            GATTCharacteristic(uuid: BluetoothUUID(0x2A03), properties: [.read], permissions: [], value: [9]),
        ]))
        var server = GATTServerState(database: db, prepareQueueLimit: 5)
        server.setSigningKey(SigningKey(csrk: Array(0..<16), security: LinkSecurity(encrypted: true, authenticated: true)), connection: 0x0041)
        return (server, battery.characteristicValues[0])
    }
}

/// The response opcode each request expects.
private let responseTo: [UInt8: UInt8] = [0x02: 0x03, 0x04: 0x05, 0x06: 0x07, 0x08: 0x09, 0x0A: 0x0B, 0x0C: 0x0D, 0x0E: 0x0F,
                                          0x10: 0x11, 0x12: 0x13, 0x16: 0x17, 0x18: 0x19, 0x20: 0x21]

/// A refusal for security names what the link lacks (Vol 3, Part C, §10.3.1): Insufficient
/// Encryption only to an unencrypted link whose peer has a key, Insufficient
/// Authentication to an unencrypted one without a key or an encrypted one whose key is
/// not authenticated, a short key only to an encrypted link.
private func check(_ response: ATTPDU?, security s: LinkSecurity) {
    guard case let .errorResponse(_, _, code)? = response else { return }
    switch code {
    case .insufficientEncryption: precondition(!s.encrypted && s.keyAvailable, "Insufficient Encryption on \(s)")
    case .insufficientAuthentication: precondition(s.encrypted ? !s.authenticated : !s.keyAvailable, "Insufficient Authentication on \(s)")
    case .encryptionKeySizeTooShort: precondition(s.encrypted, "Encryption Key Size Too Short on \(s)")
    default: break
    }
}

private func check(_ pdu: ATTPDU, _ response: ATTPDU?, mtu: Int, database: AttributeDatabase, supplied: GATTServerState.SuppliedValues) {
    guard pdu.opcode.kind == .request, pdu.opcode != .exchangeMTURequest else {
        precondition(response == nil, "\(pdu.opcode) got \(String(describing: response))")
        return
    }
    guard let response else { preconditionFailure("\(pdu.opcode) got no response") }
    precondition(response.bytes.count <= mtu, "\(response.opcode) of \(response.bytes.count) bytes; ATT_MTU is \(mtu)")
    if case let .errorResponse(request, _, code) = response {
        precondition(request == pdu.opcode, "an Error Response for \(request) answered \(pdu.opcode)")
        // §3.4.6.1: a prepared value is validated when the queue is executed.
        precondition(request != .prepareWriteRequest || (code != .invalidAttributeValueLength && code != .invalidOffset),
                     "Prepare Write Request refused with \(code)")
        // Only the application refuses with its own code, and only where it was asked.
        if case let .errorResponse(_, handle, ATTErrorCode(rawValue: 0x80)) = response {
            precondition(supplied[handle] == .failure(ATTErrorCode(rawValue: 0x80)), "an application error for \(handle), which nobody refused")
        }
        return
    }
    precondition(responseTo[pdu.opcode.rawValue] == response.opcode.rawValue, "\(pdu.opcode) answered with \(response.opcode)")
    func inRange(_ handles: [UInt16], _ s: UInt16, _ e: UInt16) {
        precondition(!handles.isEmpty, "an empty \(response.opcode)")
        precondition(zip(handles, handles.dropFirst()).allSatisfy { $0 < $1 }, "\(response.opcode): handles not increasing: \(handles)")
        precondition(handles.allSatisfy { (s...e).contains($0) }, "\(response.opcode): \(handles) outside \(s)...\(e)")
    }
    switch (pdu, response) {
    case let (.findInformationRequest(s, e), .findInformationResponse(list)):
        inRange(list.map(\.handle), s, e)
        precondition(Set(list.map { $0.uuid.uint16 == nil }).count == 1, "Find Information mixes UUID sizes")
        for entry in list { precondition(database.attribute(entry.handle)?.type == entry.uuid) }
    case let (.findByTypeValueRequest(s, e, type, value), .findByTypeValueResponse(list)):
        inRange(list.map(\.found), s, e)
        for entry in list {
            let a = database.attribute(entry.found)
            precondition(a?.type == BluetoothUUID(type) && a?.value == value && entry.groupEnd >= entry.found)
        }
    case let (.readByTypeRequest(s, e, type), .readByTypeResponse(list)):
        inRange(list.map(\.handle), s, e)
        precondition(Set(list.map(\.value.count)).count == 1, "Read By Type entries of different lengths")
        for entry in list {
            precondition(database.attribute(entry.handle)?.type == type)
            if case let .success(v)? = supplied[entry.handle] { precondition(v.starts(with: entry.value), "Read By Type did not send the supplied value") }
        }
    case let (.readByGroupTypeRequest(s, e, type), .readByGroupTypeResponse(list)):
        inRange(list.map(\.handle), s, e)
        precondition(Set(list.map(\.value.count)).count == 1, "Read By Group Type entries of different lengths")
        for entry in list {
            let a = database.attribute(entry.handle)
            precondition(a?.type == type && entry.groupEnd >= entry.handle)
            if case let .serviceDeclaration(end)? = a?.role { precondition(end == entry.groupEnd) } else { preconditionFailure("not a service") }
            precondition(a.map { $0.value.starts(with: entry.value) } ?? false)
        }
    case let (.readRequest(h), .readResponse(v)):
        if let a = database.attribute(h), a.type != BluetoothUUID(0x2B29), !isConfiguration(a) {
            precondition(a.value.starts(with: v), "Read of \(h) returned what it does not hold")
        }
    case let (.readBlobRequest(h, offset), .readBlobResponse(v)):
        if let a = database.attribute(h), a.type != BluetoothUUID(0x2B29), !isConfiguration(a) {
            precondition(Int(offset) <= a.value.count && a.value[Int(offset)...].starts(with: v), "Read Blob of \(h) at \(offset)")
        }
    case let (.prepareWriteRequest(h, o, v), .prepareWriteResponse(h2, o2, v2)):
        precondition(h == h2 && o == o2 && v == v2, "Prepare Write Response does not echo the request")
    default:
        break
    }
}

private func isConfiguration(_ a: Attribute) -> Bool {
    if case .clientConfiguration = a.role { return true }
    return false
}

private func check(_ effect: GATTServerState.Effect, server: GATTServerState, before: AttributeDatabase) {
    switch effect {
    case let .written(handle, value, _):
        guard let a = before.attribute(handle) else { preconditionFailure("a write to \(handle), which does not exist") }
        precondition(!a.permissions.isDisjoint(with: [.write, .writeEncrypted, .writeAuthenticated, .writeAuthorized]), "a write to \(handle), which takes none")
        precondition(value.count <= a.maximumLength, "\(value.count) bytes written to \(handle), whose maximum is \(a.maximumLength)")
        precondition(!isConfiguration(a), "a CCCD written as a value")
        precondition(server.database.attribute(handle)?.value == value, "\(handle) does not hold what was written")
    case let .subscription(valueHandle, _, notify, indicate):
        guard case let .characteristicValue(properties)? = before.attribute(valueHandle)?.role else {
            preconditionFailure("a subscription to \(valueHandle), which is no characteristic value")
        }
        precondition(!notify || properties.contains(.notify), "notifications of \(valueHandle), which does not notify")
        precondition(!indicate || properties.contains(.indicate), "indications of \(valueHandle), which does not indicate")
    case .signCounter:
        break
    case let .clientRecordChanged(connection):
        // Reported when the client set Client Supported Features bits, or became
        // change-aware: either way it is change-aware now, or has bits set.
        precondition(server.isChangeAware(connection) || server.clientSupportedFeatures(connection: connection) != 0,
                     "a record change for \(connection), which neither is change-aware nor set a feature")
    }
}
