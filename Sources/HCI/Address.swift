// BD_ADDR and LE address types (Core Specification v5.4, Vol 6, Part B, §1.3;
// Vol 4, Part E, §7.8 parameter tables).

/// A 48-bit Bluetooth device address. `bytes` is in wire order (least significant
/// octet first); the text form is most significant first, `XX:XX:XX:XX:XX:XX`.
public struct BluetoothAddress: Hashable, Sendable, CustomStringConvertible, LosslessStringConvertible {
    /// Wire order: bytes[0] is the least significant octet.
    public let bytes: [UInt8]

    public init(wireBytes: [UInt8]) throws {
        guard wireBytes.count == 6 else {
            throw DecodeError.lengthMismatch(what: "BD_ADDR", declared: 6, actual: wireBytes.count)
        }
        bytes = wireBytes
    }

    /// From the text form `XX:XX:XX:XX:XX:XX` (most significant octet first).
    public init?(_ description: String) {
        let parts = description.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 6 else { return nil }
        var out: [UInt8] = []
        for p in parts.reversed() {
            guard p.count == 2, let v = UInt8(p, radix: 16) else { return nil }
            out.append(v)
        }
        bytes = out
    }

    public static let zero = BluetoothAddress(unchecked: [0, 0, 0, 0, 0, 0])
    init(unchecked: [UInt8]) { bytes = unchecked }

    public var description: String {
        bytes.reversed().map { b in
            let s = String(b, radix: 16, uppercase: true)
            return s.count == 1 ? "0" + s : s
        }.joined(separator: ":")
    }

    public init(from reader: inout ByteReader) throws {
        bytes = try reader.readBytes(6, "BD_ADDR")
    }

    public func encode(into w: inout ByteWriter) { w.write(contentsOf: bytes) }
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
        default: return "unknown(0x\(String(rawValue, radix: 16)))"
        }
    }
}
