// H4 over a NIO channel: TCP and unix sockets (ClientBootstrap on a descriptor we
// connected ourselves, so the errors keep their advice), serial ttys and ptys
// (NIOPipeBootstrap after our termios set-up) and the BlueZ HCI socket
// (NIOPipeBootstrap on the bound socket). The channel's event loop reads the
// descriptor and hands each read's packets to the host synchronously, on the same
// thread, in arrival order: no reader thread, no hop. The host runs on that loop
// (`preferredLoop`), so a packet goes from read(2) through HCI, L2CAP, ATT and GATT
// and its answer back to write(2) without leaving the thread.
//
// Back-pressure: the host handles each packet before the loop reads again, so bytes
// the host has not taken stay in the kernel (and the controller's flow control holds
// the rest). Reading starts with `deliver(on:_:)` (or `inbound`), never before.
//
// On the BlueZ HCI socket one write(2) is one packet and one read(2) returns one
// packet (cut short if the buffer is smaller). A NIO channel gathers the writes that
// queued while the descriptor was not writable into one writev(2), which that socket
// would take as one packet: there the transport keeps one packet at a time in the
// channel (`OnePacketAtATime`) and reads into buffers as large as any packet.

import HCI
import Logging
import NIOCore
import NIOPosix
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

public final class ChannelTransport: HCITransport {
    /// What the descriptor is, which decides how the channel reads and writes it.
    enum Descriptor {
        /// A connected stream socket (TCP, unix).
        case streamSocket
        /// A serial tty or a pty.
        case terminal
        /// A socket where one write(2) is one packet and one read(2) returns one packet:
        /// the BlueZ HCI socket (a SOCK_SEQPACKET socket behaves the same).
        case packetSocket
    }

    public let label: String
    private let loop: any EventLoop
    private let logger: Logger
    /// The TCP socket whose ACKs the transport sends itself, when asked for (`BoundedAck`).
    fileprivate let quickAckSocket: Int32?
    /// How many times the rest of a packet was read right after acknowledging its start,
    /// in the same turn of the loop (see `H4ChannelHandler.channelReadComplete`).
    let restReadAtOnce = Atomic<Int>(0)
    private let state = Mutex(State())
    /// `inbound`'s packets, read and not yet taken.
    let pulled = PulledPackets()
    /// Set on a packet socket: its writes go through here, one packet in the channel at a time.
    private let onePacketAtATime: OnePacketAtATime?

    struct Target {
        let receive: @Sendable (TransportInput) -> Void
        let loop: any EventLoop
    }

    struct State {
        var channel: (any Channel)?
        /// Packets `sendNow` took before the channel registered; written when it does.
        var unsent: [HCIPacket] = []
        /// Who takes the packets, and on which loop.
        var target: Target?
        /// How the link ended, kept until someone takes delivery.
        var ending: TransportInput?
        var ended = false
        var closedByUs = false
        /// `send` callers waiting for the channel to become writable again, by number.
        var writableWaiters: [Int: CheckedContinuation<Void, any Error>] = [:]
        var nextWaiter = 0
    }

