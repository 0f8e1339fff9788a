// Trace file formats: btsnoop (RFC 1761 style, as written by Android, BlueZ's btmon
// and Bumble; datalinks 1001 H1, 1002 H4, 2001 Linux monitor), pcap and pcapng
// (link types 187 H4, 201 H4 with direction pseudo-header, 254 Linux monitor).
//
// Readers are pure: bytes in, records out. They decode every complete record, then
// report damage (truncation, an impossible length) with its byte offset; a record
// whose bytes are not a valid HCI packet is kept as `.undecodable`, not damage.

import Glibc
import HCI

public enum TraceFormat: Sendable, Equatable, CustomStringConvertible {
    case btsnoop(datalink: UInt32)
    case pcap(linkType: UInt32, nanoseconds: Bool, bigEndian: Bool)
    case pcapng

    public static let btsnoopH1: UInt32 = 1001
    public static let btsnoopH4: UInt32 = 1002
    public static let btsnoopMonitor: UInt32 = 2001
    public static let linkTypeH4: UInt32 = 187
    public static let linkTypeH4WithPHDR: UInt32 = 201
    public static let linkTypeMonitor: UInt32 = 254

    public var description: String {
        switch self {
        case let .btsnoop(d): return "btsnoop (datalink \(d))"
        case let .pcap(l, _, _): return "pcap (link type \(l))"
        case .pcapng: return "pcapng"
        }
    }
}

/// Everything read from a trace file.
public struct Trace: Sendable {
    public var format: TraceFormat
    public var records: [TraceRecord]
    /// Set when the file ends in a damaged or truncated record.
    public var damage: TraceDamage?

    public init(format: TraceFormat, records: [TraceRecord], damage: TraceDamage? = nil) {
        self.format = format
        self.records = records
        self.damage = damage
    }
}

/// Microseconds between 0000-01-01 (btsnoop's epoch) and 1970-01-01.
let btsnoopEpochDelta: Int64 = 0x00DC_DDB3_0F2F_8000

public enum TraceReader {
    /// Reads a whole trace held in memory, detecting its format from the header.
    public static func read(_ bytes: [UInt8]) throws -> Trace {
        try collect(TraceStream(bytes: bytes))
    }

    /// Reads a whole trace file (streaming it through `TraceStream`; the file's bytes
    /// are not held twice).
    public static func read(contentsOf path: String) throws -> Trace {
        try collect(TraceStream(path: path))
    }

    private static func collect(_ stream: TraceStream) throws -> Trace {
        var stream = stream
        var records: [TraceRecord] = []
        while let r = try stream.next() { records.append(r) }
        return Trace(format: stream.format, records: records, damage: stream.damage)
    }

    static func btsnoopRecord(datalink: UInt32, flags: UInt32, data: [UInt8], ts: Int64) -> TraceRecord {
        switch datalink {
        case TraceFormat.btsnoopH1:
            let received = flags & 1 != 0
            let commandOrEvent = flags & 2 != 0
            let type: HCIPacketType = commandOrEvent ? (received ? .event : .command) : .acl
            return TraceRecord(timestampMicros: ts, direction: received ? .controllerToHost : .hostToController,
                               content: TraceRecord.content(type: type, body: data))
        case TraceFormat.btsnoopH4:
            return TraceRecord(timestampMicros: ts, direction: flags & 1 != 0 ? .controllerToHost : .hostToController,
                               content: TraceRecord.content(h4: data))
        default:
            return monitorRecord(index: UInt16(truncatingIfNeeded: flags >> 16), opcode: UInt16(truncatingIfNeeded: flags), data: data, ts: ts)
        }
    }

