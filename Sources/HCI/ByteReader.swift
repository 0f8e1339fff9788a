// The one bounds-checked little-endian reader and writer every layer uses.
//
// Contract (docs/architecture.md, "One reader, one contract"): a read past the
// end throws `DecodeError.truncated` naming what was being read and where;
// nothing traps and nothing silently truncates. Stream framers that want
// "need more" semantics check `remaining` before reading.

/// A malformed or incomplete piece of input, with what was being decoded and where.
public enum DecodeError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The input ended `needed - available` bytes too early while reading `what` at `offset`.
    case truncated(what: String, offset: Int, needed: Int, available: Int)
    /// A length field said `declared` bytes but `actual` bytes were present.
    case lengthMismatch(what: String, declared: Int, actual: Int)
    /// A field held a value the specification does not allow.
    case invalidValue(what: String, value: Int)
    /// Bytes were left over after a complete structure.
    case trailingBytes(what: String, count: Int)

    public var description: String {
        switch self {
        case let .truncated(what, offset, needed, available):
            return "truncated \(what) at offset \(offset): needed \(needed) bytes, \(available) available"
        case let .lengthMismatch(what, declared, actual):
            return "\(what): length field says \(declared) bytes but \(actual) are present"
        case let .invalidValue(what, value):
            return "\(what): invalid value 0x\(String(value, radix: 16))"
        case let .trailingBytes(what, count):
            return "\(what): \(count) unexpected trailing bytes"
        }
    }
}

/// Reads little-endian (and, for file formats, big-endian) integers from a byte buffer, bounds-checked.
public struct ByteReader: Sendable {
    let storage: ArraySlice<UInt8>
    let end: Int
    /// Index of the next byte to read, in the indices of the bytes the reader was made
    /// from: 0 for an array's first byte; a slice keeps its base's indices.
    public private(set) var offset: Int
    /// Name used in errors ("LE Advertising Report", "btsnoop record", ...).
    public var context: String

    public init(_ bytes: [UInt8], context: String = "packet") {
        self.init(bytes[...], context: context)
    }

    /// A reader over a slice, sharing its storage (nothing copied): how a layer reads the
    /// part of a frame that is its own (an ATT PDU's parameters after its opcode).
    public init(_ bytes: ArraySlice<UInt8>, context: String = "packet") {
        self.storage = bytes
        self.end = bytes.endIndex
        self.offset = bytes.startIndex
        self.context = context
    }

    public var remaining: Int { end - offset }
    public var isAtEnd: Bool { offset >= end }

    mutating func take(_ count: Int, _ what: @autoclosure () -> String) throws -> Int {
        guard count >= 0, end - offset >= count else {
            throw DecodeError.truncated(
                what: "\(context): \(what())", offset: offset, needed: count, available: Swift.max(0, end - offset))
        }
        let start = offset
        offset += count
        return start
    }

    public mutating func readUInt8(_ what: @autoclosure () -> String = "UInt8") throws -> UInt8 {
        storage[try take(1, what())]
    }

    public mutating func readInt8(_ what: @autoclosure () -> String = "Int8") throws -> Int8 {
        Int8(bitPattern: try readUInt8(what()))
    }

    public mutating func readUInt16(_ what: @autoclosure () -> String = "UInt16") throws -> UInt16 {
        let i = try take(2, what())
        return UInt16(storage[i]) | UInt16(storage[i + 1]) << 8
    }

    public mutating func readUInt24(_ what: @autoclosure () -> String = "UInt24") throws -> UInt32 {
        let i = try take(3, what())
        return UInt32(storage[i]) | UInt32(storage[i + 1]) << 8 | UInt32(storage[i + 2]) << 16
    }

    public mutating func readUInt32(_ what: @autoclosure () -> String = "UInt32") throws -> UInt32 {
        let i = try take(4, what())
        var v: UInt32 = 0
        for k in 0..<4 { v |= UInt32(storage[i + k]) << (8 * k) }
        return v
    }

    public mutating func readUInt64(_ what: @autoclosure () -> String = "UInt64") throws -> UInt64 {
        let i = try take(8, what())
        var v: UInt64 = 0
        for k in 0..<8 { v |= UInt64(storage[i + k]) << (8 * k) }
        return v
    }

    public mutating func readUInt16BE(_ what: @autoclosure () -> String = "UInt16") throws -> UInt16 {
        let i = try take(2, what())
        return UInt16(storage[i]) << 8 | UInt16(storage[i + 1])
    }

    public mutating func readUInt32BE(_ what: @autoclosure () -> String = "UInt32") throws -> UInt32 {
        let i = try take(4, what())
        var v: UInt32 = 0
        for k in 0..<4 { v = v << 8 | UInt32(storage[i + k]) }
        return v
    }

    public mutating func readUInt64BE(_ what: @autoclosure () -> String = "UInt64") throws -> UInt64 {
        let i = try take(8, what())
        var v: UInt64 = 0
        for k in 0..<8 { v = v << 8 | UInt64(storage[i + k]) }
        return v
    }

    public mutating func readBytes(_ count: Int, _ what: @autoclosure () -> String = "bytes") throws -> [UInt8] {
        let i = try take(count, what())
        return Array(storage[i..<(i + count)])
    }

    /// A reader over the next `count` bytes; this reader skips past them.
    public mutating func readReader(_ count: Int, _ what: @autoclosure () -> String) throws -> ByteReader {
        let i = try take(count, what())
        return ByteReader(storage[i..<(i + count)], context: "\(context): \(what())")
    }

    public mutating func skip(_ count: Int, _ what: @autoclosure () -> String = "bytes") throws {
        _ = try take(count, what())
    }

