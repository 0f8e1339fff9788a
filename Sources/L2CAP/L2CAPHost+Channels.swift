// L2CAPHost's credit-based channels (LE and enhanced mode): listening on an SPSM,
// connecting to a peer's, reconfiguring, and the runtime side of each open channel
// (the SDUs waiting for the application or handed to a synchronous receiver such as
// an EATT bearer, the application waiting for an SDU or for credits). The protocol
// itself is the link's `CreditBasedChannels` (sans I/O); this file only turns its
// events into frames on the wire and resumed callers, on the loop.

import DequeModule
import HCI
import NIOCore

/// What the host keeps per link for credit-based channels, beside the protocol state.
struct ChannelRuntime {
    struct Key: Hashable {
        var handle: UInt16
        var cid: UInt16
    }
    struct Endpoint {
        var channel: L2CAPChannel
        /// Whole SDUs not yet taken, with the K-frames (credits) each used.
        var sdus = Deque<(bytes: [UInt8], frames: Int)>()
        var reader: CheckedContinuation<[UInt8]?, any Error>?
        /// Waits begun by readers: names the one `reader` is, for its cancellation.
        var waits: UInt64 = 0
        var ended: ChannelCloseReason?
        /// A layer above that takes each SDU synchronously on the loop (an EATT bearer):
        /// SDUs go to it as they arrive, their credits straight back, then `.closed`.
        var receiver: (@Sendable (ChannelInput) -> Void)?
    }
    var endpoints: [Key: Endpoint] = [:]
    /// Who takes the channels peers open to each SPSM, and which `listen` made it
    /// (a consumer that let go unregisters only its own).
    var listeners: [UInt16: (continuation: BufferedStream<L2CAPChannel>.Continuation, token: UInt64)] = [:]
    /// Our connection requests by (handle, identifier).
    var connects: [Key: (waiter: CheckedContinuation<[L2CAPChannel], any Error>, timer: LoopTimer)] = [:]
    /// Our reconfigure requests by (handle, identifier).
    var reconfigures: [Key: (waiter: CheckedContinuation<Void, any Error>, timer: LoopTimer)] = [:]
    var sends: [UInt64: CheckedContinuation<Void, any Error>] = [:]
    /// Completions of SDUs written synchronously (`L2CAPChannel.write`), by token.
    var writes: [UInt64: @Sendable (Bool) -> Void] = [:]
    /// `close()` callers waiting for the peer's Disconnection Response, by channel.
    var closes: [Key: (waiter: CheckedContinuation<Void, Never>, timer: LoopTimer)] = [:]
    /// Our Connection Parameter Update Requests (peripheral) by (handle, identifier):
    /// not a channel's, but answered on the same signaling channel with the same RTX.
    var parameterUpdates: [Key: (waiter: CheckedContinuation<Bool, any Error>, timer: LoopTimer)] = [:]
    var nextToken: UInt64 = 1
}

extension L2CAPHost {
    /// How long we wait for the answer to a connection request (the RTX timer, §6.2.1:
    /// 1 to 60 s).
    public static let signalingTimeout: Duration = .seconds(30)

    /// Accepts credit-based channels to `spsm` on every link, in both modes (LE, and
    /// enhanced with up to five per request), offering `parameters` (our MTU, MPS and
    /// initial credits; MTU and MPS raised to 64 for enhanced mode). A peer whose link
    /// does not meet `security` is refused with §4.23's result (insufficient
    /// authentication, encryption key size too short) and may pair and ask again.
    /// The stream holds up to `backlog` channels not yet taken; a channel beyond that is
    /// closed at once (and counted in `dropped`). Ends with the transport, or when
    /// listening again on the same SPSM replaces it. A consumer that lets go of the
    /// stream (its task cancelled, the stream dropped) stops the listening, as
    /// `stopListening` does: peers asking afterwards are refused with "SPSM not
    /// supported" rather than accepted and closed.
    public func listen(spsm: UInt16, parameters: CreditBasedParameters = CreditBasedParameters(), security: ChannelSecurity = .none,
                       backlog: Int = 16) -> BufferedStream<L2CAPChannel> {
        let (stream, c) = BufferedStream<L2CAPChannel>.makeStream(capacity: backlog, keeping: .oldest)
        if ended {
            c.finish()
            return stream
        }
        coc.listeners[spsm]?.continuation.finish()
        let token = coc.nextToken
        coc.nextToken += 1
        coc.listeners[spsm] = (c, token)
        // Finished (by a newer listen, stopListening or the transport's end): nothing to undo.
        let loop = self.loop
        c.onTermination = { [weak self] how in
            guard case .cancelled = how, let self else { return }
            loop.execute { self.onLoop { $0.listenerGone(spsm: spsm, token: token) } }
        }
        listening[spsm] = CreditBasedChannels.Listener(parameters: parameters, security: security)
        for h in Array(connections.keys) { connections[h]?.signaling.channels.listen(spsm: spsm, parameters, security: security) }
        return stream
    }

