// The ATT bearer actor: executes `ATTBearerState` over an `ATTChannel` with the
// loop's timer for the 30 s transaction timeout, on the channel's event loop (its
// executor). The channel hands PDUs in synchronously and takes PDUs out
// synchronously; what the peer sends goes synchronously to the handler a GATT client
// or server set (`setHandler`), else to the `incoming` stream. Callers get async
// functions for their transactions.

import DequeModule
import HCI
import L2CAP
import Logging
import NIOCore

public actor ATTBearer: LoopIsolated {
    /// What the peer sends that is not an answer to us.
    public enum Incoming: Hashable, Sendable {
        /// Answer with `respond(_:)`.
        case request(ATTPDU)
        case command(ATTPDU)
        case notification(handle: UInt16, value: [UInt8])
        /// Confirm with `confirm()` once handled.
        case indication(handle: UInt16, value: [UInt8])
    }

    public nonisolated let channel: any ATTChannel
    /// The channel's event loop, this actor's executor (both read once, at init).
    public nonisolated let loop: any EventLoop
    /// The loop's actors' executor (held here: `unownedExecutor` does not keep it).
    public nonisolated let loopExecutor: LoopExecutor
    public nonisolated let unownedExecutor: UnownedSerialExecutor
    private let logger: Logger
    private let timeout: Duration
    // `@exclusivity(unchecked)` below: state on the loop alone, and no access to it calls
    // out while under way (docs/architecture.md, "Decisions worth knowing").
    @exclusivity(unchecked) private var state: ATTBearerState
    @exclusivity(unchecked) private var waiters: [UInt64: CheckedContinuation<ATTPDU?, any Error>] = [:]
    @exclusivity(unchecked) private var timers: [UInt64: LoopTimer] = [:]
    private var incomingContinuation: BufferedStream<Incoming>.Continuation?
    private var opened = false
    /// PDUs handed to the channel and not yet to the link, and their octets.
    @exclusivity(unchecked) private var unsent = 0
    @exclusivity(unchecked) private var unsentOctets = 0
    /// The octets of each of those PDUs, oldest first: a channel reports them handed
    /// over in the order they were written, through one callback made once
    /// (`writtenCallback`), not a closure per PDU.
    @exclusivity(unchecked) private var unsentSizes = Deque<Int>()
    private var writtenCallback: (@Sendable (Bool) -> Void)?
    @exclusivity(unchecked) private var drainWaiters: [CheckedContinuation<Void, Never>] = []
    @exclusivity(unchecked) private var writableWaiters: [CheckedContinuation<Void, Never>] = []
    /// `queuedRequestsSent(within:)`'s waiters, each with its time limit.
    @exclusivity(unchecked) private var queueWaiters: [UInt64: (CheckedContinuation<Void, Never>, LoopTimer)] = [:]
    @exclusivity(unchecked) private var nextQueueWaiter: UInt64 = 0
    /// Writability, as a NIO channel has it: the bearer stops being writable when the
    /// PDUs it has handed to the channel and the link has not taken yet pass
    /// `highWaterMark` octets, and is writable again once they are back under
    /// `lowWaterMark`. Requests, responses and confirmations always go (the protocol
    /// bounds them: one outstanding each way); a sender of notifications or commands
    /// waits in `writable()` so that what it queues stays bounded.
    public nonisolated let highWaterMark: Int
    public nonisolated var lowWaterMark: Int { highWaterMark / 2 }
    private var handler: (@Sendable (Incoming) -> Void)?
    private var closedHandler: (@Sendable () -> Void)?
    /// Transactions started without a waiter (`startIndication`) and their outcomes until awaited.
    @exclusivity(unchecked) private var detached: Set<UInt64> = []
    /// Transactions started by `startRequest`: who takes each outcome, on the loop.
    @exclusivity(unchecked) private var answerHandlers: [UInt64: @Sendable (Result<ATTPDU, any Error>) -> Void] = [:]
    @exclusivity(unchecked) private var outcomes: [UInt64: Result<ATTPDU?, any Error>] = [:]
    /// Incoming requests, commands, notifications and indications, in arrival order,
    /// when no handler is set (`setHandler`, which GATT clients and servers on the same
    /// loop use). Buffer: the newest 1024, drops counted. Ends when the bearer closes.
    public nonisolated let incoming: BufferedStream<Incoming>

    /// The default `highWaterMark`: 16 KiB, some 700 notifications at the smallest
    /// ATT_MTU, more than a connection event carries.
    public static let defaultHighWaterMark = 16 * 1024

    public init(channel: any ATTChannel, localRxMTU: UInt16 = 517,
                transactionTimeout: Duration = ATTBearerState.transactionTimeout,
                highWaterMark: Int = ATTBearer.defaultHighWaterMark, logger: Logger) {
        self.init(channel: channel, state: ATTBearerState(localRxMTU: localRxMTU), transactionTimeout: transactionTimeout,
                  highWaterMark: highWaterMark, logger: logger)
    }

    /// An enhanced bearer (EATT) over an L2CAP enhanced credit-based channel to SPSM
    /// 0x0027: its ATT_MTU is the channel's, the smaller of both sides' MTUs.
    public init(enhanced channel: L2CAPChannel,
                transactionTimeout: Duration = ATTBearerState.transactionTimeout, logger: Logger) {
        let info = channel.info
        self.init(channel: EATTChannel(channel: channel), state: ATTBearerState(enhancedMTU: Int(Swift.min(info.local.mtu, info.remote.mtu))),
                  transactionTimeout: transactionTimeout, highWaterMark: ATTBearer.defaultHighWaterMark, logger: logger)
    }

    private init(channel: any ATTChannel, state: ATTBearerState, transactionTimeout: Duration,
                 highWaterMark: Int, logger: Logger) {
        self.channel = channel
        self.highWaterMark = Swift.max(1, highWaterMark)
        self.loop = channel.loop
        self.loopExecutor = LoopExecutor.of(channel.loop)
        self.unownedExecutor = loopExecutor.asUnownedSerialExecutor()
        self.logger = logger
        self.timeout = transactionTimeout
        self.state = state
        let (stream, c) = BufferedStream<Incoming>.makeStream(capacity: 1024)
        self.incoming = stream
        self.incomingContinuation = c
    }

    /// Opens the channel: from now on the peer's PDUs are handled as they arrive.
    public func start() {
        guard !opened else { return }
        opened = true
        // The channel delivers on its loop, this actor's executor.
        // Held strongly (a weak reference would give the bearer a side table, and every
        // retain of it the slow path): the L2CAP host lets go of it after `.closed`.
        channel.open { input in
            self.onLoop(input) { bearer, input in
                switch input {
                case let .frame(pdu): bearer.receive(pdu)
                case .closed: bearer.linkEnded()
                }
            }
        }
    }

    /// What the peer sends (requests, commands, notifications, indications) goes to
    /// `handler`, synchronously on the loop, instead of `incoming`; `closed` is called
    /// once when the bearer closes. Set by a GATT client or server sharing the loop.
    public func setHandler(_ handler: @escaping @Sendable (Incoming) -> Void, closed: @escaping @Sendable () -> Void) {
        self.handler = handler
        if unusable { closed() } else { closedHandler = closed }
    }

    private var unusable: Bool { state.unusableReason != nil }

    /// Whether the bearer can still carry transactions (not closed, not timed out).
    public var isOpen: Bool { !unusable }

    /// Why the bearer can no longer carry transactions (closed, timed out); nil while open.
    public var unusableReason: String? { state.unusableReason }

    public var mtu: Int { state.mtu }

    /// Sends a request and returns the peer's response; throws `ATTBearerError`.
    public func request(_ pdu: ATTPDU) async throws -> ATTPDU {
        start()
        let (id, events) = state.sendRequest(pdu)
        return try await wait(id: id, events: events) ?? .writeResponse
    }

    /// Sends an indication and returns when the peer confirms it.
    public func indicate(handle: UInt16, value: [UInt8]) async throws {
        start()
        let (id, events) = state.sendIndication(handle: handle, value: value)
        _ = try await wait(id: id, events: events)
    }

    /// Queues an indication at once (one outstanding per bearer, the rest wait in
    /// order) and returns a function that waits for its confirmation, so a server can
    /// start indications on several bearers before it waits for any of them.
    public func startIndication(handle: UInt16, value: [UInt8]) -> @Sendable () async throws -> Void {
        start()
        let (id, events) = state.sendIndication(handle: handle, value: value)
        detached.insert(id)
        execute(events)
        return { [self] in _ = try await self.outcome(of: id) }
    }

    /// Queues a request at once, behind those queued before it, and hands its outcome
    /// to `answered` on the loop as it comes, before the bearer takes its next PDU.
    /// For traffic whose place in the conversation matters but whose answer nobody
    /// should wait for in line: what the facade owes the peer before the program's
    /// next operation, which must not wait out a request outstanding before it.
    public func startRequest(_ pdu: ATTPDU, answered: @escaping @Sendable (Result<ATTPDU, any Error>) -> Void) {
        start()
        let (id, events) = state.sendRequest(pdu)
        answerHandlers[id] = answered
        execute(events)
    }

    /// Waits for transaction `id` started by `startIndication`, whose outcome may have come already.
    private func outcome(of id: UInt64) async throws -> ATTPDU? {
        if let r = outcomes.removeValue(forKey: id) { return try r.get() }
        detached.remove(id)
        return try await withCheckedThrowingContinuation { waiters[id] = $0 }
    }

    /// Resumes the waiter of `id`, or keeps the outcome for one not waiting yet.
    private func finish(_ id: UInt64, _ result: Result<ATTPDU?, any Error>) {
        if let answered = answerHandlers.removeValue(forKey: id) {
            answered(result.map { $0 ?? .writeResponse })
        } else if let w = waiters.removeValue(forKey: id) {
            w.resume(with: result)
        } else if detached.remove(id) != nil {
            outcomes[id] = result
        }
    }

    /// Notifications, Write Command, Signed Write Command.
    public func sendUnacknowledged(_ pdu: ATTPDU) throws {
        if let reason = state.unusableReason { throw ATTBearerError.bearerUnusable(reason) }
        execute(inPlace { $0.sendUnacknowledged(pdu) })
    }

    /// `body` on the state where it is stored. A non-mutating method called on the
    /// stored `state` itself gets a copy of all of it first (its queues retained, then
    /// released): per notification, on the hot path.
    @inline(__always)
    private func inPlace<T>(_ body: (inout ATTBearerState) -> T) -> T { body(&state) }

    /// `sendUnacknowledged` once the bearer is writable: a sender in a loop is paced by
    /// the link instead of queueing without bound.
    public func sendWhenWritable(_ pdu: ATTPDU) async throws {
        await writable()
        try sendUnacknowledged(pdu)
    }

    /// Sends a Handle Value Notification of `value`, cut to ATT_MTU - 3 octets; throws as
    /// `sendUnacknowledged` does.
    public func notify(handle: UInt16, value: [UInt8]) throws {
        let room = state.mtu - 3
        try sendUnacknowledged(.handleValueNotification(handle: handle, value: value.count > room ? Array(value.prefix(room)) : value))
    }

    /// Whether every PDU queued so far is in the link's hands, or the bearer is closed:
    /// what `drain()` waits for.
    public var isDrained: Bool { unsent == 0 || unusable }

    /// Whether a notification or command may be queued now without passing
    /// `highWaterMark` (or the bearer is closed, and sending fails at once).
    public var isWritable: Bool { unsentOctets < highWaterMark || unusable }

    /// Returns at once when `isWritable`, else once what waits for the link is back
    /// under `lowWaterMark` or the bearer closes. Waiters resume in the order they came.
    public func writable() async {
        guard !isWritable else { return }
        await withCheckedContinuation { writableWaiters.append($0) }
    }

    /// `writable()` for a caller on this bearer's loop that suspends in its own
    /// isolation: `waiter` is resumed at once if the bearer has room, else once it has.
    /// The caller's task then resumes where it is, with no hop to this actor and back.
    public func whenWritable(_ waiter: CheckedContinuation<Void, Never>) {
        if isWritable { waiter.resume() } else { writableWaiters.append(waiter) }
    }

    /// `drain()` for a caller on this bearer's loop, as `whenWritable(_:)` is.
    public func whenDrained(_ waiter: CheckedContinuation<Void, Never>) {
        if isDrained { waiter.resume() } else { drainWaiters.append(waiter) }
    }

    /// Runs `body` isolated to this bearer (for a caller that may be on another loop).
    public func perform<T: Sendable>(_ body: @Sendable (isolated ATTBearer) throws -> T) rethrows -> T { try body(self) }

    public func respond(_ pdu: ATTPDU) { execute(state.respond(pdu)) }
    public func confirm() { execute(state.confirm()) }

    /// Exchanges MTUs (client role) and returns the resulting ATT_MTU.
    @discardableResult
    public func exchangeMTU() async throws -> Int {
        _ = try await request(.exchangeMTURequest(clientRxMTU: state.localRxMTU))
        return state.mtu
    }

    /// `exchangeMTU()` queued at once, its outcome handed to `answered` as
    /// `startRequest(_:answered:)` hands it (the ATT_MTU has changed by then).
    public func startMTUExchange(answered: @escaping @Sendable (Result<ATTPDU, any Error>) -> Void) {
        startRequest(.exchangeMTURequest(clientRxMTU: state.localRxMTU), answered: answered)
    }

    private func wait(id: UInt64, events: [ATTBearerState.Event]) async throws -> ATTPDU? {
        try await withCheckedThrowingContinuation { c in
            waiters[id] = c
            execute(events)
        }
    }

    private func receive(_ bytes: ArraySlice<UInt8>) { execute(state.receive(bytes)) }

    private func linkEnded() { close(reason: channel.closeReason) }

    /// Closes the bearer: pending transactions fail, the incoming stream ends.
    public func close(reason: String = "closed by the host") {
        execute(state.close(reason: reason))
        incomingContinuation?.finish()
        incomingContinuation = nil
        handler = nil
        writtenCallback = nil
        closedHandler.take()?()
        for w in drainWaiters { w.resume() }
        drainWaiters.removeAll()
        resumeWritableWaiters()
        resumeQueueWaitersIfSent()
    }

    private func resumeWritableWaiters() {
        let waiting = writableWaiters
        writableWaiters.removeAll()
        for w in waiting { w.resume() }
    }

    private func deliver(_ item: Incoming) {
        if let handler { handler(item) } else { incomingContinuation?.yield(item) }
    }

    /// Applies the state machine's events; sends go through one outbox in order.
    private func execute(_ events: [ATTBearerState.Event]) {
        for e in events {
            switch e {
            case let .send(bytes):
                unsent += 1
                let octets = bytes.count
                unsentOctets += octets
                unsentSizes.append(octets)
                let queued = channel.write(bytes, done: whenWritten)
                if !queued {
                    unsent -= 1
                    unsentOctets -= octets
                    unsentSizes.removeLast()
                    logger.debug("ATT send failed: the link is gone")
                    close(reason: channel.closeReason)
                    return
                }
            case let .startTimer(id):
                timers[id] = LoopTimer(after: timeout, on: loop, handler: TransactionTimer(bearer: self, id: id))
            case let .cancelTimer(id):
                timers.removeValue(forKey: id)?.cancel()
            case let .responded(id, pdu):
                finish(id, .success(pdu))
            case let .failed(id, error):
                timers.removeValue(forKey: id)?.cancel()
                finish(id, .failure(error))
            case let .confirmed(id):
                finish(id, .success(nil))
            case let .request(pdu): deliver(.request(pdu))
            case let .command(pdu): deliver(.command(pdu))
            case let .notification(h, v): deliver(.notification(handle: h, value: v))
            case let .indication(h, v): deliver(.indication(handle: h, value: v))
            case let .mtuChanged(m): logger.debug("ATT MTU", metadata: ["att.mtu": "\(m)"])
            case let .protocolViolation(why): logger.debug("ATT protocol violation", metadata: ["reason": "\(why)"])
            }
        }
        resumeQueueWaitersIfSent()
    }

    /// What the channel calls as each PDU is handed to the link (or dropped with it).
    private var whenWritten: @Sendable (Bool) -> Void {
        if let writtenCallback { return writtenCallback }
        let callback: @Sendable (Bool) -> Void = { _ in self.onLoop { $0.written() } }
        // Kept while the bearer is open; `close()` lets go of it (it holds the bearer).
        if !unusable { writtenCallback = callback }
        return callback
    }

    private func written() {
        guard let octets = unsentSizes.popFirst() else { return }
        unsent -= 1
        unsentOctets -= octets
        if !writableWaiters.isEmpty, unsentOctets <= lowWaterMark { resumeWritableWaiters() }
        guard unsent == 0 else { return }
        for w in drainWaiters { w.resume() }
        drainWaiters.removeAll()
    }

    /// Returns once every request queued behind the outstanding one has been sent (each
    /// goes when the one before it is answered), the bearer closed, or `limit` passed:
    /// before a disconnection, so requests a program queued and did not wait for (the
    /// CCCD writes of subscriptions it let go) reach the peer. Then `drain()` waits for
    /// them to reach the link.
    public func queuedRequestsSent(within limit: Duration) async {
        guard state.hasQueuedRequests, !unusable else { return }
        let id = nextQueueWaiter
        nextQueueWaiter += 1
        await withCheckedContinuation { c in
            queueWaiters[id] = (c, LoopTimer(after: limit, on: loop) { self.onLoop(id) { $0.resumeQueueWaiter($1) } })
        }
    }

    private func resumeQueueWaiter(_ id: UInt64) {
        guard let (c, timer) = queueWaiters.removeValue(forKey: id) else { return }
        timer.cancel()
        c.resume()
    }

    private func resumeQueueWaitersIfSent() {
        guard !queueWaiters.isEmpty, !state.hasQueuedRequests || unusable else { return }
        for id in Array(queueWaiters.keys) { resumeQueueWaiter(id) }
    }

    /// Returns once every PDU queued so far has been handed to the link (e.g. before
    /// disconnecting, so a confirmation or response is not lost), or the bearer closed.
    public func drain() async {
        guard unsent > 0, !unusable else { return }
        await withCheckedContinuation { drainWaiters.append($0) }
    }

    /// Transaction `id`'s 30 s timer, for `LoopTimer` (a struct: no closure context per request).
    private struct TransactionTimer: NIOScheduledCallbackHandler, Sendable {
        let bearer: ATTBearer
        let id: UInt64
        func handleScheduledCallback(eventLoop: some EventLoop) { bearer.onLoop(id) { $0.timerFired($1) } }
    }

    private func timerFired(_ id: UInt64) {
        timers[id] = nil
        let events = state.timedOut(id: id)
        if !events.isEmpty { logger.warning("ATT transaction timed out; the bearer is unusable") }
        execute(events)
    }
}
