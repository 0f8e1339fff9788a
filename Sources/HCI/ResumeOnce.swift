// A continuation resumed once, by whichever of its wakers (a completion, a timer, a
// signal) comes first: the others find it gone and do nothing.

import Synchronization

public final class ResumeOnce: Sendable {
    private let state = Mutex<CheckedContinuation<Void, Never>?>(nil)

    public init() {}

    /// The continuation to resume; set before any waker can run.
    public func set(_ k: CheckedContinuation<Void, Never>) { state.withLock { $0 = k } }

    /// Resumes the continuation if no other waker has.
    public func resume() { state.withLock { k in defer { k = nil }; return k }?.resume() }
}
