// The one bounded stream type the library hands out: a buffer of at most `capacity`
// elements, kept either the newest (older ones are dropped when the consumer falls
// behind) or the oldest (new ones are refused when it is full), each drop counted in
// `dropped`. Each API that returns one says its capacity, its policy and how it ends.
//
// Why not `AsyncStream`: its iterator takes each element through a nonisolated async
// closure, so a consumer isolated to an actor leaves the actor for every element and
// comes back in a new job, even when the element was waiting in the buffer (measured:
// 102 jobs on the actor's executor for 100 buffered elements). The stack's followers
// are isolated to the host, on its loop: every event cost two thread hops, and the
// order in which a follower met its events against other work on the loop depended on
// the global pool's threads. This one's `next(isolation:)` runs on the consumer's
// executor: an element already buffered is returned at once, and a wait costs one
// resumption on that executor.

import DequeModule
import Synchronization

/// Counts what a bounded stream dropped. Shared between the producer and the consumer.
public final class DropCounter: Sendable {
    private let value = Mutex(0)
    public init() {}
    public var count: Int { value.withLock { $0 } }
    public func increment() { value.withLock { $0 += 1 } }
}

/// An AsyncSequence with a bounded buffer and the count of what it dropped because the
/// consumer fell behind. One consumer at a time. It ends when the producer finishes it
/// (after the elements still buffered), and it is cancelled (`onTermination` is told,
/// what is buffered goes) when the consuming task is cancelled or when the stream and
/// every iterator of it are gone.
public struct BufferedStream<Element: Sendable>: AsyncSequence, Sendable {
    public typealias Failure = Never
    let consumer: Consumer
    /// Elements lost because the buffer was full.
    public var dropped: DropCounter { consumer.storage.dropped }

    /// Which elements a full buffer keeps.
    public enum Keeping: Sendable {
        /// The newest: the oldest buffered element goes to make room.
        case newest
        /// The oldest: the new element is refused.
        case oldest
    }

    /// How a stream ended, as `onTermination` is told.
    public enum Termination: Sendable {
        /// The producer finished it.
        case finished
        /// The consumer went away: its task was cancelled, or nothing holds the stream any more.
        case cancelled
    }

    /// What became of a yielded element.
    public enum YieldResult: Sendable {
        case enqueued
        /// The buffer was full: the oldest element (`.newest`) or this one (`.oldest`) was dropped.
        case dropped
        /// The stream had ended; the element was not taken.
        case terminated
    }

    /// A stream keeping at most `capacity` elements (at least one), by default the newest.
    public static func makeStream(capacity: Int, keeping: Keeping = .newest) -> (stream: BufferedStream, continuation: Continuation) {
        let storage = Storage(capacity: Swift.max(1, capacity), keepingNewest: keeping == .newest, dropped: DropCounter())
        return (BufferedStream(consumer: Consumer(storage: storage)), Continuation(storage: storage))
    }

    public func makeAsyncIterator() -> Iterator { Iterator(consumer: consumer) }

    /// What is buffered now, taken without waiting. For tests: what a call made the
    /// stack emit, checked as the call returns (the layers emit on the loop as they take
    /// each packet), where waiting a while for nothing would pass on a slow machine
    /// whatever came later.
    func takeBuffered() -> [Element] { consumer.storage.takeBuffered() }

    public struct Iterator: AsyncIteratorProtocol {
        let consumer: Consumer

        /// The next element, on the caller's executor; nil once the stream ended or the
        /// task was cancelled.
        public mutating func next(isolation actor: isolated (any Actor)?) async -> Element? {
            await consumer.storage.next()
        }

        public mutating func next() async -> Element? {
            await consumer.storage.next()
        }
    }

    /// The producer's side. `yield` counts what the buffer drops.
    public struct Continuation: Sendable {
        let storage: Storage

        @discardableResult
        public func yield(_ e: Element) -> YieldResult { storage.yield(e) }

        /// Ends the stream: the consumer gets what is buffered, then nil.
        public func finish() { storage.end(.finished) }

        /// Called once, when the stream ends either way (from the thread that ended it).
        public var onTermination: (@Sendable (Termination) -> Void)? {
            get { storage.state.withLock { $0.onTermination } }
            nonmutating set { storage.setOnTermination(newValue) }
        }
    }

    /// Held by the stream and its iterators: when the last of them goes, the consumer is gone.
    final class Consumer: Sendable {
        let storage: Storage
        init(storage: Storage) { self.storage = storage }
        deinit { storage.end(.cancelled) }
    }

    final class Storage: Sendable {
        struct State {
            var buffer = Deque<Element>()
            /// The consumer, waiting (only while the buffer is empty and the stream open).
            var waiter: UnsafeContinuation<Element?, Never>?
            /// How the stream ended, once it has.
            var ending: Termination?
            var ended: Bool { ending != nil }
            /// What the producer finished with, thrown once after the buffer (a
            /// `BufferedThrowingStream`'s).
            var failure: (any Error)?
            var onTermination: (@Sendable (Termination) -> Void)?
        }
        let state = Mutex(State())
        let capacity: Int
        let keepingNewest: Bool
        let dropped: DropCounter

