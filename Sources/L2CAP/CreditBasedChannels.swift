// One link's credit-based channels (Vol 3, Part A, §4.22–§4.28, §4.6–§4.7 and
// §10.1), sans I/O, in both modes: LE credit-based (one channel per request) and
// enhanced credit-based (up to five per request; MTU and MPS reconfigurable). Which
// SPSMs we listen on and what security each asks of the link, requests in both
// directions, the channel table by our (local) CID, credits, reconfiguration and
// disconnection. Inputs are the
// signaling commands `LESignalingChannel` hands over, K-frames by local CID, and the
// application's calls; outputs are bytes to send and what the application hears.
// It also keeps the link's one counter of signaling identifiers (§4), which
// `LESignalingChannel` takes its own from.

import HCI

public struct CreditBasedChannels: Sendable {
    public enum Event: Hashable, Sendable {
        /// A signaling command to send on CID 0x0005.
        case signal([UInt8])
        /// A K-frame for the peer's CID `remoteCID`; `token` marks an SDU's last frame.
        case frame(remoteCID: UInt16, [UInt8], token: UInt64?)
        /// A peer opened a channel to an SPSM we listen on; it is open now.
        case accepted(CreditBasedChannelInfo)
        /// Our request `identifier` opened these channels (one in LE mode, up to five in
        /// enhanced mode); `result` is success, or why the peer refused the others.
        case opened(identifier: UInt8, [CreditBasedChannelInfo], result: CreditBasedConnectionResult)
        /// Our request `identifier` was refused: no channel opened.
        case refused(identifier: UInt8, CreditBasedConnectionResult)
        /// The peer reconfigured its side of this channel (§4.27): new `remote` MTU/MPS.
        case reconfiguredByPeer(CreditBasedChannelInfo)
        /// The peer answered our Credit Based Reconfigure Request `identifier`; on
        /// success `channels` carry our new MTU and MPS.
        case reconfigureAnswered(identifier: UInt8, CreditBasedReconfigureResult, channels: [CreditBasedChannelInfo])
        /// A whole SDU arrived on our channel `localCID`, in `frames` K-frames.
        case sdu(localCID: UInt16, [UInt8], frames: Int)
        /// Channel `localCID` ended; `unsent` are the tokens of SDUs that did not go out.
        case closed(localCID: UInt16, ChannelCloseReason, unsent: [UInt64])
        /// The peer answered our Disconnection Request for `localCID` (or rejected it):
        /// both sides have let the channel go.
        case disconnectAnswered(localCID: UInt16)
        /// A malformed or unexpected command (already answered where the spec says to).
        case ignored(String)
    }

    /// LE dynamic CIDs (§2.1).
    public static let dynamicCIDs: ClosedRange<UInt16> = 0x0040...0x007F

    /// Most channels one enhanced-mode request opens (§4.25).
    public static let maximumChannelsPerRequest = 5

    /// An SPSM we accept connections on: the parameters we offer, what the link must have.
    public struct Listener: Hashable, Sendable {
        public var parameters: CreditBasedParameters
        public var security: ChannelSecurity
    }

    /// SPSMs we accept connections on.
    public private(set) var listening: [UInt16: Listener] = [:]
    public private(set) var channels: [UInt16: CreditBasedChannelState] = [:]
    /// The link's security now (its Security Manager keeps it current), checked against
    /// a listener's requirement when a peer asks for a channel.
    public var linkSecurity = LinkSecurityState()
    /// A long-term key for the link is stored with the peer's bond (its Security Manager
    /// keeps it current): an unencrypted link is then refused "insufficient encryption"
    /// rather than "insufficient authentication" (Vol 3, Part C, §10.3.1).
    public var keyStored = false
    private struct Pending {
        var spsm: UInt16
        var localCIDs: [UInt16]
        var local: CreditBasedParameters
        var enhanced: Bool
    }
    /// Our connection requests waiting for a response, by identifier.
    private var connecting: [UInt8: Pending] = [:]
    /// Our reconfigure requests waiting for a response: identifier → our CIDs, new MTU, MPS.
    private var reconfiguring: [UInt8: (localCIDs: [UInt16], mtu: UInt16, mps: UInt16)] = [:]
    /// Our Disconnection Requests waiting for a response: identifier → our CID.
    private var disconnecting: [UInt8: UInt16] = [:]
    private var nextCID: UInt16 = dynamicCIDs.lowerBound
    private var nextIdentifier: UInt8 = 1

