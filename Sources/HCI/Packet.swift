// HCI packets as they cross the transport (Core Specification v5.4, Vol 4,
// Part E, §5.4) and the H4 packet indicators (Vol 4, Part A, §2).

/// The H4 packet indicator (an open set: unknown values survive and print).
public struct HCIPacketType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let command = HCIPacketType(rawValue: 0x01)
    public static let acl = HCIPacketType(rawValue: 0x02)
    public static let sco = HCIPacketType(rawValue: 0x03)
    public static let event = HCIPacketType(rawValue: 0x04)
    public static let iso = HCIPacketType(rawValue: 0x05)

    public var description: String {
        switch rawValue {
        case 1: return "command"
        case 2: return "acl"
        case 3: return "sco"
        case 4: return "event"
        case 5: return "iso"
        default: return "unknown(0x\(hex2(rawValue)))"
        }
    }
}

/// ACL Packet_Boundary_Flag (Vol 4, Part E, §5.4.2).
public struct ACLPacketBoundary: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue & 0x3 }
    /// First non-automatically-flushable packet (host to controller, LE).
    public static let firstNonFlushable = ACLPacketBoundary(rawValue: 0b00)
    public static let continuing = ACLPacketBoundary(rawValue: 0b01)
    /// First automatically flushable packet (controller to host uses this for LE).
    public static let firstFlushable = ACLPacketBoundary(rawValue: 0b10)
    public static let complete = ACLPacketBoundary(rawValue: 0b11)
    public var description: String {
        ["first-non-flushable", "continuing", "first-flushable", "complete"][Int(rawValue)]
    }
}

/// One ACL data packet: 12-bit handle, boundary and broadcast flags, payload.
public struct ACLDataPacket: Hashable, Sendable {
    public var handle: UInt16
    public var boundary: ACLPacketBoundary
    public var broadcast: UInt8
    public var data: [UInt8]

    public init(handle: UInt16, boundary: ACLPacketBoundary, broadcast: UInt8 = 0, data: [UInt8]) {
        self.handle = handle & 0x0FFF
        self.boundary = boundary
        self.broadcast = broadcast & 0x3
        self.data = data
    }

    /// The highest Connection_Handle a controller may give a link (Vol 4, Part E,
    /// §5.4.2: 0x0000–0x0EFF; an ACL header carries 12 bits of it, and the values
    /// above are reserved).
    public static let maximumConnectionHandle: UInt16 = 0x0EFF
}

/// A packet between host and controller, without its H4 indicator.
///
/// Commands and events keep their parameters as bytes; `HCIEvent(_:)` and the
/// command types decode them. SCO and ISO are carried through unparsed.
public enum HCIPacket: Hashable, Sendable {
    case command(opcode: HCIOpcode, parameters: [UInt8])
    case event(code: HCIEventCode, parameters: [UInt8])
    case acl(ACLDataPacket)
    /// SCO data, header included (handle and length), carried through as is.
    case sco([UInt8])
    /// ISO data, header included, carried through as is.
    case iso([UInt8])

    public var type: HCIPacketType {
        switch self {
        case .command: return .command
        case .event: return .event
        case .acl: return .acl
        case .sco: return .sco
        case .iso: return .iso
        }
    }

    /// The packet's bytes without the H4 indicator (what btsnoop 1001 and monitor records hold).
    public var body: [UInt8] {
        var w = ByteWriter(capacity: bodyCount)
        encodeBody(into: &w)
        return w.bytes
    }

    /// The H4 encoding: indicator byte then body.
    public var h4Bytes: [UInt8] {
        var w = ByteWriter(capacity: 1 + bodyCount)
        w.write(type.rawValue)
        encodeBody(into: &w)
        return w.bytes
    }

    /// How many bytes `encodeBody` writes.
    @inlinable
    public var bodyCount: Int {
        var counter = ByteCounter()
        encodeBody(into: &counter)
        return counter.count
    }

    /// Writes the body (header fields little-endian, then the payload) into `w`: a
    /// `ByteWriter`, or a transport's own buffer.
    @inlinable
    public func encodeBody<Sink: HCIByteSink>(into w: inout Sink) {
        switch self {
        case let .command(opcode, parameters):
            w.write(opcode.rawValue)
            w.write(UInt8(truncatingIfNeeded: parameters.count))
            w.write(contentsOf: parameters)
        case let .event(code, parameters):
            w.write(code.rawValue)
            w.write(UInt8(truncatingIfNeeded: parameters.count))
            w.write(contentsOf: parameters)
        case let .acl(p):
            w.write(p.handle | UInt16(p.boundary.rawValue) << 12 | UInt16(p.broadcast) << 14)
            w.write(UInt16(truncatingIfNeeded: p.data.count))
            w.write(contentsOf: p.data)
        case let .sco(raw), let .iso(raw):
            w.write(contentsOf: raw)
        }
    }

    /// Decodes a complete packet body of the given type. The length field must match
    /// the body exactly.
    /// The name errors carry (a literal: no String built per packet).
    static func readerContext(_ type: HCIPacketType) -> String {
        switch type {
        case .command: return "HCI command packet"
        case .event: return "HCI event packet"
        case .acl: return "HCI ACL packet"
        case .sco: return "HCI SCO packet"
        case .iso: return "HCI ISO packet"
        default: return "HCI packet"
        }
    }

