// The executors of one event loop: the serial executor every actor on the loop shares
// (`LoopExecutor`), and the loop as a task executor (`LoopTaskExecutor`).
//
// Why not NIO's own: Swift lets a task continue into an actor without a new job only
// when the job it runs in names the same serial executor *and* the same task executor
// as the task's preference (the runtime's `swift_task_switch`). NIO runs every job
// with no task executor, so a task that prefers the loop (`withTaskExecutorPreference`)
// paid one more job on the loop at every call into an actor, and every return from one:
// two per `GATTServer.notify`, which also split each batch of packets in the virtual
// controllers into batches of one. These run each job with the task executor the task
// prefers, so calls between the stack's actors stay calls.
//
// A task awaiting inside the stack suspends on a continuation, and Swift resumes it on
// the task's executor: without a preference that is the global cooperative pool, so
// every wait costs two thread hops (to the pool, then back to the loop-isolated actor).
// A task that prefers `LoopTaskExecutor` (`withTaskExecutorPreference(host.taskExecutor)
// { ... }`) resumes on the loop instead: an operation from the application to the
// controller and back stays on one thread. (Setting the preference inside the stack's
// own waits, for every caller, hung release builds of Swift 6.3 when the caller had no
// preference of its own; so it is the application's choice, made once around its work.)

import NIOCore
import Synchronization

/// The serial executor of every actor whose code runs on `loop` (one per loop:
/// `LoopExecutor.of(_:)`), which runs each job on the loop with the task executor its
/// task prefers.
///
/// A job does not say which task executor its task prefers, so this learns it: a job
/// comes here first as one with no preference. When its task, running here, enqueues
/// itself here again, the runtime found that the job's task executor was not the one
/// the task prefers (the serial executor is this one either way), and the job runs
/// next with the other. One extra job when a task that prefers the loop first enters
/// an actor; none after.
public final class LoopExecutor: SerialExecutor, @unchecked Sendable {
    public let loop: any EventLoop
    /// The task executor, held weakly: it holds this executor, and whoever prefers it
    /// keeps it (a strong reference both ways would keep both alive for ever).
    private let task = Mutex(WeakTaskExecutor())
    private struct WeakTaskExecutor {
        weak var executor: LoopTaskExecutor?
    }
    /// The job running now through this executor and whether it runs with
    /// `taskExecutor` as its task executor. Read and written only on the loop's thread
    /// (the reason this class is `@unchecked Sendable`).
    private var running: UnsafeRawPointer?
    private var runningWithPreference = false
    private var jobs = 0

    /// Jobs this executor has run on the loop (read it on the loop): how often Swift
    /// concurrency had to go through the loop's task queue.
    public var jobsRun: Int {
        loop.preconditionInEventLoop()
        return jobs
    }

    private init(loop: any EventLoop) {
        self.loop = loop
    }

    /// The loop as a task executor, for `withTaskExecutorPreference`: the same object
    /// for as long as anyone holds it (a controller does).
    public var taskExecutor: LoopTaskExecutor {
        task.withLock { t in
            if let e = t.executor { return e }
            let e = LoopTaskExecutor(serial: self)
            t.executor = e
            return e
        }
    }

    private struct Entry {
        weak var executor: LoopExecutor?
    }
    private static let registry = Mutex<[ObjectIdentifier: Entry]>([:])

    /// The executor of `loop`: the same object for every actor on it, as the runtime
    /// compares executors by identity.
    public static func of(_ loop: any EventLoop) -> LoopExecutor {
        let key = ObjectIdentifier(loop)
        return registry.withLock { entries in
            // `===`: a loop that ended may have left its identifier to a new one.
            if let e = entries[key]?.executor, e.loop === loop { return e }
            entries = entries.filter { $0.value.executor != nil }
            let e = LoopExecutor(loop: loop)
            entries[key] = Entry(executor: e)
            return e
        }
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let preferred = loop.inEventLoop && running == Self.identity(job) ? !runningWithPreference : false
        // The task executor is taken now, off the job's way (it is a lock).
        let taskExecutor = preferred ? self.taskExecutor : nil
        loop.execute { self.run(job, on: taskExecutor) }
    }

    /// Runs `job` on the loop (the caller is on it), with `taskExecutor` as its task
    /// executor if given.
    fileprivate func run(_ job: UnownedJob, on taskExecutor: LoopTaskExecutor?) {
        let outer = (running, runningWithPreference)
        running = Self.identity(job)
        runningWithPreference = taskExecutor != nil
        jobs &+= 1
        if let taskExecutor {
            job.runSynchronously(isolatedTo: asUnownedSerialExecutor(), taskExecutor: taskExecutor.asUnownedTaskExecutor())
        } else {
            job.runSynchronously(on: asUnownedSerialExecutor())
        }
        (running, runningWithPreference) = outer
    }

    private static func identity(_ job: UnownedJob) -> UnsafeRawPointer {
        unsafeBitCast(job, to: UnsafeRawPointer.self)
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    public func checkIsolated() {
        loop.preconditionInEventLoop()
    }

    public func isIsolatingCurrentContext() -> Bool? {
        loop.inEventLoop
    }
}

/// The loop as a Swift task executor: a task that prefers it resumes on the loop after
/// each wait, isolated to the loop's actors (`LoopExecutor`), so its calls into them
/// need no new job.
public final class LoopTaskExecutor: TaskExecutor, Sendable {
    public let loop: any EventLoop
    /// The loop's serial executor, which runs this one's jobs.
    private let serial: LoopExecutor

    /// Made by `LoopExecutor` only: `LoopExecutor.of(loop).taskExecutor`.
    fileprivate init(serial: LoopExecutor) {
        self.serial = serial
        self.loop = serial.loop
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        loop.execute { self.serial.run(job, on: self) }
    }
}