    /// The consumer of `listen`'s stream `token` let go: stop listening, unless a newer
    /// `listen` on the same SPSM replaced it.
    private func listenerGone(spsm: UInt16, token: UInt64) {
        guard coc.listeners[spsm]?.token == token else { return }
        stopListening(spsm: spsm)
    }

    /// Stops accepting channels to `spsm` (open ones stay open).
    public func stopListening(spsm: UInt16) {
        coc.listeners.removeValue(forKey: spsm)?.continuation.finish()
        listening[spsm] = nil
        for h in Array(connections.keys) { connections[h]?.signaling.channels.stopListening(spsm: spsm) }
    }

    /// The link's security, as its Security Manager knows it (checked against an SPSM's
    /// requirement when a peer asks for a channel).
    public func setLinkSecurity(_ security: LinkSecurityState, handle: UInt16) {
        connections[handle]?.signaling.channels.linkSecurity = security
    }

    /// Whether a long-term key for link `handle` is stored with its peer's bond, as its
    /// Security Manager knows it (an unencrypted link is then refused a secured SPSM with
    /// "insufficient encryption", not "insufficient authentication").
    public func setKeyStored(_ stored: Bool, handle: UInt16) {
        connections[handle]?.signaling.channels.keyStored = stored
    }

    /// The security the Security Manager last set for link `handle` (nil: no such link).
    public func linkSecurity(handle: UInt16) -> LinkSecurityState? { connections[handle]?.signaling.channels.linkSecurity }

    /// Whether link `handle` is up, as the events handled so far say.
    public func hasLink(handle: UInt16) -> Bool { connections[handle] != nil }

    /// Opens an LE credit-based channel (§4.22) to the peer's `spsm` on link `handle`.
    public func connectChannel(spsm: UInt16, handle: UInt16, parameters: CreditBasedParameters = CreditBasedParameters()) async throws -> L2CAPChannel {
        guard connections[handle] != nil else { throw L2CAPChannelError.linkClosed(handle: handle) }
        guard let (id, bytes) = connections[handle]?.signaling.channels.connect(spsm: spsm, parameters) else {
            throw L2CAPChannelError.noResources
        }
        let opened = try await awaitChannels(identifier: id, bytes: bytes, handle: handle)
        guard let first = opened.first else { throw L2CAPChannelError.noResources }
        return first
    }

    /// Opens `count` (1...5) channels to the peer's `spsm` on link `handle` with one
    /// Credit Based Connection Request (enhanced mode, §4.25), all with `parameters`
    /// (MTU and MPS at least 64). Returns those the peer accepted (it may refuse some,
    /// for want of resources); throws `.refused` when it accepted none.
    public func connectChannels(spsm: UInt16, count: Int, handle: UInt16, parameters: CreditBasedParameters = CreditBasedParameters()) async throws -> [L2CAPChannel] {
        guard connections[handle] != nil else { throw L2CAPChannelError.linkClosed(handle: handle) }
        guard let (id, bytes) = connections[handle]?.signaling.channels.connectEnhanced(spsm: spsm, parameters, count: count) else {
            throw L2CAPChannelError.noResources
        }
        return try await awaitChannels(identifier: id, bytes: bytes, handle: handle)
    }

    private func awaitChannels(identifier id: UInt8, bytes: [UInt8], handle: UInt16) async throws -> [L2CAPChannel] {
        let key = ChannelRuntime.Key(handle: handle, cid: UInt16(id))
        return try await withCheckedThrowingContinuation { c in
            let timer = LoopTimer(after: Self.signalingTimeout, on: loop) {
                self.onLoop { $0.connectTimedOut(key) }
            }
            coc.connects[key] = (c, timer)
            enqueue(bytes, on: .leSignaling, handle: handle)
        }
    }

