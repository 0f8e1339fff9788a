// Values streamed to a peer from code that runs off the host's loop: notifications
// (`NotificationWriter`) and Write Commands (`WriteWithoutResponseWriter`). The values
// wait in a bounded queue, and one task on the loop takes them in order and sends each
// as the facade's own call does. A writer suspends only when the queue is full (until
// the loop has taken it down to half), so a sender on the cooperative pool and the
// loop each wake once per batch, not twice per value (the shape of NIO's
// `NIOAsyncWriter`, with its high and low watermarks).

import DequeModule
import HCI
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
    let queue: LoopWriterQueue<[UInt8]>

    init(host: BluetoothHost, characteristic: Characteristic, only: Set<UInt16>?, capacity: Int, store: Bool) throws(BLEError) {
        self.characteristic = characteristic
        queue = try LoopWriterQueue(capacity: capacity, executor: host.taskExecutor) { value in
            _ = try await host.notify(characteristic, value: value, only: only, store: store, failWithTheHost: true)
        }
    }

    /// The most values that wait before `send` suspends.
    public var capacity: Int { queue.capacity }
    /// Values the loop has notified (handed to every subscriber's link, or to nobody
    /// when none was subscribed).
    public var sent: Int { queue.sent }
    /// Values that were queued when the writer failed, and so were never sent.
    public var dropped: Int { queue.dropped }

    /// Queues `value`; suspends while the queue is full. Throws the writer's failure
    /// (the value is then not queued), or `CancellationError` when the task is cancelled
    /// while it waits for room (the value stays queued and is sent).
    public func send(_ value: [UInt8]) async throws { try await queue.send(value) }

    /// Returns once every value queued so far has been notified (each in the
    /// controller's buffers); throws the writer's failure.
    public func flush() async throws { try await queue.flush() }
}

/// Writes a characteristic's value as Write Commands (Write Without Response) from any
/// task, in order, with back-pressure (see
/// `RemotePeripheral.writeWithoutResponseWriter(for:capacity:)`).
///
/// `send` checks the value's length (at most ATT_MTU − 3 bytes, the ATT_MTU of when the
/// writer was made) and queues it; it suspends while `capacity` values or more wait,
/// until the host's loop has taken enough of them to leave half. A task on the loop
/// hands each value to the link as `RemotePeripheral.write(_:to:withResponse: false)`
/// does, waiting for room when the link has fallen behind; `flush` returns once every
/// value is in the controller's buffers.
///
/// When the link or the transport ends, the writer fails with that error: the values
/// still queued are dropped, counted in `dropped`, and `send` and `flush` throw it from
/// then on, as do the ones waiting.
public final class WriteWithoutResponseWriter: Sendable {
    public let characteristic: RemoteCharacteristic
    /// The longest value a Write Command carries on this link (ATT_MTU − 3).
    public let maximumLength: Int
    let queue: LoopWriterQueue<[UInt8]>

    init(characteristic: RemoteCharacteristic, maximumLength: Int, capacity: Int, executor: LoopTaskExecutor,
         deliver: @escaping @Sendable ([UInt8]) async throws -> Void, settle: @escaping @Sendable () async throws -> Void) throws(BLEError) {
        self.characteristic = characteristic
        self.maximumLength = maximumLength
        queue = try LoopWriterQueue(capacity: capacity, executor: executor, deliver: deliver, settle: settle)
    }

    /// The most values that wait before `send` suspends.
    public var capacity: Int { queue.capacity }
    /// Values handed to the link.
    public var sent: Int { queue.sent }
    /// Values that were queued when the writer failed, and so were never sent.
    public var dropped: Int { queue.dropped }

    /// Queues `value`; suspends while the queue is full. Throws
    /// `BLEError.invalidArgument` for a value longer than `maximumLength` (not queued),
    /// the writer's failure, or `CancellationError` when the task is cancelled while it
    /// waits for room (the value stays queued and is sent).
    public func send(_ value: [UInt8]) async throws {
        guard value.count <= maximumLength else {
            throw BLEError.invalidArgument("a Write Command carries at most \(maximumLength) bytes (ATT_MTU - 3), not \(value.count)")
        }
        try await queue.send(value)
    }

    /// Returns once every value queued so far is in the controller's buffers; throws
    /// the writer's failure.
    public func flush() async throws { try await queue.flush() }
}

/// The queue behind both writers: values from any task, taken in order by one task on
/// the host's loop that hands each to `deliver`, and calls `settle` when it has emptied
/// the queue before telling `flush` callers.
final class LoopWriterQueue<Value: Sendable>: Sendable {
    let capacity: Int
    private let executor: LoopTaskExecutor
    private let deliver: @Sendable (Value) async throws -> Void
    private let settle: (@Sendable () async throws -> Void)?

