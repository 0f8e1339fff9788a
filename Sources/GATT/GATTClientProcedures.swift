// GATT client sub-procedures as sans-I/O state machines (Core Specification v5.4,
// Vol 3, Part G, §4.4–§4.8): each takes the server's answer to its last request and
// returns the next request or what it found. Nothing the server sends is trusted:
// every entry must lie inside the range asked for, handles must strictly increase
// (within one response and across responses), entry lengths must be ones the
// procedure defines, a response may not exceed ATT_MTU. A violation ends the
// procedure with a `GATTClientError` naming it, so a procedure driven by a hostile
// server always makes progress (the next request starts after the last handle
// returned) or stops; it never traps and never repeats a request.
//
// Round trips: characteristics of all services come from one Read By Type range and
// descriptors of all characteristics from one Find Information range (gaps between
// extents are skipped), as BlueZ does; the spec leaves the final "nothing more"
// request of each discovery (answered with Attribute Not Found) unavoidable unless a
// response already reached the end of the range.

import ATT
import HCI

public struct DiscoveredService: Hashable, Sendable {
    public var uuid: BluetoothUUID
    public var start: UInt16
    public var end: UInt16
    public var isPrimary: Bool
    public init(uuid: BluetoothUUID, start: UInt16, end: UInt16, isPrimary: Bool) {
        self.uuid = uuid
        self.start = start
        self.end = end
        self.isPrimary = isPrimary
    }
}

public struct DiscoveredCharacteristic: Hashable, Sendable {
    public var uuid: BluetoothUUID
    public var declarationHandle: UInt16
    public var valueHandle: UInt16
    public var properties: CharacteristicProperties
    /// Last handle that belongs to this characteristic (its descriptors end here).
    public var end: UInt16
    /// From handles known another way (a cache, a previous connection to a bonded peer).
    public init(uuid: BluetoothUUID, declarationHandle: UInt16, valueHandle: UInt16, properties: CharacteristicProperties, end: UInt16) {
        self.uuid = uuid
        self.declarationHandle = declarationHandle
        self.valueHandle = valueHandle
        self.properties = properties
        self.end = end
    }
}

public struct DiscoveredDescriptor: Hashable, Sendable {
    public var uuid: BluetoothUUID
    public var handle: UInt16
    public init(uuid: BluetoothUUID, handle: UInt16) {
        self.uuid = uuid
        self.handle = handle
    }
}

public struct DiscoveredInclude: Hashable, Sendable {
    public var handle: UInt16
    public var service: DiscoveredService
}

public enum GATTClientError: Error, Hashable, Sendable, CustomStringConvertible {
    case att(ATTBearerError)
    case unexpectedResponse(ATTOpcode)
    /// A Prepare Write Response (of a long or reliable write) did not echo its request's
    /// handle, offset and value; the queue was cancelled.
    case preparedWriteMismatch(handle: UInt16)
    case noClientConfiguration(valueHandle: UInt16)
    /// The server answered with a response that lists nothing.
    case emptyResponse(ATTOpcode)
    /// An entry's handle lies outside the range the request asked for.
    case handleOutOfRange(ATTOpcode, handle: UInt16, range: ClosedRange<UInt16>)
    /// An entry's handle is not above the one before it (in this or an earlier response).
    case handlesNotIncreasing(ATTOpcode, previous: UInt16, handle: UInt16)
    /// An entry the procedure cannot use: a value of a length §4 does not define, a
    /// group that ends before it starts, a characteristic value outside its service.
    case malformedEntry(ATTOpcode, handle: UInt16, reason: String)
    /// The response is longer than ATT_MTU allows.
    case responseExceedsMTU(ATTOpcode, length: Int, mtu: Int)
    /// A value longer than the PDU can carry (a Signed Write Command: ATT_MTU - 15).
    case valueTooLong(length: Int, limit: Int)

