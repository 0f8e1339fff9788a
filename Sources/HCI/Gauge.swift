/// A count its owner keeps (live event streams, operations waiting for an MTU
/// exchange, senders waiting for room, octets waiting for controller buffers) that a
/// test or a tool follows without polling: each `watch()` stream starts with the
/// value at that moment and then gets every change.
///
/// A stream keeps only the newest value: a count is state, so once a newer one is
/// there an older one is worth nothing, and a slow follower never makes the owner
/// wait or buffer. Streams that ended are let go at the next change. Not `Sendable`:
/// it lives inside its owner's isolation (an actor on the loop, or a lock's state),
/// and its owner calls `finish()` when the count stops meaning anything (the
/// controller closed), which ends every stream.
package struct Gauge {
    package private(set) var value: Int
    private var streams: [AsyncStream<Int>.Continuation] = []
    private var finished = false
    /// Streams being told (one whose consumer stopped counts until the next change).
    package var followers: Int { streams.count }

    package init(_ value: Int = 0) { self.value = value }

    /// Sets the count; every follower gets it if it changed.
    package mutating func set(_ new: Int) {
        guard new != value else { return }
        value = new
        guard !streams.isEmpty else { return }
        streams.removeAll { follower in
            if case .terminated = follower.yield(new) { return true }
            return false
        }
    }

    /// A stream of the count: the value now, then each change.
    package mutating func watch() -> AsyncStream<Int> {
        let (stream, follower) = AsyncStream.makeStream(of: Int.self, bufferingPolicy: .bufferingNewest(1))
        follower.yield(value)
        if finished { follower.finish() } else { streams.append(follower) }
        return stream
    }

    /// Ends every follower's stream (each still gets the last value it had not taken);
    /// a stream asked for afterwards holds the last value and ends.
    package mutating func finish() {
        finished = true
        for follower in streams { follower.finish() }
        streams.removeAll()
    }
}
