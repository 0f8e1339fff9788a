// Advertising and scan response data, typed (Core Specification Supplement v11,
// Part A, §1; Assigned Numbers §2.3): a builder and a parser for the common AD
// types. Unknown types are kept as raw structures; a structure whose length runs
// past the data is reported in `damage`, never trusted.

import HCI

public struct AdvertisingData: Hashable, Sendable {
    /// Flags (§1.3): 0x02 LE General Discoverable, 0x04 BR/EDR Not Supported, ...
    public var flags: UInt8?
    public var localName: String?
    /// True when the name came as Shortened Local Name.
    public var nameIsShortened = false
    public var serviceUUIDs: [BluetoothUUID] = []
    /// Whether the UUID lists were complete (vs incomplete) per size.
    public var serviceUUIDsComplete = true
    public var txPowerLevel: Int8?
    public var appearance: UInt16?
    public var serviceData: [ServiceData] = []
    public var manufacturerData: [ManufacturerData] = []
    /// Peripheral Connection Interval Range, in 1.25 ms units.
    public var connectionIntervalRange: ClosedRange<UInt16>?
    public var uri: String?
    public var leRole: UInt8?
    /// Advertising Interval, in 0.625 ms units.
    public var advertisingInterval: UInt16?
    /// Structures this type does not model, in order.
    public var other: [ADStructure] = []
    /// A structure that ran past the end (what came before it is kept).
    public var damage: DecodeError?

    public struct ServiceData: Hashable, Sendable {
        public var uuid: BluetoothUUID
        public var data: [UInt8]
        public init(uuid: BluetoothUUID, data: [UInt8]) { self.uuid = uuid; self.data = data }
    }
    public struct ManufacturerData: Hashable, Sendable {
        public var companyIdentifier: UInt16
        public var data: [UInt8]
        public init(companyIdentifier: UInt16, data: [UInt8]) { self.companyIdentifier = companyIdentifier; self.data = data }
    }

    public init() {}

    // MARK: Parsing

    public init(parsing bytes: [UInt8]) {
        let (structures, damage) = ADStructure.parse(bytes)
        self.damage = damage
        for s in structures { absorb(s) }
    }

    private mutating func absorb(_ s: ADStructure) {
        let d = s.data
        func uuids(_ size: Int) -> [BluetoothUUID]? {
            guard d.count % size == 0 else { return nil }
            return stride(from: 0, to: d.count, by: size).compactMap { try? BluetoothUUID(littleEndian: Array(d[$0..<($0 + size)])) }
        }
        switch s.type {
        case 0x01 where d.count == 1: flags = d[0]
        case 0x02, 0x03, 0x04, 0x05, 0x06, 0x07:
            let size = [0x02: 2, 0x03: 2, 0x04: 4, 0x05: 4, 0x06: 16, 0x07: 16][s.type] ?? 2
            guard let list = uuids(size) else { other.append(s); return }
            serviceUUIDs += list
            if s.type % 2 == 0 { serviceUUIDsComplete = false }
        case 0x08, 0x09:
            localName = String(decoding: d, as: UTF8.self)
            nameIsShortened = s.type == 0x08
        case 0x0A where d.count == 1: txPowerLevel = Int8(bitPattern: d[0])
        case 0x19 where d.count == 2: appearance = UInt16(d[0]) | UInt16(d[1]) << 8
        case 0x12 where d.count == 4:
            let lo = UInt16(d[0]) | UInt16(d[1]) << 8, hi = UInt16(d[2]) | UInt16(d[3]) << 8
            if lo <= hi { connectionIntervalRange = lo...hi } else { other.append(s) }
        case 0x16 where d.count >= 2, 0x20 where d.count >= 4, 0x21 where d.count >= 16:
            let size = s.type == 0x16 ? 2 : s.type == 0x20 ? 4 : 16
            if let u = try? BluetoothUUID(littleEndian: Array(d[0..<size])) { serviceData.append(ServiceData(uuid: u, data: Array(d[size...]))) }
        case 0xFF where d.count >= 2:
            manufacturerData.append(ManufacturerData(companyIdentifier: UInt16(d[0]) | UInt16(d[1]) << 8, data: Array(d[2...])))
        case 0x24 where !d.isEmpty: uri = Self.decodeURI(d)
        case 0x1C where d.count == 1: leRole = d[0]
        case 0x1A where d.count == 2: advertisingInterval = UInt16(d[0]) | UInt16(d[1]) << 8
        default: other.append(s)
        }
    }

    // MARK: Building