    public init(type: HCIPacketType, body: [UInt8]) throws {
        try self.init(type: type, reader: ByteReader(body, context: Self.readerContext(type)))
    }

    /// Decodes the packet body `r` holds (all of what remains in it).
    init(type: HCIPacketType, reader: ByteReader) throws {
        var r = reader
        switch type {
        case .command:
            let opcode = HCIOpcode(rawValue: try r.readUInt16("opcode"))
            let len = Int(try r.readUInt8("parameter length"))
            guard len == r.remaining else {
                throw DecodeError.lengthMismatch(what: "HCI command \(opcode)", declared: len, actual: r.remaining)
            }
            self = .command(opcode: opcode, parameters: r.readRemaining())
        case .event:
            let code = HCIEventCode(rawValue: try r.readUInt8("event code"))
            let len = Int(try r.readUInt8("parameter length"))
            guard len == r.remaining else {
                throw DecodeError.lengthMismatch(what: "HCI event \(code)", declared: len, actual: r.remaining)
            }
            self = .event(code: code, parameters: r.readRemaining())
        case .acl:
            let hf = try r.readUInt16("handle and flags")
            let len = Int(try r.readUInt16("data length"))
            guard len == r.remaining else {
                throw DecodeError.lengthMismatch(what: "HCI ACL data", declared: len, actual: r.remaining)
            }
            self = .acl(ACLDataPacket(
                handle: hf & 0x0FFF, boundary: ACLPacketBoundary(rawValue: UInt8((hf >> 12) & 0x3)),
                broadcast: UInt8(hf >> 14), data: r.readRemaining()))
        case .sco:
            guard let header = H4Framer.headerLength(for: .sco), r.remaining >= header else {
                throw DecodeError.truncated(what: "HCI SCO header", offset: 0, needed: 3, available: r.remaining)
            }
            self = .sco(r.readRemaining())
        case .iso:
            guard r.remaining >= 4 else {
                throw DecodeError.truncated(what: "HCI ISO header", offset: 0, needed: 4, available: r.remaining)
            }
            self = .iso(r.readRemaining())
        default:
            throw DecodeError.invalidValue(what: "HCI packet type", value: Int(type.rawValue))
        }
    }

    /// Decodes an H4 packet: indicator byte then body.
    public init(h4: [UInt8]) throws {
        guard let first = h4.first else {
            throw DecodeError.truncated(what: "H4 packet indicator", offset: 0, needed: 1, available: 0)
        }
        try self.init(type: HCIPacketType(rawValue: first), body: Array(h4.dropFirst()))
    }
}

/// Splits an H4 byte stream into packets. Pure: no I/O, no clock.
///
/// Feed it whatever arrives (one byte at a time is fine); `nextPacket()` returns
/// nil when it needs more bytes. An unknown packet indicator cannot be skipped
/// safely (the length field's position is unknown), so the framer fails and
/// stays failed: the stream is out of sync and the transport must be reset.
public struct H4Framer: Sendable {
    private var buffer: [UInt8] = []
    private var start = 0
    public private(set) var failure: DecodeError?
    /// Largest packet body accepted; ACL bodies are at most 4 + 65535 bytes.
    public var maximumBodyLength = 4 + 65_535

    public init() {}

    public static func headerLength(for type: HCIPacketType) -> Int? {
        switch type {
        case .command: return 3
        case .acl: return 4
        case .sco: return 3
        case .event: return 2
        case .iso: return 4
        default: return nil
        }
    }

    /// Bytes consumed so far into a packet still incomplete.
    public var bufferedByteCount: Int { buffer.count - start }

    public mutating func append<S: Sequence>(_ bytes: S) where S.Element == UInt8 {
        buffer.append(contentsOf: bytes)
    }

    /// The next complete packet, nil if more bytes are needed; throws (and stays failed)
    /// when the stream is out of sync.
    public mutating func nextPacket() throws -> HCIPacket? {
        if let failure { throw failure }
        let available = buffer.count - start
        guard available >= 1 else { compact(); return nil }
        let type = HCIPacketType(rawValue: buffer[start])
        guard let headerLength = Self.headerLength(for: type) else {
            let error = DecodeError.invalidValue(what: "H4 packet indicator", value: Int(type.rawValue))
            failure = error
            throw error
        }
        guard available >= 1 + headerLength else { return nil }
        let h = start + 1
        let payloadLength: Int
        switch type {
        case .command, .sco: payloadLength = Int(buffer[h + 2])
        case .event: payloadLength = Int(buffer[h + 1])
        case .acl: payloadLength = Int(buffer[h + 2]) | Int(buffer[h + 3]) << 8
        default: payloadLength = (Int(buffer[h + 2]) | Int(buffer[h + 3]) << 8) & 0x3FFF  // ISO: 14-bit length
        }
        let total = 1 + headerLength + payloadLength
        guard available >= total else { return nil }
        // Decoded from the framer's buffer in place (the reader is gone before `compact`
        // changes the buffer): each field's bytes are copied once.
        let body = start + 1 ..< start + total
        start += total
        let packet = try HCIPacket(type: type, reader: ByteReader(buffer[body], context: HCIPacket.readerContext(type)))
        compact()
        return packet
    }

    private mutating func compact() {
        if start > 0 && (start == buffer.count || start > 4096) {
            buffer.removeFirst(start)
            start = 0
        }
    }
}
