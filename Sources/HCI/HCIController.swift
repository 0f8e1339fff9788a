// The host's view of one controller: sends commands through `CommandFlow`, matches
// their answers, times them out on the loop's timers, paces ACL data with
// `ACLFlow`, and fans events and ACL data out to subscribers. The only serial owner
// of this state is the actor; the transport is the only I/O.

import DequeModule
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// Why a command or an ACL send did not succeed.
public enum HCIError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The controller answered with a non-zero status.
    case commandFailed(opcode: HCIOpcode, status: HCIStatus)
    /// No Command Complete / Command Status arrived in time.
    case commandTimedOut(opcode: HCIOpcode, timeout: Duration)
    /// The answer could not be decoded.
    case malformedResponse(opcode: HCIOpcode, DecodeError)
    /// The transport closed or failed before the operation finished.
    case transportClosed(String)
    /// The connection went away while data for it was waiting for a buffer.
    case connectionClosed(handle: UInt16)

    public var description: String {
        switch self {
        case let .commandFailed(opcode, status): return "\(opcode) failed: \(status)"
        case let .commandTimedOut(opcode, timeout): return "\(opcode) timed out after \(timeout)"
        case let .malformedResponse(opcode, e): return "\(opcode): malformed response: \(e)"
        case let .transportClosed(reason): return "transport closed: \(reason)"
        case let .connectionClosed(handle): return "connection 0x\(hex4(handle)) closed"
        }
    }
}

/// Events from the controller: everything but Command Complete and Command Status
/// (which answer commands), unless the subscriber asked for those too. Buffer: the newest `capacity` events; older ones are
/// dropped when the consumer falls behind and counted in `dropped`. Ends when the
/// transport closes.
public struct HCIEventStream: AsyncSequence, Sendable {
    public typealias Element = HCIEvent
    let base: BufferedStream<HCIEvent>
    public var dropped: DropCounter { base.dropped }
    public func makeAsyncIterator() -> BufferedStream<HCIEvent>.Iterator { base.makeAsyncIterator() }
}

/// What the controller sent that the layer above (L2CAP) follows: every event but
/// Command Complete and Command Status, and every ACL packet, in the controller's order.
public enum HCIInbound: Sendable {
    case event(HCIEvent)
    case acl(ACLDataPacket)
    /// The transport ended; nothing follows.
    case closed(String)
}

/// Where `HCIInbound` goes: called on the controller's loop, synchronously, before the
/// next packet is read.
public typealias HCIInboundSink = @Sendable (HCIInbound) -> Void

