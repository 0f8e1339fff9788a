// Typed beacons carried in advertising data: Apple iBeacon (manufacturer data,
// company 0x004C, type 0x02 length 0x15) and Google Eddystone (service data on
// UUID 0xFEAA: UID 0x00, URL 0x10, TLM 0x20, EID 0x30), parsed and built.

import HCI

public struct IBeacon: Hashable, Sendable {
    /// Proximity UUID (big-endian on air, as printed).
    public var uuid: BluetoothUUID
    public var major: UInt16
    public var minor: UInt16
    /// RSSI expected at 1 m, dBm.
    public var measuredPower: Int8

    public init(uuid: BluetoothUUID, major: UInt16, minor: UInt16, measuredPower: Int8) {
        self.uuid = uuid
        self.major = major
        self.minor = minor
        self.measuredPower = measuredPower
    }

    public init?(_ m: AdvertisingData.ManufacturerData) {
        let d = m.data
        guard m.companyIdentifier == 0x004C, d.count == 23, d[0] == 0x02, d[1] == 0x15,
              let u = try? BluetoothUUID(littleEndian: Array(d[2..<18]).reversed()) else { return nil }
        uuid = u
        major = UInt16(d[18]) << 8 | UInt16(d[19])
        minor = UInt16(d[20]) << 8 | UInt16(d[21])
        measuredPower = Int8(bitPattern: d[22])
    }

    public var manufacturerData: AdvertisingData.ManufacturerData {
        .init(companyIdentifier: 0x004C, data: [0x02, 0x15] + Array(uuid.littleEndianBytes.reversed())
              + [UInt8(major >> 8), UInt8(major & 0xFF), UInt8(minor >> 8), UInt8(minor & 0xFF), UInt8(bitPattern: measuredPower)])
    }
}

public enum Eddystone: Hashable, Sendable {
    public static let serviceUUID = BluetoothUUID(0xFEAA)

    /// Tx power at 0 m (dBm), 10-byte namespace, 6-byte instance.
    case uid(txPower: Int8, namespace: [UInt8], instance: [UInt8])
    case url(txPower: Int8, url: String)
    /// Unencrypted TLM: battery mV (0 = not supported), temperature °C (nil = not supported),
    /// advertising PDU count, time since boot in 0.1 s.
    case tlm(batteryMillivolts: UInt16, temperature: Double?, advertisingCount: UInt32, uptimeDeciseconds: UInt32)
    case eid(txPower: Int8, identifier: [UInt8])

    static let schemes = ["http://www.", "https://www.", "http://", "https://"]
    static let expansions = [".com/", ".org/", ".edu/", ".net/", ".info/", ".biz/", ".gov/", ".com", ".org", ".edu", ".net", ".info", ".biz", ".gov"]

    public init?(_ s: AdvertisingData.ServiceData) {
        guard s.uuid == Self.serviceUUID, let frame = s.data.first else { return nil }
        let d = Array(s.data.dropFirst())
        switch frame {
        case 0x00 where d.count >= 17:
            self = .uid(txPower: Int8(bitPattern: d[0]), namespace: Array(d[1..<11]), instance: Array(d[11..<17]))
        case 0x10 where d.count >= 2 && Int(d[1]) < Self.schemes.count:
            var url = Self.schemes[Int(d[1])]
            for b in d[2...] { url += Int(b) < Self.expansions.count ? Self.expansions[Int(b)] : String(UnicodeScalar(b)) }
            self = .url(txPower: Int8(bitPattern: d[0]), url: url)
        case 0x20 where d.count == 13 && d[0] == 0x00:
            let battery = UInt16(d[1]) << 8 | UInt16(d[2])
            let rawTemp = Int16(bitPattern: UInt16(d[3]) << 8 | UInt16(d[4]))
            let adv = d[5..<9].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            let sec = d[9..<13].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            self = .tlm(batteryMillivolts: battery, temperature: rawTemp == Int16(bitPattern: 0x8000) ? nil : Double(rawTemp) / 256,
                        advertisingCount: adv, uptimeDeciseconds: sec)
        case 0x30 where d.count >= 9:
            self = .eid(txPower: Int8(bitPattern: d[0]), identifier: Array(d[1..<9]))
        default:
            return nil
        }
    }

    /// The service data, or nil when a field does not fit its frame (URL too long or
    /// with characters outside printable ASCII, wrong namespace/instance/EID sizes).
    public var serviceData: AdvertisingData.ServiceData? {
        var d: [UInt8]
        switch self {
        case let .uid(tx, ns, inst):
            guard ns.count == 10, inst.count == 6 else { return nil }
            d = [0x00, UInt8(bitPattern: tx)] + ns + inst + [0, 0]
        case let .url(tx, url):
            guard let (i, scheme) = Self.schemes.enumerated().first(where: { url.hasPrefix($0.1) }) else { return nil }
            var rest = Substring(url.dropFirst(scheme.count)), enc: [UInt8] = []
            while !rest.isEmpty {
                if let (j, e) = Self.expansions.enumerated().first(where: { rest.hasPrefix($0.1) }) {
                    enc.append(UInt8(j))
                    rest = rest.dropFirst(e.count)
                } else {
                    guard let c = rest.unicodeScalars.first, c.value > 0x20, c.value < 0x7F else { return nil }
                    enc.append(UInt8(c.value))
                    rest = rest.dropFirst()
                }
            }
            guard enc.count <= 17 else { return nil }
            d = [0x10, UInt8(bitPattern: tx), UInt8(i)] + enc
        case let .tlm(b, t, a, s):
            let temp = t.map { UInt16(bitPattern: Int16(($0 * 256).rounded())) } ?? 0x8000
            d = [0x20, 0x00, UInt8(b >> 8), UInt8(b & 0xFF), UInt8(temp >> 8), UInt8(temp & 0xFF)]
            d += [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: a >> UInt32($0)) } + [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: s >> UInt32($0)) }
        case let .eid(tx, id):
            guard id.count == 8 else { return nil }
            d = [0x30, UInt8(bitPattern: tx)] + id
        }
        return .init(uuid: Self.serviceUUID, data: d)
    }
}

extension AdvertisingData {
    public var iBeacon: IBeacon? { manufacturerData.lazy.compactMap(IBeacon.init).first }
    public var eddystone: [Eddystone] { serviceData.compactMap(Eddystone.init) }
}
