// L2CAP for LE over ACL (Core Specification v5.4, Vol 3, Part A): the basic frame,
// the fixed channels a LE host uses, fragmentation to the controller's LE ACL data
// length and reassembly per connection. Pure: no I/O, no clock.

import HCI

/// L2CAP channel identifier (§2.1). An open set.
public struct ChannelID: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    public static let att = ChannelID(rawValue: 0x0004)
    public static let leSignaling = ChannelID(rawValue: 0x0005)
    public static let securityManager = ChannelID(rawValue: 0x0006)
    public var description: String {
        switch rawValue {
        case 0x0004: return "ATT"
        case 0x0005: return "LE signaling"
        case 0x0006: return "SMP"
        default: return "CID 0x" + hex4(rawValue)
        }
    }
}

/// A complete L2CAP basic frame (B-frame, §3.1).
public struct BasicFrame: Hashable, Sendable {
    public var channel: ChannelID
    /// The information payload as a slice: a reassembled frame's shares the storage of
    /// the ACL data it came in (nothing copied), with that data's indices, so index it
    /// from `startIndex`. The stack hands this on; a layer that keeps bytes copies them.
    public var payloadSlice: ArraySlice<UInt8>

    /// The information payload as an array of its own (a copy of `payloadSlice`).
    public var payload: [UInt8] {
        get { Array(payloadSlice) }
        set { payloadSlice = newValue[...] }
    }

    public init(channel: ChannelID, payload: [UInt8]) {
        self.init(channel: channel, payload: payload[...])
    }

    public init(channel: ChannelID, payload: ArraySlice<UInt8>) {
        self.channel = channel
        self.payloadSlice = payload
    }

    public var bytes: [UInt8] {
        var w = ByteWriter(capacity: payloadSlice.count + 4)
        w.write(UInt16(truncatingIfNeeded: payloadSlice.count)); w.write(channel.rawValue); w.write(contentsOf: payloadSlice)
        return w.bytes
    }

    /// The frame as one ACL packet ("first non-automatically-flushable"), when it fits
    /// in `maximumDataLength` bytes (what most frames do: no fragment array to build).
    public func onlyFragment(handle: UInt16, maximumDataLength: Int) -> ACLDataPacket? {
        guard payloadSlice.count + 4 <= maximumDataLength else { return nil }
        return ACLDataPacket(handle: handle, boundary: .firstNonFlushable, data: bytes)
    }

    /// Splits the frame into ACL packets of at most `maximumDataLength` bytes: the first
    /// marked "first non-automatically-flushable" (the LE host's), the rest "continuing".
    public func fragments(handle: UInt16, maximumDataLength: Int) -> [ACLDataPacket] {
        let all = bytes
        let size = Swift.max(1, maximumDataLength)
        return stride(from: 0, to: all.count, by: size).map { i in
            ACLDataPacket(handle: handle, boundary: i == 0 ? .firstNonFlushable : .continuing,
                          data: Array(all[i..<Swift.min(i + size, all.count)]))
        }
    }
}
