// One-shot timers for the protocol layers: work scheduled on the stack's event loop,
// so the timer fires on the loop where the layer that armed it runs, and time is the
// loop's (a test drives it with `NIOAsyncTestingEventLoop.advanceTime`).

import NIOCore

public struct LoopTimer: Sendable {
    /// nil when the loop had shut down: such a timer never fires.
    private let scheduled: NIOScheduledCallback?

    /// What the loop calls when the time comes.
    private struct Fire: NIOScheduledCallbackHandler, Sendable {
        let fire: @Sendable () -> Void
        func handleScheduledCallback(eventLoop: some EventLoop) { fire() }
    }

    /// Calls `fire` on `loop` after `delay` of the loop's time (NIO's conversion:
    /// nanoseconds, clamped), unless cancelled first.
    ///
    /// A scheduled callback, not `scheduleTask`: NIO's own loops keep it as one entry in
    /// their timer queue, with no promise, future or cancellation error behind it (the
    /// ATT layer arms and cancels one per request).
    public init(after delay: Duration, on loop: any EventLoop, _ fire: @escaping @Sendable () -> Void) {
        self.init(after: delay, on: loop, handler: Fire(fire: fire))
    }

    /// Calls `handler` on `loop` after `delay`, unless cancelled first. A struct handler
    /// that holds what it needs (an object and an id) costs no allocation; a `fire`
    /// closure capturing the same costs its context (the ATT bearer arms one timer per
    /// transaction).
    public init(after delay: Duration, on loop: any EventLoop, handler: some NIOScheduledCallbackHandler & Sendable) {
        scheduled = try? loop.scheduleCallback(in: TimeAmount(delay), handler: handler)
    }

    public func cancel() { scheduled?.cancel() }
}

extension EventLoop {
    /// Suspends for `duration` of this loop's time; throws `CancellationError` when the
    /// task is cancelled first (the scheduled wake-up is cancelled with it).
    public func sleep(for duration: Duration) async throws {
        let wake = scheduleTask(in: TimeAmount(duration)) {}
        try await withTaskCancellationHandler {
            do { try await wake.futureResult.get() } catch { throw CancellationError() }
        } onCancel: {
            wake.cancel()
        }
    }
}
