// Tests wait for real peers and real processes in wall-clock time: this spelling of
// `firstElement` bounds the wait on one of NIO's shared loops, whose time is the
// system's. Library code passes its own stack's loop instead.

import HCI
import NIOCore
import NIOPosix

/// The first element of `seq` within `limit` of wall-clock time, or nil.
public func firstElement<S: AsyncSequence & Sendable>(_ seq: S, within limit: Duration) async -> S.Element? where S.Element: Sendable {
    await firstElement(seq, within: limit, on: MultiThreadedEventLoopGroup.singleton.next())
}

/// Whether `seq` ends (finishes, or throws) within `limit` of wall-clock time. The
/// iteration runs in a task of its own, which goes on when the time runs out.
public func ends<S: AsyncSequence & Sendable>(_ seq: S, within limit: Duration) async -> Bool where S.Element: Sendable {
    await firstElement(AsyncStream<Void> { k in Task { do { for try await _ in seq {} } catch {}; k.yield() } }, within: limit) != nil
}

/// Whether `body` throws within `limit` of wall-clock time (false when it returns, or
/// is still running then; it runs in a task of its own).
public func throwsWithin(_ limit: Duration, _ body: @escaping @Sendable () async throws -> Void) async -> Bool {
    await firstElement(AsyncStream<Bool> { k in Task { do { try await body(); k.yield(false) } catch { k.yield(true) } } }, within: limit) == true
}