    public init() {}

    /// The next signaling identifier of this link: 1...255, then 1 again (0 is illegal).
    public mutating func takeIdentifier() -> UInt8 {
        let id = nextIdentifier
        nextIdentifier = nextIdentifier == 0xFF ? 1 : nextIdentifier + 1
        return id
    }

    /// Accepts channels to `spsm` in both modes, offering `p` (raised to 64 bytes of MTU
    /// and MPS for an enhanced-mode peer), from links that meet `security`.
    public mutating func listen(spsm: UInt16, _ p: CreditBasedParameters, security: ChannelSecurity = .none) {
        listening[spsm] = Listener(parameters: p, security: security)
    }
    public mutating func stopListening(spsm: UInt16) { listening[spsm] = nil }

    /// `n` free CIDs (not in use, not promised to a pending request), or nil.
    private mutating func allocateCIDs(_ n: Int) -> [UInt16]? {
        var used = Set(channels.keys).union(connecting.values.flatMap(\.localCIDs))
        var out: [UInt16] = []
        for _ in CreditBasedChannels.dynamicCIDs where out.count < n {
            let cid = nextCID
            nextCID = nextCID == CreditBasedChannels.dynamicCIDs.upperBound ? CreditBasedChannels.dynamicCIDs.lowerBound : nextCID + 1
            if used.insert(cid).inserted { out.append(cid) }
        }
        return out.count == n ? out : nil
    }

    private mutating func allocateCID() -> UInt16? { allocateCIDs(1)?.first }

    /// Our LE Credit Based Connection Request to `spsm` (§4.22): its identifier and bytes.
    /// Nil when all 64 dynamic CIDs are taken or the parameters are out of range.
    public mutating func connect(spsm: UInt16, _ p: CreditBasedParameters) -> (identifier: UInt8, bytes: [UInt8])? {
        guard p.isValid, let cid = allocateCID() else { return nil }
        let identifier = takeIdentifier()
        connecting[identifier] = Pending(spsm: spsm, localCIDs: [cid], local: p, enhanced: false)
        var w = ByteWriter(capacity: 10)
        w.write(spsm); w.write(cid); w.write(p.mtu); w.write(p.mps); w.write(p.initialCredits)
        return (identifier, SignalingCommand(code: .leCreditBasedConnectionRequest, identifier: identifier, data: w.bytes).bytes)
    }

    /// Our Credit Based Connection Request (§4.25) for `count` (1...5) channels to
    /// `spsm`, all with parameters `p` (MTU and MPS ≥ 64): its identifier and bytes. Nil
    /// when `count` or the parameters are out of range or too few CIDs are free.
    public mutating func connectEnhanced(spsm: UInt16, _ p: CreditBasedParameters, count: Int) -> (identifier: UInt8, bytes: [UInt8])? {
        guard (1...CreditBasedChannels.maximumChannelsPerRequest).contains(count), p.isValid(enhanced: true),
              let cids = allocateCIDs(count) else { return nil }
        let identifier = takeIdentifier()
        connecting[identifier] = Pending(spsm: spsm, localCIDs: cids, local: p, enhanced: true)
        var w = ByteWriter(capacity: 8 + 2 * count)
        w.write(spsm); w.write(p.mtu); w.write(p.mps); w.write(p.initialCredits)
        for cid in cids { w.write(cid) }
        return (identifier, SignalingCommand(code: .creditBasedConnectionRequest, identifier: identifier, data: w.bytes).bytes)
    }