    public var description: String {
        switch self {
        case let .att(e): return "\(e)"
        case let .unexpectedResponse(op): return "unexpected \(op)"
        case let .preparedWriteMismatch(h): return "the server's Prepare Write Response for 0x\(hex4(h)) did not echo the request; the write was cancelled"
        case let .noClientConfiguration(h): return "characteristic 0x\(hex4(h)) has no Client Characteristic Configuration"
        case let .emptyResponse(op): return "the server sent an empty \(op)"
        case let .handleOutOfRange(op, h, r):
            return "the server's \(op) lists handle 0x\(hex4(h)) outside the range asked for (0x\(hex4(r.lowerBound))–0x\(hex4(r.upperBound)))"
        case let .handlesNotIncreasing(op, p, h): return "the server's \(op) lists handle 0x\(hex4(h)) after 0x\(hex4(p)); handles must increase"
        case let .malformedEntry(op, h, why): return "the server's \(op) entry at 0x\(hex4(h)) is malformed: \(why)"
        case let .responseExceedsMTU(op, n, mtu): return "the server's \(op) is \(n) bytes; ATT_MTU is \(mtu)"
        case let .valueTooLong(n, limit): return "a \(n)-byte value does not fit; at most \(limit) bytes"
        }
    }
}

/// What a client procedure does next.
public enum GATTProcedureStep<Output: Sendable>: Sendable {
    /// Send this request and feed its answer (response or Error Response) to `receive`.
    case request(ATTPDU)
    case finished(Output)
}

/// A GATT client sub-procedure, sans I/O: `start()` gives the first step, each
/// answer to a request goes to `receive(_:)`. After a thrown error the procedure is
/// over; feeding it more is a programming error that throws again.
public protocol GATTClientProcedure: Sendable {
    associatedtype Output: Sendable
    mutating func start() -> GATTProcedureStep<Output>
    mutating func receive(_ answer: ATTPDU) throws(GATTClientError) -> GATTProcedureStep<Output>
}

/// Checks the parts every answer shares: not longer than ATT_MTU; an Error Response
/// other than Attribute Not Found ends the procedure with that error.
/// Returns true for Attribute Not Found (the end of a discovery).
private func isAttributeNotFound(_ answer: ATTPDU, mtu: Int) throws(GATTClientError) -> Bool {
    let length = answer.encodedCount
    guard length <= mtu else { throw .responseExceedsMTU(answer.opcode, length: length, mtu: mtu) }
    if case let .errorResponse(req, h, code) = answer {
        if code == .attributeNotFound { return true }
        throw .att(.errorResponse(request: req, handle: h, error: code))
    }
    return false
}

/// Handles of one discovery, checked as they arrive: inside `range`, each above the last.
private struct HandleCursor: Sendable {
    let opcode: ATTOpcode
    let range: ClosedRange<UInt16>
    private(set) var last: UInt16?

    init(_ opcode: ATTOpcode, range: ClosedRange<UInt16>) {
        self.opcode = opcode
        self.range = range
    }

    /// Accepts `handle` if it is in `from...range.upperBound` and above the previous one.
    mutating func accept(_ handle: UInt16, from start: UInt16) throws(GATTClientError) {
        guard handle >= start, handle <= range.upperBound else {
            throw .handleOutOfRange(opcode, handle: handle, range: start...Swift.max(start, range.upperBound))
        }
        if let last, handle <= last { throw .handlesNotIncreasing(opcode, previous: last, handle: handle) }
        last = handle
    }

    /// A group accepted at its start covers handles up to `end` (≥ that start).
    mutating func extend(to end: UInt16) { last = Swift.max(last ?? end, end) }

    /// The next start after `handle`, or nil when the range is exhausted.
    func next(after handle: UInt16) -> UInt16? { handle < range.upperBound ? handle + 1 : nil }
}

private func decodeUUID(_ bytes: [UInt8], _ op: ATTOpcode, handle: UInt16) throws(GATTClientError) -> BluetoothUUID {
    guard bytes.count == 2 || bytes.count == 16, let u = try? BluetoothUUID(littleEndian: bytes) else {
        throw .malformedEntry(op, handle: handle, reason: "a UUID of \(bytes.count) bytes")
    }
    return u
}

private func uint16(_ b: [UInt8], _ i: Int) -> UInt16 { UInt16(b[i]) | UInt16(b[i + 1]) << 8 }

// MARK: §4.4 Primary service discovery

