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
    @inlinable @inline(__always)
    public nonisolated func onLoop<T, E: Error>(_ body: (isolated Self) throws(E) -> T) throws(E) -> T {
        precondition(loop.inEventLoop, "\(Self.self) entered off its event loop")
        // The executor check above is what makes dropping `isolated` sound: the actor's
        // executor is this loop, and this is the loop's thread. The cast is of a global
        // function (no context), not of `body`: casting `body` itself needs
        // `withoutActuallyEscaping`, which allocates its context on every call.
        typealias Isolated = (isolated Self, (isolated Self) throws(E) -> T) throws(E) -> T
        typealias Unchecked = (Self, (isolated Self) throws(E) -> T) throws(E) -> T
        return try unsafeBitCast(loopIsolatedApply as Isolated, to: Unchecked.self)(self, body)
    }

    /// `onLoop(_:)` with what `body` needs passed in as `argument`: a closure that
    /// captures nothing has no context to allocate, so a layer's per-packet hand-off
    /// to the next (the hot path) costs no allocation.
    ///
    /// Both forms are always inlined. Called as a function of its own, the cast
    /// function takes `body` at the generic abstraction, and the thunk that adapts
    /// `body` to it is allocated on every call (10 of a GATT read's 33 allocations
    /// over Rootcanal). Inlined, a `body` that captures nothing needs no thunk. A
    /// capturing `body` still gets one, and so does a closure inside a tuple
    /// `argument`; a struct `argument` does not (`L2CAPATTChannel.write`).
    @inlinable @inline(__always)
    public nonisolated func onLoop<Argument, T, E: Error>(
        _ argument: Argument, _ body: (isolated Self, Argument) throws(E) -> T
    ) throws(E) -> T {
        precondition(loop.inEventLoop, "\(Self.self) entered off its event loop")
        typealias Isolated = (isolated Self, Argument, (isolated Self, Argument) throws(E) -> T) throws(E) -> T
        typealias Unchecked = (Self, Argument, (isolated Self, Argument) throws(E) -> T) throws(E) -> T
        return try unsafeBitCast(loopIsolatedApply as Isolated, to: Unchecked.self)(self, argument, body)
    }
}

/// Calls `body` isolated to `actor` (what `onLoop` casts to a nonisolated function).
@inlinable
func loopIsolatedApply<A: LoopIsolated, T, E: Error>(_ actor: isolated A, _ body: (isolated A) throws(E) -> T) throws(E) -> T {
    try body(actor)
}

@inlinable
func loopIsolatedApply<A: LoopIsolated, Argument, T, E: Error>(
    _ actor: isolated A, _ argument: Argument, _ body: (isolated A, Argument) throws(E) -> T
) throws(E) -> T {
    try body(actor, argument)
}