    /// Our request `identifier` got no response in time (the RTX timer): forget it.
    public mutating func abandonConnect(identifier: UInt8) { connecting[identifier] = nil }

    /// Our Credit Based Reconfigure Request (§4.27): from now on we would receive SDUs
    /// up to `mtu` and K-frames up to `mps` on our enhanced-mode channels `localCIDs`
    /// (1...5). Refused here, with the result the peer would give, when a channel is
    /// not ours or not enhanced, the MTU would shrink, the MPS would shrink on more than
    /// one channel, or a value is below 64. The new values apply when the peer accepts.
    public mutating func reconfigure(_ localCIDs: [UInt16], mtu: UInt16, mps: UInt16) -> Result<(identifier: UInt8, bytes: [UInt8]), ReconfigureRefusal> {
        guard (1...CreditBasedChannels.maximumChannelsPerRequest).contains(localCIDs.count), Set(localCIDs).count == localCIDs.count,
              localCIDs.allSatisfy({ channels[$0]?.enhanced == true }) else { return .failure(.init(.invalidDestinationCIDs)) }
        guard mtu >= 64, (64...65533).contains(mps) else { return .failure(.init(.unacceptableParameters)) }
        let current = localCIDs.compactMap { channels[$0]?.local }
        guard current.allSatisfy({ mtu >= $0.mtu }) else { return .failure(.init(.mtuReductionNotAllowed)) }
        guard localCIDs.count == 1 || current.allSatisfy({ mps >= $0.mps }) else { return .failure(.init(.mpsReductionNotAllowed)) }
        let identifier = takeIdentifier()
        reconfiguring[identifier] = (localCIDs, mtu, mps)
        var w = ByteWriter(capacity: 4 + 2 * localCIDs.count)
        w.write(mtu); w.write(mps)
        for cid in localCIDs { w.write(cid) }
        return .success((identifier, SignalingCommand(code: .creditBasedReconfigureRequest, identifier: identifier, data: w.bytes).bytes))
    }

    /// Our reconfigure request `identifier` got no response in time: forget it.
    public mutating func abandonReconfigure(identifier: UInt8) { reconfiguring[identifier] = nil }

    /// Sends an SDU on our channel `localCID`.
    public mutating func send(_ sdu: [UInt8], on localCID: UInt16, token: UInt64?) throws(ChannelSendError) -> [Event] {
        // In place (`channels[localCID]?.…`), here and below: a copy of the channel taken
        // out and stored back shares its queue and partial SDU with the dictionary's until
        // then, so changing them copies them whole.
        guard let events = try channels[localCID]?.send(sdu, token: token), let ch = channels[localCID] else {
            throw .closed(.closedLocally)
        }
        return translate(events, ch)
    }

    /// The application consumed an SDU that came in `frames` K-frames: credit them back.
    public mutating func consumed(frames: Int, on localCID: UInt16) -> [Event] {
        guard let n = channels[localCID]?.grant(frames) else { return [] }
        guard n > 0 else { return [] }
        return [.signal(creditIndication(cid: localCID, credits: n))]
    }

    /// Our Disconnection Request for `localCID` (§4.6). The channel is closed for us at
    /// once; the peer's response only confirms it.
    public mutating func disconnect(_ localCID: UInt16) -> [Event] { end(localCID, .closedLocally) }

    /// Removes our channel `localCID`, sends our Disconnection Request, reports the end.
    private mutating func end(_ localCID: UInt16, _ reason: ChannelCloseReason) -> [Event] {
        guard var ch = channels.removeValue(forKey: localCID) else { return [] }
        return [.signal(disconnectRequest(ch)), .closed(localCID: localCID, reason, unsent: ch.abandon())]
    }