/// Discover All Primary Services (Read By Group Type) or, with a UUID, Discover
/// Primary Service by Service UUID (Find By Type Value).
public struct PrimaryServiceDiscovery: GATTClientProcedure {
    public let uuid: BluetoothUUID?
    private let mtu: Int
    private var cursor: HandleCursor
    private var from: UInt16 = 1
    private var found: [DiscoveredService] = []

    public init(uuid: BluetoothUUID? = nil, mtu: Int) {
        self.uuid = uuid
        self.mtu = mtu
        cursor = HandleCursor(uuid == nil ? .readByGroupTypeResponse : .findByTypeValueResponse, range: 1...0xFFFF)
    }

    public mutating func start() -> GATTProcedureStep<[DiscoveredService]> { .request(request) }

    private var request: ATTPDU {
        if let uuid { return .findByTypeValueRequest(start: from, end: 0xFFFF, type: 0x2800, value: uuid.attBytes) }
        return .readByGroupTypeRequest(start: from, end: 0xFFFF, type: GATTType.primaryService)
    }

    public mutating func receive(_ answer: ATTPDU) throws(GATTClientError) -> GATTProcedureStep<[DiscoveredService]> {
        if try isAttributeNotFound(answer, mtu: mtu) { return .finished(found) }
        var groups: [(start: UInt16, end: UInt16, uuid: BluetoothUUID)] = []
        switch (answer, uuid) {
        case let (.readByGroupTypeResponse(list), nil):
            for g in list { groups.append((g.handle, g.groupEnd, try decodeUUID(g.value, answer.opcode, handle: g.handle))) }
        case let (.findByTypeValueResponse(list), u?):
            for r in list { groups.append((r.found, r.groupEnd, u)) }
        default:
            throw .unexpectedResponse(answer.opcode)
        }
        guard let last = groups.last else { throw .emptyResponse(answer.opcode) }
        for g in groups {
            try cursor.accept(g.start, from: from)
            guard g.end >= g.start else { throw .malformedEntry(answer.opcode, handle: g.start, reason: "group ends at 0x\(hex4(g.end))") }
            // The next group must start after this one ends.
            cursor.extend(to: g.end)
            found.append(DiscoveredService(uuid: g.uuid, start: g.start, end: g.end, isPrimary: true))
        }
        guard let next = cursor.next(after: last.end) else { return .finished(found) }
        from = next
        return .request(request)
    }
}

// MARK: §4.5 Relationship discovery

/// Find Included Services: Read By Type of «Include» in the service's range; a
/// 128-bit included service's UUID is read from its declaration (§4.5.1).
public struct IncludedServiceDiscovery: GATTClientProcedure {
    public let service: DiscoveredService
    private let mtu: Int
    private var cursor: HandleCursor
    private var from: UInt16
    private var found: [DiscoveredInclude] = []
    /// Includes whose UUID is still to be read, and the one being read.
    private var unread: [DiscoveredInclude] = []
    private var next: UInt16?

    public init(service: DiscoveredService, mtu: Int) {
        self.service = service
        self.mtu = mtu
        from = service.start
        cursor = HandleCursor(.readByTypeResponse, range: service.start...Swift.max(service.start, service.end))
    }

    public mutating func start() -> GATTProcedureStep<[DiscoveredInclude]> {
        service.end >= service.start ? .request(.readByTypeRequest(start: from, end: service.end, type: GATTType.include)) : .finished([])
    }

