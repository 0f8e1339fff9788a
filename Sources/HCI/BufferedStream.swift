// The one bounded stream type the library hands out: the newest `capacity`
// elements are kept, older ones are dropped when the consumer falls behind and
// counted in `dropped`. Each API that returns one says its capacity and how it ends.

import Synchronization

/// Counts what a bounded stream dropped. Shared between the producer and the consumer.
public final class DropCounter: Sendable {
    private let value = Mutex(0)
    public init() {}
    public var count: Int { value.withLock { $0 } }
    public func increment() { value.withLock { $0 += 1 } }
}

/// An AsyncSequence with a bounded buffer (the newest elements are kept) and the
/// count of what it dropped because the consumer fell behind.
public struct BufferedStream<Element: Sendable>: AsyncSequence, Sendable {
    let base: AsyncStream<Element>
    /// Elements lost because the buffer was full (the oldest are dropped first).
    public let dropped: DropCounter

    public init(base: AsyncStream<Element>, dropped: DropCounter) {
        self.base = base
        self.dropped = dropped
    }

    public func makeAsyncIterator() -> AsyncStream<Element>.Iterator { base.makeAsyncIterator() }

    /// The producer's side: `yield` counts what the buffer drops.
    public struct Continuation: Sendable {
        let base: AsyncStream<Element>.Continuation
        let dropped: DropCounter
        public func yield(_ e: Element) { if case .dropped = base.yield(e) { dropped.increment() } }
        public func finish() { base.finish() }
        public var onTermination: (@Sendable (AsyncStream<Element>.Continuation.Termination) -> Void)? {
            get { base.onTermination }
            nonmutating set { base.onTermination = newValue }
        }
    }

    /// A stream keeping the newest `capacity` elements (at least one).
    public static func makeStream(capacity: Int) -> (stream: BufferedStream, continuation: Continuation) {
        let (s, c) = AsyncStream<Element>.makeStream(bufferingPolicy: .bufferingNewest(Swift.max(1, capacity)))
        let d = DropCounter()
        return (BufferedStream(base: s, dropped: d), Continuation(base: c, dropped: d))
    }
}