    /// The link went down: every channel ends with `reason`.
    public mutating func linkLost(_ reason: HCIStatus) -> [Event] {
        let all = channels.keys.sorted()
        var out: [Event] = []
        for cid in all {
            guard var ch = channels.removeValue(forKey: cid) else { continue }
            out.append(.closed(localCID: cid, .linkLost(reason), unsent: ch.abandon()))
        }
        connecting.removeAll()  // their callers hear of the link's end from the host
        disconnecting.removeAll()
        reconfiguring.removeAll()
        return out
    }

    /// A K-frame on our CID `localCID`; nil when no channel has that CID.
    public mutating func receive(_ payload: [UInt8], on localCID: UInt16) -> [Event]? {
        receive(payload[...], on: localCID)
    }

    /// A K-frame on our CID `localCID`, as a slice of the frame it came in.
    public mutating func receive(_ payload: ArraySlice<UInt8>, on localCID: UInt16) -> [Event]? {
        guard let events = channels[localCID]?.receive(payload), let ch = channels[localCID] else { return nil }
        return translate(events, ch)
    }

    /// A signaling command this layer handles (§4.6, §4.7, §4.22–§4.28); nil for others.
    public mutating func receive(_ cmd: SignalingCommand) -> [Event]? {
        switch cmd.code {
        case .leCreditBasedConnectionRequest: return connectionRequest(cmd)
        case .leCreditBasedConnectionResponse: return connectionResponse(cmd)
        case .creditBasedConnectionRequest: return enhancedConnectionRequest(cmd)
        case .creditBasedConnectionResponse: return enhancedConnectionResponse(cmd)
        case .creditBasedReconfigureRequest: return reconfigureRequest(cmd)
        case .creditBasedReconfigureResponse: return reconfigureResponse(cmd)
        case .flowControlCreditIndication: return creditIndication(cmd)
        case .disconnectionRequest: return disconnectionRequest(cmd)
        case .disconnectionResponse: return disconnectionResponse(cmd)
        case .commandReject:
            // A peer that does not know the command (a 4.0 host, or one without enhanced
            // mode) rejects our request.
            if connecting.removeValue(forKey: cmd.identifier) != nil {
                return [.refused(identifier: cmd.identifier, .spsmNotSupported)]
            }
            if let cid = disconnecting.removeValue(forKey: cmd.identifier) { return [.disconnectAnswered(localCID: cid)] }
            if reconfiguring.removeValue(forKey: cmd.identifier) != nil {
                return [.reconfigureAnswered(identifier: cmd.identifier, .rejected, channels: [])]
            }
            return nil
        default: return nil
        }
    }

    /// Whether `identifier` belongs to one of our requests here.
    public func isOutstanding(_ identifier: UInt8) -> Bool {
        connecting[identifier] != nil || disconnecting[identifier] != nil || reconfiguring[identifier] != nil
    }

    // MARK: Signaling

    private mutating func connectionRequest(_ cmd: SignalingCommand) -> [Event] {
        var r = ByteReader(cmd.data, context: "LE Credit Based Connection Request")
        guard let spsm = try? r.readUInt16(), let scid = try? r.readUInt16(), let mtu = try? r.readUInt16(),
              let mps = try? r.readUInt16(), let credits = try? r.readUInt16(), r.isAtEnd else {
            return [.signal(SignalingCommand.reject(cmd.identifier, .commandNotUnderstood)), .ignored("malformed LE Credit Based Connection Request")]
        }
        func answer(_ result: CreditBasedConnectionResult, dcid: UInt16 = 0, _ p: CreditBasedParameters? = nil) -> Event {
            var w = ByteWriter(capacity: 10)
            w.write(dcid); w.write(p?.mtu ?? 0); w.write(p?.mps ?? 0); w.write(p?.initialCredits ?? 0); w.write(result.rawValue)
            return .signal(SignalingCommand(code: .leCreditBasedConnectionResponse, identifier: cmd.identifier, data: w.bytes).bytes)
        }
        // §4.23, in the order the checks apply.
        guard let listener = listening[spsm] else { return [answer(.spsmNotSupported)] }
        if let refusal = listener.security.refusal(for: linkSecurity, keyAvailable: keyStored) { return [answer(refusal)] }
        let ours = listener.parameters
        guard CreditBasedChannels.dynamicCIDs.contains(scid) else { return [answer(.invalidSourceCID)] }
        guard !channels.values.contains(where: { $0.remoteCID == scid }) else { return [answer(.sourceCIDAlreadyAllocated)] }
        let theirs = CreditBasedParameters(mtu: mtu, mps: mps, initialCredits: credits)
        guard theirs.isValid else { return [answer(.unacceptableParameters)] }
        guard let dcid = allocateCID() else { return [answer(.noResourcesAvailable)] }
        let ch = CreditBasedChannelState(spsm: spsm, localCID: dcid, remoteCID: scid, local: ours, remote: theirs)
        channels[dcid] = ch
        return [answer(.success, dcid: dcid, ours), .accepted(ch.info)]
    }

