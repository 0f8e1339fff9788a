// Characteristic values as a person reads them, for the common SIG characteristics
// (GATT Specification Supplement): Battery Level as a percentage, names and strings
// as text, Appearance by name, PnP ID and Peripheral Preferred Connection Parameters
// field by field, temperatures and humidity in their units. nil when the UUID is not
// one of these or the value's length is wrong for it.

import HCI

public enum CharacteristicFormatter {
    public static func describe(_ value: [UInt8], of uuid: BluetoothUUID) -> String? {
        guard let short = uuid.uint16 else { return nil }
        func u16(_ i: Int) -> UInt16 { UInt16(value[i]) | UInt16(value[i + 1]) << 8 }
        func text() -> String? {
            guard let s = String(bytes: value.prefix { $0 != 0 }, encoding: .utf8) else { return nil }
            return "\"\(s)\""
        }
        switch short {
        case 0x2A00, 0x2A24, 0x2A25, 0x2A26, 0x2A27, 0x2A28, 0x2A29, 0x2A3D, 0x2A8A, 0x2A90:
            return text()
        case 0x2A01:
            guard value.count == 2 else { return nil }
            return AssignedNumbers.appearanceName(u16(0)) ?? "appearance 0x\(hex4(u16(0)))"
        case 0x2A04:
            guard value.count == 8 else { return nil }
            func ms(_ v: UInt16, _ unit: Double) -> String { v == 0xFFFF ? "none" : "\(Double(v) * unit) ms" }
            return "interval \(ms(u16(0), 1.25))–\(ms(u16(2), 1.25)), latency \(u16(4)), supervision timeout \(ms(u16(6), 10))"
        case 0x2A05:
            guard value.count == 4 else { return nil }
            return "handles 0x\(hex4(u16(0)))–0x\(hex4(u16(2)))"
        case 0x2A07:
            guard value.count == 1 else { return nil }
            return "\(Int8(bitPattern: value[0])) dBm"
        case 0x2A19:
            guard value.count == 1 else { return nil }
            return "\(value[0]) %"
        case 0x2A23:
            guard value.count == 8 else { return nil }
            return "manufacturer \(value[0..<5].reversed().map { hex2($0) }.joined()), organisation \(value[5..<8].reversed().map { hex2($0) }.joined())"
        case 0x2A37:
            guard let flags = value.first, value.count >= (flags & 1 == 0 ? 2 : 3) else { return nil }
            return "\(flags & 1 == 0 ? Int(value[1]) : Int(u16(1))) bpm"
        case 0x2A50:
            guard value.count == 7 else { return nil }
            let source = value[0] == 1 ? "Bluetooth SIG" : value[0] == 2 ? "USB" : "source \(value[0])"
            let vendor = value[0] == 1 ? AssignedNumbers.companyName(u16(1)).map { " (\($0))" } ?? "" : ""
            return "vendor 0x\(hex4(u16(1)))\(vendor) from \(source), product 0x\(hex4(u16(3))), version 0x\(hex4(u16(5)))"
        case 0x2A6E:
            guard value.count == 2 else { return nil }
            let v = Int16(bitPattern: u16(0))
            return v == Int16.min ? "unknown" : "\(Double(v) / 100) °C"
        case 0x2A6F:
            guard value.count == 2 else { return nil }
            return u16(0) == 0xFFFF ? "unknown" : "\(Double(u16(0)) / 100) %"
        case 0x2AA6:
            guard value.count == 1 else { return nil }
            return value[0] == 0 ? "not supported" : "supported"
        case 0x2902:
            guard value.count == 2 else { return nil }
            let v = u16(0)
            let parts = [v & 1 != 0 ? "notifications" : nil, v & 2 != 0 ? "indications" : nil].compactMap { $0 }
            return parts.isEmpty ? "off" : parts.joined(separator: " and ")
        case 0x2901:
            return text()
        default:
            return nil
        }
    }
}