    public mutating func receive(_ answer: ATTPDU) throws(GATTClientError) -> GATTProcedureStep<[DiscoveredInclude]> {
        if let reading = unread.first {
            // The answer to Read Request of an included service's declaration.
            guard !(try isAttributeNotFound(answer, mtu: mtu)) else { throw .att(.errorResponse(request: .readRequest, handle: reading.service.start, error: .attributeNotFound)) }
            guard case let .readResponse(v) = answer else { throw .unexpectedResponse(answer.opcode) }
            guard v.count == 16 else { throw .malformedEntry(.readResponse, handle: reading.service.start, reason: "a 128-bit service UUID of \(v.count) bytes") }
            var inc = unread.removeFirst()
            inc.service.uuid = try decodeUUID(v, .readResponse, handle: inc.service.start)
            found.append(inc)
            return step()
        }
        if try isAttributeNotFound(answer, mtu: mtu) { return .finished(found) }
        guard case let .readByTypeResponse(list) = answer else { throw .unexpectedResponse(answer.opcode) }
        guard let last = list.last else { throw .emptyResponse(answer.opcode) }
        for e in list {
            try cursor.accept(e.handle, from: from)
            guard e.value.count == 4 || e.value.count == 6 else {
                throw .malformedEntry(answer.opcode, handle: e.handle, reason: "an include declaration of \(e.value.count) bytes")
            }
            let s = uint16(e.value, 0), end = uint16(e.value, 2)
            guard s != 0, end >= s else { throw .malformedEntry(answer.opcode, handle: e.handle, reason: "included range 0x\(hex4(s))–0x\(hex4(end))") }
            let inc = DiscoveredInclude(handle: e.handle, service: DiscoveredService(
                uuid: e.value.count == 6 ? try decodeUUID(Array(e.value[4...5]), answer.opcode, handle: e.handle) : BluetoothUUID(0),
                start: s, end: end, isPrimary: false))
            if e.value.count == 6 { found.append(inc) } else { unread.append(inc) }
        }
        next = cursor.next(after: last.handle)
        return step()
    }

    private mutating func step() -> GATTProcedureStep<[DiscoveredInclude]> {
        if let u = unread.first { return .request(.readRequest(handle: u.service.start)) }
        guard let n = next else { return .finished(found.sorted { $0.handle < $1.handle }) }
        from = n
        return .request(.readByTypeRequest(start: n, end: service.end, type: GATTType.include))
    }
}

// MARK: §4.6 Characteristic discovery

/// Discover All Characteristics of several services at once: one Read By Type range
/// from the first service's start to the last one's end. Each characteristic ends
/// before the next declaration in its service, or with the service. The output has
/// one list per service, in the order given.
public struct CharacteristicDiscovery: GATTClientProcedure {
    public let services: [DiscoveredService]
    private let mtu: Int
    private var cursor: HandleCursor
    private var from: UInt16
    private var found: [DiscoveredCharacteristic] = []

    public init(services: [DiscoveredService], mtu: Int) {
        self.services = services
        self.mtu = mtu
        let valid = services.filter { $0.start <= $0.end && $0.start != 0 }
        let low = valid.map(\.start).min() ?? 1, high = valid.map(\.end).max() ?? 0
        from = low
        cursor = HandleCursor(.readByTypeResponse, range: low...Swift.max(low, high))
        if valid.isEmpty { from = 0 }
    }

    public mutating func start() -> GATTProcedureStep<[[DiscoveredCharacteristic]]> {
        from == 0 ? .finished(services.map { _ in [] }) : .request(request)
    }

    private var request: ATTPDU { .readByTypeRequest(start: from, end: cursor.range.upperBound, type: GATTType.characteristic) }

    public mutating func receive(_ answer: ATTPDU) throws(GATTClientError) -> GATTProcedureStep<[[DiscoveredCharacteristic]]> {
        if try isAttributeNotFound(answer, mtu: mtu) { return .finished(try output()) }
        guard case let .readByTypeResponse(list) = answer else { throw .unexpectedResponse(answer.opcode) }
        guard let last = list.last else { throw .emptyResponse(answer.opcode) }
        for e in list {
            try cursor.accept(e.handle, from: from)
            guard e.value.count == 5 || e.value.count == 19 else {
                throw .malformedEntry(answer.opcode, handle: e.handle, reason: "a characteristic declaration of \(e.value.count) bytes")
            }
            let valueHandle = uint16(e.value, 1)
            guard valueHandle > e.handle else {
                throw .malformedEntry(answer.opcode, handle: e.handle, reason: "value handle 0x\(hex4(valueHandle)) is not after its declaration")
            }
            found.append(DiscoveredCharacteristic(
                uuid: try decodeUUID(Array(e.value[3...]), answer.opcode, handle: e.handle), declarationHandle: e.handle,
                valueHandle: valueHandle, properties: CharacteristicProperties(rawValue: e.value[0]), end: e.handle))
        }
        guard let next = cursor.next(after: last.handle) else { return .finished(try output()) }
        from = next
        return .request(request)
    }