    private mutating func connectionResponse(_ cmd: SignalingCommand) -> [Event] {
        guard let pending = connecting[cmd.identifier], !pending.enhanced, let localCID = pending.localCIDs.first else {
            return [.ignored("unexpected LE Credit Based Connection Response")]
        }
        var r = ByteReader(cmd.data, context: "LE Credit Based Connection Response")
        guard let dcid = try? r.readUInt16(), let mtu = try? r.readUInt16(), let mps = try? r.readUInt16(),
              let credits = try? r.readUInt16(), let result = try? r.readUInt16(), r.isAtEnd else {
            return [.ignored("malformed LE Credit Based Connection Response")]
        }
        connecting[cmd.identifier] = nil
        let outcome = CreditBasedConnectionResult(rawValue: result)
        guard outcome == .success else { return [.refused(identifier: cmd.identifier, outcome)] }
        let theirs = CreditBasedParameters(mtu: mtu, mps: mps, initialCredits: credits)
        // A success with a CID outside the dynamic range or one already in use cannot be
        // used: refuse it ourselves. With parameters out of range the peer's channel
        // exists, so we also ask the peer to let it go.
        guard CreditBasedChannels.dynamicCIDs.contains(dcid), !channels.values.contains(where: { $0.remoteCID == dcid }) else {
            return [.refused(identifier: cmd.identifier, .unacceptableParameters)]
        }
        guard theirs.isValid else {
            return [.signal(disconnectRequest(remoteCID: dcid, localCID: localCID)), .refused(identifier: cmd.identifier, .unacceptableParameters)]
        }
        let ch = CreditBasedChannelState(spsm: pending.spsm, localCID: localCID, remoteCID: dcid, local: pending.local, remote: theirs)
        channels[localCID] = ch
        return [.opened(identifier: cmd.identifier, [ch.info], result: .success)]
    }

