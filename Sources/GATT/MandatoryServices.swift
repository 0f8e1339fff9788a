// The services every GATT server has (Core Specification v5.4, Vol 3, Part C, §12
// and Part G, §7): GAP (Device Name, Appearance, and Peripheral Preferred Connection
// Parameters when given) and GATT (Service Changed, Client Supported Features,
// Database Hash), and the Database Hash itself (§7.3.1).

import ATT
import BLECrypto
import HCI

public enum GATTCharacteristicType {
    public static let deviceName = BluetoothUUID(0x2A00)
    public static let appearance = BluetoothUUID(0x2A01)
    public static let peripheralPreferredConnectionParameters = BluetoothUUID(0x2A04)
    public static let serviceChanged = BluetoothUUID(0x2A05)
    public static let clientSupportedFeatures = BluetoothUUID(0x2B29)
    public static let databaseHash = BluetoothUUID(0x2B2A)
    public static let serverSupportedFeatures = BluetoothUUID(0x2B3A)
}

/// Server Supported Features bits (Vol 3, Part G, §7.4).
public enum ServerSupportedFeatures {
    /// The server takes enhanced ATT bearers (EATT, SPSM 0x0027).
    public static let eatt: UInt8 = 0x01
}

/// Client Supported Features bits (Vol 3, Part G, §7.2): what a client writes to tell
/// the server what it handles. A bit once set stays set for the connection (a bond's).
public enum ClientSupportedFeatures {
    public static let robustCaching: UInt8 = 0x01
    /// The client takes enhanced ATT bearers (EATT).
    public static let eatt: UInt8 = 0x02
    /// The client takes Multiple Handle Value Notifications.
    public static let multipleHandleValueNotifications: UInt8 = 0x04
    /// Every bit this version of the specification defines.
    public static let all: UInt8 = 0x07
}

/// Peripheral Preferred Connection Parameters (Vol 3, Part C, §12.3): the connection a
/// peripheral would have its central give it, in its GAP service, as NimBLE's and
/// Zephyr's GAP services carry it; BlueZ's central reads it for the device's links. Four
/// little-endian 16-bit fields; 0xFFFF in one says "no preference".
public struct PreferredConnectionParameters: Hashable, Sendable, CustomStringConvertible {
    /// Connection interval bounds in 1.25 ms units: 6 to 3200 (7.5 ms to 4 s), or 0xFFFF.
    public var intervalMin: UInt16
    public var intervalMax: UInt16
    /// Peripheral latency in connection events: 0 to 499.
    public var latency: UInt16
    /// Supervision timeout in 10 ms units: 10 to 3200 (100 ms to 32 s), or 0xFFFF.
    public var supervisionTimeout: UInt16

    /// The value a field takes for "no preference".
    public static let noPreference: UInt16 = 0xFFFF

    public init(intervalMin: UInt16, intervalMax: UInt16, latency: UInt16 = 0, supervisionTimeout: UInt16) {
        self.intervalMin = intervalMin
        self.intervalMax = intervalMax
        self.latency = latency
        self.supervisionTimeout = supervisionTimeout
    }

    /// The characteristic's value as a server holds it: `nil` unless 8 octets.
    public init?(value: [UInt8]) {
        guard value.count == 8 else { return nil }
        func u16(_ i: Int) -> UInt16 { UInt16(value[i]) | UInt16(value[i + 1]) << 8 }
        self.init(intervalMin: u16(0), intervalMax: u16(2), latency: u16(4), supervisionTimeout: u16(6))
    }

    public var value: [UInt8] {
        [intervalMin, intervalMax, latency, supervisionTimeout].flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] }
    }

    /// Whether each field is in §12.3's range (or says "no preference"), the maximum
    /// interval at least the minimum, and the timeout longer than (1 + latency) ×
    /// the maximum interval × 2 (Vol 6, Part B, §4.5.2; BlueZ checks the same).
    public var isValid: Bool {
        let none = Self.noPreference
        func interval(_ v: UInt16) -> Bool { v == none || (6...3200).contains(v) }
        guard interval(intervalMin), interval(intervalMax), intervalMin == none || intervalMax == none || intervalMin <= intervalMax,
              latency <= 499, supervisionTimeout == none || (10...3200).contains(supervisionTimeout) else { return false }
        // In units: timeout × 10 ms > (1 + latency) × interval × 1.25 ms × 2.
        return intervalMax == none || supervisionTimeout == none || (1 + Int(latency)) * Int(intervalMax) < 4 * Int(supervisionTimeout)
    }

    /// What to ask for to meet them (an LE Connection Update or a Connection Parameter
    /// Update Request): nil when they state no interval. A missing bound takes the
    /// other's value; without a timeout preference the timeout is 5 s, or longer when
    /// the interval and latency need it (more than (1 + latency) × interval × 2).
    public var request: (intervalMin: UInt16, intervalMax: UInt16, latency: UInt16, supervisionTimeout: UInt16)? {
        let none = Self.noPreference
        guard intervalMin != none || intervalMax != none else { return nil }
        let (low, high) = (intervalMin == none ? intervalMax : intervalMin, intervalMax == none ? intervalMin : intervalMax)
        // In 10 ms units: (1 + latency) × interval (1.25 ms units) × 2, and one more.
        let least = (Int(1 + latency) * Int(high) * 125 * 2 + 999) / 1000 + 1
        return (low, high, latency, supervisionTimeout != none ? supervisionTimeout : UInt16(min(3200, max(500, least))))
    }

    /// Whether a link with `interval`, `latency` and `supervisionTimeout` meets them
    /// (an interval in range; the latency and timeout stated, when stated).
    public func isMet(interval: UInt16, latency: UInt16, supervisionTimeout: UInt16) -> Bool {
        guard let r = request else { return true }
        return (r.intervalMin...r.intervalMax).contains(interval) && latency == r.latency
            && (self.supervisionTimeout == Self.noPreference || supervisionTimeout == self.supervisionTimeout)
    }

    public var description: String {
        func ms(_ v: UInt16, _ unit: Double) -> String { v == Self.noPreference ? "no preference" : "\(Double(v) * unit) ms" }
        return "interval \(ms(intervalMin, 1.25)) to \(ms(intervalMax, 1.25)), latency \(latency), timeout \(ms(supervisionTimeout, 10))"
    }
}

