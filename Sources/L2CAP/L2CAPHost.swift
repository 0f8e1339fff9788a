// L2CAP over one controller: the actor that joins `HCIController` to the pure
// pieces in this module, on the controller's event loop (it shares the controller's
// executor). It follows LE connections from HCI events and reassembles inbound ACL
// per connection, both handed over synchronously by the controller in the order the
// controller sent them; hands each fixed channel's frames to the receiver a layer
// above registered for that connection (synchronously, on the loop) or to a stream;
// answers the LE signaling channel; and sends outbound frames as ACL fragments, one
// fragment per connection in turn (round robin), while the controller has buffers,
// so a connection with a long queue cannot starve the others. Each connection's queue
// is bounded (`outboundLimit`): the layers above pace themselves below it (an ATT
// bearer's writability, a channel's credits, senders that wait until sent), so only
// a peer that keeps asking while taking nothing can fill it, and that link ends.

import DequeModule
import HCI
import Logging
import NIOCore

/// A frame received on a fixed channel of one connection.
public struct ChannelFrame: Hashable, Sendable {
    public var handle: UInt16
    public var payload: [UInt8]
}

/// Frames of one fixed channel across connections. Buffer: the newest 1024 frames,
/// drops counted; ends when the controller's transport closes.
public typealias ChannelFrameStream = BufferedStream<ChannelFrame>

/// What a channel receiver gets: each frame in order, then `.closed` once.
public enum ChannelInput: Sendable {
    /// One PDU: a slice of the frame it came in (nothing copied on the way), with that
    /// frame's indices: index it from `startIndex`, or make an `Array` of what you keep.
    case frame(ArraySlice<UInt8>)
    /// The connection ended (or never existed); nothing follows.
    case closed
}