    /// A Linux monitor record (btsnoop 2001, pcap 254, the kernel's HCI monitor
    /// channel): opcodes that carry HCI packets (BlueZ src/shared/btsnoop.h) become
    /// packets with their direction, the rest `.monitor` records.
    public static func monitorRecord(index: UInt16, opcode: UInt16, data: [UInt8], ts: Int64) -> TraceRecord {
        let mapping: (HCIPacketType, TraceRecord.Direction)?
        switch opcode {
        case 2: mapping = (.command, .hostToController)
        case 3: mapping = (.event, .controllerToHost)
        case 4: mapping = (.acl, .hostToController)
        case 5: mapping = (.acl, .controllerToHost)
        case 6: mapping = (.sco, .hostToController)
        case 7: mapping = (.sco, .controllerToHost)
        case 18: mapping = (.iso, .hostToController)
        case 19: mapping = (.iso, .controllerToHost)
        default: mapping = nil
        }
        guard let (type, dir) = mapping else {
            return TraceRecord(timestampMicros: ts, direction: .unknown, content: .monitor(opcode: opcode, data: data), adapterIndex: index)
        }
        return TraceRecord(timestampMicros: ts, direction: dir, content: TraceRecord.content(type: type, body: data), adapterIndex: index)
    }

    static func linkRecord(linkType: UInt32, data: [UInt8], ts: Int64) -> TraceRecord {
        switch linkType {
        case TraceFormat.linkTypeH4WithPHDR:
            guard data.count >= 4 else {
                return TraceRecord(timestampMicros: ts, direction: .unknown, content: .undecodable(
                    type: nil, bytes: data, error: .truncated(what: "H4 direction pseudo-header", offset: 0, needed: 4, available: data.count)))
            }
            let dir = UInt32(data[0]) << 24 | UInt32(data[1]) << 16 | UInt32(data[2]) << 8 | UInt32(data[3])
            return TraceRecord(timestampMicros: ts, direction: dir & 1 != 0 ? .controllerToHost : .hostToController,
                               content: TraceRecord.content(h4: Array(data.dropFirst(4))))
        case TraceFormat.linkTypeMonitor:
            guard data.count >= 4 else {
                return TraceRecord(timestampMicros: ts, direction: .unknown, content: .undecodable(
                    type: nil, bytes: data, error: .truncated(what: "monitor header", offset: 0, needed: 4, available: data.count)))
            }
            let index = UInt16(data[0]) << 8 | UInt16(data[1])
            let opcode = UInt16(data[2]) << 8 | UInt16(data[3])
            return monitorRecord(index: index, opcode: opcode, data: Array(data.dropFirst(4)), ts: ts)
        default:
            let content = TraceRecord.content(h4: data)
            let dir = data.first.map { TraceRecord.impliedDirection(HCIPacketType(rawValue: $0)) } ?? .unknown
            return TraceRecord(timestampMicros: ts, direction: dir, content: content)
        }
    }

}

/// One step of `TraceParser`.
enum TraceParserStep {
    /// A record (nil for a block that carries none, such as a pcapng statistics block), and the bytes it took.
    case record(TraceRecord?, consumed: Int)
    /// The buffer ends inside the next record.
    case needMore
    /// The next record is impossible; reading stops here.
    case damage(String)
}

/// The per-format framing, one record at a time, from a buffer that may end mid-record.
/// Holds only the state the format needs (pcap's byte order, pcapng's interfaces).
struct TraceParser: Sendable {
    private(set) var format: TraceFormat
    private var bigEndian = false
    private var nanoseconds = false
    private var linkType: UInt32 = 0
    private var interfaces: [(linkType: UInt32, unitsPerSecond: Int64)] = []
    private var sawSection = false

    private init(format: TraceFormat) { self.format = format }