    /// Assigns each characteristic to the service holding its declaration and sets its end.
    private func output() throws(GATTClientError) -> [[DiscoveredCharacteristic]] {
        var out: [[DiscoveredCharacteristic]] = []
        for s in services {
            var chars = found.filter { $0.declarationHandle >= s.start && $0.declarationHandle <= s.end }
            for i in chars.indices {
                // Declarations strictly increase (checked), so the next one is above this one: no underflow.
                chars[i].end = i + 1 < chars.count ? chars[i + 1].declarationHandle - 1 : s.end
                guard chars[i].valueHandle <= chars[i].end else {
                    throw .malformedEntry(.readByTypeResponse, handle: chars[i].declarationHandle,
                                          reason: "value handle 0x\(hex4(chars[i].valueHandle)) lies beyond the characteristic (ends 0x\(hex4(chars[i].end)))")
                }
            }
            out.append(chars)
        }
        return out
    }
}

// MARK: §4.7 Descriptor discovery

/// Discover All Characteristic Descriptors of several characteristics at once: Find
/// Information over their extents (value handle + 1 ... end), merged into one range;
/// handles between extents (declarations, values) are skipped, not stored. The
/// output has one list per characteristic, in the order given.
public struct DescriptorDiscovery: GATTClientProcedure {
    public let characteristics: [DiscoveredCharacteristic]
    private let mtu: Int
    /// (index into `characteristics`, extent), sorted by extent.
    private let extents: [(index: Int, range: ClosedRange<UInt16>)]
    private var cursor: HandleCursor
    private var from: UInt16 = 0
    private var found: [[DiscoveredDescriptor]]

    public init(characteristics: [DiscoveredCharacteristic], mtu: Int) {
        self.characteristics = characteristics
        self.mtu = mtu
        extents = characteristics.enumerated()
            .compactMap { i, c in c.valueHandle < c.end ? (i, (c.valueHandle + 1)...c.end) : nil }
            .sorted { $0.range.lowerBound < $1.range.lowerBound }
        found = characteristics.map { _ in [] }
        let low = extents.first?.range.lowerBound ?? 1
        cursor = HandleCursor(.findInformationResponse, range: low...Swift.max(low, extents.map(\.range.upperBound).max() ?? low))
        from = extents.isEmpty ? 0 : low
    }

    public mutating func start() -> GATTProcedureStep<[[DiscoveredDescriptor]]> {
        from == 0 ? .finished(found) : .request(request)
    }

    private var request: ATTPDU { .findInformationRequest(start: from, end: cursor.range.upperBound) }

    public mutating func receive(_ answer: ATTPDU) throws(GATTClientError) -> GATTProcedureStep<[[DiscoveredDescriptor]]> {
        if try isAttributeNotFound(answer, mtu: mtu) { return .finished(found) }
        guard case let .findInformationResponse(list) = answer else { throw .unexpectedResponse(answer.opcode) }
        guard let last = list.last else { throw .emptyResponse(answer.opcode) }
        for e in list {
            try cursor.accept(e.handle, from: from)
            if let x = extents.first(where: { $0.range.contains(e.handle) }) {
                found[x.index].append(DiscoveredDescriptor(uuid: e.uuid, handle: e.handle))
            }
        }
        // Continue after the last handle, skipping ahead to the next extent that is not done.
        guard let after = cursor.next(after: last.handle),
              let next = extents.first(where: { $0.range.upperBound >= after }) else { return .finished(found) }
        from = Swift.max(after, next.range.lowerBound)
        return .request(request)
    }
}

// MARK: §4.8.2 Read using characteristic UUID

/// Read Using Characteristic UUID: a Read By Type Request over `range`; the (handle,
/// value) pairs of its response, each handle inside the range and above the one
/// before, the response no longer than ATT_MTU. Attribute Not Found is no match (an
/// empty result); any other Error Response ends it with that error.
///
/// With `all` (what an application asking for every value of a type wants, as BlueZ's
/// `char-read-uuid` and Bumble's `read_characteristics_by_uuid` do) it goes on: the next
/// Read By Type Request starts after the last handle returned, until Attribute Not
/// Found or the end of the range, handles increasing across responses too; and a
/// value the response may have cut (§3.4.4.2: a value longer than ATT_MTU − 4 or 253
/// octets comes as its first that many) is completed by a `ReadLongProcedure` from its
/// end on (Read Blob Requests; Attribute Not Long or Invalid Offset at its length: it
/// was whole).
public struct ReadByUUIDProcedure: GATTClientProcedure {
    public let uuid: BluetoothUUID
    public let range: ClosedRange<UInt16>
    public let all: Bool
    private let mtu: Int
    private var found: [ATTPDU.HandleValue] = []
    private var handles: HandleCursor
    /// Entries of `found` whose values may go on, by index, the first being read.
    private var cut: [Int] = []
    /// The read of the rest of `found[cut[0]]`, while one is under way.
    private var rest: ReadLongProcedure?
    /// Where the last Read By Type Request started.
    private var from: UInt16