    /// A peer's Credit Based Connection Request (§4.25): up to five channels at once,
    /// answered with one Credit Based Connection Response (§4.26) that lists a
    /// Destination CID per Source CID, 0x0000 for each one refused.
    private mutating func enhancedConnectionRequest(_ cmd: SignalingCommand) -> [Event] {
        var r = ByteReader(cmd.data, context: "Credit Based Connection Request")
        guard let spsm = try? r.readUInt16(), let mtu = try? r.readUInt16(), let mps = try? r.readUInt16(),
              let credits = try? r.readUInt16(), r.remaining % 2 == 0 else {
            return [.signal(SignalingCommand.reject(cmd.identifier, .commandNotUnderstood)), .ignored("malformed Credit Based Connection Request")]
        }
        var scids: [UInt16] = []
        while let cid = try? r.readUInt16() { scids.append(cid) }
        func answer(_ result: CreditBasedConnectionResult, dcids: [UInt16]? = nil, _ p: CreditBasedParameters? = nil) -> Event {
            let list = dcids ?? Array(repeating: 0, count: scids.count)
            var w = ByteWriter(capacity: 8 + 2 * list.count)
            w.write(p?.mtu ?? 0); w.write(p?.mps ?? 0); w.write(p?.initialCredits ?? 0); w.write(result.rawValue)
            for d in list { w.write(d) }
            return .signal(SignalingCommand(code: .creditBasedConnectionResponse, identifier: cmd.identifier, data: w.bytes).bytes)
        }
        // §4.26, all-refusing results first, in the order the checks apply.
        guard (1...CreditBasedChannels.maximumChannelsPerRequest).contains(scids.count) else { return [answer(.invalidParameters)] }
        guard let listener = listening[spsm] else { return [answer(.spsmNotSupported)] }
        if let refusal = listener.security.refusal(for: linkSecurity, keyAvailable: keyStored) { return [answer(refusal)] }
        let theirs = CreditBasedParameters(mtu: mtu, mps: mps, initialCredits: credits)
        guard theirs.isValid(enhanced: true) else { return [answer(.unacceptableParameters)] }
        let ours = listener.parameters.enhancedMinimum
        // Then each channel on its own: the response's result names a refusal if any.
        var result = CreditBasedConnectionResult.success
        var dcids: [UInt16] = []
        var accepted: [Event] = []
        var remoteInUse = Set(channels.values.map(\.remoteCID))
        for scid in scids {
            guard CreditBasedChannels.dynamicCIDs.contains(scid) else {
                result = .invalidSourceCID
                dcids.append(0)
                continue
            }
            guard remoteInUse.insert(scid).inserted else {
                result = .sourceCIDAlreadyAllocated
                dcids.append(0)
                continue
            }
            guard let dcid = allocateCID() else {
                result = .noResourcesAvailable
                dcids.append(0)
                continue
            }
            let ch = CreditBasedChannelState(spsm: spsm, localCID: dcid, remoteCID: scid, local: ours, remote: theirs, enhanced: true)
            channels[dcid] = ch
            dcids.append(dcid)
            accepted.append(.accepted(ch.info))
        }
        return [answer(result, dcids: dcids, ours)] + accepted
    }

    /// The answer to our Credit Based Connection Request: a channel for each non-zero
    /// Destination CID we can use.
    private mutating func enhancedConnectionResponse(_ cmd: SignalingCommand) -> [Event] {
        guard let pending = connecting[cmd.identifier], pending.enhanced else { return [.ignored("unexpected Credit Based Connection Response")] }
        var r = ByteReader(cmd.data, context: "Credit Based Connection Response")
        guard let mtu = try? r.readUInt16(), let mps = try? r.readUInt16(), let credits = try? r.readUInt16(),
              let result = try? r.readUInt16(), r.remaining % 2 == 0, r.remaining <= 2 * pending.localCIDs.count else {
            return [.ignored("malformed Credit Based Connection Response")]
        }
        var dcids: [UInt16] = []
        while let cid = try? r.readUInt16() { dcids.append(cid) }
        connecting[cmd.identifier] = nil
        let outcome = CreditBasedConnectionResult(rawValue: result)
        let theirs = CreditBasedParameters(mtu: mtu, mps: mps, initialCredits: credits)
        var out: [Event] = []
        var opened: [CreditBasedChannelInfo] = []
        var remoteInUse = Set(channels.values.map(\.remoteCID))
        // A refused channel's Destination CID is 0x0000 (a peer that lists none refused all).
        for (localCID, dcid) in zip(pending.localCIDs, dcids) where dcid != 0 {
            // Unusable CIDs are dropped; a usable CID with parameters out of range is a
            // channel the peer holds, so we ask the peer to let it go.
            guard CreditBasedChannels.dynamicCIDs.contains(dcid), remoteInUse.insert(dcid).inserted else { continue }
            guard theirs.isValid(enhanced: true) else {
                out.append(.signal(disconnectRequest(remoteCID: dcid, localCID: localCID)))
                continue
            }
            let ch = CreditBasedChannelState(spsm: pending.spsm, localCID: localCID, remoteCID: dcid, local: pending.local, remote: theirs, enhanced: true)
            channels[localCID] = ch
            opened.append(ch.info)
        }
        guard !opened.isEmpty else {
            return out + [.refused(identifier: cmd.identifier, outcome == .success ? .unacceptableParameters : outcome)]
        }
        return out + [.opened(identifier: cmd.identifier, opened, result: outcome)]
    }

