// The fire-alarm profile (the seed's worked example, §5.2): one service with
//   alarm state  (read, indicate)  1 byte: 0 quiet, 1 alarm
//   alarm text   (read)            UTF-8
//   floor plan   (read, notify)    read: size (UInt32 LE) + CRC-32 (UInt32 LE) of the
//                                  image; subscribed: the image as notifications,
//                                  each filling the central's ATT_MTU − 3
//   acknowledge  (write)           UTF-8, who acknowledged
// Both sides use only the BLE facade.

import BLE
import Foundation

public enum FireAlarmProfile {
    public static let service = BluetoothUUID("F1DE0000-2C4B-4D5E-8F60-7A8B9CADBEEF")!
    public static let alarmState = BluetoothUUID("F1DE0001-2C4B-4D5E-8F60-7A8B9CADBEEF")!
    public static let alarmText = BluetoothUUID("F1DE0002-2C4B-4D5E-8F60-7A8B9CADBEEF")!
    public static let floorPlan = BluetoothUUID("F1DE0003-2C4B-4D5E-8F60-7A8B9CADBEEF")!
    public static let acknowledge = BluetoothUUID("F1DE0004-2C4B-4D5E-8F60-7A8B9CADBEEF")!
    /// TX power the sender advertises (dBm), for the receiver's distance estimate.
    public static let advertisedTxPower: Int8 = 0

    /// The floor-plan characteristic's value: the image's size and CRC-32.
    public static func header(for image: [UInt8]) -> [UInt8] {
        let n = UInt32(image.count), c = crc32(image)
        return (0..<4).map { UInt8(truncatingIfNeeded: n >> (8 * $0)) } + (0..<4).map { UInt8(truncatingIfNeeded: c >> (8 * $0)) }
    }

    /// Size and CRC-32 from a header; nil unless exactly 8 bytes.
    public static func parseHeader(_ b: [UInt8]) -> (size: Int, crc: UInt32)? {
        guard b.count == 8 else { return nil }
        func u32(_ i: Int) -> UInt32 { (0..<4).reduce(0) { $0 | UInt32(b[i + $1]) << (8 * UInt32($1)) } }
        return (Int(u32(0)), u32(4))
    }

    /// CRC-32 (IEEE 802.3, reflected, as zlib and PNG use).
    public static func crc32(_ data: [UInt8]) -> UInt32 {
        var c: UInt32 = 0xFFFF_FFFF
        for b in data {
            c ^= UInt32(b)
            for _ in 0..<8 { c = c & 1 != 0 ? (c >> 1) ^ 0xEDB8_8320 : c >> 1 }
        }
        return ~c
    }

    /// The built-in floor plan: an SVG of one storey with the exits marked.
    public static let defaultFloorPlan: [UInt8] = Array("""
    <svg xmlns="http://www.w3.org/2000/svg" width="640" height="400" viewBox="0 0 640 400">
      <title>Building B, floor 3: evacuation plan</title>
      <rect x="10" y="10" width="620" height="380" fill="#fff" stroke="#000" stroke-width="6"/>
      <g stroke="#000" stroke-width="3" fill="none">
        <path d="M10 200 H250 M330 200 H630 M250 10 V140 M250 260 V390 M420 10 V200 M420 260 V390"/>
      </g>
      <g font-family="sans-serif" font-size="18">
        <text x="40" y="60">Lab 3.01</text><text x="280" y="60">Office 3.02</text><text x="450" y="60">Office 3.03</text>
        <text x="40" y="300">Store 3.04</text><text x="280" y="300">Kitchen 3.05</text><text x="450" y="300">Meeting 3.06</text>
      </g>
      <circle cx="300" cy="120" r="22" fill="#d00"/><text x="285" y="127" fill="#fff" font-size="18">!</text>
      <g fill="#080"><rect x="600" y="180" width="30" height="40"/><rect x="10" y="180" width="30" height="40"/></g>
      <g font-family="sans-serif" font-size="14" fill="#080"><text x="540" y="240">EXIT east</text><text x="16" y="240">EXIT west</text></g>
      <path d="M300 150 V200 H590" stroke="#080" stroke-width="5" fill="none" stroke-dasharray="12 6"/>
    </svg>
    """.utf8)

    public static let defaultText = "FIRE in building B, floor 3 (kitchen 3.05). Leave by the east stairs; do not use the lifts."
}

/// One step of a sender's or receiver's session, printed as it happens.
/// A field of a fire-alarm event, typed so JSON carries numbers and booleans as such.
public enum FireAlarmField: Sendable, Equatable, CustomStringConvertible, ExpressibleByStringInterpolation, ExpressibleByIntegerLiteral {
    case text(String)
    case integer(Int)
    case number(Double)
    case flag(Bool)

    public init(stringLiteral value: String) { self = .text(value) }
    public init(integerLiteral value: Int) { self = .integer(value) }

    public var description: String {
        switch self {
        case let .text(t): return t
        case let .integer(i): return String(i)
        case let .number(d): return String(d)
        case let .flag(b): return String(b)
        }
    }

    var jsonObject: Any {
        switch self {
        case let .text(t): return t
        case let .integer(i): return i
        case let .number(d): return d.isFinite ? d : NSNull()
        case let .flag(b): return b
        }
    }
}

public struct FireAlarmEvent: Sendable {
    public var role: String
    /// The step as the text output shows it ("floor plan", "ALARM").
    public var event: String
    public var detail: String
    public var fields: [String: FireAlarmField]

    public init(role: String, event: String, detail: String, fields: [String: FireAlarmField] = [:]) {
        self.role = role
        self.event = event
        self.detail = detail
        self.fields = fields
    }

    /// The step's stable name in JSON: lower-case snake_case ("floor_plan", "alarm").
    public var eventName: String {
        String(event.lowercased().map { $0 == " " || $0 == "-" ? "_" : $0 })
    }

    /// `role     | event        detail`
    public var text: String {
        let r = role.padding(toLength: 8, withPad: " ", startingAt: 0)
        let e = event.padding(toLength: 14, withPad: " ", startingAt: 0)
        return "\(r)| \(e) \(detail)"
    }

    /// One JSON object: role, event (snake_case), detail and the fields (numbers and
    /// booleans as such), keys sorted (schema: docs/schemas/demo.schema.json).
    public var json: String {
        var o: [String: Any] = fields.mapValues(\.jsonObject)
        o["role"] = role
        o["event"] = eventName
        o["detail"] = detail
        guard let data = try? JSONSerialization.data(withJSONObject: o, options: [.sortedKeys, .withoutEscapingSlashes]) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }
}

extension FireAlarmEvent {
    /// Writes each event to stdout as it happens (one line: text, or JSON).
    public static func printer(json: Bool) -> FireAlarmLog {
        { e in FileHandle.standardOutput.write(Data(((json ? e.json : e.text) + "\n").utf8)) }
    }
}

/// Where events go: a closure, so a session can print them, collect them or both.
public typealias FireAlarmLog = @Sendable (FireAlarmEvent) -> Void
