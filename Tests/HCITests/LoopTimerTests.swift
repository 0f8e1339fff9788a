// LoopTimer on NIO's own loop (its scheduled callbacks) and on the embedded loop tests
// drive (NIO's default, built on scheduleTask): fires once after its delay, never after
// cancel(), never on a loop that has shut down.

import HCI
import NIOCore
import NIOEmbedded
import NIOPosix
import Synchronization
import Testing

private final class Count: Sendable {
    let value = Mutex(0)
    func add() { value.withLock { $0 += 1 } }
    var now: Int { value.withLock { $0 } }
}

@Suite(.timeLimit(.minutes(3))) struct LoopTimerTests {
    @Test func firesAfterItsDelayOnTheEmbeddedLoop() {
        let loop = EmbeddedEventLoop()
        let fired = Count()
        _ = LoopTimer(after: .milliseconds(100), on: loop) { fired.add() }
        loop.advanceTime(by: .milliseconds(99))
        #expect(fired.now == 0)
        loop.advanceTime(by: .milliseconds(1))
        #expect(fired.now == 1)
        loop.advanceTime(by: .seconds(10))
        #expect(fired.now == 1)
    }

    @Test func aCancelledTimerNeverFiresOnTheEmbeddedLoop() {
        let loop = EmbeddedEventLoop()
        let fired = Count()
        let timer = LoopTimer(after: .milliseconds(100), on: loop) { fired.add() }
        loop.advanceTime(by: .milliseconds(50))
        timer.cancel()
        loop.advanceTime(by: .seconds(10))
        #expect(fired.now == 0)
    }

    @Test func firesAndCancelsOnNIOsLoop() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let (cancelled, kept) = (Count(), Count())
        let done = loop.makePromise(of: Void.self)
        let timer = LoopTimer(after: .milliseconds(20), on: loop) { cancelled.add() }
        timer.cancel()
        _ = LoopTimer(after: .milliseconds(10), on: loop) { kept.add() }
        // Well after both deadlines.
        _ = LoopTimer(after: .milliseconds(80), on: loop) { done.succeed() }
        try await done.futureResult.get()
        #expect(cancelled.now == 0)
        #expect(kept.now == 1)
        try await group.shutdownGracefully()
    }

    @Test func aTimerOnALoopThatShutDownNeverFires() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        try await group.shutdownGracefully()
        let fired = Count()
        let timer = LoopTimer(after: .milliseconds(1), on: loop) { fired.add() }
        timer.cancel()
        #expect(fired.now == 0)
    }
}
