// One producer, any number of consumers: each `subscribe` gets its own bounded
// stream with its own drop counter. The facade's streams (hardware state,
// connection events) are built on it.

import HCI
import Synchronization

final class Broadcast<Element: Sendable>: Sendable {
    private struct State {
        var subscribers: [UInt64: BufferedStream<Element>.Continuation] = [:]
        var next: UInt64 = 1
        var latest: Element?
        var finished = false
    }
    private let state = Mutex(State())
    /// Whether a new subscriber first gets the latest element (a state, not an event).
    private let replaysLatest: Bool

    init(replaysLatest: Bool = false) { self.replaysLatest = replaysLatest }

    /// A stream of what is yielded from now on (preceded by the latest element when
    /// replaying); keeps the newest `capacity` elements, counting the rest as dropped.
    func subscribe(capacity: Int) -> BufferedStream<Element> {
        let (stream, c) = BufferedStream<Element>.makeStream(capacity: capacity)
        let id: UInt64? = state.withLock { s in
            if replaysLatest, let l = s.latest { c.yield(l) }
            if s.finished { return nil }
            let id = s.next
            s.next += 1
            s.subscribers[id] = c
            return id
        }
        guard let id else {
            c.finish()
            return stream
        }
        c.onTermination = { [weak self] _ in self?.state.withLock { _ = $0.subscribers.removeValue(forKey: id) } }
        return stream
    }

    func yield(_ e: Element) {
        let subs = state.withLock { s in
            s.latest = e
            return Array(s.subscribers.values)
        }
        for c in subs { c.yield(e) }
    }

    func finish() {
        let subs = state.withLock { s in
            s.finished = true
            defer { s.subscribers.removeAll() }
            return Array(s.subscribers.values)
        }
        for c in subs { c.finish() }
    }

    var latest: Element? { state.withLock { $0.latest } }
}
