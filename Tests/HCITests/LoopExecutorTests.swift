// The loop's executors: calls between actors on one loop stay calls (no job on the
// loop's queue per call), for a task that prefers the loop and for one that does not;
// a task that prefers the loop comes back to it after a wait without a job per call
// after that; a task that prefers another loop still gets through.

import HCI
import NIOCore
import NIOPosix
import Testing

/// An actor on `executor`'s loop that calls another one there.
private actor Caller {
    nonisolated let executor: LoopExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    init(_ executor: LoopExecutor) { self.executor = executor }

    /// Calls `callee` `times` times; every `waitEvery` calls (0: never) waits on a
    /// continuation `resumer` (another loop's thread) resumes. Returns the callee's count.
    func call(_ callee: Callee, times: Int, waitEvery: Int = 0, resumer: (any EventLoop)? = nil) async -> Int {
        var last = 0
        for i in 1...times {
            last = await callee.step()
            if waitEvery > 0, i % waitEvery == 0, let resumer {
                await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in resumer.execute { c.resume() } }
            }
        }
        return last
    }
}

/// The callee: an actor on the same loop.
private actor Callee {
    nonisolated let executor: LoopExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    private var count = 0
    init(_ executor: LoopExecutor) { self.executor = executor }
    func step() -> Int {
        count += 1
        return count
    }
}

/// An actor on another loop, whose code prefers `here`'s task executor and calls into
/// `here`'s actors.
private actor Elsewhere {
    nonisolated let executor: LoopExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    init(_ executor: LoopExecutor) { self.executor = executor }

    func call(_ caller: Caller, _ callee: Callee, times: Int, preferring here: LoopExecutor) async -> Int {
        await withTaskExecutorPreference(here.taskExecutor) { await caller.call(callee, times: times) }
    }
}

@Suite(.timeLimit(.minutes(3))) struct LoopExecutorTests {
    /// Jobs `executor` ran while `body` ran.
    private func jobs(on executor: LoopExecutor, _ body: () async -> Int) async throws -> (result: Int, jobs: Int) {
        let before = try await executor.loop.submit { executor.jobsRun }.get()
        let result = await body()
        let after = try await executor.loop.submit { executor.jobsRun }.get()
        return (result, after - before)
    }

    /// `times` calls between two actors on `executor`'s loop, in a task that prefers
    /// the loop (waiting every `waitEvery` calls, resumed by `resumer`): the callee's
    /// count and the jobs run.
    private func callsPreferringTheLoop(_ executor: LoopExecutor, times: Int, waitEvery: Int = 0, resumer: (any EventLoop)? = nil)
        async throws -> (result: Int, jobs: Int) {
        let (caller, callee) = (Caller(executor), Callee(executor))
        return try await jobs(on: executor) {
            await withTaskExecutorPreference(executor.taskExecutor) {
                await caller.call(callee, times: times, waitEvery: waitEvery, resumer: resumer)
            }
        }
    }

    @Test func oneExecutorPerLoop() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let (a, b) = (group.next(), group.next())
        #expect(LoopExecutor.of(a) === LoopExecutor.of(a))
        #expect(LoopExecutor.of(a) !== LoopExecutor.of(b))
        #expect(LoopExecutor.of(a).loop === a)
        try await group.shutdownGracefully()
    }

    @Test func theTaskExecutorOutlivesTheActorsOnItsLoop() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        weak var serial: LoopExecutor?
        var taskExecutor: LoopTaskExecutor? = LoopExecutor.of(loop).taskExecutor
        #expect(taskExecutor === LoopExecutor.of(loop).taskExecutor)
        // No actor holds the loop's serial executor now: the task executor does.
        let count = await withTaskExecutorPreference(taskExecutor) {
            let executor = LoopExecutor.of(loop)
            serial = executor
            return await Caller(executor).call(Callee(executor), times: 10)
        }
        #expect(count == 10)
        #expect(serial != nil)
        taskExecutor = nil
        // The last references go with the calls' last jobs, on the loop thread, while this
        // test may already run on another: it waits (a bounded number of loop turns) for
        // them. One turn was not always enough: in 3,000 repetitions 7 to 38 still saw the
        // executor after one, and after two (NIO lets go of a batch's jobs only once the
        // whole batch ran); a CI run failed so. A leak still fails: it never goes.
        for _ in 0..<1000 where serial != nil { try await loop.submit {}.get() }
        // Nothing holds either now: both are gone, and the loop gets new ones.
        #expect(serial == nil)
        #expect(LoopExecutor.of(loop).loop === loop)
        try await group.shutdownGracefully()
    }

    @Test func callsBetweenTheLoopsActorsNeedNoJobWhenTheTaskPrefersTheLoop() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let (count, jobs) = try await callsPreferringTheLoop(LoopExecutor.of(group.next()), times: 1000)
        #expect(count == 1000)
        // Entering the loop and leaving it; NIO's own executor ran two jobs per call.
        #expect(jobs < 10, "\(jobs) jobs for 1000 calls")
        try await group.shutdownGracefully()
    }

    @Test func aTaskThatPrefersTheLoopComingFromAnotherActorNeedsNoJobPerCall() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let (here, there) = (LoopExecutor.of(group.next()), LoopExecutor.of(group.next()))
        let (caller, callee, elsewhere) = (Caller(here), Callee(here), Elsewhere(there))
        // The task enters `here` from another actor's executor: the runtime enqueues it
        // on the serial executor, which learns from its first call that it prefers the loop.
        let (count, jobs) = try await self.jobs(on: here) { await elsewhere.call(caller, callee, times: 1000, preferring: here) }
        #expect(count == 1000)
        #expect(jobs < 10, "\(jobs) jobs for 1000 calls")
        try await group.shutdownGracefully()
    }

    @MainActor @Test func aTaskThatPrefersTheLoopComingFromTheMainActorNeedsNoJobPerCall() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        // The call into the loop is from this test, on the main actor.
        let (count, jobs) = try await callsPreferringTheLoop(LoopExecutor.of(group.next()), times: 1000)
        #expect(count == 1000)
        #expect(jobs < 10, "\(jobs) jobs for 1000 calls")
        try await group.shutdownGracefully()
    }

    @Test func callsBetweenTheLoopsActorsNeedNoJobWithoutAPreference() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let executor = LoopExecutor.of(group.next())
        let (caller, callee) = (Caller(executor), Callee(executor))
        let (count, jobs) = try await self.jobs(on: executor) { await caller.call(callee, times: 1000) }
        #expect(count == 1000)
        #expect(jobs < 10, "\(jobs) jobs for 1000 calls")
        try await group.shutdownGracefully()
    }

    @Test func aTaskThatPrefersTheLoopResumesOnItAfterAWait() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let (executor, resumer) = (LoopExecutor.of(group.next()), group.next())
        let (count, jobs) = try await callsPreferringTheLoop(executor, times: 1000, waitEvery: 100, resumer: resumer)
        #expect(count == 1000)
        // One job per wait (the resumption, through the task executor), none per call.
        #expect(jobs < 30, "\(jobs) jobs for 1000 calls and 10 waits")
        try await group.shutdownGracefully()
    }

    @Test func aTaskThatPrefersAnotherLoopStillGetsThrough() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let (here, there) = (LoopExecutor.of(group.next()), LoopExecutor.of(group.next()))
        let (caller, callee) = (Caller(here), Callee(here))
        let count = await withTaskExecutorPreference(there.taskExecutor) {
            await caller.call(callee, times: 200, waitEvery: 50, resumer: there.loop)
        }
        #expect(count == 200)
        try await group.shutdownGracefully()
    }
}
