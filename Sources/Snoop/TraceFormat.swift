// Trace file formats: btsnoop (RFC 1761 style, as written by Android, BlueZ's btmon
// and Bumble; datalinks 1001 H1, 1002 H4, 2001 Linux monitor), pcap and pcapng
// (link types 187 H4, 201 H4 with direction pseudo-header, 254 Linux monitor).
//
// Readers are pure: bytes in, records out. They decode every complete record, then
// report damage (truncation, an impossible length) with its byte offset; a record
// whose bytes are not a valid HCI packet is kept as `.undecodable`, not damage.

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
    /// Reads a whole trace file, detecting its format from the header.
    public static func read(_ bytes: [UInt8]) throws -> Trace {
        if bytes.starts(with: Array("btsnoop\0".utf8)) { return try readBtsnoop(bytes) }
        if bytes.count >= 4 {
            let le = UInt32(bytes[0]) | UInt32(bytes[1]) << 8 | UInt32(bytes[2]) << 16 | UInt32(bytes[3]) << 24
            switch le {
            case 0xA1B2_C3D4, 0xD4C3_B2A1, 0xA1B2_3C4D, 0x4D3C_B2A1: return try readPcap(bytes)
            case 0x0A0D_0D0A: return try readPcapng(bytes)
            default: break
            }
        }
        throw TraceFormatError(reason: "not a btsnoop, pcap or pcapng file (unknown header \(Array(bytes.prefix(8)).hexString))")
    }

    // MARK: btsnoop

    static func readBtsnoop(_ bytes: [UInt8]) throws -> Trace {
        var r = ByteReader(bytes, context: "btsnoop header")
        do {
            try r.skip(8, "magic")
            let version = try r.readUInt32BE("version")
            guard version == 1 else { throw TraceFormatError(reason: "btsnoop version \(version) is not supported (only 1)") }
        } catch let e as DecodeError { throw TraceFormatError(reason: "btsnoop header: \(e)") }
        guard let datalink = try? r.readUInt32BE("datalink") else { throw TraceFormatError(reason: "btsnoop header truncated") }
        guard [TraceFormat.btsnoopH1, TraceFormat.btsnoopH4, TraceFormat.btsnoopMonitor].contains(datalink) else {
            throw TraceFormatError(reason: "btsnoop datalink \(datalink) is not supported (1001, 1002, 2001 are)")
        }
        var records: [TraceRecord] = []
        var damage: TraceDamage?
        while !r.isAtEnd {
            let start = r.offset
            guard r.remaining >= 24 else {
                damage = TraceDamage(offset: start, reason: "truncated record header: \(r.remaining) of 24 bytes")
                break
            }
            // Header lengths are checked above, so these reads cannot fail.
            let original = (try? r.readUInt32BE()) ?? 0
            let included = Int((try? r.readUInt32BE()) ?? 0)
            let flags = (try? r.readUInt32BE()) ?? 0
            _ = try? r.readUInt32BE()  // cumulative drops
            // Wrapping: a corrupt timestamp must not trap.
            let ts = Int64(bitPattern: (try? r.readUInt64BE()) ?? 0) &- btsnoopEpochDelta
            guard included <= 65_535 + 64, UInt32(included) <= original || original == 0 else {
                damage = TraceDamage(offset: start, reason: "impossible record length \(included) (original \(original))")
                break
            }
            guard let data = try? r.readBytes(included) else {
                damage = TraceDamage(offset: start, reason: "truncated record: \(included) bytes announced, \(r.remaining) present")
                break
            }
            records.append(btsnoopRecord(datalink: datalink, flags: flags, data: data, ts: ts))
        }
        return Trace(format: .btsnoop(datalink: datalink), records: records, damage: damage)
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

    /// Linux monitor opcodes (BlueZ src/shared/btsnoop.h) that carry HCI packets.
    static func monitorRecord(index: UInt16, opcode: UInt16, data: [UInt8], ts: Int64) -> TraceRecord {
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

    // MARK: pcap

    static func readPcap(_ bytes: [UInt8]) throws -> Trace {
        var r = ByteReader(bytes, context: "pcap header")
        guard bytes.count >= 24 else { throw TraceFormatError(reason: "pcap header truncated: \(bytes.count) of 24 bytes") }
        let magicLE = (try? r.readUInt32()) ?? 0
        let bigEndian = magicLE == 0xD4C3_B2A1 || magicLE == 0x4D3C_B2A1
        let nanos = magicLE == 0xA1B2_3C4D || magicLE == 0x4D3C_B2A1
        func u32(_ r: inout ByteReader) -> UInt32 { (bigEndian ? try? r.readUInt32BE() : try? r.readUInt32()) ?? 0 }
        try? r.skip(16)  // version (2+2), thiszone, sigfigs, snaplen
        let linkType = u32(&r) & 0x0FFF_FFFF
        guard [TraceFormat.linkTypeH4, TraceFormat.linkTypeH4WithPHDR, TraceFormat.linkTypeMonitor].contains(linkType) else {
            throw TraceFormatError(reason: "pcap link type \(linkType) is not supported (187, 201, 254 are)")
        }
        var records: [TraceRecord] = []
        var damage: TraceDamage?
        while !r.isAtEnd {
            let start = r.offset
            guard r.remaining >= 16 else {
                damage = TraceDamage(offset: start, reason: "truncated record header: \(r.remaining) of 16 bytes")
                break
            }
            let sec = Int64(u32(&r)), frac = Int64(u32(&r))
            let included = Int(u32(&r))
            _ = u32(&r)
            guard included <= 65_535 + 64 else {
                damage = TraceDamage(offset: start, reason: "impossible record length \(included)")
                break
            }
            guard let data = try? r.readBytes(included) else {
                damage = TraceDamage(offset: start, reason: "truncated record: \(included) bytes announced, \(r.remaining) present")
                break
            }
            let ts = sec * 1_000_000 + (nanos ? frac / 1000 : frac)
            records.append(linkRecord(linkType: linkType, data: data, ts: ts))
        }
        return Trace(format: .pcap(linkType: linkType, nanoseconds: nanos, bigEndian: bigEndian), records: records, damage: damage)
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

    // MARK: pcapng

    static func readPcapng(_ bytes: [UInt8]) throws -> Trace {
        var r = ByteReader(bytes, context: "pcapng")
        var bigEndian = false
        var interfaces: [(linkType: UInt32, unitsPerSecond: Int64)] = []
        var records: [TraceRecord] = []
        var damage: TraceDamage?
        func u32(_ r: inout ByteReader) throws -> UInt32 { bigEndian ? try r.readUInt32BE() : try r.readUInt32() }
        func u16(_ r: inout ByteReader) throws -> UInt16 { bigEndian ? try r.readUInt16BE() : try r.readUInt16() }
        var first = true
        while !r.isAtEnd {
            let start = r.offset
            guard r.remaining >= 12 else {
                damage = TraceDamage(offset: start, reason: "truncated block header: \(r.remaining) bytes")
                break
            }
            let typeLE = (try? r.readUInt32()) ?? 0
            if typeLE == 0x0A0D_0D0A {
                // The byte-order magic follows the length; peek at it to learn the section's endianness.
                let bom = bytes[start + 8..<start + 12]
                bigEndian = Array(bom) == [0x1A, 0x2B, 0x3C, 0x4D]
                interfaces.removeAll()
            } else if first {
                throw TraceFormatError(reason: "pcapng does not start with a section header block")
            }
            first = false
            let blockType = bigEndian ? typeLE.byteSwapped : typeLE
            let length = Int((try? u32(&r)) ?? 0)
            guard length >= 12, length % 4 == 0, length <= 65_535 + 256 else {
                damage = TraceDamage(offset: start, reason: "impossible block length \(length)")
                break
            }
            guard var body = try? r.readReader(length - 12, "block body"), (try? r.skip(4)) != nil else {
                damage = TraceDamage(offset: start, reason: "truncated block: \(length) bytes announced, \(bytes.count - start) present")
                break
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
                            units = v & 0x80 != 0 ? Int64(1) << exp : (0..<exp).reduce(Int64(1)) { a, _ in a * 10 }
                        }
                    }
                    interfaces.append((linkType, units))
                case 0x0000_0006:  // Enhanced Packet Block
                    let iface = Int(try u32(&body))
                    let hi = Int64(try u32(&body)), lo = Int64(try u32(&body))
                    let captured = Int(try u32(&body))
                    _ = try u32(&body)
                    let data = try body.readBytes(captured, "packet data")
                    guard iface < interfaces.count else {
                        damage = TraceDamage(offset: start, reason: "packet for undeclared interface \(iface)")
                        break
                    }
                    let raw = hi << 32 | lo
                    let units = interfaces[iface].unitsPerSecond
                    let ts = units == 1_000_000 ? raw : (raw / units) &* 1_000_000 &+ (raw % units) &* 1_000_000 / units
                    records.append(linkRecord(linkType: interfaces[iface].linkType, data: data, ts: ts))
                case 0x0000_0003:  // Simple Packet Block
                    let original = Int(try u32(&body))
                    let data = try body.readBytes(Swift.min(original, body.remaining), "packet data")
                    guard let iface = interfaces.first else {
                        damage = TraceDamage(offset: start, reason: "packet before any interface description")
                        break
                    }
                    records.append(linkRecord(linkType: iface.linkType, data: data, ts: 0))
                default:
                    break  // section header, statistics, name resolution, custom: nothing to decode
                }
            } catch {
                damage = TraceDamage(offset: start, reason: "malformed block 0x\(String(blockType, radix: 16)): \(error)")
            }
            if damage != nil { break }
        }
        return Trace(format: .pcapng, records: records, damage: damage)
    }
}