    /// Raises what we receive on enhanced-mode `channels` (all on one link, 1...5) to
    /// SDUs of `mtu` and K-frames of `mps` bytes (Credit Based Reconfigure Request,
    /// §4.27); returns once the peer accepted. The MTU may only grow, and the MPS shrink
    /// only for one channel at a time. Throws `.reconfigureRefused` with the result the
    /// peer gave (or would give), `.timedOut` after 30 s, `.linkClosed`.
    public func reconfigure(_ channels: [L2CAPChannel], mtu: UInt16, mps: UInt16) async throws {
        guard let handle = channels.first?.handle, channels.allSatisfy({ $0.handle == handle && $0.host === self }) else {
            throw L2CAPChannelError.reconfigureRefused(.invalidDestinationCIDs)
        }
        guard connections[handle] != nil else { throw L2CAPChannelError.linkClosed(handle: handle) }
        guard let outcome = connections[handle]?.signaling.channels.reconfigure(channels.map(\.info.localCID), mtu: mtu, mps: mps) else {
            throw L2CAPChannelError.linkClosed(handle: handle)
        }
        let (id, bytes): (UInt8, [UInt8])
        switch outcome {
        case let .success(request): (id, bytes) = request
        case let .failure(refusal): throw L2CAPChannelError.reconfigureRefused(refusal.result)
        }
        let key = ChannelRuntime.Key(handle: handle, cid: UInt16(id))
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
            let timer = LoopTimer(after: Self.signalingTimeout, on: loop) {
                self.onLoop { $0.reconfigureTimedOut(key) }
            }
            coc.reconfigures[key] = (c, timer)
            enqueue(bytes, on: .leSignaling, handle: handle)
        }
    }

    private func reconfigureTimedOut(_ key: ChannelRuntime.Key) {
        guard let pending = coc.reconfigures.removeValue(forKey: key) else { return }
        connections[key.handle]?.signaling.channels.abandonReconfigure(identifier: UInt8(truncatingIfNeeded: key.cid))
        pending.waiter.resume(throwing: L2CAPChannelError.timedOut)
    }

    private func connectTimedOut(_ key: ChannelRuntime.Key) {
        guard let pending = coc.connects.removeValue(forKey: key) else { return }
        connections[key.handle]?.signaling.channels.abandonConnect(identifier: UInt8(truncatingIfNeeded: key.cid))
        pending.waiter.resume(throwing: L2CAPChannelError.timedOut)
    }

    func sendSDU(_ sdu: [UInt8], handle: UInt16, localCID: UInt16) async throws {
        let key = ChannelRuntime.Key(handle: handle, cid: localCID)
        if let reason = coc.endpoints[key]?.ended { throw L2CAPChannelError.closed(reason) }
        guard connections[handle] != nil, coc.endpoints[key] != nil else { throw L2CAPChannelError.closed(.closedLocally) }
        let token = coc.nextToken
        coc.nextToken += 1
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
            do {
                guard let events = try connections[handle]?.signaling.channels.send(sdu, on: localCID, token: token) else {
                    return c.resume(throwing: L2CAPChannelError.linkClosed(handle: handle))
                }
                coc.sends[token] = c
                channelEvents(events, handle: handle)
            } catch let e as ChannelSendError {
                switch e {
                case let .sduTooLong(n, mtu): c.resume(throwing: L2CAPChannelError.sduTooLong(n, mtu: mtu))
                case let .closed(reason): c.resume(throwing: L2CAPChannelError.closed(reason))
                }
            } catch {
                c.resume(throwing: error)
            }
        }
    }

    func nextSDU(handle: UInt16, localCID: UInt16) async throws -> [UInt8]? {
        let key = ChannelRuntime.Key(handle: handle, cid: localCID)
        guard var ep = coc.endpoints[key] else { return nil }
        if let first = ep.sdus.popFirst() {
            coc.endpoints[key] = ep
            if ep.ended == nil, let events = connections[handle]?.signaling.channels.consumed(frames: first.frames, on: localCID) {
                channelEvents(events, handle: handle)
            }
            return first.bytes
        }
        if let reason = ep.ended {
            // A clean end stays readable (and `closeReason` answerable) until the link
            // goes; an abnormal one is reported once.
            switch reason {
            case .closedLocally, .closedByPeer: return nil
            case .linkLost, .protocolViolation:
                coc.endpoints[key] = nil
                throw L2CAPChannelError.closed(reason)
            }
        }
        guard ep.reader == nil else { throw L2CAPChannelError.closed(.closedLocally) }  // one reader at a time
        ep.waits &+= 1
        coc.endpoints[key] = ep
        let wait = ep.waits, loop = self.loop
        // Resumed by the next SDU (whose credits then go back at once), the channel's end,
        // or the reading task's cancellation (CancellationError; the channel stays open).
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<[UInt8]?, any Error>) in
                guard !Task.isCancelled else { return c.resume(throwing: CancellationError()) }
                coc.endpoints[key]?.reader = c
            }
        } onCancel: {
            loop.execute { self.onLoop { $0.cancelRead(key, wait: wait) } }
        }
    }

    /// The reader of `wait` was cancelled: its wait ends with CancellationError.
    private func cancelRead(_ key: ChannelRuntime.Key, wait: UInt64) {
        guard let ep = coc.endpoints[key], ep.waits == wait, let reader = ep.reader else { return }
        coc.endpoints[key]?.reader = nil
        reader.resume(throwing: CancellationError())
    }

    /// Closes our channel and waits (up to the signaling timeout) for the peer's
    /// Disconnection Response, so that the peer has let it go too.
    func closeChannel(handle: UInt16, localCID: UInt16) async {
        let key = ChannelRuntime.Key(handle: handle, cid: localCID)
        guard let events = connections[handle]?.signaling.channels.disconnect(localCID), !events.isEmpty else { return }
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let timer = LoopTimer(after: Self.signalingTimeout, on: loop) {
                self.onLoop { $0.closeAnswered(key) }
            }
            coc.closes[key] = (c, timer)
            channelEvents(events, handle: handle)
        }
    }

    /// Starts closing without waiting (a channel refused by the backlog, an answer that
    /// came after its caller gave up).
    private func closeNow(handle: UInt16, localCID: UInt16) {
        guard let events = connections[handle]?.signaling.channels.disconnect(localCID) else { return }
        channelEvents(events, handle: handle)
    }

    private func closeAnswered(_ key: ChannelRuntime.Key) {
        guard let pending = coc.closes.removeValue(forKey: key) else { return }
        pending.timer.cancel()
        pending.waiter.resume()
    }

    /// Hands every SDU of the channel to `deliver` on the loop, as it arrives (those
    /// already waiting first), then `.closed` once; the SDUs' credits go back at once.
    /// For a layer that consumes synchronously (an ATT bearer); `sdus` then sees nothing.
    func setChannelReceiver(handle: UInt16, localCID: UInt16, _ deliver: @escaping @Sendable (ChannelInput) -> Void) {
        let key = ChannelRuntime.Key(handle: handle, cid: localCID)
        guard var ep = coc.endpoints[key] else { return deliver(.closed) }
        let waiting = ep.sdus
        ep.sdus.removeAll()
        ep.receiver = deliver
        coc.endpoints[key] = ep
        for sdu in waiting {
            deliver(.frame(sdu.bytes[...]))
            if ep.ended == nil, let events = connections[handle]?.signaling.channels.consumed(frames: sdu.frames, on: localCID) {
                channelEvents(events, handle: handle)
            }
        }
        if ep.ended != nil { deliver(.closed) }
    }

    /// Queues one SDU without waiting: it goes out as the peer's credits allow; `done`
    /// hears whether its last K-frame reached the controller. False (and `done` not
    /// called) when the channel is closed or the SDU is longer than the peer's MTU.
    func writeSDU(_ sdu: [UInt8], handle: UInt16, localCID: UInt16, done: (@Sendable (Bool) -> Void)?) -> Bool {
        let key = ChannelRuntime.Key(handle: handle, cid: localCID)
        guard coc.endpoints[key]?.ended == nil, connections[handle] != nil else { return false }
        let token = coc.nextToken
        coc.nextToken += 1
        guard let events = try? connections[handle]?.signaling.channels.send(sdu, on: localCID, token: token) else { return false }
        coc.writes[token] = done ?? { _ in }
        channelEvents(events, handle: handle)
        return true
    }

    func closeReason(handle: UInt16, localCID: UInt16) -> ChannelCloseReason? {
        coc.endpoints[ChannelRuntime.Key(handle: handle, cid: localCID)]?.ended
    }

    /// A frame on a dynamic CID of `handle`: a K-frame for one of its channels, or nothing.
    func channelFrame(_ payload: ArraySlice<UInt8>, cid: ChannelID, handle: UInt16) -> Bool {
        guard CreditBasedChannels.dynamicCIDs.contains(cid.rawValue),
              let events = connections[handle]?.signaling.channels.receive(payload, on: cid.rawValue) else { return false }
        channelEvents(events, handle: handle)
        return true
    }

    /// The link is gone: its channels end with the controller's reason, its requests fail.
    func channelsLinkLost(handle: UInt16, reason: HCIStatus) {
        for (key, ep) in coc.endpoints where key.handle == handle && ep.ended != nil { coc.endpoints[key] = nil }
        if let events = connections[handle]?.signaling.channels.linkLost(reason) { channelEvents(events, handle: handle) }
        for (key, pending) in coc.connects where key.handle == handle {
            coc.connects[key] = nil
            pending.timer.cancel()
            pending.waiter.resume(throwing: L2CAPChannelError.linkClosed(handle: handle))
        }
        for key in coc.closes.keys where key.handle == handle { closeAnswered(key) }
        for (key, pending) in coc.reconfigures where key.handle == handle {
            coc.reconfigures[key] = nil
            pending.timer.cancel()
            pending.waiter.resume(throwing: L2CAPChannelError.linkClosed(handle: handle))
        }
        for key in coc.parameterUpdates.keys where key.handle == handle {
            parameterUpdateAnswered(key, .failure(HCIError.connectionClosed(handle: handle)))
        }
    }

    /// The transport ended: every channel and waiter ends.
    func channelsFinishAll() {
        for (_, l) in coc.listeners { l.continuation.finish() }
        coc.listeners.removeAll()
        for (key, pending) in coc.connects {
            pending.timer.cancel()
            pending.waiter.resume(throwing: L2CAPChannelError.linkClosed(handle: key.handle))
        }
        coc.connects.removeAll()
        for (key, var ep) in coc.endpoints where ep.ended == nil {
            ep.ended = .linkLost(.connectionTerminatedByLocalHost)
            ep.reader?.resume(throwing: L2CAPChannelError.closed(.linkLost(.connectionTerminatedByLocalHost)))
            ep.reader = nil
            let receiver = ep.receiver
            ep.receiver = nil
            coc.endpoints[key] = ep
            receiver?(.closed)
        }
        for (_, s) in coc.sends { s.resume(throwing: L2CAPChannelError.closed(.linkLost(.connectionTerminatedByLocalHost))) }
        coc.sends.removeAll()
        for (_, w) in coc.writes { w(false) }
        coc.writes.removeAll()
        for key in coc.closes.keys { closeAnswered(key) }
        for (key, pending) in coc.reconfigures {
            pending.timer.cancel()
            pending.waiter.resume(throwing: L2CAPChannelError.linkClosed(handle: key.handle))
        }
        coc.reconfigures.removeAll()
        for key in coc.parameterUpdates.keys { parameterUpdateAnswered(key, .failure(HCIError.connectionClosed(handle: key.handle))) }
    }

    func channelEvents(_ events: [CreditBasedChannels.Event], handle: UInt16) {
        for e in events {
            switch e {
            case let .signal(bytes):
                enqueue(bytes, on: .leSignaling, handle: handle)
            case let .frame(remoteCID, bytes, token):
                var done: (@Sendable (Bool) -> Void)?
                if let token {
                    done = { sent in self.onLoop((token, sent, handle)) { $0.sduDone($1.0, sent: $1.1, handle: $1.2) } }
                }
                if !enqueue(bytes, on: ChannelID(rawValue: remoteCID), handle: handle, done: done), let token {
                    sduDone(token, sent: false, handle: handle)
                }
            case let .accepted(info):
                let ch = open(info, handle: handle)
                guard let l = coc.listeners[info.spsm] else { closeNow(handle: handle, localCID: info.localCID); continue }
                // Refused by a full backlog (counted), or its consumer let go and the
                // listening has not stopped yet: closed.
                if l.continuation.yield(ch) != .enqueued { closeNow(handle: handle, localCID: info.localCID) }
            case let .opened(id, infos, result):
                let opened = infos.map { open($0, handle: handle) }
                if let pending = coc.connects.removeValue(forKey: ChannelRuntime.Key(handle: handle, cid: UInt16(id))) {
                    pending.timer.cancel()
                    if result != .success {
                        logger.info("peer refused some channels", metadata: ["ble.handle": "\(handle)", "l2cap.result": "\(result)"])
                    }
                    pending.waiter.resume(returning: opened)
                } else {
                    for info in infos { closeNow(handle: handle, localCID: info.localCID) }  // the caller gave up (timeout)
                }
            case let .refused(id, result):
                if let pending = coc.connects.removeValue(forKey: ChannelRuntime.Key(handle: handle, cid: UInt16(id))) {
                    pending.timer.cancel()
                    pending.waiter.resume(throwing: L2CAPChannelError.refused(result))
                }
            case let .sdu(cid, bytes, frames):
                let key = ChannelRuntime.Key(handle: handle, cid: cid)
                guard var ep = coc.endpoints[key] else { continue }
                if let receiver = ep.receiver {
                    receiver(.frame(bytes[...]))
                    if let more = connections[handle]?.signaling.channels.consumed(frames: frames, on: cid) { channelEvents(more, handle: handle) }
                } else if let reader = ep.reader {
                    ep.reader = nil
                    coc.endpoints[key] = ep
                    reader.resume(returning: bytes)
                    // Taken at once: its credits go straight back.
                    if let more = connections[handle]?.signaling.channels.consumed(frames: frames, on: cid) { channelEvents(more, handle: handle) }
                } else {
                    ep.sdus.append((bytes, frames))
                    coc.endpoints[key] = ep
                }
            case let .closed(cid, reason, unsent):
                let key = ChannelRuntime.Key(handle: handle, cid: cid)
                if var ep = coc.endpoints[key] {
                    ep.ended = reason
                    let reader = ep.reader, receiver = ep.receiver
                    ep.reader = nil
                    ep.receiver = nil
                    coc.endpoints[key] = ep
                    // A waiting reader has no SDUs before it: it hears the end now.
                    switch reason {
                    case .closedLocally, .closedByPeer: reader?.resume(returning: nil)
                    case .linkLost, .protocolViolation: reader?.resume(throwing: L2CAPChannelError.closed(reason))
                    }
                    receiver?(.closed)
                }
                for t in unsent {
                    coc.sends.removeValue(forKey: t)?.resume(throwing: L2CAPChannelError.closed(reason))
                    coc.writes.removeValue(forKey: t)?(false)
                }
            case let .reconfiguredByPeer(info):
                coc.endpoints[ChannelRuntime.Key(handle: handle, cid: info.localCID)]?.channel.update(info)
            case let .reconfigureAnswered(id, result, infos):
                for info in infos { coc.endpoints[ChannelRuntime.Key(handle: handle, cid: info.localCID)]?.channel.update(info) }
                if let pending = coc.reconfigures.removeValue(forKey: ChannelRuntime.Key(handle: handle, cid: UInt16(id))) {
                    pending.timer.cancel()
                    if result == .success { pending.waiter.resume() } else { pending.waiter.resume(throwing: L2CAPChannelError.reconfigureRefused(result)) }
                }
            case let .disconnectAnswered(cid):
                closeAnswered(ChannelRuntime.Key(handle: handle, cid: cid))
            case let .ignored(why):
                logger.debug("credit-based channel signaling ignored", metadata: ["ble.handle": "\(handle)", "why": "\(why)"])
            }
        }
    }

    private func open(_ info: CreditBasedChannelInfo, handle: UInt16) -> L2CAPChannel {
        let ch = L2CAPChannel(host: self, handle: handle, info: info)
        coc.endpoints[ChannelRuntime.Key(handle: handle, cid: info.localCID)] = ChannelRuntime.Endpoint(channel: ch)
        return ch
    }

    private func sduDone(_ token: UInt64, sent: Bool, handle: UInt16) {
        if let w = coc.writes.removeValue(forKey: token) { return w(sent) }
        guard let c = coc.sends.removeValue(forKey: token) else { return }
        if sent { c.resume() } else { c.resume(throwing: L2CAPChannelError.linkClosed(handle: handle)) }
    }
}