    public init(uuid: BluetoothUUID, range: ClosedRange<UInt16>, mtu: Int, all: Bool = false) {
        self.uuid = uuid
        self.range = range
        self.mtu = mtu
        self.all = all
        self.from = range.lowerBound
        self.handles = HandleCursor(.readByTypeResponse, range: range)
    }

    public mutating func start() -> GATTProcedureStep<[ATTPDU.HandleValue]> {
        .request(.readByTypeRequest(start: range.lowerBound, end: range.upperBound, type: uuid))
    }

    public mutating func receive(_ answer: ATTPDU) throws(GATTClientError) -> GATTProcedureStep<[ATTPDU.HandleValue]> {
        if let i = cut.first, var r = rest {
            switch try r.receive(answer) {
            case let .request(pdu):
                rest = r
                return .request(pdu)
            case let .finished(value):
                found[i].value = value
                cut.removeFirst()
                rest = nil
                return next()
            }
        }
        if try isAttributeNotFound(answer, mtu: mtu) { return .finished(found) }
        guard case let .readByTypeResponse(list) = answer else { throw .unexpectedResponse(answer.opcode) }
        guard !list.isEmpty else { throw .emptyResponse(answer.opcode) }
        for entry in list { try handles.accept(entry.handle, from: from) }
        guard all else { return .finished(list) }
        let longest = Swift.min(mtu - 4, 253)
        for entry in list {
            if entry.value.count == longest { cut.append(found.count) }
            found.append(entry)
        }
        return next()
    }

    /// The next request: the rest of a cut value (`ReadLongProcedure` from its end on),
    /// else the rest of the range.
    private mutating func next() -> GATTProcedureStep<[ATTPDU.HandleValue]> {
        if let i = cut.first {
            var r = ReadLongProcedure(handle: found[i].handle, mtu: mtu, after: found[i].value)
            // A read always starts with a request.
            guard case let .request(pdu) = r.start() else { return .finished(found) }
            rest = r
            return .request(pdu)
        }
        guard let last = handles.last, let after = handles.next(after: last) else { return .finished(found) }
        from = after
        return .request(.readByTypeRequest(start: after, end: range.upperBound, type: uuid))
    }
}

// MARK: §4.9.4, §4.9.5 Write long characteristic values, reliable writes

/// Write Long Characteristic Values and Reliable Writes: each (handle, value) in
/// pieces of ATT_MTU − 5 with Prepare Write Requests, each response checked to echo
/// its request (handle, offset and value, §4.9.4 and §4.9.5), then one Execute Write
/// Request (flags 0x01). When a response does not echo its request, or the server
/// refuses a piece after an earlier one was queued, what the server holds is
/// cancelled (Execute Write Request, flags 0x00) and the procedure then ends with
/// that error, whatever the cancel's answer; a refused first piece left nothing
/// queued (§3.4.6.1), so it ends at once.
public struct PreparedWriteProcedure: GATTClientProcedure {
    private let writes: [(handle: UInt16, value: [UInt8])]
    private let piece: Int
    private var index = 0
    private var offset = 0
    private var queued = false
    private var executing = false
    /// The error to end with once the cancel is answered.
    private var failure: GATTClientError?

    /// Each value at most 65535 octets (a Prepare Write's offset is 16 bits; longer
    /// values are cut there).
    public init(writes: [(handle: UInt16, value: [UInt8])], mtu: Int) {
        self.writes = writes.map { ($0.handle, Array($0.value.prefix(Int(UInt16.max)))) }
        self.piece = Swift.max(1, mtu - 5)
    }