    /// Wraps a descriptor of the given kind; takes ownership of `fd`.
    /// - Parameters:
    ///   - quickAck: acknowledge what was read sooner than Linux's delayed ACK (TCP peers
    ///     that write a packet in two segments, like Rootcanal, otherwise stall on it;
    ///     see `BoundedAck`).
    init(fd: Int32, kind: Descriptor, label: String, quickAck: Bool = false, on loop: (any EventLoop)? = nil, logger: Logger) {
        let loop = loop ?? MultiThreadedEventLoopGroup.singleton.next()
        self.loop = loop
        self.label = label
        self.logger = logger
        self.quickAckSocket = quickAck && kind == .streamSocket ? fd : nil
        let onePacketAtATime = kind == .packetSocket ? OnePacketAtATime() : nil
        self.onePacketAtATime = onePacketAtATime
        let initializer: @Sendable (any Channel) -> EventLoopFuture<Void> = { [weak self] channel in
            guard let self else { return channel.eventLoop.makeFailedFuture(TransportError.closed) }
            return channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(H4ChannelHandler(transport: self, tellsEndOfInput: kind == .streamSocket))
            }
        }
        let registered: EventLoopFuture<any Channel>
        switch kind {
        case .streamSocket:
            registered = ClientBootstrap(group: loop)
                .channelOption(.autoRead, value: false)
                // The peer's end of input comes as `ChannelEvent.inputClosed`, so the
                // handler tells it from a reset (which NIO reports to no handler).
                .channelOption(.allowRemoteHalfClosure, value: true)
                .channelInitializer(initializer)
                .withConnectedSocket(fd)
        case .terminal:
            registered = NIOPipeBootstrap(group: loop)
                .channelOption(.autoRead, value: false)
                .channelInitializer(initializer)
                .takingOwnershipOfDescriptor(inputOutput: fd)
        case .packetSocket:
            // A read shorter than the packet loses the rest of it: every read gets room
            // for the largest packet H4 can frame (an ACL packet of 65,535 octets).
            registered = NIOPipeBootstrap(group: loop)
                .channelOption(.autoRead, value: false)
                .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 1 + 4 + 65_535))
                .channelInitializer(initializer)
                .takingOwnershipOfDescriptor(inputOutput: fd)
        }
        onePacketAtATime?.drained = { [weak self] in self?.becameWritable() }
        registered.whenComplete { [weak self] result in
            switch result {
            case let .success(channel): self?.registered(channel)
            case let .failure(error):
                // Who owns `fd` after a failed registration depends on where it failed;
                // leaking it is safer than closing a number someone may reuse.
                self?.end(.io(operation: "register \(label)", errno: 0, reason: "\(error)"))
            }
        }
    }

    public var preferredLoop: (any EventLoop)? { loop }

    /// Packets as a stream, for tools and tests (the host uses `deliver(on:_:)`).
    /// Back-pressured, nothing dropped: the channel stops reading while
    /// `PulledPackets.highWater` packets (256) wait for the consumer and reads again
    /// once it has taken them down to 64; what is not read stays in the kernel, and the
    /// controller's flow control holds the rest. One consumer; the stream holds the
    /// transport while it is iterated.
    public var inbound: AsyncThrowingStream<HCIPacket, any Error> {
        let pulled = self.pulled
        deliver(on: loop) { [weak self] input in
            if pulled.put(input) { self?.setReading(false) }
        }
        return AsyncThrowingStream(unfolding: {
            try await pulled.next { self.setReading(true) }
        })
    }

    public func deliver(on target: any EventLoop, _ receive: @escaping @Sendable (TransportInput) -> Void) {
        let (channel, ending) = state.withLock { s -> ((any Channel)?, TransportInput?) in
            // One taker; none once the end was handed over.
            guard s.target == nil, !(s.ended && s.ending == nil) else { return (nil, nil) }
            if let ending = s.ending {
                // Ended before anyone took delivery: only the end is left to hand over.
                s.ending = nil
                return (nil, ending)
            }
            s.target = Target(receive: receive, loop: target)
            return (s.channel, nil)
        }
        if let ending {
            target.execute { receive(ending) }
        } else if let channel {
            setReading(true, channel)
        }
    }

    /// Starts (`on`) or pauses the channel's reading; on the loop at once, else handed to it.
    private func setReading(_ on: Bool, _ channel: (any Channel)? = nil) {
        guard let channel = channel ?? state.withLock({ $0.channel }) else { return }
        channel.setOption(ChannelOptions.autoRead, value: on).whenFailure { [logger, label] e in
            logger.debug("cannot \(on ? "start" : "pause") reading", metadata: ["transport": "\(label)", "error": "\(e)"])
        }
    }

    private func registered(_ channel: any Channel) {
        let (unsent, reading, closed) = state.withLock { s -> ([HCIPacket], Bool, Bool) in
            s.channel = channel
            defer { s.unsent = [] }
            return (s.unsent, s.target != nil, s.closedByUs)
        }
        if closed {
            channel.close(promise: nil)
            return
        }
        if !unsent.isEmpty { write(unsent, to: channel) }
        if reading { setReading(true, channel) }
        // `send` callers waited for the channel.
        if channel.isWritable { becameWritable() }
    }

    /// Called on the channel's loop by the handler.
    fileprivate func received(_ packets: [HCIPacket]) {
        guard !packets.isEmpty, let target = state.withLock({ $0.target }) else { return }
        if target.loop.inEventLoop {
            target.receive(.packets(packets))
        } else {
            target.loop.execute { target.receive(.packets(packets)) }
        }
    }

    fileprivate func end(_ error: TransportError?) {
        let (target, input, waiters) = state.withLock { s -> (Target?, TransportInput?, [Int: CheckedContinuation<Void, any Error>]) in
            guard !s.ended else { return (nil, nil, [:]) }
            s.ended = true
            let input = TransportInput.ended(s.closedByUs ? nil : error)
            if s.target == nil { s.ending = input }
            // Nothing more is delivered: let go of the host's handler (it holds the host).
            defer { s.target = nil; s.writableWaiters = [:] }
            return (s.target, input, s.writableWaiters)
        }
        // Waiting senders go on, and find the transport ended.
        for w in waiters.values { w.resume() }
        guard let input else { return }
        if let error { logger.debug("transport ended", metadata: ["transport": "\(label)", "error": "\(error)"]) }
        if let target { target.loop.execute { target.receive(input) } }
    }

    /// Sends the ACK the kernel holds for the socket, now; called on the loop while the
    /// channel is open (so `fd` is still the channel's). See `BoundedAck` for when.
    ///
    /// TCP_QUICKACK with the value 2 sends the pending ACK and leaves the socket in
    /// delayed-ACK mode (Linux's `__tcp_sock_set_quickack`: an even value re-enters it).
    /// A plain setsockopt(2): NIO's option API casts the option type on every call.
    fileprivate func acknowledgeNow() {
        guard let fd = quickAckSocket else { return }
        var acknowledgeNow: Int32 = 2
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_QUICKACK, &acknowledgeNow, socklen_t(MemoryLayout<Int32>.size))
    }

    fileprivate var acknowledges: Bool { quickAckSocket != nil }

    /// Whether this TCP connection was reset by the peer (see `connectionWasReset(fd:)`);
    /// false for other descriptors.
    fileprivate var wasReset: Bool { quickAckSocket.map(Self.connectionWasReset(fd:)) ?? false }

    /// Whether the TCP connection on `fd` was reset by the peer rather than closed. After
    /// the peer's FIN the socket waits in CLOSE_WAIT for our own close; a reset takes it
    /// to CLOSE at once. The end of input alone does not tell them apart: when epoll
    /// reports a reset's EPOLLERR before its EPOLLHUP, NIO reads SO_ERROR (which clears
    /// it) and then its read meets a plain end of file.
    static func connectionWasReset(fd: Int32) -> Bool {
        var info = tcp_info()
        var length = socklen_t(MemoryLayout<tcp_info>.size)
        guard getsockopt(fd, Int32(IPPROTO_TCP), TCP_INFO, &info, &length) == 0 else { return false }
        return Int(info.tcpi_state) == TCP_CLOSE
    }

    /// Writes `packet` once the channel is writable: while what the channel holds unwritten
    /// (the socket being full) is over NIO's high-water mark (64 KiB), the caller waits
    /// until it drains under the low one, or until its task is cancelled
    /// (`CancellationError`, nothing sent). A forwarder (`btctl monitor`'s tap) that
    /// reads one side's `inbound` and sends to the other is so paced by the slower side,
    /// with nothing growing. The host itself uses `sendNow`, bounded by HCI's flow control.
    public func send(_ packet: HCIPacket) async throws {
        try await writable()
        guard let channel = try channelForSending(orQueue: { $0.append(packet) }) else { return }
        if channel.eventLoop.inEventLoop {
            write([packet], to: channel)
        } else {
            // Written before returning, so the next call's check sees what this one added.
            try await channel.eventLoop.submit { self.write([packet], to: channel) }.get()
        }
    }

    /// Returns when the channel is registered and writable, or the transport ended;
    /// throws `CancellationError` when the caller's task is cancelled first.
    private func writable() async throws {
        let id = state.withLock { s in defer { s.nextWaiter += 1 }; return s.nextWaiter }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                // Checked under the lock that `becameWritable` takes after NIO set the
                // channel writable (or the packet socket's backlog drained): a waiter
                // added here is either seen there or not needed.
                let now: Result<Void, any Error>? = state.withLock { s in
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if s.ended { return .success(()) }
                    if let channel = s.channel, channel.isWritable, !(onePacketAtATime?.isFull ?? false) { return .success(()) }
                    s.writableWaiters[id] = c
                    return nil
                }
                if let now { c.resume(with: now) }
            }
        } onCancel: {
            state.withLock { $0.writableWaiters.removeValue(forKey: id) }?.resume(throwing: CancellationError())
        }
    }

    /// How many `send` callers wait for the channel.
    var sendersWaiting: Int { state.withLock { $0.writableWaiters.count } }

    /// Called on the loop when the channel registered or became writable again.
    fileprivate func becameWritable() {
        for w in state.withLock({ s in defer { s.writableWaiters = [:] }; return s.writableWaiters }).values { w.resume() }
    }

    public var sendsSynchronously: Bool { true }

    /// Queues `packets` on the channel in order and flushes. On the channel's loop the
    /// write happens now; from elsewhere it is handed to the loop.
    public func sendNow(_ packets: [HCIPacket]) throws {
        guard let channel = try channelForSending(orQueue: { $0 += packets }) else { return }
        if channel.eventLoop.inEventLoop {
            write(packets, to: channel)
        } else {
            channel.eventLoop.execute { self.write(packets, to: channel) }
        }
    }

    /// One packet (the host's path for each ACL fragment), with no array around it.
    public func sendNow(_ packet: HCIPacket) throws {
        guard let channel = try channelForSending(orQueue: { $0.append(packet) }) else { return }
        if channel.eventLoop.inEventLoop {
            write(packet, to: channel)
            if onePacketAtATime == nil { channel.flush() }
        } else {
            channel.eventLoop.execute { self.write([packet], to: channel) }
        }
    }

    /// The channel to write to; nil while connecting (`queue` then adds the packets to
    /// those sent once connected). Throws once the transport has ended.
    private func channelForSending(orQueue queue: (inout [HCIPacket]) -> Void) throws -> (any Channel)? {
        try state.withLock { s -> (any Channel)? in
            if s.ended || s.closedByUs { throw TransportError.closed }
            if s.channel == nil { queue(&s.unsent) }
            return s.channel
        }
    }

    private func write(_ packets: [HCIPacket], to channel: any Channel) {
        for p in packets { write(p, to: channel) }
        if onePacketAtATime == nil { channel.flush() }
    }

    /// Writes one packet, not flushed unless one goes at a time.
    private func write(_ p: HCIPacket, to channel: any Channel) {
        // Encoded straight into the buffer written, with no array in between.
        var sink = BufferSink(buffer: channel.allocator.buffer(capacity: 1 + p.bodyCount))
        sink.write(p.type.rawValue)
        p.encodeBody(into: &sink)
        let buffer = sink.buffer
        if let onePacketAtATime {
            onePacketAtATime.write(buffer, to: channel)
        } else {
            channel.write(buffer, promise: nil)
        }
    }

    deinit {
        // Dropped while open, without close(): release the socket. Once ended, the channel
        // is closed or closing already (by close(), the peer, or an error), and its loop
        // may be shut down by now.
        state.withLock { $0.ended ? nil : $0.channel }?.close(promise: nil)
    }

    public func close() async {
        let channel = state.withLock { s -> (any Channel)? in
            s.closedByUs = true
            return s.channel
        }
        end(nil)
        try? await channel?.close()
    }
}