    /// The parser for the file whose first bytes are `head`, and how many header bytes
    /// it takes; nil when `head` is too short to tell (and the file may have more).
    static func start(_ head: [UInt8], atEnd: Bool) throws -> (TraceParser, headerLength: Int)? {
        if head.count < 16, !atEnd, Array("btsnoop\0".utf8).starts(with: head.prefix(8)) || head.count < 4 { return nil }
        if head.starts(with: Array("btsnoop\0".utf8)) {
            var r = ByteReader(head, context: "btsnoop header")
            do {
                try r.skip(8, "magic")
                let version = try r.readUInt32BE("version")
                guard version == 1 else { throw TraceFormatError(reason: "btsnoop version \(version) is not supported (only 1)") }
            } catch let e as DecodeError { throw TraceFormatError(reason: "btsnoop header: \(e)") }
            guard let datalink = try? r.readUInt32BE("datalink") else { throw TraceFormatError(reason: "btsnoop header truncated") }
            guard [TraceFormat.btsnoopH1, TraceFormat.btsnoopH4, TraceFormat.btsnoopMonitor].contains(datalink) else {
                throw TraceFormatError(reason: "btsnoop datalink \(datalink) is not supported (1001, 1002, 2001 are)")
            }
            return (TraceParser(format: .btsnoop(datalink: datalink)), 16)
        }
        if head.count >= 4 {
            let le = UInt32(head[0]) | UInt32(head[1]) << 8 | UInt32(head[2]) << 16 | UInt32(head[3]) << 24
            switch le {
            case 0xA1B2_C3D4, 0xD4C3_B2A1, 0xA1B2_3C4D, 0x4D3C_B2A1:
                guard head.count >= 24 else {
                    if !atEnd { return nil }
                    throw TraceFormatError(reason: "pcap header truncated: \(head.count) of 24 bytes")
                }
                let bigEndian = le == 0xD4C3_B2A1 || le == 0x4D3C_B2A1
                let nanoseconds = le == 0xA1B2_3C4D || le == 0x4D3C_B2A1
                var r = ByteReader(head, context: "pcap header")
                try? r.skip(20)  // magic, version (2+2), thiszone, sigfigs, snaplen
                let linkType = ((bigEndian ? try? r.readUInt32BE() : try? r.readUInt32()) ?? 0) & 0x0FFF_FFFF
                guard [TraceFormat.linkTypeH4, TraceFormat.linkTypeH4WithPHDR, TraceFormat.linkTypeMonitor].contains(linkType) else {
                    throw TraceFormatError(reason: "pcap link type \(linkType) is not supported (187, 201, 254 are)")
                }
                var p = TraceParser(format: .pcap(linkType: linkType, nanoseconds: nanoseconds, bigEndian: bigEndian))
                (p.bigEndian, p.nanoseconds, p.linkType) = (bigEndian, nanoseconds, linkType)
                return (p, 24)
            case 0x0A0D_0D0A:
                return (TraceParser(format: .pcapng), 0)  // the section header is a block like the others
            default: break
            }
        }
        throw TraceFormatError(reason: "not a btsnoop, pcap or pcapng file (unknown header \(Array(head.prefix(8)).hexString))")
    }

    private func u32(_ r: inout ByteReader) -> UInt32 { (bigEndian ? try? r.readUInt32BE() : try? r.readUInt32()) ?? 0 }

    /// The record starting at `offset` in `bytes`; `atEnd` says no more bytes follow.
    mutating func next(_ bytes: [UInt8], at offset: Int, atEnd: Bool) throws -> TraceParserStep {
        let available = bytes.count - offset
        switch format {
        case let .btsnoop(datalink):
            guard available >= 24 else { return atEnd ? .damage("truncated record header: \(available) of 24 bytes") : .needMore }
            var r = ByteReader(bytes, context: "btsnoop record")
            try? r.skip(offset)
            // The header's 24 bytes are present, so these reads cannot fail.
            let original = (try? r.readUInt32BE()) ?? 0
            let included = Int((try? r.readUInt32BE()) ?? 0)
            let flags = (try? r.readUInt32BE()) ?? 0
            _ = try? r.readUInt32BE()  // cumulative drops
            // Wrapping: a corrupt timestamp must not trap.
            let ts = Int64(bitPattern: (try? r.readUInt64BE()) ?? 0) &- btsnoopEpochDelta
            guard included <= 65_535 + 64, UInt32(included) <= original || original == 0 else {
                return .damage("impossible record length \(included) (original \(original))")
            }
            guard r.remaining >= included else {
                return atEnd ? .damage("truncated record: \(included) bytes announced, \(available - 24) present") : .needMore
            }
            if datalink == TraceFormat.btsnoopH4, included > 0, let type = try? r.readUInt8(), let body = try? r.readBytes(included - 1) {
                // H4: the packet indicator, then the body copied once.
                return .record(TraceRecord(timestampMicros: ts, direction: flags & 1 != 0 ? .controllerToHost : .hostToController,
                                           content: TraceRecord.content(type: HCIPacketType(rawValue: type), body: body)), consumed: 24 + included)
            }
            let data = (try? r.readBytes(included)) ?? []
            return .record(TraceReader.btsnoopRecord(datalink: datalink, flags: flags, data: data, ts: ts), consumed: 24 + included)
        case .pcap:
            guard available >= 16 else { return atEnd ? .damage("truncated record header: \(available) of 16 bytes") : .needMore }
            var r = ByteReader(bytes, context: "pcap record")
            try? r.skip(offset)
            let sec = Int64(u32(&r)), frac = Int64(u32(&r))
            let included = Int(u32(&r))
            _ = u32(&r)
            guard included <= 65_535 + 64 else { return .damage("impossible record length \(included)") }
            guard let data = try? r.readBytes(included) else {
                return atEnd ? .damage("truncated record: \(included) bytes announced, \(available - 16) present") : .needMore
            }
            let ts = sec &* 1_000_000 &+ (nanoseconds ? frac / 1000 : frac)
            return .record(TraceReader.linkRecord(linkType: linkType, data: data, ts: ts), consumed: 16 + included)
        case .pcapng:
            return try nextBlock(bytes, at: offset, atEnd: atEnd)
        }
    }

