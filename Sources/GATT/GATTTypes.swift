// GATT vocabulary both roles share: the attribute types of the declarations
// (Assigned Numbers §3.5 / §3.7 / §3.8) and the Characteristic Properties bits
// (Core Specification v5.4, Vol 3, Part G, §3.3.1.1). No I/O, no crypto: the client
// procedures and their fuzz target compile with this file alone.

import HCI

/// GATT attribute types (Assigned Numbers §3.5 / §3.8 / §3.7).
public enum GATTType {
    public static let primaryService = BluetoothUUID(0x2800)
    public static let secondaryService = BluetoothUUID(0x2801)
    public static let include = BluetoothUUID(0x2802)
    public static let characteristic = BluetoothUUID(0x2803)
    public static let extendedProperties = BluetoothUUID(0x2900)
    public static let userDescription = BluetoothUUID(0x2901)
    public static let clientCharacteristicConfiguration = BluetoothUUID(0x2902)
    public static let presentationFormat = BluetoothUUID(0x2904)
}

/// Characteristic Properties (§3.3.1.1).
public struct CharacteristicProperties: OptionSet, Hashable, Sendable {
    /// The properties set, by name: broadcast, read, write-without-response, write,
    /// notify, indicate, signed-write, extended (as btctl prints them).
    public var names: [String] {
        let all: [(CharacteristicProperties, String)] = [(.broadcast, "broadcast"), (.read, "read"), (.writeWithoutResponse, "write-without-response"),
            (.write, "write"), (.notify, "notify"), (.indicate, "indicate"), (.authenticatedSignedWrites, "signed-write"), (.extendedProperties, "extended")]
        return all.filter { contains($0.0) }.map(\.1)
    }

    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let broadcast = CharacteristicProperties(rawValue: 0x01)
    public static let read = CharacteristicProperties(rawValue: 0x02)
    public static let writeWithoutResponse = CharacteristicProperties(rawValue: 0x04)
    public static let write = CharacteristicProperties(rawValue: 0x08)
    public static let notify = CharacteristicProperties(rawValue: 0x10)
    public static let indicate = CharacteristicProperties(rawValue: 0x20)
    public static let authenticatedSignedWrites = CharacteristicProperties(rawValue: 0x40)
    public static let extendedProperties = CharacteristicProperties(rawValue: 0x80)
}