    /// A peer's Credit Based Reconfigure Request (§4.27): its new MTU and MPS for the
    /// listed channels (its own CIDs, our remote CIDs), answered per §4.28.
    private mutating func reconfigureRequest(_ cmd: SignalingCommand) -> [Event] {
        var r = ByteReader(cmd.data, context: "Credit Based Reconfigure Request")
        guard let mtu = try? r.readUInt16(), let mps = try? r.readUInt16(), r.remaining % 2 == 0 else {
            return [.signal(SignalingCommand.reject(cmd.identifier, .commandNotUnderstood)), .ignored("malformed Credit Based Reconfigure Request")]
        }
        var cids: [UInt16] = []
        while let cid = try? r.readUInt16() { cids.append(cid) }
        func answer(_ result: CreditBasedReconfigureResult) -> Event {
            var w = ByteWriter(capacity: 2)
            w.write(result.rawValue)
            return .signal(SignalingCommand(code: .creditBasedReconfigureResponse, identifier: cmd.identifier, data: w.bytes).bytes)
        }
        var locals: [UInt16] = []
        for cid in cids {
            guard let local = channels.first(where: { $0.value.remoteCID == cid && $0.value.enhanced })?.key, !locals.contains(local) else {
                return [answer(.invalidDestinationCIDs)]
            }
            locals.append(local)
        }
        guard (1...CreditBasedChannels.maximumChannelsPerRequest).contains(locals.count) else { return [answer(.invalidDestinationCIDs)] }
        guard mtu >= 64, (64...65533).contains(mps) else { return [answer(.unacceptableParameters)] }
        let current = locals.compactMap { channels[$0]?.remote }
        guard current.allSatisfy({ mtu >= $0.mtu }) else { return [answer(.mtuReductionNotAllowed)] }
        guard locals.count == 1 || current.allSatisfy({ mps >= $0.mps }) else { return [answer(.mpsReductionNotAllowed)] }
        var out = [answer(.success)]
        for local in locals {
            guard var ch = channels[local] else { continue }
            ch.reconfigureRemote(mtu: mtu, mps: mps)
            channels[local] = ch
            out.append(.reconfiguredByPeer(ch.info))
        }
        return out
    }

    private mutating func reconfigureResponse(_ cmd: SignalingCommand) -> [Event] {
        guard let pending = reconfiguring[cmd.identifier] else { return [.ignored("unexpected Credit Based Reconfigure Response")] }
        var r = ByteReader(cmd.data, context: "Credit Based Reconfigure Response")
        guard let raw = try? r.readUInt16(), r.isAtEnd else { return [.ignored("malformed Credit Based Reconfigure Response")] }
        reconfiguring[cmd.identifier] = nil
        let result = CreditBasedReconfigureResult(rawValue: raw)
        guard result == .success else { return [.reconfigureAnswered(identifier: cmd.identifier, result, channels: [])] }
        var infos: [CreditBasedChannelInfo] = []
        for local in pending.localCIDs {
            guard var ch = channels[local] else { continue }  // closed meanwhile
            ch.reconfigureLocal(mtu: pending.mtu, mps: pending.mps)
            channels[local] = ch
            infos.append(ch.info)
        }
        return [.reconfigureAnswered(identifier: cmd.identifier, .success, channels: infos)]
    }