    public mutating func start() -> GATTProcedureStep<Void> {
        writes.isEmpty ? execute() : prepare()
    }

    public mutating func receive(_ answer: ATTPDU) throws(GATTClientError) -> GATTProcedureStep<Void> {
        if let failure { throw failure }
        if executing {
            switch answer {
            case .executeWriteResponse: return .finished(())
            case let .errorResponse(req, h, code): throw .att(.errorResponse(request: req, handle: h, error: code))
            default: throw .unexpectedResponse(answer.opcode)
            }
        }
        let handle = writes[index].handle
        let sent = chunk
        switch answer {
        case let .prepareWriteResponse(h, o, v):
            queued = true
            guard h == handle, Int(o) == offset, v == sent else { return cancel(.preparedWriteMismatch(handle: handle)) }
        case let .errorResponse(req, h, code):
            let refused = GATTClientError.att(.errorResponse(request: req, handle: h, error: code))
            if queued { return cancel(refused) }
            throw refused
        default:
            return cancel(.unexpectedResponse(answer.opcode))
        }
        offset += sent.count
        if offset >= writes[index].value.count {
            index += 1
            offset = 0
            if index == writes.count { return execute() }
        }
        return prepare()
    }

    /// The piece of the current value from `offset` on (empty for an empty value).
    private var chunk: [UInt8] {
        let value = writes[index].value
        return Array(value[offset..<Swift.min(value.count, offset + piece)])
    }

    private func prepare() -> GATTProcedureStep<Void> {
        .request(.prepareWriteRequest(handle: writes[index].handle, offset: UInt16(offset), value: chunk))
    }

    private mutating func execute() -> GATTProcedureStep<Void> {
        executing = true
        return .request(.executeWriteRequest(flags: 1))
    }

    private mutating func cancel(_ error: GATTClientError) -> GATTProcedureStep<Void> {
        failure = error
        return .request(.executeWriteRequest(flags: 0))
    }
}

// MARK: §4.8.1, §4.8.3 Read (long) characteristic value

/// Read Characteristic Value, continued with Read Blob while each piece fills the
/// response (ATT_MTU − 1), up to 512 bytes (§3.2.9). Each piece must fit ATT_MTU; an
/// empty piece, Attribute Not Long or Invalid Offset ends the value.
public struct ReadLongProcedure: GATTClientProcedure {
    public let handle: UInt16
    private let mtu: Int
    private var value: [UInt8] = []

    public init(handle: UInt16, mtu: Int) {
        self.handle = handle
        self.mtu = mtu
    }

    /// Reads the rest of a value whose first octets, `known`, came another way (a Read
    /// By Type Response that may have cut it): Read Blob from the end of `known` on.
    public init(handle: UInt16, mtu: Int, after known: [UInt8]) {
        self.init(handle: handle, mtu: mtu)
        value = known
    }

    public mutating func start() -> GATTProcedureStep<[UInt8]> {
        value.isEmpty ? .request(.readRequest(handle: handle)) : .request(.readBlobRequest(handle: handle, offset: UInt16(value.count)))
    }

    public mutating func receive(_ answer: ATTPDU) throws(GATTClientError) -> GATTProcedureStep<[UInt8]> {
        let length = answer.encodedCount
        guard length <= mtu else { throw .responseExceedsMTU(answer.opcode, length: length, mtu: mtu) }
        let piece: [UInt8]
        switch answer {
        case let .readResponse(v) where value.isEmpty: piece = v
        case let .readBlobResponse(v) where !value.isEmpty: piece = v
        case let .errorResponse(.readBlobRequest, _, code) where code == .attributeNotLong || code == .invalidOffset:
            return .finished(value)
        case let .errorResponse(req, h, code):
            throw .att(.errorResponse(request: req, handle: h, error: code))
        default:
            throw .unexpectedResponse(answer.opcode)
        }
        // The first piece is the value so far as it is (no copy): most reads end there.
        if value.isEmpty { value = piece } else { value += piece }
        guard piece.count == mtu - 1, value.count < 512, value.count <= Int(UInt16.max) else { return .finished(value) }
        return .request(.readBlobRequest(handle: handle, offset: UInt16(value.count)))
    }
}

