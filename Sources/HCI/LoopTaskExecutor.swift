// The host's event loop as a Swift task executor. A task that awaits inside the stack
// suspends on a continuation, and Swift resumes it on the task's executor: without a
// preference that is the global cooperative pool, so every wait costs two thread hops
// (to the pool, then back to the loop-isolated actor). A task that prefers this
// executor (`withTaskExecutorPreference(host.taskExecutor) { ... }`) resumes on the
// loop instead: an operation from the application to the controller and back stays on
// one thread. (Setting the preference inside the stack's own waits, for every caller,
// hung release builds of Swift 6.3 when the caller had no preference of its own; so it
// is the application's choice, made once around its work.)

import NIOCore

public final class LoopTaskExecutor: TaskExecutor {
    public let loop: any EventLoop

    public init(_ loop: any EventLoop) { self.loop = loop }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        loop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