    /// The AD structures, in a stable order (flags, name, UUIDs, tx power, ...).
    public var structures: [ADStructure] {
        var out: [ADStructure] = []
        if let flags { out.append(ADStructure(type: 0x01, data: [flags])) }
        if let localName { out.append(ADStructure(type: nameIsShortened ? 0x08 : 0x09, data: Array(localName.utf8))) }
        let by16 = serviceUUIDs.compactMap(\.uint16)
        let by128 = serviceUUIDs.filter { $0.uint16 == nil }
        if !by16.isEmpty { out.append(ADStructure(type: serviceUUIDsComplete ? 0x03 : 0x02, data: by16.flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] })) }
        if !by128.isEmpty { out.append(ADStructure(type: serviceUUIDsComplete ? 0x07 : 0x06, data: by128.flatMap(\.littleEndianBytes))) }
        if let txPowerLevel { out.append(ADStructure(type: 0x0A, data: [UInt8(bitPattern: txPowerLevel)])) }
        if let appearance { out.append(ADStructure(type: 0x19, data: [UInt8(appearance & 0xFF), UInt8(appearance >> 8)])) }
        if let r = connectionIntervalRange {
            out.append(ADStructure(type: 0x12, data: [UInt8(r.lowerBound & 0xFF), UInt8(r.lowerBound >> 8), UInt8(r.upperBound & 0xFF), UInt8(r.upperBound >> 8)]))
        }
        for s in serviceData {
            let type: UInt8 = s.uuid.uint16 != nil ? 0x16 : s.uuid.uint32 != nil ? 0x20 : 0x21
            let u: [UInt8] = type == 0x16 ? s.uuid.attBytes : type == 0x20 ? Array(s.uuid.littleEndianBytes[12..<16]) : s.uuid.littleEndianBytes
            out.append(ADStructure(type: type, data: u + s.data))
        }
        if let uri { out.append(ADStructure(type: 0x24, data: Self.encodeURI(uri))) }
        if let leRole { out.append(ADStructure(type: 0x1C, data: [leRole])) }
        if let advertisingInterval { out.append(ADStructure(type: 0x1A, data: [UInt8(advertisingInterval & 0xFF), UInt8(advertisingInterval >> 8)])) }
        for m in manufacturerData {
            out.append(ADStructure(type: 0xFF, data: [UInt8(m.companyIdentifier & 0xFF), UInt8(m.companyIdentifier >> 8)] + m.data))
        }
        return out + other
    }

    public var bytes: [UInt8] { ADStructure.encode(structures) }

    /// Encodes for legacy advertising: throws with how much fits when over `limit` (31).
    public func encoded(limit: Int = 31) throws -> [UInt8] {
        let b = bytes
        guard b.count <= limit else { throw AdvertisingDataError.tooLong(length: b.count, limit: limit) }
        return b
    }

    // URI scheme name string (Assigned Numbers §2.7): a UTF-8 code point for the scheme, then the rest.
    static let schemes: [(UInt8, String)] = [(0x16, "http:"), (0x17, "https:")]
    static func decodeURI(_ d: [UInt8]) -> String {
        // The scheme is encoded as U+00xx (two UTF-8 bytes 0xC2 0xxx); 0x01 means "no scheme".
        if d.count >= 2, d[0] == 0xC2, let s = schemes.first(where: { $0.0 == d[1] }) { return s.1 + String(decoding: d[2...], as: UTF8.self) }
        if d.first == 0x01 { return String(decoding: d.dropFirst(), as: UTF8.self) }
        return String(decoding: d, as: UTF8.self)
    }
    static func encodeURI(_ s: String) -> [UInt8] {
        for (code, prefix) in schemes where s.hasPrefix(prefix) { return [0xC2, code] + Array(s.dropFirst(prefix.count).utf8) }
        return [0x01] + Array(s.utf8)
    }
}

extension AdvertisingData {
    /// What a connectable GATT server advertises with legacy advertising (`limit` bytes
    /// in each of the advertising and scan response data), the way phones and BlueZ do:
    /// flags, then as many of `serviceUUIDs` as fit (16-bit ones first; the lists are
    /// marked incomplete when some are left out), then the complete local name when it
    /// still fits. Otherwise the name goes in the scan response, shortened (on a
    /// character boundary) when longer than `limit - 2` bytes. An active scanner sees
    /// both; a passive one sees the services.
    public static func server(name: String, serviceUUIDs: [BluetoothUUID], flags: UInt8 = 0x06,
                              limit: Int = 31) -> (advertising: AdvertisingData, scanResponse: AdvertisingData) {
        var adv = AdvertisingData()
        adv.flags = flags
        var used = 3
        var seen: Set<BluetoothUUID> = []
        let unique = serviceUUIDs.filter { seen.insert($0).inserted }
        let short = unique.filter { $0.uint16 != nil }, long = unique.filter { $0.uint16 == nil }
        var advertised: [BluetoothUUID] = []
        for (list, size) in [(short, 2), (long, 16)] where !list.isEmpty {
            let room = limit - used - 2
            let n = room >= size ? Swift.min(list.count, room / size) : 0
            guard n > 0 else { continue }
            advertised += list.prefix(n)
            used += 2 + n * size
        }
        adv.serviceUUIDs = advertised
        adv.serviceUUIDsComplete = advertised.count == unique.count
        var response = AdvertisingData()
        let nameBytes = Array(name.utf8)
        if nameBytes.isEmpty {
            // Nothing to name.
        } else if used + 2 + nameBytes.count <= limit {
            adv.localName = name
        } else if nameBytes.count <= limit - 2 {
            response.localName = name
        } else {
            var cut = ""
            for c in name {
                guard cut.utf8.count + String(c).utf8.count <= limit - 2 else { break }
                cut.append(c)
            }
            response.localName = cut
            response.nameIsShortened = true
        }
        return (adv, response)
    }
}

public enum AdvertisingDataError: Error, Equatable, Sendable, CustomStringConvertible {
    case tooLong(length: Int, limit: Int)
    public var description: String {
        switch self {
        case let .tooLong(length, limit):
            let or = limit <= 31 ? ", or use extended advertising"
                : limit == Advertiser.connectableExtendedDataLength ? ", or advertise non-connectable" : ""
            return "advertising data is \(length) bytes; \(limit) fit (remove \(length - limit) bytes\(or))"
        }
    }
}