/// Handles of the mandatory services' characteristics in a database.
public struct MandatoryHandles: Hashable, Sendable {
    public var deviceName: UInt16
    public var appearance: UInt16
    public var serviceChanged: UInt16
    public var serviceChangedConfiguration: UInt16
    public var clientSupportedFeatures: UInt16
    public var databaseHash: UInt16

    /// No mandatory services (every handle 0, which no attribute has).
    public static let none = MandatoryHandles(deviceName: 0, appearance: 0, serviceChanged: 0, serviceChangedConfiguration: 0,
                                              clientSupportedFeatures: 0, databaseHash: 0)
}

extension AttributeDatabase {
    /// Adds the GAP and GATT services (call first, so they take the lowest handles).
    /// With `serverFeatures`, the GATT service ends with a Server Supported Features
    /// characteristic holding them (§7.4; a server that takes EATT must have it). With
    /// `preferredConnectionParameters`, the GAP service ends with them (§12.3).
    public mutating func addMandatoryServices(deviceName: String, appearance: UInt16 = 0, serverFeatures: UInt8? = nil,
                                              preferredConnectionParameters: PreferredConnectionParameters? = nil) throws -> MandatoryHandles {
        let gap = try add(GATTService(uuid: BluetoothUUID(0x1800), characteristics: [
            GATTCharacteristic(uuid: GATTCharacteristicType.deviceName, properties: [.read], value: Array(deviceName.utf8.prefix(248))),
            GATTCharacteristic(uuid: GATTCharacteristicType.appearance, properties: [.read], value: [UInt8(appearance & 0xFF), UInt8(appearance >> 8)]),
        ] + (preferredConnectionParameters.map {
            [GATTCharacteristic(uuid: GATTCharacteristicType.peripheralPreferredConnectionParameters, properties: [.read], value: $0.value)]
        } ?? [])))
        let gatt = try add(GATTService(uuid: BluetoothUUID(0x1801), characteristics: [
            GATTCharacteristic(uuid: GATTCharacteristicType.serviceChanged, properties: [.indicate], permissions: [], value: [0, 0, 0, 0]),
            GATTCharacteristic(uuid: GATTCharacteristicType.clientSupportedFeatures, properties: [.read, .write], value: [0], maximumLength: 1),
            GATTCharacteristic(uuid: GATTCharacteristicType.databaseHash, properties: [.read], permissions: [.read], value: [UInt8](repeating: 0, count: 16)),
        ] + (serverFeatures.map { [GATTCharacteristic(uuid: GATTCharacteristicType.serverSupportedFeatures, properties: [.read], value: [$0])] } ?? [])))
        let handles = MandatoryHandles(
            deviceName: gap.characteristicValues[0], appearance: gap.characteristicValues[1], serviceChanged: gatt.characteristicValues[0],
            serviceChangedConfiguration: gatt.clientConfigurations[0] ?? 0, clientSupportedFeatures: gatt.characteristicValues[1],
            databaseHash: gatt.characteristicValues[2])
        try refreshDatabaseHash(at: handles.databaseHash)
        return handles
    }

    /// The Database Hash (§7.3.1): AES-CMAC with a zero key over, in handle order, the
    /// handle, type and value of every service, include and characteristic declaration
    /// and Extended Properties descriptor, and the handle and type of every User
    /// Description, Client/Server Configuration, Presentation and Aggregate Format descriptor.
    public func databaseHash() throws -> [UInt8] {
        var m: [UInt8] = []
        let withValue: Set<UInt16> = [0x2800, 0x2801, 0x2802, 0x2803, 0x2900]
        let withoutValue: Set<UInt16> = [0x2901, 0x2902, 0x2903, 0x2904, 0x2905]
        for a in attributes {
            guard let t = a.type.uint16 else { continue }
            if withValue.contains(t) || withoutValue.contains(t) {
                m += [UInt8(a.handle & 0xFF), UInt8(a.handle >> 8), UInt8(t & 0xFF), UInt8(t >> 8)]
                if withValue.contains(t) { m += a.value }
            }
        }
        // The hash is read least significant octet first (§7.3): CMAC output reversed.
        return try BLECrypto.cmac(key: [UInt8](repeating: 0, count: 16), m).reversed()
    }

    public mutating func refreshDatabaseHash(at handle: UInt16) throws {
        setValue(try databaseHash(), at: handle)
    }
}