        init(capacity: Int, keepingNewest: Bool, dropped: DropCounter) {
            self.capacity = capacity
            self.keepingNewest = keepingNewest
            self.dropped = dropped
        }

        func yield(_ e: Element) -> YieldResult {
            let (result, waiter) = state.withLock { s -> (YieldResult, UnsafeContinuation<Element?, Never>?) in
                if s.ended { return (.terminated, nil) }
                if let w = s.waiter {
                    s.waiter = nil
                    return (.enqueued, w)
                }
                if s.buffer.count < capacity {
                    s.buffer.append(e)
                    return (.enqueued, nil)
                }
                if keepingNewest {
                    s.buffer.removeFirst()
                    s.buffer.append(e)
                }
                return (.dropped, nil)
            }
            if let waiter { waiter.resume(returning: e) }
            if case .dropped = result { dropped.increment() }
            return result
        }

        /// Finished by the producer (what is buffered is still handed out, then
        /// `failure` if any) or cancelled (it is not); the first of these only.
        func end(_ how: Termination, failure: (any Error)? = nil) {
            let (waiter, handler) = state.withLock { s -> (UnsafeContinuation<Element?, Never>?, (@Sendable (Termination) -> Void)?) in
                if how == .cancelled { s.buffer.removeAll() }
                guard !s.ended else { return (nil, nil) }
                s.ending = how
                s.failure = failure
                let w = s.waiter, h = s.onTermination
                s.waiter = nil
                s.onTermination = nil
                return (w, h)
            }
            waiter?.resume(returning: nil)
            handler?(how)
        }

        func setOnTermination(_ handler: (@Sendable (Termination) -> Void)?) {
            // Set on a stream that already ended: told at once, as it would have been.
            let late = state.withLock { s -> Termination? in
                if let how = s.ending { return how }
                s.onTermination = handler
                return nil
            }
            if let late { handler?(late) }
        }

        func takeBuffered() -> [Element] {
            state.withLock { s in
                defer { s.buffer.removeAll() }
                return Array(s.buffer)
            }
        }

        /// After `next()` returned nil: the producer's error, once.
        func takeFailure() -> (any Error)? {
            state.withLock { s in
                defer { s.failure = nil }
                return s.failure
            }
        }

        /// An element waiting, or the end (`.some(nil)`): what `next()` returns without
        /// suspending. nil when it must wait.
        private static func ready(_ s: inout State) -> Element?? {
            if let e = s.buffer.popFirst() { return .some(e) }
            return s.ended ? .some(nil) : nil
        }

        func next() async -> Element? {
            if let now = state.withLock({ Self.ready(&$0) }) { return now }
            return await withTaskCancellationHandler {
                await withUnsafeContinuation { (c: UnsafeContinuation<Element?, Never>) in
                    let ready = state.withLock { s -> Element?? in
                        if let now = Self.ready(&s) { return now }
                        precondition(s.waiter == nil, "BufferedStream: more than one consumer at a time")
                        s.waiter = c
                        return nil
                    }
                    if let ready { c.resume(returning: ready) }
                }
            } onCancel: {
                end(.cancelled)
            }
        }
    }
}

/// `BufferedStream` whose producer may end it with an error, thrown to the consumer
/// after the elements still buffered. The same buffer, policies and endings.
public struct BufferedThrowingStream<Element: Sendable>: AsyncSequence, Sendable {
    public typealias Failure = any Error
    let consumer: BufferedStream<Element>.Consumer
    /// Elements lost because the buffer was full.
    public var dropped: DropCounter { consumer.storage.dropped }

    public static func makeStream(capacity: Int, keeping: BufferedStream<Element>.Keeping = .newest)
        -> (stream: BufferedThrowingStream, continuation: Continuation) {
        let (s, c) = BufferedStream<Element>.makeStream(capacity: capacity, keeping: keeping)
        return (BufferedThrowingStream(consumer: s.consumer), Continuation(base: c))
    }

    public func makeAsyncIterator() -> Iterator { Iterator(consumer: consumer) }

    public struct Iterator: AsyncIteratorProtocol {
        let consumer: BufferedStream<Element>.Consumer

        /// The next element, on the caller's executor; nil once the stream finished or
        /// the task was cancelled; the producer's error, once, after the last element.
        public mutating func next(isolation actor: isolated (any Actor)?) async throws(any Error) -> Element? {
            try await take()
        }

        public mutating func next() async throws -> Element? { try await take() }

        private func take() async throws -> Element? {
            if let e = await consumer.storage.next() { return e }
            if let failure = consumer.storage.takeFailure() { throw failure }
            return nil
        }
    }

    /// The producer's side. `yield` counts what the buffer drops.
    public struct Continuation: Sendable {
        let base: BufferedStream<Element>.Continuation

        @discardableResult
        public func yield(_ e: Element) -> BufferedStream<Element>.YieldResult { base.yield(e) }

        /// Ends the stream: the consumer gets what is buffered, then `error` (if any) is thrown.
        public func finish(throwing error: (any Error)? = nil) { base.storage.end(.finished, failure: error) }

        /// Called once, when the stream ends either way.
        public var onTermination: (@Sendable (BufferedStream<Element>.Termination) -> Void)? {
            get { base.onTermination }
            nonmutating set { base.onTermination = newValue }
        }
    }
}
