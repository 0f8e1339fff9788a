// One frame of an HCI trace, whatever file format it came from.

import HCI

public struct TraceRecord: Sendable, Equatable {
    public enum Direction: String, Sendable, Equatable {
        /// Host to controller ("tx", "sent").
        case hostToController = "tx"
        /// Controller to host ("rx", "received").
        case controllerToHost = "rx"
        /// The format does not say (pcap link type 187).
        case unknown = "unknown"
    }

    public enum Content: Sendable, Equatable {
        case packet(HCIPacket)
        /// The record's bytes are not a valid HCI packet; kept with the reason.
        case undecodable(type: HCIPacketType?, bytes: [UInt8], error: DecodeError)
        /// A Linux monitor record that carries no HCI packet (new index, system note, ...).
        case monitor(opcode: UInt16, data: [UInt8])
    }

    /// Microseconds since the Unix epoch.
    public var timestampMicros: Int64
    public var direction: Direction
    public var content: Content
    /// Controller index (Linux monitor format), if the format records one.
    public var adapterIndex: UInt16?

    public init(timestampMicros: Int64, direction: Direction, content: Content, adapterIndex: UInt16? = nil) {
        self.timestampMicros = timestampMicros
        self.direction = direction
        self.content = content
        self.adapterIndex = adapterIndex
    }

    public init(timestampMicros: Int64, packet: HCIPacket, direction: Direction) {
        self.init(timestampMicros: timestampMicros, direction: direction, content: .packet(packet))
    }

    /// The packet type and the bytes after the H4 indicator, as read (also for a
    /// record that did not decode); nil for a monitor-only record.
    public var hciBytes: (type: HCIPacketType, body: [UInt8])? {
        switch content {
        case let .packet(p): return (p.type, p.body)
        case let .undecodable(type?, bytes, _): return (type, bytes)
        default: return nil
        }
    }

    public var packet: HCIPacket? {
        if case let .packet(p) = content { return p }
        return nil
    }

    /// The direction implied by a packet type when the format does not record it:
    /// commands go to the controller, events come from it; data is unknown.
    static func impliedDirection(_ type: HCIPacketType) -> Direction {
        switch type {
        case .command: return .hostToController
        case .event: return .controllerToHost
        default: return .unknown
        }
    }

    /// Decodes an H4 packet body, or keeps the bytes with the reason it failed.
    static func content(type: HCIPacketType, body: [UInt8]) -> Content {
        do { return .packet(try HCIPacket(type: type, body: body)) } catch let e as DecodeError {
            return .undecodable(type: type, bytes: body, error: e)
        } catch {
            return .undecodable(type: type, bytes: body, error: .invalidValue(what: "packet", value: 0))
        }
    }

    static func content(h4: [UInt8]) -> Content {
        guard let first = h4.first else {
            return .undecodable(type: nil, bytes: [], error: .truncated(what: "H4 packet indicator", offset: 0, needed: 1, available: 0))
        }
        return content(type: HCIPacketType(rawValue: first), body: Array(h4.dropFirst()))
    }
}

/// Damage found in a trace file after its last complete record.
public struct TraceDamage: Error, Sendable, Equatable, CustomStringConvertible {
    /// Byte offset in the file where the damaged record starts.
    public var offset: Int
    public var reason: String
    public var description: String { "damaged at byte offset \(offset): \(reason)" }
}

/// A file that is not a trace at all (no known header).
public struct TraceFormatError: Error, Sendable, Equatable, CustomStringConvertible {
    public var reason: String
    public var description: String { reason }
}