/// A ByteBuffer as the target of `HCIPacket.encodeBody`.
private struct BufferSink: HCIByteSink {
    var buffer: ByteBuffer
    mutating func write(_ v: UInt8) { buffer.writeInteger(v) }
    mutating func write(_ v: UInt16) { buffer.writeInteger(v, endianness: .little) }
    mutating func write(contentsOf bytes: [UInt8]) { buffer.writeBytes(bytes) }
}

/// The writes of a packet socket: one packet in the channel at a time, so each is its
/// own write(2) (the channel writes a lone buffer with write(2) and gathers several into
/// one writev(2)). The next packet goes in when the previous one's write completed,
/// which on a writable socket is within the same flush; when the socket is full, the
/// channel waits for it to drain as for any channel and the rest wait here, in order
/// (no more than HCI's flow control lets the host send: the controller's ACL buffers
/// and command credits). Used only on the channel's loop.
private final class OnePacketAtATime: @unchecked Sendable {
    private var waiting = CircularBuffer<ByteBuffer>()
    private var inFlight = false
    /// How many packets wait here (read from any thread: `ChannelTransport.send` waits
    /// while it is over `limit`, as for a channel that is not writable).
    private let backlog = Atomic<Int>(0)
    static let limit = 16
    /// Called when the backlog drops back to `limit` (set once, before any write).
    nonisolated(unsafe) var drained: (@Sendable () -> Void)?

