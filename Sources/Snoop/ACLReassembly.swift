// Units a trace carries in pieces, held until their length is in so the decoder shows
// each whole at its last piece, as btmon does:
// - L2CAP frames split over ACL packets (Core v5.4, Vol 3, Part A, §7.2: a first
//   fragment with the basic header, then continuing fragments), by link and direction
//   (`ACLReassembly`);
// - SDUs of a credit-based channel split over K-frames (§3.4: the first K-frame carries
//   the SDU length), by link, CID and direction (`SDUReassembly`).
// Bounded: at most `limit` units at once (a trace that starts more gives the oldest
// up), each at most the length its first piece names.

/// A link and a direction: where an L2CAP frame's ACL fragments belong.
struct LinkDirection: Hashable, Sendable {
    var handle: UInt16
    var direction: TraceRecord.Direction
}

typealias ACLReassembly = Reassembly<LinkDirection>
typealias SDUReassembly = Reassembly<ChannelTable.Key>

/// A key that names the link it belongs to (so a link's end forgets its units).
protocol LinkKeyed: Hashable, Sendable { var handle: UInt16 { get } }
extension LinkDirection: LinkKeyed {}
extension ChannelTable.Key: LinkKeyed {}

struct Reassembly<Key: LinkKeyed>: Sendable {
    static var limit: Int { 64 }

    private struct Partial: Sendable {
        /// The unit so far (an L2CAP frame: basic header included).
        var bytes: [UInt8]
        /// The whole unit's length.
        var length: Int
        var fragments: Int
    }

    private var partial: [Key: Partial] = [:]
    /// The keys of `partial`, oldest first.
    private var order: [Key] = []

    /// A first fragment: `frame` (an L2CAP frame: basic header and what follows it here)
    /// is shorter than the `length` octets its header names. A unit of that key not
    /// finished yet is given up (a new first fragment ends it, as in a receiver).
    mutating func start(_ key: Key, _ frame: [UInt8], length: Int) {
        drop(key)
        if order.count >= Self.limit { partial[order.removeFirst()] = nil }
        partial[key] = Partial(bytes: frame, length: length, fragments: 1)
        order.append(key)
    }

    /// A continuing fragment: the whole unit (its named length) and its number of
    /// fragments when this one completes it; nil while more are to come, or when none
    /// was started (the trace began after its first fragment, or that was dropped).
    mutating func continuing(_ key: Key, _ data: some Collection<UInt8>) -> (frame: [UInt8], fragments: Int)? {
        guard partial[key] != nil else { return nil }
        partial[key]?.bytes.append(contentsOf: data)
        partial[key]?.fragments += 1
        guard let p = partial[key], p.bytes.count >= p.length else { return nil }
        drop(key)
        // Octets past the length the first piece named are not part of the unit.
        return (p.bytes.count > p.length ? Array(p.bytes.prefix(p.length)) : p.bytes, p.fragments)
    }

    /// Gives up the frame of `key`, if one is being reassembled.
    mutating func drop(_ key: Key) {
        guard partial.removeValue(forKey: key) != nil else { return }
        order.removeAll { $0 == key }
    }

    /// Gives up a link's units (Disconnection Complete).
    mutating func forget(handle: UInt16) {
        for key in order where key.handle == handle { partial[key] = nil }
        order.removeAll { $0.handle == handle }
    }

    /// Units being reassembled.
    var count: Int { partial.count }
}
