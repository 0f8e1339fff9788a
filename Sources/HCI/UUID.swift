// Bluetooth UUIDs (Core Specification v5.4, Vol 3, Part B, §2.5.1): 16- and 32-bit
// aliases of the Base UUID 0000xxxx-0000-1000-8000-00805F9B34FB, and full 128-bit
// values. Stored as 16 bytes little-endian (wire order); compared by value, so a
// 16-bit UUID equals its 128-bit expansion.

public struct BluetoothUUID: Hashable, Sendable, CustomStringConvertible, LosslessStringConvertible {
    /// 128 bits, least significant byte first (the order ATT puts on the wire).
    public let littleEndianBytes: [UInt8]

    /// The Base UUID, little-endian, with the 32-bit alias field (bytes 12–15) zero.
    static let base: [UInt8] = [0xFB, 0x34, 0x9B, 0x5F, 0x80, 0x00, 0x00, 0x80, 0x00, 0x10, 0x00, 0x00, 0, 0, 0, 0]

    public init(_ short: UInt16) { self.init(alias32: UInt32(short)) }

    public init(alias32 alias: UInt32) {
        var b = Self.base
        b[12] = UInt8(truncatingIfNeeded: alias); b[13] = UInt8(truncatingIfNeeded: alias >> 8)
        b[14] = UInt8(truncatingIfNeeded: alias >> 16); b[15] = UInt8(truncatingIfNeeded: alias >> 24)
        self.init(full: b)
    }

    init(full: [UInt8]) { littleEndianBytes = full }

    /// From 2, 4 or 16 bytes in wire (little-endian) order.
    public init(littleEndian bytes: [UInt8]) throws {
        switch bytes.count {
        case 2: self.init(UInt16(bytes[0]) | UInt16(bytes[1]) << 8)
        case 4: self.init(alias32: UInt32(bytes[0]) | UInt32(bytes[1]) << 8 | UInt32(bytes[2]) << 16 | UInt32(bytes[3]) << 24)
        case 16: self.init(full: bytes)
        default: throw DecodeError.invalidValue(what: "UUID length", value: bytes.count)
        }
    }

    /// From "180F", "0000180F", "0000180f00001000800000805f9b34fb" or
    /// "0000180f-0000-1000-8000-00805f9b34fb" (hyphens there and nowhere else); nil for
    /// anything else.
    public init?(_ description: String) {
        let u = Array(description.utf8)
        let hyphens = [8, 13, 18, 23]
        let hex: String
        switch u.count {
        case 4, 8, 32: hex = description
        case 36 where hyphens.allSatisfy({ u[$0] == UInt8(ascii: "-") }):
            hex = String(decoding: u.indices.filter { !hyphens.contains($0) }.map { u[$0] }, as: UTF8.self)
        default: return nil
        }
        guard hex.unicodeScalars.allSatisfy(\.properties.isASCIIHexDigit), let big = [UInt8](hex: hex) else { return nil }
        try? self.init(littleEndian: big.reversed())
    }

    /// The 16-bit alias, when this UUID is one.
    public var uint16: UInt16? {
        guard isBaseAlias, littleEndianBytes[14] == 0, littleEndianBytes[15] == 0 else { return nil }
        return UInt16(littleEndianBytes[12]) | UInt16(littleEndianBytes[13]) << 8
    }

    /// The 32-bit alias, when this UUID is one.
    public var uint32: UInt32? {
        guard isBaseAlias else { return nil }
        return (12..<16).reduce(UInt32(0)) { $0 | UInt32(littleEndianBytes[$1]) << (8 * UInt32($1 - 12)) }
    }

    var isBaseAlias: Bool { Array(littleEndianBytes[0..<12]) == Array(Self.base[0..<12]) }

    /// The shortest wire form ATT allows: 2 bytes for 16-bit aliases, else 16 (ATT has no 32-bit form).
    public var attBytes: [UInt8] {
        if let s = uint16 { return [UInt8(s & 0xFF), UInt8(s >> 8)] }
        return littleEndianBytes
    }

    public var description: String {
        if let s = uint16 { return String(hex4(s)).uppercased() }
        let h = Array(littleEndianBytes.reversed()).hexString.uppercased()
        let c = Array(h)
        return String(c[0..<8]) + "-" + String(c[8..<12]) + "-" + String(c[12..<16]) + "-" + String(c[16..<20]) + "-" + String(c[20..<32])
    }
}
