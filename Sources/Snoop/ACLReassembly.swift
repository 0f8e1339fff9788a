// L2CAP frames a trace carries in several ACL packets (Core v5.4, Vol 3, Part A, §7.2:
// a first fragment with the basic header, then continuing fragments), held by link
// and direction until the frame's length is in, so the decoder shows the whole frame
// at its last fragment, as btmon does. Bounded: at most `limit` frames at once (a
// trace that starts more gives the oldest up), each at most its header's length.

struct ACLReassembly: Sendable {
    static let limit = 64

    struct Key: Hashable, Sendable {
        var handle: UInt16
        var direction: TraceRecord.Direction
    }

    private struct Partial: Sendable {
        /// The frame so far, basic header included.
        var bytes: [UInt8]
        /// The whole frame's length, basic header included.
        var length: Int
        var fragments: Int
    }

    private var partial: [Key: Partial] = [:]
    /// The keys of `partial`, oldest first.
    private var order: [Key] = []

    /// A first fragment: `frame` (basic header and what follows it here) is shorter than
    /// the `length` octets its header names. A frame of that link and direction not
    /// finished yet is given up (a new first fragment ends it, as in a receiver).
    mutating func start(_ key: Key, _ frame: [UInt8], length: Int) {
        drop(key)
        if order.count >= Self.limit { partial[order.removeFirst()] = nil }
        partial[key] = Partial(bytes: frame, length: length, fragments: 1)
        order.append(key)
    }

    /// A continuing fragment: the whole frame and its number of fragments when this one
    /// completes it; nil while more are to come, or when no frame was started (the
    /// trace began after its first fragment, or the first fragment was dropped).
    mutating func continuing(_ key: Key, _ data: [UInt8]) -> (frame: [UInt8], fragments: Int)? {
        guard partial[key] != nil else { return nil }
        partial[key]?.bytes.append(contentsOf: data)
        partial[key]?.fragments += 1
        guard let p = partial[key], p.bytes.count >= p.length else { return nil }
        drop(key)
        return (p.bytes, p.fragments)
    }

    /// Gives up the frame of `key`, if one is being reassembled.
    mutating func drop(_ key: Key) {
        guard partial.removeValue(forKey: key) != nil else { return }
        order.removeAll { $0 == key }
    }

    /// Gives up a link's frames (Disconnection Complete).
    mutating func forget(handle: UInt16) {
        for key in order where key.handle == handle { partial[key] = nil }
        order.removeAll { $0.handle == handle }
    }

    /// Frames being reassembled.
    var count: Int { partial.count }
}
