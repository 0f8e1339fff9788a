// Actors whose executor is an event loop, and the synchronous way into one from code
// already running on that loop.

import NIOCore

/// An actor whose serial executor is `loop` (`unownedExecutor` is the loop's): the
/// stack's layers, which call one another synchronously on the controller's loop.
public protocol LoopIsolated: Actor {
    /// The event loop this actor's code runs on.
    nonisolated var loop: any EventLoop { get }
}

extension LoopIsolated {
    /// Runs `body` isolated to this actor, from code already on its loop (a packet
    /// handler, a timer, another layer's synchronous call).
    ///
    /// `assumeIsolated` does the same after asking the concurrency runtime whether the
    /// current executor is this actor's: on every call, the task's executor, the main
    /// executor and the loop's identity (about a tenth of a notification's CPU, end to
    /// end on the virtual radio). The loop already knows whether this is its thread, so
    /// this checks that instead, and traps as `assumeIsolated` would when it is not.
    @inlinable
    public nonisolated func onLoop<T>(_ body: (isolated Self) throws -> T) rethrows -> T {
        precondition(loop.inEventLoop, "\(Self.self) entered off its event loop")
        return try withoutActuallyEscaping(body) { isolatedBody in
            // The executor check above is what makes dropping `isolated` sound: the
            // actor's executor is this loop, and this is the loop's thread.
            try unsafeBitCast(isolatedBody, to: ((Self) throws -> T).self)(self)
        }
    }
}
