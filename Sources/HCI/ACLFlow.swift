// HCI ACL data flow control, sans I/O (Core Specification v5.4, Vol 4, Part E,
// §4.1.1 "Packet-based data flow control" and §7.7.19 Number Of Completed Packets).

/// LE ACL buffer accounting, sans I/O (§4.1.1 "Data flow control").
///
/// The controller has `total` buffers; each ACL packet sent takes one until Number
/// Of Completed Packets returns it. Credits held by a connection come back when it
/// disconnects (the controller flushes them without reporting).
public struct ACLFlow: Sendable {
    public private(set) var total: Int
    public private(set) var available: Int
    public private(set) var outstanding = HandleMap<Int>()

    public init(total: Int) {
        self.total = total
        self.available = total
    }

    public mutating func reset(total: Int) {
        self.total = total
        available = total
        outstanding.removeAll()
    }

    /// Takes a credit for `handle`; false when none is free.
    public mutating func take(handle: UInt16) -> Bool {
        guard available > 0 else { return false }
        available -= 1
        outstanding[handle, default: 0] += 1
        return true
    }

    /// Number Of Completed Packets: returns up to what each handle has outstanding
    /// (a controller reporting more than was sent cannot inflate the pool).
    public mutating func completed(_ nocp: NumberOfCompletedPackets) {
        for e in nocp.entries {
            let held = outstanding[e.connectionHandle] ?? 0
            let n = Swift.min(held, Int(e.numCompletedPackets))
            available += n
            outstanding[e.connectionHandle] = held - n == 0 ? nil : held - n
        }
    }

    /// The connection went away: its credits return to the pool.
    public mutating func disconnected(handle: UInt16) {
        available += outstanding.removeValue(forKey: handle) ?? 0
    }
}
