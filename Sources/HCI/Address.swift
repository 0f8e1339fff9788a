// BD_ADDR and LE address types (Core Specification v5.4, Vol 6, Part B, §1.3;
// Vol 4, Part E, §7.8 parameter tables).

/// A 48-bit Bluetooth device address. `bytes` is in wire order (least significant
/// octet first); the text form is most significant first, `XX:XX:XX:XX:XX:XX`.
public struct BluetoothAddress: Hashable, Sendable, CustomStringConvertible, LosslessStringConvertible {
    /// The 48 bits as one integer: octet 0 on the wire is the low byte. Kept as a value,
    /// not an array, so a decoded address costs no allocation (a scan decodes one per
    /// report) and hashes and compares as a word.
    public let value: UInt64

    /// Wire order: bytes[0] is the least significant octet.
    public var bytes: [UInt8] { (0..<6).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }

    /// Octet `i` in wire order (0 least significant).
    @inlinable public func octet(_ i: Int) -> UInt8 { UInt8(truncatingIfNeeded: value >> (8 * i)) }

    public init(wireBytes: [UInt8]) throws {
        guard wireBytes.count == 6 else {
            throw DecodeError.lengthMismatch(what: "BD_ADDR", declared: 6, actual: wireBytes.count)
        }
        self.init(unchecked: wireBytes)
    }

    /// From the 48-bit value (bits above 48 are dropped).
    public init(value: UInt64) { self.value = value & 0xFFFF_FFFF_FFFF }

    /// From the text form `XX:XX:XX:XX:XX:XX` (most significant octet first).
    public init?(_ description: String) {
        let parts = description.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 6 else { return nil }
        var v: UInt64 = 0
        for p in parts {
            guard p.utf8.count == 2, let b = UInt8(hexDigits: p) else { return nil }
            v = v << 8 | UInt64(b)
        }
        value = v
    }

    public static let zero = BluetoothAddress(value: 0)
    init(unchecked wire: [UInt8]) {
        var v: UInt64 = 0
        for (i, b) in wire.prefix(6).enumerated() { v |= UInt64(b) << (8 * i) }
        value = v
    }

    public var description: String {
        let digits: StaticString = "0123456789ABCDEF"
        return digits.withUTF8Buffer { d in
            String(unsafeUninitializedCapacity: 17) { out in
                var k = 0
                for i in stride(from: 5, through: 0, by: -1) {
                    let b = octet(i)
                    out[k] = d[Int(b >> 4)]
                    out[k + 1] = d[Int(b & 0xF)]
                    if i > 0 { out[k + 2] = UInt8(ascii: ":") }
                    k += 3
                }
                return 17
            }
        }
    }

    public init(from reader: inout ByteReader) throws {
        let i = try reader.take(6, "BD_ADDR")
        var v: UInt64 = 0
        for k in 0..<6 { v |= UInt64(reader.storage[i + k]) << (8 * k) }
        value = v
    }

    public func encode(into w: inout ByteWriter) {
        w.write(UInt32(truncatingIfNeeded: value))
        w.write(UInt16(truncatingIfNeeded: value >> 32))
    }
}

/// Coded as its text form, `"XX:XX:XX:XX:XX:XX"` (a bond file stays readable).
extension BluetoothAddress: Codable {
    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        let text = try c.decode(String.self)
        guard let a = BluetoothAddress(text) else {
            throw DecodingError.dataCorruptedError(in: c, debugDescription: "not a Bluetooth address: \(text)")
        }
        self = a
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(description)
    }
}

/// LE address type as used in HCI parameters (an open set: 0x00 public, 0x01 random,
/// 0x02/0x03 identity addresses resolved by the controller, 0xFF anonymous).
public struct AddressType: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let `public` = AddressType(rawValue: 0x00)
    public static let random = AddressType(rawValue: 0x01)
    public static let publicIdentity = AddressType(rawValue: 0x02)
    public static let randomIdentity = AddressType(rawValue: 0x03)
    public static let anonymous = AddressType(rawValue: 0xFF)

    public var description: String {
        switch rawValue {
        case 0x00: return "public"
        case 0x01: return "random"
        case 0x02: return "public-identity"
        case 0x03: return "random-identity"
        case 0xFF: return "anonymous"
        default: return "unknown(0x\(hex2(rawValue)))"
        }
    }
}
