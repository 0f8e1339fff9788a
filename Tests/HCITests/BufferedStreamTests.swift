// The library's bounded stream: what a full buffer keeps and counts, how the stream
// ends (finished, the consumer cancelled, the consumer gone), and that a consumer on
// an actor takes what is buffered without leaving the actor's executor.

import HCI
import NIOCore
import NIOPosix
import Synchronization
import Testing

/// A consumer isolated to an actor on a loop.
private actor Follower {
    nonisolated let executor: LoopExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    init(_ executor: LoopExecutor) { self.executor = executor }

    /// Everything until the stream ends.
    func follow(_ s: BufferedStream<Int>) async -> [Int] {
        var got: [Int] = []
        for await e in s { got.append(e) }
        return got
    }
}

/// What `onTermination` was told, in order.
private final class Endings: Sendable {
    private let seen = Mutex<[BufferedStream<Int>.Termination]>([])
    var all: [BufferedStream<Int>.Termination] { seen.withLock { $0 } }
    func record(_ t: BufferedStream<Int>.Termination) { seen.withLock { $0.append(t) } }
}

@Suite(.timeLimit(.minutes(3))) struct BufferedStreamTests {
    @Test func aFullBufferKeepsTheNewestOrTheOldestAndCountsTheRest() async {
        let (newest, toNewest) = BufferedStream<Int>.makeStream(capacity: 3)
        let (oldest, toOldest) = BufferedStream<Int>.makeStream(capacity: 3, keeping: .oldest)
        var results: [BufferedStream<Int>.YieldResult] = []
        for i in 0..<5 {
            results.append(toNewest.yield(i))
            toOldest.yield(i)
        }
        toNewest.finish()
        toOldest.finish()
        #expect(results == [.enqueued, .enqueued, .enqueued, .dropped, .dropped])
        #expect(await collect(newest) == [2, 3, 4])
        #expect(await collect(oldest) == [0, 1, 2])
        #expect(newest.dropped.count == 2 && oldest.dropped.count == 2)
        #expect(toNewest.yield(9) == .terminated)
        #expect(newest.dropped.count == 2)
    }

    @Test func finishingHandsOutWhatIsBufferedThenEnds() async {
        let endings = Endings()
        let (s, c) = BufferedStream<Int>.makeStream(capacity: 8)
        c.onTermination = { endings.record($0) }
        c.yield(1)
        c.yield(2)
        c.finish()
        c.finish()
        #expect(await collect(s) == [1, 2])
        #expect(endings.all == [.finished])
        // Set after the end: told at once how it ended.
        c.onTermination = { endings.record($0) }
        #expect(endings.all == [.finished, .finished])
    }

    @Test func aWaitingConsumerGetsTheNextElementAndIsEndedByCancellation() async {
        let endings = Endings()
        let (s, c) = BufferedStream<Int>.makeStream(capacity: 8)
        c.onTermination = { endings.record($0) }
        let (started, start) = AsyncStream<Void>.makeStream()
        let consumer = Task {
            var it = s.makeAsyncIterator()
            start.yield()
            let first = await it.next()
            // Waits here until cancelled.
            let second = await it.next()
            return (first, second)
        }
        _ = await firstElement(started, within: .seconds(5), on: MultiThreadedEventLoopGroup.singleton.next())
        c.yield(7)
        // Cancelled while it waits for the second, or before: an element already
        // buffered is still handed out, then the wait ends with nil.
        consumer.cancel()
        let (first, second) = await consumer.value
        #expect(first == 7 && second == nil)
        #expect(endings.all == [.cancelled])
        #expect(c.yield(9) == .terminated)
    }

    @Test func theConsumerLettingGoCancelsTheStream() async {
        let endings = Endings()
        var stream: BufferedStream<Int>?
        do {
            let (s, c) = BufferedStream<Int>.makeStream(capacity: 8)
            c.onTermination = { endings.record($0) }
            c.yield(1)
            stream = s
            var it = s.makeAsyncIterator()
            #expect(await it.next() == 1)
            stream = nil
            // The iterator still holds the stream.
            #expect(endings.all.isEmpty)
            #expect(c.yield(2) == .enqueued)
        }
        #expect(stream == nil)
        #expect(endings.all == [.cancelled])
    }

    /// A follower isolated to an actor on the loop takes 100 buffered elements in the
    /// job that started it: no job per element. (`AsyncStream` costs one per element.)
    @Test func anActorTakesWhatIsBufferedWithoutAJobPerElement() async throws {
        // A loop of its own: no other test's jobs in the count.
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let executor = LoopExecutor.of(loop)
        let follower = Follower(executor)
        let (s, c) = BufferedStream<Int>.makeStream(capacity: 128)
        for i in 0..<100 { c.yield(i) }
        c.finish()
        let before = try await loop.submit { executor.jobsRun }.get()
        let got = await follower.follow(s)
        let jobs = try await loop.submit { executor.jobsRun }.get() - before
        #expect(got == Array(0..<100))
        // Entering the actor, and coming back to this task's executor (none for the latter on the loop).
        #expect(jobs <= 2, "\(jobs) jobs for 100 buffered elements")
        try await group.shutdownGracefully()
    }

    @Test func aThrowingStreamThrowsItsErrorOnceAfterWhatIsBuffered() async throws {
        struct LinkWent: Error {}
        let endings = Endings()
        let (s, c) = BufferedThrowingStream<Int>.makeStream(capacity: 2)
        c.onTermination = { endings.record($0) }
        for i in 0..<3 { c.yield(i) }
        c.finish(throwing: LinkWent())
        var it = s.makeAsyncIterator()
        var got: [Int] = []
        await #expect(throws: LinkWent.self) { while let e = try await it.next() { got.append(e) } }
        #expect(got == [1, 2])
        #expect(s.dropped.count == 1)
        #expect(endings.all == [.finished])
        // Thrown once: the stream has ended.
        #expect(try await it.next() == nil)
    }

    private func collect(_ s: BufferedStream<Int>) async -> [Int] {
        var out: [Int] = []
        for await e in s { out.append(e) }
        return out
    }
}
