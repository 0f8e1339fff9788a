// Reassembly of LE L2CAP basic frames per connection from ACL fragments
// (Core Specification v5.4, Vol 3, Part A, §7.2). Pure: no I/O, no clock.

import HCI

/// Why reassembly dropped data.
public enum ReassemblyError: Error, Hashable, Sendable, CustomStringConvertible {
    /// A continuing fragment arrived with no frame in progress.
    case strayContinuation(handle: UInt16)
    /// The frame's length field exceeds what this host accepts.
    case oversize(handle: UInt16, declared: Int, maximum: Int)
    /// More bytes arrived than the length field announced.
    case lengthMismatch(handle: UInt16, declared: Int, received: Int)
    /// A new frame started before the previous one was complete; the old one is dropped.
    case incompleteFrameDropped(handle: UInt16, declared: Int, received: Int)

    public var description: String {
        switch self {
        case let .strayContinuation(h): return "connection 0x\(hex4(h)): continuation fragment without a start"
        case let .oversize(h, d, m): return "connection 0x\(hex4(h)): L2CAP frame of \(d) bytes exceeds the maximum \(m)"
        case let .lengthMismatch(h, d, r): return "connection 0x\(hex4(h)): L2CAP frame announced \(d) bytes, received \(r)"
        case let .incompleteFrameDropped(h, d, r): return "connection 0x\(hex4(h)): new frame started; previous one had \(r) of \(d) bytes"
        }
    }
}

/// Reassembles ACL fragments into basic frames, per connection (§7.2.1).
public struct Reassembler: Sendable {
    /// Largest frame payload accepted (the ATT MTU plus signaling headroom, at most 65535).
    public var maximumPayload: Int
    private var partial = HandleMap<[UInt8]>()

    public init(maximumPayload: Int = 65_535) { self.maximumPayload = maximumPayload }

    /// Feeds one ACL packet. Returns a complete frame, nil if more fragments are needed,
    /// and the errors met (several can come from one packet: a dropped frame, then a new one).
    public mutating func receive(_ packet: ACLDataPacket) -> (frame: BasicFrame?, errors: [ReassemblyError]) {
        let h = packet.handle
        var errors: [ReassemblyError] = []
        var buffer: [UInt8]
        if packet.boundary == .continuing {
            // Taken out of `partial`, so the append grows the frame in place (linear in its
            // length, however small the fragments a peer's controller sends).
            guard var p = partial.removeValue(forKey: h) else { return (nil, [.strayContinuation(handle: h)]) }
            p += packet.data
            buffer = p
        } else {
            if let p = partial.removeValue(forKey: h) {
                errors.append(.incompleteFrameDropped(handle: h, declared: Self.declared(p) ?? -1, received: Swift.max(0, p.count - 4)))
            }
            buffer = packet.data
        }
        guard let declared = Self.declared(buffer) else {
            partial[h] = buffer
            return (nil, errors)
        }
        guard declared <= maximumPayload else {
            partial[h] = nil
            return (nil, errors + [.oversize(handle: h, declared: declared, maximum: maximumPayload)])
        }
        let received = buffer.count - 4
        if received < declared {
            partial[h] = buffer
            return (nil, errors)
        }
        partial[h] = nil
        guard received == declared else {
            return (nil, errors + [.lengthMismatch(handle: h, declared: declared, received: received)])
        }
        let cid = ChannelID(rawValue: UInt16(buffer[2]) | UInt16(buffer[3]) << 8)
        return (BasicFrame(channel: cid, payload: buffer[4...]), errors)
    }

    /// The connection went away: forget its partial frame.
    public mutating func disconnected(handle: UInt16) { partial[handle] = nil }

    public func hasPartialFrame(handle: UInt16) -> Bool { partial[handle] != nil }

    static func declared(_ b: [UInt8]) -> Int? {
        b.count >= 4 ? Int(UInt16(b[0]) | UInt16(b[1]) << 8) : nil
    }
}