public actor HCIController: LoopIsolated {
    public nonisolated let transport: any HCITransport
    /// The event loop this controller's stack runs on: this actor, the L2CAP host over
    /// it, the ATT bearers of its links and the GATT server and clients on them all use
    /// it as their executor, so they call each other without a thread hop, in order.
    public nonisolated let loop: any EventLoop
    /// The loop as a task executor (`LoopTaskExecutor`): an application task that prefers
    /// it resumes on the loop after each wait inside the stack, not on the global pool.
    /// Kept here, not derived from `loopExecutor` on each read: the loop executor holds
    /// it weakly, and this reference keeps it (and so its identity) for the controller's life.
    public nonisolated let taskExecutor: LoopTaskExecutor
    /// The serial executor of every actor on the loop (held here: `unownedExecutor`
    /// does not keep it).
    public nonisolated let loopExecutor: LoopExecutor
    /// `loopExecutor`, made once: every isolated call reads it.
    public nonisolated let unownedExecutor: UnownedSerialExecutor
    public let commandTimeout: Duration
    private let logger: Logger

    // `@exclusivity(unchecked)` below: state on the loop alone, and no access to it calls
    // out while under way (docs/architecture.md, "Decisions worth knowing").
    @exclusivity(unchecked) private var flow = CommandFlow()
    @exclusivity(unchecked) private var waiters: [UInt64: CheckedContinuation<CommandFlow.Outcome, any Error>] = [:]
    @exclusivity(unchecked) private var acl = ACLFlow(total: 0)
    @exclusivity(unchecked) private var aclWaiters = Deque<(id: UInt64, handle: UInt16, continuation: CheckedContinuation<Void, any Error>)>()
    /// Those waiting for a connection's ACL packets to be completed (`packetsCompleted`).
    @exclusivity(unchecked) private var completionWaiters: [UInt64: (handle: UInt16, continuation: CheckedContinuation<Void, Never>)] = [:]
    private var nextACLWaiter: UInt64 = 1
    private var eventSubscribers: [UInt64: BufferedStream<HCIEvent>.Continuation] = [:] {
        didSet { eventSubscriberGauge.set(eventSubscribers.count) }
    }
    /// How many `events()` streams are live.
    private var eventSubscriberGauge = Gauge()
    /// The subscribers that also get Command Complete and Command Status.
    private var answerSubscribers: Set<UInt64> = []
    private var sink: HCIInboundSink?
    /// `addAnswerObserver`'s observers.
    private var answerObservers: [@Sendable (CommandFlow.Entry, CommandFlow.Outcome) -> Void] = []
    private var creditListener: (@Sendable () -> Void)?
    private var nextSubscriber: UInt64 = 1
    @exclusivity(unchecked) private var timers: [UInt64: LoopTimer] = [:]
    @exclusivity(unchecked) private var outbox = Deque<HCIPacket>()
    @exclusivity(unchecked) private var pumping = false
    private var reading = false
    /// Why the transport ended, once it has.
    public private(set) var closedReason: String?

    /// What `initialize()` learned; nil before it ran.
    public private(set) var info: ControllerInfo?
    /// The LE ACL data packet length `initialize()` learned (nil before it ran): what
    /// L2CAP asks per frame. Stored on its own: reading it through `info` copies all
    /// of `info` (its arrays retained and released) on every frame.
    public private(set) var leACLDataPacketLength: Int?

    /// `loop`: the event loop the stack runs on; by default the transport's preferred
    /// loop (an in-process controller's), else one of NIO's shared loops.
    public init(transport: any HCITransport,
                commandTimeout: Duration = .seconds(5), loop: (any EventLoop)? = nil, logger: Logger) {
        self.transport = transport
        self.loop = loop ?? transport.preferredLoop ?? MultiThreadedEventLoopGroup.singleton.next()
        self.loopExecutor = LoopExecutor.of(self.loop)
        self.unownedExecutor = loopExecutor.asUnownedSerialExecutor()
        self.taskExecutor = loopExecutor.taskExecutor
        self.commandTimeout = commandTimeout
        self.logger = logger
    }

    /// Starts reading from the transport. Called by the first command if not before.
    public func start() {
        guard !reading else { return }
        reading = true
        // The transport hands packets over on the loop (this actor's executor). The layer
        // above handles each packet synchronously before the next: events and ACL data
        // reach it in the controller's order, and nothing queues between them.
        // The handler holds this controller strongly (a weak reference would give it a
        // side table, and every retain of it the slow path); the transport lets go of
        // the handler after `.ended`, which `close()` brings about.
        transport.deliver(on: loop) { input in
            self.onLoop(input) { controller, input in
                switch input {
                case let .packets(packets): for p in packets { controller.receive(p) }
                case .ended(nil): controller.transportEnded("closed")
                case let .ended(error?): controller.transportEnded("\(error)")
                }
            }
        }
    }

    /// Closes the transport; every pending operation fails and every stream ends.
    public func close() async {
        await transport.close()
        transportEnded("closed by the host")
    }

    public var isClosed: Bool { closedReason != nil }

    // MARK: Commands

    /// Sends a command and waits for its Command Complete (returning the decoded return
    /// parameters) or, for commands that finish later, its successful Command Status.
    @discardableResult
    public func send<C: HCICommand>(_ command: C) async throws -> C.ReturnParameters {
        let outcome = try await submit(opcode: C.opcode, parameters: command.parameters, completesWithStatus: C.completesWithStatus)
        switch outcome {
        case let .status(s):
            guard s.isSuccess else { throw HCIError.commandFailed(opcode: C.opcode, status: s) }
            var r = ByteReader([], context: "\(C.opcode)")
            do { return try C.ReturnParameters(returnParameters: &r) } catch let e as DecodeError {
                throw HCIError.malformedResponse(opcode: C.opcode, e)
            }
        case let .complete(bytes):
            var r = ByteReader(bytes, context: "\(C.opcode) return parameters")
            do {
                let status = HCIStatus(rawValue: try r.readUInt8("Status"))
                guard status.isSuccess else { throw HCIError.commandFailed(opcode: C.opcode, status: status) }
                return try C.ReturnParameters(returnParameters: &r)
            } catch let e as DecodeError {
                throw HCIError.malformedResponse(opcode: C.opcode, e)
            }
        }
    }

    /// Sends any command by opcode and returns how it ended, without interpreting it.
    public func sendRaw(opcode: HCIOpcode, parameters: [UInt8], completesWithStatus: Bool = false) async throws -> CommandFlow.Outcome {
        try await submit(opcode: opcode, parameters: parameters, completesWithStatus: completesWithStatus)
    }

    private func submit(opcode: HCIOpcode, parameters: [UInt8], completesWithStatus: Bool) async throws -> CommandFlow.Outcome {
        if let closedReason { throw HCIError.transportClosed(closedReason) }
        start()
        let (id, toSend) = flow.submit(opcode: opcode, parameters: parameters, completesWithStatus: completesWithStatus)
        logger.trace("command queued", metadata: ["hci.opcode": "\(opcode)", "hci.id": "\(id)"])
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<CommandFlow.Outcome, any Error>) in
                waiters[id] = c
                armTimer(id: id, opcode: opcode)
                put(toSend)
            }
        } onCancel: {
            Task { await self.cancel(id: id) }
        }
    }

    private func armTimer(id: UInt64, opcode: HCIOpcode) {
        timers[id] = LoopTimer(after: commandTimeout, on: loop) {
            self.onLoop { $0.timerFired(id: id, opcode: opcode) }
        }
    }

    private func timerFired(id: UInt64, opcode: HCIOpcode) {
        timers[id] = nil
        guard waiters[id] != nil else { return }
        let (_, toSend) = flow.timedOut(id: id)
        logger.warning("command timed out", metadata: ["hci.opcode": "\(opcode)", "hci.timeout": "\(commandTimeout)"])
        finish(id, .failure(HCIError.commandTimedOut(opcode: opcode, timeout: commandTimeout)))
        put(toSend)
    }

    /// The caller's task was cancelled: a command still queued is withdrawn and ends
    /// with CancellationError; one already sent is waited for (its answer, or the
    /// command timeout, ends the call), since the controller carries it out either way:
    /// ending the wait early would leave the caller's account of the controller (a scan
    /// started, a set enabled) behind what the controller did.
    private func cancel(id: UInt64) {
        guard flow.withdraw(id: id) else { return }
        finish(id, .failure(CancellationError()))
    }

    private func finish(_ id: UInt64, _ result: Result<CommandFlow.Outcome, any Error>) {
        timers.removeValue(forKey: id)?.cancel()
        waiters.removeValue(forKey: id)?.resume(with: result)
    }

    /// Queues commands for the wire; one pump sends the outbox in order.
    private func put(_ entries: [CommandFlow.Entry]) {
        guard !entries.isEmpty else { return }
        for e in entries { outbox.append(.command(opcode: e.opcode, parameters: e.parameters)) }
        startPump()
    }

    private func startPump() {
        guard !pumping else { return }
        if transport.sendsSynchronously {
            // Written now, on the loop, in order.
            let packets = Array(outbox)
            outbox.removeAll(keepingCapacity: true)
            writeNow(packets)
            return
        }
        pumping = true
        Task { await self.pump() }
    }

    /// Writes the outbox (commands and the L2CAP host's ACL) to the transport in order.
    private func pump() async {
        while let p = outbox.popFirst() {
            if case let .command(opcode, _) = p { logger.trace("command sent", metadata: ["hci.opcode": "\(opcode)"]) }
            do {
                try await transport.send(p)
            } catch {
                transportEnded("send failed: \(error)")
                break
            }
        }
        pumping = false
    }

    // MARK: ACL data

    /// Queues one ACL packet for the transport (in order with commands), waiting for a
    /// controller buffer if none is free.
    /// Fails with `.connectionClosed` if the connection disconnects while waiting.
    public func sendACL(_ packet: ACLDataPacket) async throws {
        if let closedReason { throw HCIError.transportClosed(closedReason) }
        start()
        if aclWaiters.isEmpty, acl.take(handle: packet.handle) {
            queueACL(packet)
            return
        }
        let id = nextACLWaiter
        nextACLWaiter += 1
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                aclWaiters.append((id, packet.handle, c))
            }
        } onCancel: {
            Task { await self.cancelACLWaiter(id: id) }
        }
        queueACL(packet)
    }

    /// For the L2CAP host, on the loop: takes a controller buffer for `packet` and queues
    /// it for the transport, in order with commands. Returns false when no buffer is
    /// free (the credit listener is called when one frees) or the transport has ended.
    public func sendACLNow(_ packet: ACLDataPacket) -> Bool {
        guard closedReason == nil, aclWaiters.isEmpty, acl.take(handle: packet.handle) else { return false }
        queueACL(packet)
        return true
    }

    /// The one way ACL data goes to the wire: behind the commands before it in the
    /// outbox (written at once when nothing is ahead of it).
    private func queueACL(_ packet: ACLDataPacket) {
        if outbox.isEmpty, !pumping, transport.sendsSynchronously {
            do { try transport.sendNow(.acl(packet)) } catch { transportEnded("send failed: \(error)") }
            return
        }
        outbox.append(.acl(packet))
        startPump()
    }

    /// Writes on the loop, now, to a transport that `sendsSynchronously`.
    private func writeNow(_ packets: [HCIPacket]) {
        do { try transport.sendNow(packets) } catch { transportEnded("send failed: \(error)") }
    }

    /// Returns once every ACL packet sent on `handle` so far has been reported by Number
    /// Of Completed Packets (the controller has sent it over the air or flushed it), the
    /// connection ended, or the transport closed; or at `limit`. For a host that ends a
    /// link right after its last PDU: a Disconnect sent while that PDU sits in the
    /// controller's buffer may end the link before it goes out.
    public func packetsCompleted(handle: UInt16, within limit: Duration) async {
        guard closedReason == nil, acl.outstanding[handle] != nil || aclWaiters.contains(where: { $0.handle == handle }) else { return }
        let id = nextACLWaiter
        nextACLWaiter += 1
        let timer = LoopTimer(after: limit, on: loop) { self.onLoop { $0.resumeCompletionWaiter(id) } }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in completionWaiters[id] = (handle, c) }
        } onCancel: {
            Task { await self.resumeCompletionWaiter(id) }
        }
        timer.cancel()
    }

    private func resumeCompletionWaiter(_ id: UInt64) { completionWaiters.removeValue(forKey: id)?.continuation.resume() }

    /// Resumes the completion waiters of connections with nothing outstanding (`all`: every one).
    private func resumeCompletionWaiters(all: Bool = false) {
        for (id, w) in completionWaiters where all || (acl.outstanding[w.handle] == nil && !aclWaiters.contains(where: { $0.handle == w.handle })) {
            resumeCompletionWaiter(id)
        }
    }

    /// Called on the loop whenever controller buffers free up (Number Of Completed
    /// Packets, a disconnection, a new buffer count). One listener: the L2CAP host.
    public func setACLCreditListener(_ listener: @escaping @Sendable () -> Void) { creditListener = listener }

    private func cancelACLWaiter(id: UInt64) {
        if let i = aclWaiters.firstIndex(where: { $0.id == id }) {
            aclWaiters.remove(at: i).continuation.resume(throwing: CancellationError())
        }
    }

    /// Wakes ACL senders, oldest first, while credits last (a credit is taken for each).
    private func grantACLCredits() {
        while let w = aclWaiters.first, acl.take(handle: w.handle) {
            aclWaiters.removeFirst()
            w.continuation.resume()
        }
        if acl.available > 0 { creditListener?() }
    }

    /// Sets the number of LE ACL buffers (done by `initialize()`; tests may set it directly).
    public func setACLBufferCount(_ n: Int) {
        acl.reset(total: n)
        grantACLCredits()
    }

    public var aclCredits: (available: Int, total: Int, outstanding: HandleMap<Int>) {
        (acl.available, acl.total, acl.outstanding)
    }

    // MARK: Subscriptions

    /// A stream of events; see `HCIEventStream` for its buffer policy. With `answers`,
    /// Command Complete and Command Status come too, each in its place among the other
    /// events and before the command it answers returns: a follower can tell which
    /// events the controller sent before it answered a command.
    public func events(capacity: Int = 1024, answers: Bool = false) -> HCIEventStream {
        let (stream, continuation) = BufferedStream<HCIEvent>.makeStream(capacity: capacity)
        if closedReason != nil {
            continuation.finish()
        } else {
            let id = nextSubscriber
            nextSubscriber += 1
            eventSubscribers[id] = continuation
            if answers { answerSubscribers.insert(id) }
            // The consumer let go. (Finished is by `close`, which removed every subscriber
            // already: no task then, which would reach the loop after its owner may have
            // shut it down.)
            continuation.onTermination = { termination in
                guard case .cancelled = termination else { return }
                Task { await self.removeEventSubscriber(id) }
            }
        }
        start()
        return HCIEventStream(base: stream)
    }

    /// Hands every event (but Command Complete and Command Status) and every inbound
    /// ACL packet to `sink`, in the order the controller sent them; the reader awaits
    /// `sink` before it reads the next packet, so nothing is buffered or dropped between
    /// them. One sink per controller (the L2CAP host); a second replaces the first.
    /// After the transport ends, `sink` gets `.closed` once.
    public func setInboundSink(_ sink: @escaping HCIInboundSink) {
        if let closedReason {
            sink(.closed(closedReason))
            return
        }
        self.sink = sink
        start()
    }

    /// Calls `observer` on the loop with each command the controller answered (Command
    /// Complete, or the Command Status that ends it) and that answer, as the answer
    /// arrives: in the controller's order among the events the L2CAP host's observers
    /// get, before the command's caller resumes. A layer that must know whether an
    /// event came before or after a command took effect (an advertising set's end
    /// against its re-enabling) keeps that account here.
    public func addAnswerObserver(_ observer: @escaping @Sendable (CommandFlow.Entry, CommandFlow.Outcome) -> Void) {
        answerObservers.append(observer)
    }

    /// How many `events()` streams are live: now, then each change (tests follow a
    /// follower letting go). Ends when the transport does.
    package func eventSubscriberCounts() -> AsyncStream<Int> { eventSubscriberGauge.watch() }

    private func removeEventSubscriber(_ id: UInt64) {
        eventSubscribers[id] = nil
        answerSubscribers.remove(id)
    }

    // MARK: Inbound

    /// Handles `packet` and hands what the layer above follows to the sink.
    private func receive(_ packet: HCIPacket) {
        switch packet {
        case let .event(code, parameters):
            let event: HCIEvent
            do {
                event = Self.addressable(try HCIEvent(code: code, parameters: parameters), logger: logger)
            } catch {
                logger.warning("malformed event ignored", metadata: ["hci.event": "\(code)", "error": "\(error)"])
                return
            }
            if handle(event) { sink?(.event(event)) }
        case let .acl(p):
            sink?(.acl(p))
        default:
            logger.trace("packet ignored", metadata: ["hci.type": "\(packet.type)"])
        }
    }

    /// `event`, or, for an LE (Enhanced) Connection Complete that reports success with
    /// a handle above 0x0EFF (a controller's fault: no ACL packet can name it,
    /// Vol 4, Part E, §5.4.2), the same event failed with Invalid HCI Command
    /// Parameters, as Linux takes it: the connection attempt ends at once with that
    /// status, instead of a link that could never carry data waiting out the ATT
    /// timeout.
    static func addressable(_ event: HCIEvent, logger: Logger) -> HCIEvent {
        func failed(_ handle: UInt16) -> HCIStatus {
            logger.error("connection complete with a handle above 0x0EFF taken as failed",
                         metadata: ["ble.handle": "0x\(hex4(handle))", "hci.status": "\(HCIStatus.invalidCommandParameters)"])
            return .invalidCommandParameters
        }
        switch event {
        case var .le(.connectionComplete(c)) where c.status.isSuccess && c.connectionHandle > ACLDataPacket.maximumConnectionHandle:
            c.status = failed(c.connectionHandle)
            return .le(.connectionComplete(c))
        case var .le(.enhancedConnectionComplete(c)) where c.status.isSuccess && c.connectionHandle > ACLDataPacket.maximumConnectionHandle:
            c.status = failed(c.connectionHandle)
            return .le(.enhancedConnectionComplete(c))
        default:
            return event
        }
    }

    /// Returns false for the events that answer commands (they go no further).
    private func handle(_ event: HCIEvent) -> Bool {
        switch event {
        case let .commandComplete(cc):
            yieldAnswer(event)
            let (finished, toSend) = flow.commandComplete(cc)
            if let (e, outcome) = finished { answered(e, outcome) }
            put(toSend)
            return false
        case let .commandStatus(cs):
            yieldAnswer(event)
            let (finished, toSend) = flow.commandStatus(cs)
            if let (e, outcome) = finished { answered(e, outcome) }
            put(toSend)
            return false
        case let .numberOfCompletedPackets(nocp):
            acl.completed(nocp)
            grantACLCredits()
            resumeCompletionWaiters()
        case let .disconnectionComplete(dc) where dc.status.isSuccess:
            acl.disconnected(handle: dc.connectionHandle)
            failACLWaiters(handle: dc.connectionHandle)
            grantACLCredits()
            resumeCompletionWaiters()
            logger.debug("disconnected", metadata: ["ble.handle": "0x\(hex4(dc.connectionHandle))", "hci.reason": "\(dc.reason)"])
        case let .hardwareError(e):
            logger.error("controller hardware error", metadata: ["hci.code": "\(e.hardwareCode)"])
        default:
            break
        }
        for (_, c) in eventSubscribers { c.yield(event) }
        return true
    }

    private func answered(_ e: CommandFlow.Entry, _ outcome: CommandFlow.Outcome) {
        for o in answerObservers { o(e, outcome) }
        finish(e.id, .success(outcome))
    }

    private func yieldAnswer(_ event: HCIEvent) {
        for id in answerSubscribers {
            eventSubscribers[id]?.yield(event)
        }
    }

    private func failACLWaiters(handle: UInt16) {
        let (gone, kept) = aclWaiters.reduce(into: ([(UInt64, UInt16, CheckedContinuation<Void, any Error>)](), Deque<(id: UInt64, handle: UInt16, continuation: CheckedContinuation<Void, any Error>)>())) {
            if $1.handle == handle { $0.0.append(($1.id, $1.handle, $1.continuation)) } else { $0.1.append($1) }
        }
        aclWaiters = kept
        for w in gone { w.2.resume(throwing: HCIError.connectionClosed(handle: handle)) }
    }

    private func transportEnded(_ reason: String) {
        guard closedReason == nil else { return }
        closedReason = reason
        logger.debug("transport ended", metadata: ["reason": "\(reason)"])
        _ = flow.failAll()
        outbox.removeAll()
        for id in Array(waiters.keys) { finish(id, .failure(HCIError.transportClosed(reason))) }
        for w in aclWaiters { w.continuation.resume(throwing: HCIError.transportClosed(reason)) }
        aclWaiters.removeAll()
        resumeCompletionWaiters(all: true)
        for (_, c) in eventSubscribers { c.finish() }
        eventSubscribers.removeAll()
        eventSubscriberGauge.finish()
        answerSubscribers.removeAll()
        if let sink {
            self.sink = nil
            sink(.closed(reason))
        }
        creditListener = nil
    }

    func record(_ info: ControllerInfo) {
        self.info = info
        leACLDataPacketLength = info.leACLDataPacketLength
    }
}