    var isFull: Bool { backlog.load(ordering: .relaxed) > Self.limit }

    func write(_ buffer: ByteBuffer, to channel: any Channel) {
        channel.eventLoop.preconditionInEventLoop()
        waiting.append(buffer)
        backlog.add(1, ordering: .relaxed)
        if !inFlight { next(channel) }
    }

    private func next(_ channel: any Channel) {
        guard let buffer = waiting.popFirst() else {
            inFlight = false
            return
        }
        if backlog.subtract(1, ordering: .relaxed).newValue == Self.limit { drained?() }
        inFlight = true
        let written = channel.eventLoop.makePromise(of: Void.self)
        written.futureResult.whenComplete { result in
            switch result {
            case .success:
                self.next(channel)
            case .failure:
                // The channel failed or closed: the transport ends through the handler
                // (`errorCaught`, `channelInactive`); what waited here is not sent.
                self.waiting.removeAll()
                self.backlog.store(0, ordering: .relaxed)
                self.inFlight = false
            }
        }
        channel.writeAndFlush(buffer, promise: written)
    }
}

/// When a TCP transport acknowledges what it read, rather than leaving it to Linux's
/// delayed ACK (40 ms at the least when nothing of ours goes out).
///
/// Rootcanal writes each packet as two writes (the H4 indicator, then the rest) with
/// Nagle's algorithm on: while any byte it sent is unacknowledged, its next small write
/// waits for our ACK. So:
/// - a read that ends inside a packet is acknowledged at once: the rest of the packet
///   is held behind that ACK (an HCI command's Command Complete took 45 ms without it);
/// - a read that ends where a packet ends is acknowledged too, or the next packet's
///   indicator is held behind that ACK (an event 5 ms after another arrived ~37 ms late
///   without it). Once the work the read started has run: at once when no other read
///   ended on a boundary within `delay` before it (a lone packet: the ACK costs one
///   setsockopt, a timer would cost a wake-up), else `delay` later (a burst: what the
///   peer writes meanwhile leaves in one segment, one wake-up for all of it).
///
/// Our own bytes carry the ACK: nothing is sent for a read when we flushed after it; the
/// check waits for the loop's queued jobs, where a task the read resumed writes its next
/// request; and a flush cancels an armed timer (in the same loop turn, before NIO
/// programs its timer, that saves the wake-up). A flush that finds the socket full
/// sends nothing; the kernel's own delayed ACK then remains.
///
/// Acknowledging every read at once (quick-ACK mode, TCP_QUICKACK 1, which stays on)
/// let the peer write each piece of a burst as its own segment, and each woke the
/// loop (per KiB notified: ~300 µs of CPU at the system calls alone, against ~90 µs
/// this way). Used only on the channel's loop.
struct BoundedAck {
    /// How long an ACK owed after a read that ended on a packet boundary may wait, when
    /// another such read came less than this before it.
    static let delay = TimeAmount.milliseconds(1)