    private mutating func nextBlock(_ bytes: [UInt8], at start: Int, atEnd: Bool) throws -> TraceParserStep {
        let available = bytes.count - start
        guard available >= 12 else { return atEnd ? .damage("truncated block header: \(available) bytes") : .needMore }
        var r = ByteReader(bytes, context: "pcapng")
        try? r.skip(start)
        let typeLE = (try? r.readUInt32()) ?? 0
        if typeLE == 0x0A0D_0D0A {
            // The byte-order magic follows the length; peek at it to learn the section's endianness.
            bigEndian = Array(bytes[start + 8..<start + 12]) == [0x1A, 0x2B, 0x3C, 0x4D]
            interfaces.removeAll()
        } else if !sawSection {
            throw TraceFormatError(reason: "pcapng does not start with a section header block")
        }
        sawSection = true
        func u32(_ r: inout ByteReader) throws -> UInt32 { bigEndian ? try r.readUInt32BE() : try r.readUInt32() }
        func u16(_ r: inout ByteReader) throws -> UInt16 { bigEndian ? try r.readUInt16BE() : try r.readUInt16() }
        let blockType = bigEndian ? typeLE.byteSwapped : typeLE
        let length = Int((try? u32(&r)) ?? 0)
        guard length >= 12, length % 4 == 0, length <= 65_535 + 256 else { return .damage("impossible block length \(length)") }
        guard var body = try? r.readReader(length - 12, "block body"), (try? r.skip(4)) != nil else {
            return atEnd ? .damage("truncated block: \(length) bytes announced, \(available) present") : .needMore
        }
        do {
            switch blockType {
            case 0x0000_0001:  // Interface Description Block
                let linkType = UInt32(try u16(&body))
                try body.skip(6)
                var units: Int64 = 1_000_000
                while body.remaining >= 4 {
                    let code = try u16(&body), olen = Int(try u16(&body))
                    let value = try body.readBytes(olen)
                    try body.skip((4 - olen % 4) % 4)
                    if code == 0 { break }
                    if code == 9, let v = value.first {  // if_tsresol
                        let exp = Int64(v & 0x7F)
                        guard exp < 63 else { return .damage("interface time resolution 2^\(exp) or 10^\(exp) is out of range") }
                        units = v & 0x80 != 0 ? Int64(1) << exp : (0..<exp).reduce(Int64(1)) { a, _ in a &* 10 }
                    }
                }
                interfaces.append((linkType, Swift.max(units, 1)))
                return .record(nil, consumed: length)
            case 0x0000_0006:  // Enhanced Packet Block
                let iface = Int(try u32(&body))
                let hi = Int64(try u32(&body)), lo = Int64(try u32(&body))
                let captured = Int(try u32(&body))
                _ = try u32(&body)
                let data = try body.readBytes(captured, "packet data")
                guard iface < interfaces.count else { return .damage("packet for undeclared interface \(iface)") }
                let raw = hi << 32 | lo
                let units = interfaces[iface].unitsPerSecond
                let ts = units == 1_000_000 ? raw : (raw / units) &* 1_000_000 &+ (raw % units) &* 1_000_000 / units
                return .record(TraceReader.linkRecord(linkType: interfaces[iface].linkType, data: data, ts: ts), consumed: length)
            case 0x0000_0003:  // Simple Packet Block
                let original = Int(try u32(&body))
                let data = try body.readBytes(Swift.min(original, body.remaining), "packet data")
                guard let iface = interfaces.first else { return .damage("packet before any interface description") }
                return .record(TraceReader.linkRecord(linkType: iface.linkType, data: data, ts: 0), consumed: length)
            default:
                return .record(nil, consumed: length)  // section header, statistics, name resolution, custom: nothing to decode
            }
        } catch {
            return .damage("malformed block 0x\(String(blockType, radix: 16)): \(error)")
        }
    }
}

