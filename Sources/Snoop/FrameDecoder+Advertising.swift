// Advertising reports in the frame decoder: each AD structure of a report, by name and
// with what its value means as btmon shows it (Core Specification Supplement, Part A,
// §1), in the text view's detail lines and the JSON `reports` array.

import HCI

extension FrameDecoder {
    /// The Flags AD type's bits by name, for each value of its octet (every advertiser
    /// sends Flags: a decoder looks them up rather than spelling them each time).
    static let flagsMeaning: [String] = (0..<256).map { flags in
        let bits = ["LE Limited Discoverable Mode", "LE General Discoverable Mode", "BR/EDR Not Supported",
                    "Simultaneous LE and BR/EDR (Controller)", "Simultaneous LE and BR/EDR (Host)"]
        let reserved = flags & 0xE0
        let all = bits.indices.filter { flags & (1 << $0) != 0 }.map { bits[$0] } + (reserved != 0 ? ["reserved bits 0x" + String(reserved, radix: 16)] : [])
        return all.isEmpty ? "none" : all.joined(separator: ", ")
    }

    /// What an AD structure's value means, as btmon shows it: the Flags' bits, the TX
    /// power in dBm, intervals in milliseconds, the LE role, addresses; the services a
    /// UUID list names (a 32- or 128-bit UUID without a name as its canonical text), the
    /// company of manufacturer data, the appearance, a service data UUID. Nil when the
    /// type has no meaning here or the value's length is not the one its type has
    /// (Core Specification Supplement, Part A, §1).
    static func adMeaning(type: UInt8, _ data: ArraySlice<UInt8>) -> String? {
        func uuid(_ bytes: ArraySlice<UInt8>) -> String? {
            if bytes.count == 2 { return AssignedNumbers.name(ofShort: UInt16(bytes[bytes.startIndex]) | UInt16(bytes[bytes.startIndex + 1]) << 8) }
            guard let u = try? BluetoothUUID(littleEndian: Array(bytes)) else { return nil }
            if let name = u.name { return name }
            // A 32-bit UUID as its 8 digits, a 128-bit one as its canonical text.
            return bytes.count == 4 ? hex(bytes.reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) }, 8).uppercased() : u.description
        }
        func uuids(_ width: Int) -> String? {
            guard !data.isEmpty, data.count % width == 0 else { return nil }
            let names = stride(from: data.startIndex, to: data.endIndex, by: width).compactMap { uuid(data[$0..<($0 + width)]) }
            return names.isEmpty ? nil : names.joined(separator: ", ")
        }
        func u16(at offset: Int = 0) -> UInt16? {
            let i = data.startIndex + offset
            return data.count >= offset + 2 ? UInt16(data[i]) | UInt16(data[i + 1]) << 8 : nil
        }
        /// `units` of `unit` microseconds in milliseconds ("7.5 ms").
        func milliseconds(_ units: UInt32, _ unit: UInt32) -> String {
            let us = UInt64(units) * UInt64(unit)
            let tenths = (us + 50) / 100
            return "\(tenths / 10)" + (tenths % 10 == 0 ? "" : ".\(tenths % 10)") + " ms"
        }
        func address(_ bytes: ArraySlice<UInt8>) -> String { (try? BluetoothAddress(wireBytes: Array(bytes)))?.description ?? "" }
        func addresses() -> String? {
            guard !data.isEmpty, data.count % 6 == 0 else { return nil }
            return stride(from: data.startIndex, to: data.endIndex, by: 6).map { address(data[$0..<($0 + 6)]) }.joined(separator: ", ")
        }
        switch type {
        case 0x01: return data.first.map { flagsMeaning[Int($0)] }  // octets after the first: none defined yet
        case 0x02, 0x03, 0x14: return uuids(2)
        case 0x04, 0x05, 0x1F: return uuids(4)
        case 0x06, 0x07, 0x15: return uuids(16)
        case 0x0A:
            guard data.count == 1, let p = data.first else { return nil }
            return "\(Int8(bitPattern: p)) dBm"
        case 0x12:
            // Peripheral Connection Interval Range: minimum and maximum in 1.25 ms, 0xFFFF
            // for no specific bound.
            guard data.count == 4, let lo = u16(), let hi = u16(at: 2) else { return nil }
            func bound(_ v: UInt16) -> String { v == 0xFFFF ? "no specific" : milliseconds(UInt32(v), 1250) }
            return bound(lo) + " to " + bound(hi)
        case 0x16: return data.count >= 2 ? uuid(data.prefix(2)) : nil
        case 0x20: return data.count >= 4 ? uuid(data.prefix(4)) : nil
        case 0x21: return data.count >= 16 ? uuid(data.prefix(16)) : nil
        case 0x17, 0x18: return addresses()
        case 0x19: return u16().flatMap(AssignedNumbers.appearanceName)
        case 0x1A:
            // Advertising Interval in 0.625 ms (2 octets here; 3 or 4 in Advertising
            // Interval - long, AD type 0x2F).
            guard data.count == 2, let v = u16() else { return nil }
            return milliseconds(UInt32(v), 625)
        case 0x2F:
            guard data.count == 3 || data.count == 4 else { return nil }
            let v = data.reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            return milliseconds(v, 625)
        case 0x1B:
            guard data.count == 7, let t = data.last else { return nil }
            return address(data.prefix(6)) + (t & 1 == 0 ? " (public)" : " (random)")
        case 0x1C:
            guard data.count == 1, let r = data.first else { return nil }
            return ["Only Peripheral Role supported", "Only Central Role supported",
                    "Peripheral and Central Role supported, Peripheral preferred",
                    "Peripheral and Central Role supported, Central preferred"][safe: Int(r)]
        case 0xFF: return u16().flatMap(AssignedNumbers.companyName)
        default: return nil
        }
    }

    /// One advertising report as JSON, and a detail line per AD structure.
    static func report<S: FrameSink>(address: BluetoothAddress, type: AddressType, rssi: Int8, eventType: Int, data: [UInt8],
                                     into s: inout S) {
        // Text shows the report's AD structures as detail lines only: the list of types
        // and the JSON objects are skipped there.
        let fields = s.writesFields
        if fields {
            s.beginObject()
            s.key("address"); s.address(address)
            s.field("address_type", string: type.description)
            s.field("rssi", int: Int(rssi))
            s.field("event_type", int: eventType)
            s.key("ad_types")
            s.beginArray()
            _ = ADStructure.forEach(in: data) { t, _ in s.int(Int(t)) }
            s.endArray()
            s.key("ad")
            s.beginArray()
        }
        let damage = ADStructure.forEach(in: data) { t, value in
            let name = ADStructure.typeName(t) ?? "Unknown AD type"
            let isText = t == 0x08 || t == 0x09 || t == 0x30
            let meaning = adMeaning(type: t, value)
            s.detail { o in
                o.put("  AD 0x")
                o.hex(UInt64(t), width: 2)
                o.put(" ")
                o.put(name)
                o.put(": ")
                if isText { o.put(UInt8(ascii: "\"")); o.text(utf8: value); o.put(UInt8(ascii: "\"")) } else { o.hexBytes(value) }
                if let meaning { o.put(" ("); o.put(meaning); o.put(")") }
            }
            guard fields else { return }
            s.beginObject()
            s.field("type", int: Int(t))
            s.field("name", string: name)
            if isText {
                s.key("value")
                s.quotedText(value)
            } else {
                s.field("value", hex: value)
            }
            if let meaning { s.field("meaning", string: meaning) }
            s.endObject()
        }
        if fields { s.endArray() }
        if let damage {
            s.detail { o in o.put("  AD damaged: "); o.put(damage.description) }
            if fields { s.field("ad_error", string: damage.description) }
        }
        if fields { s.endObject() }
    }
}