    enum Action: Equatable {
        case none
        /// Acknowledge now.
        case acknowledge
        /// Acknowledge now and cancel the armed timer.
        case acknowledgeAndCancelTimer
        /// Call `queuedWorkRan` once the loop's queued jobs have run.
        case checkAfterQueuedWork
        /// Arm the timer: `timerFired` after `delay`.
        case armTimer
        /// Cancel the armed timer (nothing is owed any more).
        case cancelTimer
    }

    /// The bytes read are unacknowledged (a read ended on a packet boundary, and
    /// nothing of ours went out after it).
    private(set) var owed = false
    private var flushedSinceRead = false
    private var checking = false
    private var armed = false
    /// When the last read that ended on a packet boundary completed.
    private var lastBoundary: NIODeadline?
    /// The read that made the ACK owed came within `delay` of the boundary before it.
    private var burst = false

    /// Bytes were read (one read(2); `readCompleted` follows the last of a batch).
    mutating func read() { flushedSinceRead = false }

    /// Our bytes went out: they carry the ACK for everything read before.
    mutating func flushed() -> Action {
        owed = false
        flushedSinceRead = true
        guard armed else { return .none }
        armed = false
        return .cancelTimer
    }

    /// At the end of a batch of reads, at `now`.
    mutating func readCompleted(insidePacket: Bool, at now: NIODeadline) -> Action {
        var withinDelay = false
        if !insidePacket {
            withinDelay = lastBoundary.map { now - $0 < Self.delay } ?? false
            lastBoundary = now
        }
        if flushedSinceRead { return .none }
        if insidePacket {
            owed = false
            guard armed else { return .acknowledge }
            armed = false
            return .acknowledgeAndCancelTimer
        }
        owed = true
        burst = withinDelay
        if armed || checking { return .none }
        checking = true
        return .checkAfterQueuedWork
    }