/// Records of a trace one at a time, from memory or streamed from a file in fixed-size
/// chunks (memory stays flat in the file's size). Damage ends the stream: `next()`
/// returns nil and `damage` says where and why.
public struct TraceStream {
    public private(set) var format: TraceFormat
    /// Set once the stream has ended at a damaged or truncated record.
    public private(set) var damage: TraceDamage?
    private var parser: TraceParser
    private var buffer: [UInt8]
    private var position: Int
    /// File offset of `buffer[0]`.
    private var base = 0
    private var source: FileSource?
    private var ended = false

    /// Bytes read from a file per refill.
    public static let chunkSize = 1 << 20

    public init(bytes: [UInt8]) throws {
        guard let (p, h) = try TraceParser.start(bytes, atEnd: true) else {
            throw TraceFormatError(reason: "not a btsnoop, pcap or pcapng file (\(bytes.count) bytes)")
        }
        (parser, format, buffer, position) = (p, p.format, bytes, h)
    }

    /// Opens `path` for streaming; throws a `TraceFormatError` naming the path's problem.
    public init(path: String) throws {
        let file = try FileSource(path: path)
        var head: [UInt8] = []
        var atEnd = false
        var started: (TraceParser, headerLength: Int)?
        repeat {
            let more = try file.read(Self.chunkSize)
            atEnd = more.isEmpty
            head += more
            started = try TraceParser.start(head, atEnd: atEnd)
        } while started == nil && !atEnd
        guard let (p, h) = started else { throw TraceFormatError(reason: "not a btsnoop, pcap or pcapng file (\(head.count) bytes)") }
        (parser, format, buffer, position, source, ended) = (p, p.format, head, h, file, atEnd)
    }

    /// The next record, or nil at the end of the trace (or at damage; see `damage`).
    public mutating func next() throws -> TraceRecord? {
        while damage == nil {
            let atEnd = ended || source == nil
            if position == buffer.count, atEnd { return nil }
            switch try parser.next(buffer, at: position, atEnd: atEnd) {
            case let .record(r, consumed):
                position += consumed
                format = parser.format
                if let r { return r }
            case .needMore:
                guard let source else { return nil }  // unreachable: at the end the parser reports damage
                let more = try source.read(Self.chunkSize)
                if more.isEmpty {
                    ended = true
                } else {
                    buffer.removeFirst(position)
                    base += position
                    position = 0
                    buffer += more
                }
            case let .damage(reason):
                damage = TraceDamage(offset: base + position, reason: reason)
            }
        }
        return nil
    }
}

/// A file read in chunks with POSIX read(2), closed when the last reference goes.
final class FileSource: @unchecked Sendable {
    private let fd: Int32
    let path: String

    init(path: String) throws {
        self.path = path
        fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw TraceFormatError(reason: "cannot read \(path): \(String(cString: strerror(errno)))") }
    }

    deinit { close(fd) }

    func read(_ count: Int) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        var filled = 0
        while filled < count {
            let n = out.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + filled, count - filled) }  // safe: count > 0
            if n < 0 {
                if errno == EINTR { continue }
                throw TraceFormatError(reason: "cannot read \(path): \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            filled += n
        }
        out.removeLast(count - filled)
        return out
    }
}