/// The values of several attributes, whole, in few round trips (§4.8.5, §4.8.1,
/// §4.8.3): Read Multiple Variable Length Characteristic Values for as many handles as
/// one request holds ((ATT_MTU - 1) / 2); a value its response cut short (the list
/// ends at ATT_MTU - 1 octets) or left out is then read on its own, long values
/// included (`ReadLongProcedure`). A server without the request (Request Not
/// Supported), and a last handle with no partner, get a read per value. Checked: not
/// empty, no more entries than handles asked, only the last entry short of its length;
/// an Error Response for this request ends it. A response longer than ATT_MTU is not
/// used either, but its values are read one by one instead of the procedure failing:
/// Bumble's server (0.0.2xx) sends one whenever a value does not fit, adding the
/// whole value, cut to ATT_MTU - 3, after the list has filled up.
public struct ReadValuesProcedure: GATTClientProcedure {
    public let handles: [UInt16]
    private let mtu: Int
    private var values: [[UInt8]?]
    /// The handles (by index) for Read Multiple Variable Length requests, in order:
    /// those not asked for yet, and those a response left out. Each response takes at
    /// least one off for good (complete, or to be read on its own), so they run out.
    private var pending: [Int]
    /// The handles the request in flight asks for.
    private var batch: [Int] = []
    /// The server takes Read Multiple Variable Length (until it answers Request Not Supported).
    private var variable = true
    /// The value read on its own now.
    private var single: (index: Int, procedure: ReadLongProcedure)?

    public init(handles: [UInt16], mtu: Int) {
        self.handles = handles
        self.mtu = mtu
        values = Array(repeating: nil, count: handles.count)
        pending = Array(handles.indices)
    }

    public mutating func start() -> GATTProcedureStep<[[UInt8]]> { advance() }

    public mutating func receive(_ answer: ATTPDU) throws(GATTClientError) -> GATTProcedureStep<[[UInt8]]> {
        if case (let index, var p)? = single {
            switch try p.receive(answer) {
            case let .request(pdu):
                single = (index, p)
                return .request(pdu)
            case let .finished(v):
                values[index] = v
                single = nil
                return advance()
            }
        }
        switch answer {
        case .readMultipleVariableResponse where answer.encodedCount > mtu:
            variable = false
            return advance()
        case let .readMultipleVariableResponse(entries):
            guard !entries.isEmpty else { throw .emptyResponse(answer.opcode) }
            guard entries.count <= batch.count else {
                throw .malformedEntry(answer.opcode, handle: handles[batch[0]], reason: "\(entries.count) values for \(batch.count) handles")
            }
            for (k, e) in entries.enumerated() {
                if e.isComplete {
                    values[batch[k]] = e.value
                } else if k < entries.count - 1 {
                    throw .malformedEntry(answer.opcode, handle: handles[batch[k]],
                                          reason: "\(e.value.count) of \(e.length) octets before another value; only the last is cut short")
                }
            }
            // Those it left out are asked for again (a value it cut short is read on its own).
            pending.insert(contentsOf: batch[entries.count...], at: 0)
            return advance()
        case .errorResponse(.readMultipleVariableRequest, _, .requestNotSupported):
            variable = false
            return advance()
        case let .errorResponse(req, h, code):
            throw .att(.errorResponse(request: req, handle: h, error: code))
        default:
            throw .unexpectedResponse(answer.opcode)
        }
    }

    /// The next request: the next batch while the server takes them and two or more
    /// handles wait, then a read of each value still missing, in order; the values
    /// once none is.
    private mutating func advance() -> GATTProcedureStep<[[UInt8]]> {
        if variable, pending.count >= 2 {
            batch = Array(pending.prefix(max(2, (mtu - 1) / 2)))
            pending.removeFirst(batch.count)
            return .request(.readMultipleVariableRequest(handles: batch.map { handles[$0] }))
        }
        guard let index = values.firstIndex(where: { $0 == nil }) else { return .finished(values.map { $0 ?? [] }) }
        var p = ReadLongProcedure(handle: handles[index], mtu: mtu)
        let step = p.start()
        single = (index, p)
        guard case let .request(pdu) = step else { return advance() }
        return .request(pdu)
    }
}