    mutating func queuedWorkRan() -> Action {
        checking = false
        guard owed, !armed else { return .none }
        if !burst {
            owed = false
            return .acknowledge
        }
        armed = true
        return .armTimer
    }

    mutating func timerFired() -> Action {
        armed = false
        guard owed else { return .none }
        owed = false
        return .acknowledge
    }
}

/// The channel's one handler: bytes in, H4 framing, packets to the transport; on TCP,
/// the ACKs (`BoundedAck`).
private final class H4ChannelHandler: ChannelDuplexHandler, NIOScheduledCallbackHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer

    private weak var transport: ChannelTransport?
    private var framer = H4Framer()
    private var failed = false
    private var ack = BoundedAck()
    /// The ACK timer while armed.
    private var timer: NIOScheduledCallback?
    /// The packet array of the last read, kept for the next.
    private var spare: [HCIPacket] = []
    /// `readNow`'s buffer, kept between reads: the framer copies the bytes it keeps, so
    /// the storage is this handler's alone again once `take` returns (no allocation per
    /// read of our own).
    private var ownReads: ByteBuffer?
    /// `queuedWorkRan` as the loop's job, made once (it holds this handler until the
    /// handler is removed from the pipeline).
    private var check: (() -> Void)?
    /// Cleared when the channel closes (its descriptor with it): no ACK after that.
    private var open = true
    /// Whether the channel reports the peer's end of input (`ChannelEvent.inputClosed`:
    /// a stream socket, with remote half-closure allowed). Then a channel that goes
    /// inactive without it, closed neither by us nor by an error a handler saw, was taken
    /// down by NIO's reset path (EPOLLHUP/EPOLLERR: a reset before our next read), which
    /// tells no handler the error.
    private let tellsEndOfInput: Bool
    /// The peer ended its input (end of file): the transport's end is `.endOfStream`.
    private var inputEnded = false

    init(transport: ChannelTransport, tellsEndOfInput: Bool) {
        self.transport = transport
        self.tellsEndOfInput = tellsEndOfInput
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !failed else { return }
        take(unwrapInboundIn(data), context: context)
    }

    /// One read's bytes: framed, and the whole packets handed to the host.
    private func take(_ buffer: ByteBuffer, context: ChannelHandlerContext) {
        ack.read()
        buffer.withUnsafeReadableBytes { framer.append($0) }
        // The last read's storage, when the host let go of it (it handles packets as they
        // come): no array allocated per read.
        var packets: [HCIPacket] = []
        swap(&packets, &spare)
        packets.removeAll(keepingCapacity: true)
        defer { swap(&packets, &spare) }
        do {
            while let p = try framer.nextPacket() { packets.append(p) }
            transport?.received(packets)
        } catch let error as DecodeError {
            transport?.received(packets)
            failed = true
            transport?.end(.framing(error))
            context.close(promise: nil)
        } catch {
            failed = true
            context.close(promise: nil)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        guard let transport, transport.acknowledges else { return }
        var reads = 0
        while true {
            let insidePacket = framer.bufferedByteCount > 0
            let action = ack.readCompleted(insidePacket: insidePacket, at: .now())
            perform(action, on: context.eventLoop)
            // The read ended inside a packet, and the ACK for it went out (just now, or
            // with the bytes we wrote since): on loopback the peer's ACK processing ran
            // in our system call and released the rest of the packet (held behind its
            // Nagle), so the rest is usually readable now. Reading it here saves the
            // loop a turn (an epoll_wait(2) that returns at once, and NIO's read path).
            guard insidePacket, reads < Self.readsAfterAcknowledging,
                let buffer = readNow(context: context)
            else { return }
            reads += 1
            transport.restReadAtOnce.add(1, ordering: .relaxed)
            take(buffer, context: context)
            if failed { return }
        }
    }

    /// At most this many reads of our own after acknowledging, per read of the channel's
    /// (a peer that keeps sending does not hold the loop: the channel reads it next).
    private static let readsAfterAcknowledging = 4

    /// What the socket holds now, without waiting; nil when nothing (EAGAIN), at its end
    /// or on an error, which the channel's next read then sees and reports as usual (an
    /// error that only this read would see ends the transport here).
    private func readNow(context: ChannelHandlerContext) -> ByteBuffer? {
        guard open, let fd = transport?.quickAckSocket else { return nil }
        var buffer = ownReads ?? context.channel.allocator.buffer(capacity: 2048)
        ownReads = nil
        buffer.clear()
        defer { ownReads = buffer }
        let (n, code) = buffer.withUnsafeMutableWritableBytes { b -> (Int, Int32) in
            let n = Glibc.read(fd, b.baseAddress, b.count)
            return (n, n < 0 ? errno : 0)
        }
        if n > 0 {
            buffer.moveWriterIndex(forwardBy: n)
            return buffer
        }
        if n < 0, code != EAGAIN, code != EINTR {
            errorCaught(context: context, error: IOError(errnoCode: code, reason: "read(2)"))
        }
        return nil
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { transport?.becameWritable() }
        context.fireChannelWritabilityChanged()
    }

    func flush(context: ChannelHandlerContext) {
        perform(ack.flushed(), on: context.eventLoop)
        context.flush()
    }

    func handleScheduledCallback(eventLoop: some EventLoop) {
        timer = nil
        perform(ack.timerFired(), on: eventLoop)
    }

    private func perform(_ action: BoundedAck.Action, on loop: some EventLoop) {
        switch action {
        case .none: break
        case .acknowledge: if open { transport?.acknowledgeNow() }
        case .acknowledgeAndCancelTimer:
            cancelTimer()
            if open { transport?.acknowledgeNow() }
        case .checkAfterQueuedWork:
            if check == nil { check = { self.perform(self.ack.queuedWorkRan(), on: loop) } }
            if let check { loop.assumeIsolated().execute(check) }
        case .armTimer:
            // Fails only on a loop that is shutting down: the kernel's own delayed ACK remains.
            timer = try? loop.assumeIsolated().scheduleCallback(in: BoundedAck.delay, handler: self)
        case .cancelTimer:
            cancelTimer()
        }
    }

    private func cancelTimer() {
        timer?.cancel()
        timer = nil
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        check = nil
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let e = event as? ChannelEvent, e == .inputClosed {
            // Nothing more comes: the transport ends as the peer closed it (a controller
            // gets no half-open link), after every packet read before it; or as it reset
            // it, when the reset came as an end of input (`connectionWasReset(fd:)`).
            inputEnded = true
            if transport?.wasReset == true { endAsReset() } else { transport?.end(.endOfStream) }
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        open = false
        guard tellsEndOfInput, !inputEnded else {
            transport?.end(.endOfStream)
            return
        }
        // Not the peer's end of input, not our close (`end` keeps a close of ours a
        // close) and not an error a read saw (the transport has ended already): NIO's
        // reset path closed the socket. SO_ERROR said ECONNRESET there.
        endAsReset()
    }

    /// The peer reset the connection: the transport ends with ECONNRESET.
    private func endAsReset() {
        transport?.end(.io(operation: transport?.label ?? "transport", errno: ECONNRESET,
                           reason: "the connection was reset: the peer went away without closing it"))
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        let io = error as? IOError
        transport?.end(.io(operation: "\(transport?.label ?? "transport")", errno: io?.errnoCode ?? 0, reason: "\(error)"))
        context.close(promise: nil)
    }
}
