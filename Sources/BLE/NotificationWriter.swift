// A characteristic's notifications streamed from code that runs off the host's loop:
// the values wait in a bounded queue, and one task on the loop takes them in order and
// notifies each as `PeripheralManager.notify` does. The writer suspends only when the
// queue is full (until the loop has taken it down to half), so a sender on the
// cooperative pool and the loop each wake once per batch, not twice per value (the
// shape of NIO's `NIOAsyncWriter`, with its high and low watermarks).

import DequeModule
import Synchronization

/// Sends a characteristic's values to its subscribers from any task, in order, with
/// back-pressure (see `PeripheralManager.notificationWriter(for:to:capacity:storeValue:)`).
///
/// `send` queues the value and returns; it suspends while `capacity` values or more
/// wait, until the host's loop has notified enough of them to leave half. A task on the
/// loop takes each value in turn: it stores it (unless `storeValue` was false), notifies
/// every central subscribed then (each gets at most ATT_MTU − 3 bytes), and waits until
/// the notification is in the controller's buffers before it takes the next, exactly
/// as `PeripheralManager.notify` does. Several tasks may send; each value keeps its place
/// in the queue, and the queue holds at most `capacity` plus one value per task sending.
///
/// When a value cannot be sent (its characteristic is no longer published, or the host
/// failed), and when the host's transport ends, the writer fails: the values still
/// queued are dropped, counted in `dropped`, and `send` and `flush` throw that error
/// from then on, as do the ones waiting.
public final class NotificationWriter: Sendable {
    public let characteristic: Characteristic
    /// The most values that wait before `send` suspends.
    public let capacity: Int

    private let host: BluetoothHost
    private let only: Set<UInt16>?
    private let store: Bool

    private struct State {
        var queue = Deque<[UInt8]>()
        /// A task on the loop is taking the queue.
        var draining = false
        /// Senders waiting for room, by ticket.
        var senders: [UInt64: CheckedContinuation<Void, any Error>] = [:]
        /// `flush` callers, waiting for the queue to empty.
        var flushers: [CheckedContinuation<Void, any Error>] = []
        var nextTicket: UInt64 = 0
        var failure: BLEError?
        var dropped = 0
        var sent = 0
    }
    private let state = Mutex(State())

    init(host: BluetoothHost, characteristic: Characteristic, only: Set<UInt16>?, capacity: Int, store: Bool) {
        self.host = host
        self.characteristic = characteristic
        self.only = only
        self.capacity = capacity
        self.store = store
    }

    /// Values the loop has notified (handed to every subscriber's link, or to nobody
    /// when none was subscribed).
    public var sent: Int { state.withLock { $0.sent } }

    /// Values that were queued when the writer failed, and so were never sent.
    public var dropped: Int { state.withLock { $0.dropped } }

    /// Values waiting for the loop.
    var queued: Int { state.withLock { $0.queue.count } }

    /// Senders suspended until the queue has room.
    var waitingSenders: Int { state.withLock { $0.senders.count } }

    /// Queues `value`; suspends while the queue is full. Throws the writer's failure
    /// (the value is then not queued), or `CancellationError` when the task is cancelled
    /// while it waits for room (the value stays queued and is sent).
    public func send(_ value: [UInt8]) async throws {
        let (start, full) = try state.withLock { s -> (Bool, Bool) in
            if let failure = s.failure { throw failure }
            s.queue.append(value)
            let start = !s.draining
            s.draining = true
            return (start, s.queue.count >= capacity)
        }
        if start { Task(executorPreference: host.taskExecutor) { await self.drain() } }
        if full { try await waitForRoom() }
    }

    /// Returns once every value queued so far has been notified (each in the
    /// controller's buffers); throws the writer's failure.
    public func flush() async throws {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
            let now: Result<Void, BLEError>? = state.withLock { s in
                if let failure = s.failure { return .failure(failure) }
                guard s.draining else { return .success(()) }
                s.flushers.append(c)
                return nil
            }
            if let now { c.resume(with: now) }
        }
    }

    private func waitForRoom() async throws {
        let ticket = state.withLock { s -> UInt64 in
            s.nextTicket += 1
            return s.nextTicket
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                let now: Result<Void, any Error>? = state.withLock { s in
                    if let failure = s.failure { return .failure(failure) }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    // The loop may have taken the queue down since `send` looked.
                    if s.queue.count < capacity { return .success(()) }
                    s.senders[ticket] = c
                    return nil
                }
                if let now { c.resume(with: now) }
            }
        } onCancel: {
            state.withLock { $0.senders.removeValue(forKey: ticket) }?.resume(throwing: CancellationError())
        }
    }

    /// On the loop: notifies the queued values in order until the queue is empty or a
    /// value cannot be sent.
    private func drain() async {
        let lowWatermark = capacity / 2
        while true {
            var room: [CheckedContinuation<Void, any Error>] = []
            var flushed: [CheckedContinuation<Void, any Error>] = []
            let next = state.withLock { s -> [UInt8]? in
                guard let v = s.queue.popFirst() else {
                    s.draining = false
                    flushed = s.flushers
                    s.flushers = []
                    return nil
                }
                if s.queue.count <= lowWatermark, !s.senders.isEmpty {
                    room = Array(s.senders.values)
                    s.senders = [:]
                }
                return v
            }
            for c in room { c.resume() }
            for c in flushed { c.resume() }
            guard let value = next else { return }
            do {
                _ = try await host.notify(characteristic, value: value, only: only, store: store, failWithTheHost: true)
                state.withLock { $0.sent += 1 }
            } catch {
                // The value taken counts with the ones still queued.
                fail(error as? BLEError ?? .notSupported("\(error)"), alsoDropped: 1)
                return
            }
        }
    }

    /// Ends the writer with `error`: what is queued is dropped (and counted), and every
    /// `send` and `flush`, waiting or to come, throws it. The first failure stays.
    func fail(_ error: BLEError, alsoDropped: Int) {
        let waiting = state.withLock { s -> [CheckedContinuation<Void, any Error>] in
            s.failure = s.failure ?? error
            s.dropped += s.queue.count + alsoDropped
            s.queue.removeAll()
            s.draining = false
            let waiting = Array(s.senders.values) + s.flushers
            s.senders = [:]
            s.flushers = []
            return waiting
        }
        for c in waiting { c.resume(throwing: error) }
    }
}