public actor L2CAPHost: LoopIsolated {
    public struct Connection: Sendable, Equatable {
        public var handle: UInt16
        public var role: ConnectionRole
        public var peer: BluetoothAddress
        public var peerType: AddressType
        public init(handle: UInt16, role: ConnectionRole, peer: BluetoothAddress, peerType: AddressType) {
            self.handle = handle
            self.role = role
            self.peer = peer
            self.peerType = peerType
        }
    }

    public nonisolated let controller: HCIController
    /// The controller's event loop, this actor's executor.
    public nonisolated let loop: any EventLoop
    public nonisolated let unownedExecutor: UnownedSerialExecutor
    public nonisolated let logger: Logger
    // `@exclusivity(unchecked)` below: state on the loop alone, and no access to it calls
    // out while under way (docs/architecture.md, "Decisions worth knowing").
    @exclusivity(unchecked) private var reassembler: Reassembler
    @exclusivity(unchecked) var connections = HandleMap<(info: Connection, signaling: LESignalingChannel)>()
    /// SPSMs we accept credit-based channels on (every link's `CreditBasedChannels`
    /// gets them), and the channels' runtime state (L2CAPHost+Channels.swift).
    var listening: [UInt16: CreditBasedChannels.Listener] = [:]
    var coc = ChannelRuntime()
    private var subscribers: [ChannelID: BufferedStream<ChannelFrame>.Continuation] = [:]
    private struct Key: Hashable, Comparable {
        var handle: UInt16
        var channel: ChannelID
        static func < (a: Key, b: Key) -> Bool { (a.handle, a.channel.rawValue) < (b.handle, b.channel.rawValue) }
    }
    private var connectionSubscribers: [Key: BufferedStream<[UInt8]>.Continuation] = [:]
    /// Synchronous receivers (the ATT bearer of a link), called on the loop.
    private var receivers = SortedMap<Key, @Sendable (ChannelInput) -> Void>()
    /// Frames for ATT or SMP that arrive before anyone subscribed to that connection's
    /// channel (a central sends Exchange MTU at once); handed over on subscription.
    @exclusivity(unchecked) private var early: [Key: [[UInt8]]] = [:]
    private let earlyLimit = 32
    private var connectionContinuations: [UInt64: BufferedStream<Connection>.Continuation] = [:]
    /// A connection's life as this host sees it, in order: a connection is known to
    /// `frames(on:handle:)` before `.connected` is delivered, and gone before
    /// `.disconnected`. What the controller reports about the link in between comes in
    /// the same order, naming the link that had the handle then: a controller gives an
    /// ended link's handle to the next at once, so an event read after a Disconnection
    /// Complete and a new LE Connection Complete belongs to the new link.
    public enum LinkEvent: Sendable, Equatable {
        /// A link is up, with the parameters LE (Enhanced) Connection Complete gave it
        /// (interval in 1.25 ms, timeout in 10 ms): known with the link, never after it.
        case connected(Connection, interval: UInt16, latency: UInt16, supervisionTimeout: UInt16)
        case linkLayer(Connection, LinkLayerEvent)
        case disconnected(Connection, reason: HCIStatus)
    }
    /// What the controller reports about a link's link layer (any status): the
    /// procedures that change it, and what it learned of the peer.
    public enum LinkLayerEvent: Sendable, Equatable {
        case parametersUpdated(LEConnectionUpdateComplete)
        case phyUpdated(LEPHYUpdateComplete)
        case dataLengthChanged(LEDataLengthChange)
        case remoteFeatures(LEReadRemoteFeaturesComplete)
        case remoteVersion(ReadRemoteVersionInformationComplete)
    }
    private var linkContinuations: [UInt64: BufferedStream<LinkEvent>.Continuation] = [:]
    private var nextContinuation: UInt64 = 0
    /// Layers that follow the controller's events synchronously (the Security
    /// Manager), called on the loop after this host has handled each event.
    private var eventObservers: [@Sendable (HCIEvent) -> Void] = []
    /// Layers that follow the links synchronously (the facade), called on the loop
    /// after the event observers have seen the event that made each link event.
    private var linkObservers: [@Sendable (LinkEvent) -> Void] = []
    private var closeObservers: [@Sendable () -> Void] = []
    /// The transport has ended (`finishAll` ran): a stream asked for now is finished
    /// at once, and a close observer is called at once.
    private(set) var ended = false
    private struct Outgoing {
        var packet: ACLDataPacket
        /// Called once this (last) fragment of a frame is handed to the controller (true)
        /// or dropped because the connection or transport went away (false).
        var done: (@Sendable (Bool) -> Void)?
    }
    /// Fragments waiting for a controller buffer, per connection, and the connections
    /// with fragments in round-robin order.
    @exclusivity(unchecked) private var queues = HandleMap<Deque<Outgoing>>()
    @exclusivity(unchecked) private var order = Deque<UInt16>()
    /// Octets of ACL data in each connection's queue, and the connections whose queue
    /// passed `outboundLimit` (their Disconnect is on its way; they take nothing more).
    @exclusivity(unchecked) private var queuedOctets = HandleMap<Int>()
    /// Followers of a connection's queued octets (`queuedOctetCounts(handle:)`), for the
    /// connections someone follows.
    @exclusivity(unchecked) private var queueGauges: [UInt16: Gauge] = [:]
    @exclusivity(unchecked) private var overflowed: Set<UInt16> = []
    /// The most ACL data one connection may have waiting for controller buffers, in
    /// octets. Past it the link is disconnected with Remote Device Terminated
    /// Connection due to Low Resources (0x14) and what it had queued fails: the stack
    /// neither drops frames silently nor grows without bound.
    public nonisolated let outboundLimit: Int
    /// Links ended because their queue passed `outboundLimit`.
    public private(set) var linksEndedForLowResources = 0
    /// Counts `drop(handle:)`s: a write that fails synchronously ends the transport
    /// inside `pump()`, and the queues it was walking are gone.
    @exclusivity(unchecked) private var drops: UInt64 = 0
    private var started = false
    /// Frames discarded because no channel listens on their CID (or a connection's ATT
    /// frames beyond `earlyLimit` before its bearer subscribed).
    public private(set) var discardedFrames = 0
    /// Reassembly problems seen, for diagnostics.
    public private(set) var reassemblyErrors: [ReassemblyError] = []

    public init(controller: HCIController, maximumPayload: Int = 65_535, outboundLimit: Int = 1 << 20, logger: Logger) {
        self.controller = controller
        self.outboundLimit = outboundLimit
        self.loop = controller.loop
        self.unownedExecutor = controller.unownedExecutor
        self.logger = logger
        self.reassembler = Reassembler(maximumPayload: maximumPayload)
    }

    /// Starts following the controller's events and ACL data, both in the order the
    /// controller sent them (the controller's reader hands each over and waits).
    public func start() async {
        guard !started else { return }
        started = true
        // Both run on the loop this actor shares with the controller.
        // Held strongly (no side table, no slow retains): the controller lets go of both
        // when its transport ends.
        await controller.setACLCreditListener { self.onLoop { $0.pump() } }
        await controller.setInboundSink { item in self.onLoop(item) { $0.deliver($1) } }
    }

    private func deliver(_ item: HCIInbound) {
        switch item {
        case let .event(e):
            let link = handle(e)
            for o in eventObservers { o(e) }
            if let link { emit(link) }
        case let .acl(p): receive(p)
        case .closed: finishAll()
        }
    }

    /// The frames arriving on `channel` (ATT, SMP, ...). One subscriber per channel.
    public func frames(on channel: ChannelID) -> ChannelFrameStream {
        let (stream, c) = BufferedStream<ChannelFrame>.makeStream(capacity: 1024)
        subscribers[channel]?.finish()
        subscribers[channel] = ended ? nil : c
        if ended { c.finish() }
        return stream
    }

    /// The frames arriving on `channel` of connection `handle` only; takes precedence over
    /// `frames(on:)` for that connection. Buffer: the newest 1024 frames, drops counted
    /// (a layer that must lose nothing registers a receiver instead). Ends when the
    /// connection does.
    public func frames(on channel: ChannelID, handle: UInt16) -> BufferedStream<[UInt8]> {
        let (stream, c) = BufferedStream<[UInt8]>.makeStream(capacity: 1024)
        let key = Key(handle: handle, channel: channel)
        connectionSubscribers[key]?.finish()
        if connections[handle] == nil {
            c.finish()
        } else {
            for f in early.removeValue(forKey: key) ?? [] { c.yield(f) }
            connectionSubscribers[key] = c
        }
        return stream
    }

    /// Hands every frame on `channel` of connection `handle` to `receiver`, on the loop,
    /// in arrival order (frames that came before are handed over at once), then
    /// `.closed` when the connection ends. Takes precedence over the streams. Call on
    /// the loop (from an actor sharing this one's executor).
    public func setReceiver(_ channel: ChannelID, handle: UInt16, _ receiver: @escaping @Sendable (ChannelInput) -> Void) {
        let key = Key(handle: handle, channel: channel)
        guard connections[handle] != nil else {
            receiver(.closed)
            return
        }
        receivers[key] = receiver
        for f in early.removeValue(forKey: key) ?? [] { receiver(.frame(f[...])) }
    }

    /// Calls `observer` with every controller event, on the loop, in order, after this
    /// host handled it (a new connection is known here first, a closed one is gone).
    public func addEventObserver(_ observer: @escaping @Sendable (HCIEvent) -> Void) {
        eventObservers.append(observer)
    }

    /// Calls `observer` with every link event (`linkEvents()`'s), on the loop, in order,
    /// as the controller's event that made it arrives, after the event observers have
    /// seen that event (the Security Manager knows a new link's peer, a link's frames
    /// have reached their receivers and the receivers `.closed`). Nothing is buffered:
    /// a new link is known before the transport's next packet is read, so a receiver
    /// set for it now gets the link's first frame.
    public func addLinkObserver(_ observer: @escaping @Sendable (LinkEvent) -> Void) {
        linkObservers.append(observer)
    }

    /// Calls `observer` on the loop once the transport has ended, after every link's
    /// receivers have been told `.closed` (a layer finishes its own streams then).
    public func addCloseObserver(_ observer: @escaping @Sendable () -> Void) {
        if ended { return observer() }
        closeObservers.append(observer)
    }

    /// New LE connections, as they complete. Buffer: the newest 256, drops counted;
    /// ends with the transport.
    public func newConnections() -> BufferedStream<Connection> {
        let (stream, c) = BufferedStream<Connection>.makeStream(capacity: 256)
        if ended {
            c.finish()
            return stream
        }
        nextContinuation += 1
        connectionContinuations[nextContinuation] = c
        return stream
    }

    /// Connections, their link-layer events and disconnections (with the controller's
    /// reason), in the order they happened. Buffer: the newest 1024, drops counted (a
    /// controller has far fewer links, and reports an event per procedure); ends with
    /// the transport.
    public func linkEvents() -> BufferedStream<LinkEvent> {
        let (stream, c) = BufferedStream<LinkEvent>.makeStream(capacity: 1024)
        if ended {
            c.finish()
            return stream
        }
        nextContinuation += 1
        linkContinuations[nextContinuation] = c
        return stream
    }

    public var currentConnections: [Connection] { connections.values.map(\.info).sorted { $0.handle < $1.handle } }

    /// Sends `payload` as one frame on `channel` of connection `handle`; returns once
    /// every fragment has been handed to the controller (frames leave in call order).
    public func send(_ payload: [UInt8], on channel: ChannelID, handle: UInt16) async throws {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
            let queued = enqueue(payload, on: channel, handle: handle) { sent in
                if sent { c.resume() } else { c.resume(throwing: HCIError.connectionClosed(handle: handle)) }
            }
            if !queued { c.resume(throwing: HCIError.connectionClosed(handle: handle)) }
        }
    }

    /// Queues `payload` as one frame on `channel` of connection `handle`, on the loop;
    /// `done` is called when its last fragment is in the controller's hands (true) or
    /// was dropped with the connection (false). Returns false, without queueing or
    /// calling `done`, when the connection is not up (or is being ended because its
    /// queue passed `outboundLimit`).
    @discardableResult
    public func enqueue(_ payload: [UInt8], on channel: ChannelID, handle: UInt16, done: (@Sendable (Bool) -> Void)? = nil) -> Bool {
        guard connections.contains(handle), overflowed.isEmpty || !overflowed.contains(handle) else { return false }
        let length = Swift.max(1, Int(controller.onLoop { $0.leACLDataPacketLength } ?? 27))
        let frame = BasicFrame(channel: channel, payload: payload)
        let dropsBefore = drops
        let only = frame.onlyFragment(handle: handle, maximumDataLength: length)
        if order.isEmpty, let only, controller.onLoop(only, { $0.sendACLNow($1) }) {
            // Nothing queued on any link and a buffer free: what `pump` would do at once.
            // A write that ended the transport dropped every link: the frame was lost.
            done?(drops == dropsBefore)
            return true
        }
        let fragments = only.map { [$0] } ?? frame.fragments(handle: handle, maximumDataLength: length)
        if queues[handle] == nil { order.append(handle) }
        var octets = queuedOctets[handle] ?? 0
        for (i, f) in fragments.enumerated() {
            queues[handle, default: []].append(Outgoing(packet: f, done: i == fragments.count - 1 ? done : nil))
            octets += f.data.count
        }
        queuedOctets[handle] = octets
        queueChanged(handle)
        pump()
        if (queuedOctets[handle] ?? 0) > outboundLimit { overflow(handle) }
        return true
    }

    /// A connection's queue passed `outboundLimit`: its peer asks faster than it takes
    /// what we send. Ends the link (its queued frames fail now, its pending operations
    /// when Disconnection Complete comes).
    private func overflow(_ handle: UInt16) {
        overflowed.insert(handle)
        linksEndedForLowResources += 1
        logger.warning("outbound queue over its limit: disconnecting", metadata: [
            "ble.handle": "\(handle)", "l2cap.queued": "\(queuedOctets[handle] ?? 0)", "l2cap.limit": "\(outboundLimit)",
        ])
        drop(handle: handle)
        let controller = self.controller
        Task { _ = try? await controller.send(Disconnect(connectionHandle: handle, reason: .remoteDeviceTerminatedConnectionDueToLowResources)) }
    }

    /// Octets of ACL data waiting in `handle`'s queue for controller buffers.
    public func queuedOctets(handle: UInt16) -> Int { queuedOctets[handle] ?? 0 }

    /// `queuedOctets(handle:)` now, then each change: tests and tools follow a link's
    /// queue without polling. Ends when the link does (at once for a handle that is
    /// not a link of this host's).
    package func queuedOctetCounts(handle: UInt16) -> AsyncStream<Int> {
        var gauge = queueGauges[handle] ?? Gauge(queuedOctets[handle] ?? 0)
        let counts = gauge.watch()
        if connections[handle] == nil { gauge.finish() } else { queueGauges[handle] = gauge }
        return counts
    }

    /// Tells `handle`'s followers, if it has any, its queued octets.
    private func queueChanged(_ handle: UInt16) {
        guard !queueGauges.isEmpty else { return }
        queueGauges[handle]?.set(queuedOctets[handle] ?? 0)
    }

    /// Calls `done` once everything queued so far for `handle` is in the controller's
    /// hands (at once when nothing is queued).
    public func whenSent(handle: UInt16, _ done: @escaping @Sendable () -> Void) {
        guard let last = queues[handle]?.indices.last else { done(); return }
        let previous = queues[handle]?[last].done
        queues[handle]?[last].done = { sent in previous?(sent); done() }
    }

    /// Waits until what was queued for `handle` so far is out: handed to the controller
    /// (at most half of `limit`), then reported sent by it in Number Of Completed
    /// Packets (the rest). Returns early when the link or the transport ends. A
    /// Disconnect sent while a PDU still sits in the controller's buffer may end the
    /// link before that PDU goes out (the keys a pairing distributes, a Write Command).
    public func flush(handle: UInt16, within limit: Duration) async {
        let once = ResumeOnce()
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            once.set(c)
            let timer = LoopTimer(after: limit / 2, on: loop) { once.resume() }
            whenSent(handle: handle) {
                timer.cancel()
                once.resume()
            }
        }
        await controller.packetsCompleted(handle: handle, within: limit / 2)
    }

    /// Peripheral: asks the central for new connection parameters (§4.20) and returns
    /// its answer: true when it accepted (LE Connection Update Complete follows if it
    /// changes anything), false when it refused (result 0x0001) or rejected the command
    /// (Command Reject). Throws `L2CAPChannelError.timedOut` when no answer came within
    /// `limit` (the RTX timer, §6.2.1; the request is then forgotten, and a late answer
    /// ignored), `HCIError.connectionClosed` when the link ends first.
    public func requestParameterUpdate(_ p: ConnectionParameterUpdate, handle: UInt16,
                                       within limit: Duration = L2CAPHost.signalingTimeout) async throws -> Bool {
        guard var c = connections[handle] else { throw HCIError.connectionClosed(handle: handle) }
        let (id, bytes) = c.signaling.requestParameterUpdate(p)
        connections[handle] = c
        let key = ChannelRuntime.Key(handle: handle, cid: UInt16(id))
        return try await withCheckedThrowingContinuation { (waiter: CheckedContinuation<Bool, any Error>) in
            let timer = LoopTimer(after: limit, on: loop) {
                self.onLoop { $0.parameterUpdateAnswered(key, .failure(L2CAPChannelError.timedOut)) }
            }
            coc.parameterUpdates[key] = (waiter, timer)
            if !enqueue(bytes, on: .leSignaling, handle: handle) {
                parameterUpdateAnswered(key, .failure(HCIError.connectionClosed(handle: handle)))
            }
        }
    }

    /// Ends our parameter update request `key` with `answer` (the peer's, the RTX
    /// timeout, or the link's end), once.
    func parameterUpdateAnswered(_ key: ChannelRuntime.Key, _ answer: Result<Bool, any Error>) {
        guard let pending = coc.parameterUpdates.removeValue(forKey: key) else { return }
        pending.timer.cancel()
        if case .failure = answer { connections[key.handle]?.signaling.abandon(identifier: UInt8(truncatingIfNeeded: key.cid)) }
        pending.waiter.resume(with: answer)
    }

    /// Hands queued fragments to the controller, one per connection in turn, while it
    /// has buffers; runs again when buffers free up (the controller's credit listener).
    private func pump() {
        while let handle = order.first {
            guard let fragment = queues[handle]?.first else {
                order.removeFirst()
                queues[handle] = nil
                continue
            }
            let dropsBefore = drops
            let sent = controller.onLoop(fragment.packet) { $0.sendACLNow($1) }
            // The write ended the transport (every queued fragment, this one too, was told).
            guard drops == dropsBefore else { return }
            guard sent else {
                if controller.onLoop({ $0.isClosed }) {
                    for h in Array(queues.keys) { drop(handle: h) }
                    order.removeAll()
                }
                return  // no buffer: the credit listener calls again
            }
            order.removeFirst()
            queues[handle]?.removeFirst()  // in place: no copy of the queue
            if queues[handle]?.isEmpty ?? true {
                queues[handle] = nil
                queuedOctets[handle] = nil
            } else {
                queuedOctets[handle]? -= fragment.packet.data.count
                order.append(handle)
            }
            queueChanged(handle)
            fragment.done?(true)
        }
    }

    private func drop(handle: UInt16) {
        drops &+= 1
        queuedOctets[handle] = nil
        queueChanged(handle)
        for f in queues.removeValue(forKey: handle) ?? [] { f.done?(false) }
        order.removeAll { $0 == handle }
    }

    private func receive(_ packet: ACLDataPacket) {
        let (frame, errors) = reassembler.receive(packet)
        for e in errors { logger.debug("reassembly", metadata: ["error": "\(e)"]) }
        reassemblyErrors += errors
        guard let frame else { return }
        // In place: a copy of the connection, changed and stored back, shares its channels'
        // queues with the stored one until then, so a credit indication would copy them.
        if frame.channel == .leSignaling, let events = connections[packet.handle]?.signaling.receive(frame.payload) {
            for e in events { signaling(e, handle: packet.handle) }
            return
        }
        if channelFrame(frame.payloadSlice, cid: frame.channel, handle: packet.handle) { return }
        if let r = receivers[Key(handle: packet.handle, channel: frame.channel)] {
            r(.frame(frame.payloadSlice))
            return
        }
        if let s = connectionSubscribers[Key(handle: packet.handle, channel: frame.channel)] {
            s.yield(frame.payload)
            return
        }
        guard let s = subscribers[frame.channel] else {
            unclaimed(frame, handle: packet.handle)
            return
        }
        s.yield(ChannelFrame(handle: packet.handle, payload: frame.payload))
    }

    /// A frame nobody subscribed to. ATT frames wait for the connection's bearer (a
    /// central sends Exchange MTU at once), up to `earlyLimit` per connection. SMP gets
    /// Pairing Failed, Pairing Not Supported (Vol 3, Part H, §3.5.5), so the peer does
    /// not wait for its 30 s timeout. Anything else is discarded (Part A, §3: frames
    /// for a CID with no channel) and counted.
    private func unclaimed(_ frame: BasicFrame, handle: UInt16) {
        let key = Key(handle: handle, channel: frame.channel)
        switch frame.channel {
        case .att where connections[handle] != nil && early[key, default: []].count < earlyLimit:
            early[key, default: []].append(frame.payload)
            return
        case .securityManager where connections[handle] != nil:
            // Never answer a Pairing Failed (code 0x05) with another.
            guard frame.payloadSlice.first != 0x05 else { return }
            enqueue([0x05, 0x05], on: .securityManager, handle: handle)
            return
        default:
            discardedFrames += 1
            logger.debug("frame on unsubscribed channel discarded", metadata: ["l2cap.cid": "\(frame.channel)", "ble.handle": "\(handle)"])
        }
    }

    private func signaling(_ e: LESignalingChannel.Event, handle: UInt16) {
        switch e {
        case let .send(bytes):
            enqueue(bytes, on: .leSignaling, handle: handle)
        case let .channel(event):
            channelEvents([event], handle: handle)
        case let .parameterUpdateAnswered(id, accepted):
            parameterUpdateAnswered(ChannelRuntime.Key(handle: handle, cid: UInt16(id)), .success(accepted))
        case let .rejected(id, reason):
            logger.debug("signaling command rejected", metadata: ["ble.handle": "\(handle)", "l2cap.reason": "\(reason)"])
            parameterUpdateAnswered(ChannelRuntime.Key(handle: handle, cid: UInt16(id)), .success(false))
        case let .updateConnection(p):
            let c = LEConnectionParameters(connectionIntervalMin: p.intervalMin, connectionIntervalMax: p.intervalMax,
                                           maxLatency: p.latency, supervisionTimeout: p.timeout)
            let controller = self.controller
            Task { _ = try? await controller.send(LEConnectionUpdate(connectionHandle: handle, connection: c)) }
        default:
            logger.debug("signaling", metadata: ["ble.handle": "\(handle)", "event": "\(e)"])
        }
    }

    /// A link event, to the streams and the link observers.
    private func emit(_ e: LinkEvent) {
        for (_, k) in linkContinuations { k.yield(e) }
        for o in linkObservers { o(e) }
    }

    /// Handles a controller event; returns the link event it made, if any (`emit`ted
    /// after the event observers saw `event`).
    private func handle(_ event: HCIEvent) -> LinkEvent? {
        switch event {
        case let .le(.connectionComplete(c)) where c.status.isSuccess:
            return connected(Connection(handle: c.connectionHandle, role: c.role, peer: c.peerAddress, peerType: c.peerAddressType),
                      interval: c.connectionInterval, latency: c.peripheralLatency, supervisionTimeout: c.supervisionTimeout)
        case let .le(.enhancedConnectionComplete(c)) where c.status.isSuccess:
            return connected(Connection(handle: c.connectionHandle, role: c.role, peer: c.peerAddress, peerType: c.peerAddressType),
                      interval: c.connectionInterval, latency: c.peripheralLatency, supervisionTimeout: c.supervisionTimeout)
        case let .le(.connectionUpdateComplete(u)):
            return linkLayer(u.connectionHandle, .parametersUpdated(u))
        case let .le(.phyUpdateComplete(u)):
            return linkLayer(u.connectionHandle, .phyUpdated(u))
        case let .le(.dataLengthChange(d)):
            return linkLayer(d.connectionHandle, .dataLengthChanged(d))
        case let .le(.readRemoteFeaturesComplete(f)):
            return linkLayer(f.connectionHandle, .remoteFeatures(f))
        case let .readRemoteVersionInformationComplete(v):
            return linkLayer(v.connectionHandle, .remoteVersion(v))
        case let .disconnectionComplete(d) where d.status.isSuccess:
            channelsLinkLost(handle: d.connectionHandle, reason: d.reason)
            let ended = connections[d.connectionHandle].map { LinkEvent.disconnected($0.info, reason: d.reason) }
            connections[d.connectionHandle] = nil
            reassembler.disconnected(handle: d.connectionHandle)
            early = early.filter { $0.key.handle != d.connectionHandle }
            for (k, c) in connectionSubscribers where k.handle == d.connectionHandle {
                c.finish()
                connectionSubscribers[k] = nil
            }
            for (k, r) in receivers where k.handle == d.connectionHandle {
                receivers[k] = nil
                r(.closed)
            }
            drop(handle: d.connectionHandle)
            if var followed = queueGauges.removeValue(forKey: d.connectionHandle) { followed.finish() }
            overflowed.remove(d.connectionHandle)
            return ended
        default:
            return nil
        }
    }

    /// A link-layer event of a link this host knows (one it does not is dropped: no
    /// link to name).
    private func linkLayer(_ handle: UInt16, _ event: LinkLayerEvent) -> LinkEvent? {
        connections[handle].map { .linkLayer($0.info, event) }
    }

    /// A new link, with the parameters it starts with; a report of one already up is ignored.
    private func connected(_ c: Connection, interval: UInt16, latency: UInt16, supervisionTimeout: UInt16) -> LinkEvent? {
        // A controller that reports a connection already up (a firmware bug; the
        // handle is never reused before its Disconnection Complete) would otherwise
        // reset the link's channels and bearers under its users. Ignored, as Linux does.
        guard connections[c.handle] == nil else {
            logger.warning("connection complete for a connection already up ignored",
                           metadata: ["ble.handle": "\(c.handle)", "ble.peer": "\(c.peer)"])
            return nil
        }
        var signaling = LESignalingChannel(role: c.role)
        for (spsm, l) in listening { signaling.channels.listen(spsm: spsm, l.parameters, security: l.security) }
        connections[c.handle] = (c, signaling)
        for (_, k) in connectionContinuations { k.yield(c) }
        logger.debug("connected", metadata: ["ble.handle": "\(c.handle)", "ble.role": "\(c.role)"])
        return .connected(c, interval: interval, latency: latency, supervisionTimeout: supervisionTimeout)
    }

    private func finishAll() {
        ended = true
        for (_, s) in subscribers { s.finish() }
        subscribers.removeAll()
        for (_, s) in connectionSubscribers { s.finish() }
        connectionSubscribers.removeAll()
        let closing = receivers.values
        receivers.removeAll()
        for r in closing { r(.closed) }
        for (_, k) in connectionContinuations { k.finish() }
        connectionContinuations.removeAll()
        for (_, k) in linkContinuations { k.finish() }
        linkContinuations.removeAll()
        early.removeAll()
        channelsFinishAll()
        connections.removeAll()
        for h in Array(queues.keys) { drop(handle: h) }
        for var followed in queueGauges.values { followed.finish() }
        queueGauges.removeAll()
        order.removeAll()
        overflowed.removeAll()
        let observers = closeObservers
        closeObservers.removeAll()
        eventObservers.removeAll()
        linkObservers.removeAll()
        for o in observers { o() }
    }
}
