// One-shot timers for the protocol layers: work scheduled on the stack's event loop
// (what the runtime uses), or, when a test injects a `Clock`, a task sleeping on
// that clock which then fires on the loop. Either way the timer fires on the loop,
// where the layer that armed it runs.

import NIOCore

public struct LoopTimer: Sendable {
    private enum Kind: Sendable {
        case scheduled(Scheduled<Void>)
        case task(Task<Void, Never>)
    }
    private let kind: Kind

    /// Calls `fire` on `loop` after `delay`, unless cancelled first.
    public init(after delay: Duration, on loop: any EventLoop, clock: (any Clock<Duration>)?, _ fire: @escaping @Sendable () -> Void) {
        if let clock {
            kind = .task(Task {
                do { try await clock.sleep(for: delay) } catch { return }
                loop.execute(fire)
            })
        } else {
            let (seconds, attoseconds) = delay.components
            let nanos = seconds.multipliedReportingOverflow(by: 1_000_000_000)
            let amount = nanos.overflow ? TimeAmount.nanoseconds(.max) : .nanoseconds(nanos.partialValue &+ attoseconds / 1_000_000_000)
            kind = .scheduled(loop.scheduleTask(in: amount, fire))
        }
    }

    public func cancel() {
        switch kind {
        case let .scheduled(s): s.cancel()
        case let .task(t): t.cancel()
        }
    }
}