    public mutating func readRemaining() -> [UInt8] {
        let rest = Array(storage[offset..<end])
        offset = end
        return rest
    }

    /// Peeks at a byte `ahead` positions from the current offset without consuming.
    public func peekUInt8(ahead: Int = 0) -> UInt8? {
        offset + ahead < end ? storage[offset + ahead] : nil
    }

    /// Throws unless every byte has been consumed.
    public func expectEnd() throws {
        if remaining > 0 { throw DecodeError.trailingBytes(what: context, count: remaining) }
    }
}

/// Where `HCIPacket.encodeBody` writes.
public protocol HCIByteSink {
    mutating func write(_ v: UInt8)
    /// Little-endian.
    mutating func write(_ v: UInt16)
    mutating func write(contentsOf bytes: [UInt8])
}

/// Counts what would be written (sizes a buffer before the bytes go in).
public struct ByteCounter: HCIByteSink {
    public private(set) var count = 0
    public init() {}
    public mutating func write(_ v: UInt8) { count += 1 }
    public mutating func write(_ v: UInt16) { count += 2 }
    public mutating func write(contentsOf bytes: [UInt8]) { count += bytes.count }
}

extension ByteWriter: HCIByteSink {
    public mutating func write(contentsOf bytes: [UInt8]) { self.bytes.append(contentsOf: bytes) }
}

/// Appends little-endian (and big-endian, for file formats) integers to a growing byte buffer.
public struct ByteWriter: Sendable {
    public private(set) var bytes: [UInt8]

    public init(capacity: Int = 32) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    public var count: Int { bytes.count }

    public mutating func write(_ v: UInt8) { bytes.append(v) }
    public mutating func write(_ v: Int8) { bytes.append(UInt8(bitPattern: v)) }
    public mutating func write(_ v: UInt16) {
        bytes.append(UInt8(truncatingIfNeeded: v))
        bytes.append(UInt8(truncatingIfNeeded: v >> 8))
    }
    public mutating func writeUInt24(_ v: UInt32) {
        for k in 0..<3 { bytes.append(UInt8(truncatingIfNeeded: v >> (8 * k))) }
    }
    public mutating func write(_ v: UInt32) {
        for k in 0..<4 { bytes.append(UInt8(truncatingIfNeeded: v >> (8 * k))) }
    }
    public mutating func write(_ v: UInt64) {
        for k in 0..<8 { bytes.append(UInt8(truncatingIfNeeded: v >> (8 * k))) }
    }
    public mutating func writeBE(_ v: UInt16) {
        bytes.append(UInt8(truncatingIfNeeded: v >> 8))
        bytes.append(UInt8(truncatingIfNeeded: v))
    }
    public mutating func writeBE(_ v: UInt32) {
        for k in (0..<4).reversed() { bytes.append(UInt8(truncatingIfNeeded: v >> (8 * k))) }
    }
    public mutating func writeBE(_ v: UInt64) {
        for k in (0..<8).reversed() { bytes.append(UInt8(truncatingIfNeeded: v >> (8 * k))) }
    }
    public mutating func write<S: Sequence>(contentsOf s: S) where S.Element == UInt8 {
        bytes.append(contentsOf: s)
    }
    /// Overwrites a byte already written (used to back-patch length fields).
    public mutating func patch(_ v: UInt8, at index: Int) {
        if bytes.indices.contains(index) { bytes[index] = v }
    }
}

extension FixedWidthInteger {
    /// A number from hex digits alone (ASCII `0-9a-fA-F`: no sign, no `0x`, no
    /// separators), nil when empty, anything else or out of range. `init(_:radix:)`
    /// also takes a sign (`UInt8("+1", radix: 16)` is 1), and `Character.isHexDigit`
    /// fullwidth digits; text from people and files goes through this instead.
    public init?(hexDigits s: some StringProtocol) {
        guard !s.isEmpty, s.unicodeScalars.allSatisfy(\.properties.isASCIIHexDigit), let v = Self(s, radix: 16) else { return nil }
        self = v
    }
}

extension Array where Element == UInt8 {
    /// Lower-case hex, no separators: `[0x01, 0xab]` → `"01ab"`.
    public var hexString: String {
        var s = ""
        s.reserveCapacity(count * 2)
        for b in self {
            let hi = b >> 4, lo = b & 0xF
            s.append(Character(Unicode.Scalar(hi < 10 ? 48 + hi : 87 + hi)))
            s.append(Character(Unicode.Scalar(lo < 10 ? 48 + lo : 87 + lo)))
        }
        return s
    }

    /// Parses hex with optional whitespace, `:` or `-` between bytes (`01:02`, `01 02`,
    /// `0102`); nil on anything else, an odd digit count, or a separator inside a byte
    /// (`1:2` is neither 0x12 nor 01 02, so it is refused rather than guessed).
    public init?(hex: String) {
        var out: [UInt8] = []
        var pending: UInt8? = nil
        for c in hex.unicodeScalars {
            if c == " " || c == ":" || c == "-" || c == "\n" || c == "\t" {
                guard pending == nil else { return nil }
                continue
            }
            guard let v = Self.hexValue(c) else { return nil }
            if let p = pending { out.append(p << 4 | v); pending = nil } else { pending = v }
        }
        guard pending == nil else { return nil }
        self = out
    }

    private static func hexValue(_ c: Unicode.Scalar) -> UInt8? {
        switch c {
        case "0"..."9": return UInt8(c.value - 48)
        case "a"..."f": return UInt8(c.value - 87)
        case "A"..."F": return UInt8(c.value - 55)
        default: return nil
        }
    }
}