    private struct State {
        var queue = Deque<Value>()
        /// A task on the loop is taking the queue.
        var draining = false
        /// Senders waiting for room, by ticket.
        var senders: [UInt64: CheckedContinuation<Void, any Error>] = [:] {
            didSet { waitingSenderGauge.set(senders.count) }
        }
        var waitingSenderGauge = Gauge()
        /// `flush` callers, waiting for the queue to empty.
        var flushers: [CheckedContinuation<Void, any Error>] = []
        var nextTicket: UInt64 = 0
        var failure: (any Error)?
        var dropped = 0
        var sent = 0
    }
    private let state = Mutex(State())

    /// Throws `BLEError.invalidArgument` for a capacity below 1.
    init(capacity: Int, executor: LoopTaskExecutor, deliver: @escaping @Sendable (Value) async throws -> Void,
         settle: (@Sendable () async throws -> Void)? = nil) throws(BLEError) {
        guard capacity >= 1 else { throw BLEError.invalidArgument("capacity must be at least 1, not \(capacity)") }
        self.capacity = capacity
        self.executor = executor
        self.deliver = deliver
        self.settle = settle
    }

    var sent: Int { state.withLock { $0.sent } }
    var dropped: Int { state.withLock { $0.dropped } }
    /// Values waiting for the loop.
    var queued: Int { state.withLock { $0.queue.count } }
    /// How many senders are suspended until the queue has room: now, then each change
    /// (tests follow a sender reaching the wait). Ends when the queue fails.
    func waitingSenderCounts() -> AsyncStream<Int> { state.withLock { $0.waitingSenderGauge.watch() } }
    /// Senders suspended until the queue has room.
    var waitingSenders: Int { state.withLock { $0.senders.count } }

    func send(_ value: Value) async throws {
        let (start, full) = try state.withLock { s -> (Bool, Bool) in
            if let failure = s.failure { throw failure }
            s.queue.append(value)
            let start = !s.draining
            s.draining = true
            return (start, s.queue.count >= capacity)
        }
        if start { Task(executorPreference: executor) { await self.drain() } }
        if full { try await waitForRoom() }
    }

    func flush() async throws {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
            let now: Result<Void, any Error>? = state.withLock { s in
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

    /// On the loop: delivers the queued values in order until the queue is empty (and
    /// settled) or a value cannot be delivered.
    private func drain() async {
        let lowWatermark = capacity / 2
        var unsettled = false
        while true {
            var room: [CheckedContinuation<Void, any Error>] = []
            let next = state.withLock { s -> Value? in
                guard let v = s.queue.popFirst() else { return nil }
                if s.queue.count <= lowWatermark, !s.senders.isEmpty {
                    room = Array(s.senders.values)
                    s.senders = [:]
                }
                return v
            }
            for c in room { c.resume() }
            guard let value = next else {
                if unsettled, let settle {
                    unsettled = false
                    do { try await settle() } catch {
                        fail(error, alsoDropped: 0)
                        return
                    }
                }
                // Values sent while settling are taken before `flush` callers hear.
                var flushed: [CheckedContinuation<Void, any Error>] = []
                let done = state.withLock { s -> Bool in
                    guard s.queue.isEmpty else { return false }
                    s.draining = false
                    flushed = s.flushers
                    s.flushers = []
                    return true
                }
                for c in flushed { c.resume() }
                if done { return } else { continue }
            }
            do {
                try await deliver(value)
                state.withLock { $0.sent += 1 }
                unsettled = true
            } catch {
                // The value taken counts with the ones still queued.
                fail(error, alsoDropped: 1)
                return
            }
        }
    }

    /// Ends the queue with `error`: what is queued is dropped (and counted), and every
    /// `send` and `flush`, waiting or to come, throws it. The first failure stays.
    func fail(_ error: any Error, alsoDropped: Int) {
        let (waiting, failure) = state.withLock { s -> ([CheckedContinuation<Void, any Error>], any Error) in
            let failure = s.failure ?? error
            s.failure = failure
            s.dropped += s.queue.count + alsoDropped
            s.queue.removeAll()
            s.draining = false
            let waiting = Array(s.senders.values) + s.flushers
            s.senders = [:]
            s.waitingSenderGauge.finish()
            s.flushers = []
            return (waiting, failure)
        }
        for c in waiting { c.resume(throwing: failure) }
    }
}
