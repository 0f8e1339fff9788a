// Waiting for the first element of an async sequence with a bound: the helper the
// layers and tests use to wait for one event (a link's end, a scan result). The bound
// is the loop's time, as every timer of the stack is.

import NIOCore

/// The first element of `seq` within `limit` of `loop`'s time, or nil (the sequence
/// ended, threw, or nothing came in time).
public func firstElement<S: AsyncSequence & Sendable>(_ seq: S, within limit: Duration, on loop: any EventLoop) async -> S.Element?
where S.Element: Sendable {
    await withTaskGroup(of: S.Element?.self) { g in
        g.addTask {
            var it = seq.makeAsyncIterator()
            return try? await it.next()
        }
        g.addTask {
            try? await loop.sleep(for: limit)
            return nil
        }
        let r = await g.next() ?? nil
        g.cancelAll()
        return r
    }
}