    private mutating func creditIndication(_ cmd: SignalingCommand) -> [Event] {
        var r = ByteReader(cmd.data, context: "Flow Control Credit Indication")
        guard let cid = try? r.readUInt16(), let credits = try? r.readUInt16(), r.isAtEnd else {
            return [.ignored("malformed Flow Control Credit Indication")]
        }
        // The CID is the sender's source CID, our remote CID (§4.24).
        guard let local = channels.first(where: { $0.value.remoteCID == cid })?.key,
              let events = channels[local]?.addCredits(credits), let ch = channels[local] else {
            return [.ignored("Flow Control Credit Indication for unknown CID 0x\(hex4(cid))")]
        }
        return translate(events, ch)
    }

    private mutating func disconnectionRequest(_ cmd: SignalingCommand) -> [Event] {
        var r = ByteReader(cmd.data, context: "Disconnection Request")
        guard let dcid = try? r.readUInt16(), let scid = try? r.readUInt16(), r.isAtEnd else {
            return [.signal(SignalingCommand.reject(cmd.identifier, .commandNotUnderstood)), .ignored("malformed Disconnection Request")]
        }
        // §4.6: both CIDs must name one of our channels, else Command Reject, Invalid CID.
        guard var ch = channels[dcid], ch.remoteCID == scid else {
            return [.signal(SignalingCommand.reject(cmd.identifier, .invalidCIDInRequest, data: cmd.data))]
        }
        channels[dcid] = nil
        var w = ByteWriter(capacity: 4)
        w.write(dcid); w.write(scid)
        return [.signal(SignalingCommand(code: .disconnectionResponse, identifier: cmd.identifier, data: w.bytes).bytes),
                .closed(localCID: dcid, .closedByPeer, unsent: ch.abandon())]
    }

    private mutating func disconnectionResponse(_ cmd: SignalingCommand) -> [Event] {
        guard let cid = disconnecting.removeValue(forKey: cmd.identifier) else { return [.ignored("unexpected Disconnection Response")] }
        return [.disconnectAnswered(localCID: cid)]
    }

    /// Turns one channel's events into the link's: frames get the peer's CID, a rule
    /// broken closes the channel with a Disconnection Request of our own.
    private mutating func translate(_ events: [CreditBasedChannelState.Event], _ ch: CreditBasedChannelState) -> [Event] {
        var out: [Event] = []
        for e in events {
            switch e {
            case let .frame(bytes, token): out.append(.frame(remoteCID: ch.remoteCID, bytes, token: token))
            case let .sdu(bytes, frames): out.append(.sdu(localCID: ch.localCID, bytes, frames: frames))
            case .returnCredit:
                out += consumed(frames: 1, on: ch.localCID)
            case let .violation(why):
                return out + end(ch.localCID, .protocolViolation(why))
            }
        }
        return out
    }

    private mutating func disconnectRequest(_ ch: CreditBasedChannelState) -> [UInt8] {
        disconnectRequest(remoteCID: ch.remoteCID, localCID: ch.localCID)
    }

    private mutating func disconnectRequest(remoteCID: UInt16, localCID: UInt16) -> [UInt8] {
        let id = takeIdentifier()
        disconnecting[id] = localCID
        var w = ByteWriter(capacity: 4)
        w.write(remoteCID); w.write(localCID)
        return SignalingCommand(code: .disconnectionRequest, identifier: id, data: w.bytes).bytes
    }

    private mutating func creditIndication(cid: UInt16, credits: UInt16) -> [UInt8] {
        var w = ByteWriter(capacity: 4)
        w.write(cid); w.write(credits)
        return SignalingCommand(code: .flowControlCreditIndication, identifier: takeIdentifier(), data: w.bytes).bytes
    }

}

/// Why we did not send a Credit Based Reconfigure Request: the result the peer would
/// have answered with.
public struct ReconfigureRefusal: Error, Hashable, Sendable {
    public var result: CreditBasedReconfigureResult
    public init(_ result: CreditBasedReconfigureResult) { self.result = result }
}
