// Advertising and scan response data as a list of AD structures (Core Specification
// Supplement, Part A, §1; Core v5.4, Vol 3, Part C, §11). Only the framing lives
// here, for decoders of HCI traffic; typed AD values are GAP's.

public struct ADStructure: Hashable, Sendable {
    public var type: UInt8
    public var data: [UInt8]
    public init(type: UInt8, data: [UInt8]) {
        self.type = type
        self.data = data
    }

    /// The Assigned Numbers name of the AD type, or nil if not known here.
    public var typeName: String? { ADStructure.names[type] }

    static let names: [UInt8: String] = [
        0x01: "Flags", 0x02: "Incomplete List of 16-bit Service UUIDs", 0x03: "Complete List of 16-bit Service UUIDs",
        0x04: "Incomplete List of 32-bit Service UUIDs", 0x05: "Complete List of 32-bit Service UUIDs",
        0x06: "Incomplete List of 128-bit Service UUIDs", 0x07: "Complete List of 128-bit Service UUIDs",
        0x08: "Shortened Local Name", 0x09: "Complete Local Name", 0x0A: "Tx Power Level", 0x0D: "Class of Device",
        0x10: "Device ID", 0x12: "Peripheral Connection Interval Range", 0x14: "List of 16-bit Service Solicitation UUIDs",
        0x15: "List of 128-bit Service Solicitation UUIDs", 0x16: "Service Data - 16-bit UUID",
        0x17: "Public Target Address", 0x18: "Random Target Address", 0x19: "Appearance", 0x1A: "Advertising Interval",
        0x1B: "LE Bluetooth Device Address", 0x1C: "LE Role", 0x1F: "List of 32-bit Service Solicitation UUIDs",
        0x20: "Service Data - 32-bit UUID", 0x21: "Service Data - 128-bit UUID", 0x24: "URI",
        0x27: "LE Supported Features", 0x29: "PB-ADV", 0x2A: "Mesh Message", 0x2B: "Mesh Beacon",
        0x2F: "Advertising Interval - long", 0x30: "Broadcast Name", 0xFF: "Manufacturer Specific Data",
    ]

    /// Splits `bytes` into AD structures. A zero length ends the data (the rest is
    /// padding). A structure whose length runs past the end is reported as `damage`
    /// with its offset, never trusted.
    public static func parse(_ bytes: [UInt8]) -> (structures: [ADStructure], damage: DecodeError?) {
        var out: [ADStructure] = []
        let damage = forEach(in: bytes) { out.append(ADStructure(type: $0, data: Array($1))) }
        return (out, damage)
    }

    /// Walks the AD structures in `bytes` without copying them: `body` gets each type and
    /// its data. Returns the damage `parse` reports (nil when the data is well formed).
    @discardableResult
    public static func forEach(in bytes: [UInt8], _ body: (UInt8, ArraySlice<UInt8>) throws -> Void) rethrows -> DecodeError? {
        var i = 0
        while i < bytes.count {
            let len = Int(bytes[i])
            if len == 0 { break }
            guard i + 1 + len <= bytes.count else {
                return .truncated(what: "AD structure at offset \(i)", offset: i, needed: len, available: bytes.count - i - 1)
            }
            try body(bytes[i + 1], bytes[(i + 2)..<(i + 1 + len)])
            i += 1 + len
        }
        return nil
    }

    /// The Assigned Numbers name of AD type `type`, or nil if not known here.
    public static func typeName(_ type: UInt8) -> String? { nameTable[Int(type)] }

    /// `names` indexed by type (a decoder looks a name up per AD structure).
    static let nameTable: [String?] = (0..<256).map { names[UInt8($0)] }

    /// Encodes structures back to bytes (length, type, data each).
    public static func encode(_ structures: [ADStructure]) -> [UInt8] {
        var w = ByteWriter()
        for s in structures {
            w.write(UInt8(truncatingIfNeeded: s.data.count + 1)); w.write(s.type); w.write(contentsOf: s.data)
        }
        return w.bytes
    }
}
