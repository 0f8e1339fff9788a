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
