// One link's LE credit-based channels (Vol 3, Part A, §4.22–§4.24, §4.6–§4.7 and
// §10.1), sans I/O: which SPSMs we listen on, requests in both directions, the
// channel table by our (local) CID, credits and disconnection. Inputs are the
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
        /// Our request `identifier` was accepted: the channel is open.
        case opened(identifier: UInt8, CreditBasedChannelInfo)
        /// Our request `identifier` was refused.
        case refused(identifier: UInt8, CreditBasedConnectionResult)
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

    /// SPSMs we accept connections on, with the parameters we offer.
    public private(set) var listening: [UInt16: CreditBasedParameters] = [:]
    public private(set) var channels: [UInt16: CreditBasedChannelState] = [:]
    /// Our requests waiting for a response: identifier → (SPSM, our CID, our parameters).
    private var connecting: [UInt8: (spsm: UInt16, localCID: UInt16, local: CreditBasedParameters)] = [:]
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

    public mutating func listen(spsm: UInt16, _ p: CreditBasedParameters) { listening[spsm] = p }
    public mutating func stopListening(spsm: UInt16) { listening[spsm] = nil }

    /// CIDs in use or promised to a pending request.
    private var usedCIDs: Set<UInt16> { Set(channels.keys).union(connecting.values.map(\.localCID)) }

    private mutating func allocateCID() -> UInt16? {
        let used = usedCIDs
        for _ in CreditBasedChannels.dynamicCIDs {
            let cid = nextCID
            nextCID = nextCID == CreditBasedChannels.dynamicCIDs.upperBound ? CreditBasedChannels.dynamicCIDs.lowerBound : nextCID + 1
            if !used.contains(cid) { return cid }
        }
        return nil
    }

    /// Our LE Credit Based Connection Request to `spsm` (§4.22): its identifier and bytes.
    /// Nil when all 64 dynamic CIDs are taken or the parameters are out of range.
    public mutating func connect(spsm: UInt16, _ p: CreditBasedParameters) -> (identifier: UInt8, bytes: [UInt8])? {
        guard p.isValid, let cid = allocateCID() else { return nil }
        let identifier = takeIdentifier()
        connecting[identifier] = (spsm, cid, p)
        var w = ByteWriter(capacity: 10)
        w.write(spsm); w.write(cid); w.write(p.mtu); w.write(p.mps); w.write(p.initialCredits)
        return (identifier, SignalingCommand(code: .leCreditBasedConnectionRequest, identifier: identifier, data: w.bytes).bytes)
    }

    /// Our request `identifier` got no response in time (the RTX timer): forget it.
    public mutating func abandonConnect(identifier: UInt8) { connecting[identifier] = nil }

    /// Sends an SDU on our channel `localCID`.
    public mutating func send(_ sdu: [UInt8], on localCID: UInt16, token: UInt64?) throws(ChannelSendError) -> [Event] {
        guard var ch = channels[localCID] else { throw .closed(.closedLocally) }
        let events = try ch.send(sdu, token: token)
        channels[localCID] = ch
        return translate(events, ch)
    }

    /// The application consumed an SDU that came in `frames` K-frames: credit them back.
    public mutating func consumed(frames: Int, on localCID: UInt16) -> [Event] {
        guard var ch = channels[localCID] else { return [] }
        let n = ch.grant(frames)
        channels[localCID] = ch
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
        return out
    }

    /// A K-frame on our CID `localCID`; nil when no channel has that CID.
    public mutating func receive(_ payload: [UInt8], on localCID: UInt16) -> [Event]? {
        guard var ch = channels[localCID] else { return nil }
        let events = ch.receive(payload)
        channels[localCID] = ch
        return translate(events, ch)
    }

    /// A signaling command this layer handles (§4.6, §4.7, §4.22–§4.24); nil for others.
    public mutating func receive(_ cmd: SignalingCommand) -> [Event]? {
        switch cmd.code {
        case .leCreditBasedConnectionRequest: return connectionRequest(cmd)
        case .leCreditBasedConnectionResponse: return connectionResponse(cmd)
        case .flowControlCreditIndication: return creditIndication(cmd)
        case .disconnectionRequest: return disconnectionRequest(cmd)
        case .disconnectionResponse: return disconnectionResponse(cmd)
        case .commandReject:
            // A peer that does not know the command (a 4.0 host) rejects our request.
            if connecting.removeValue(forKey: cmd.identifier) != nil {
                return [.refused(identifier: cmd.identifier, .spsmNotSupported)]
            }
            if let cid = disconnecting.removeValue(forKey: cmd.identifier) { return [.disconnectAnswered(localCID: cid)] }
            return nil
        default: return nil
        }
    }

    /// Whether `identifier` belongs to one of our requests here.
    public func isOutstanding(_ identifier: UInt8) -> Bool {
        connecting[identifier] != nil || disconnecting[identifier] != nil
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
        guard let ours = listening[spsm] else { return [answer(.spsmNotSupported)] }
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
        guard let pending = connecting[cmd.identifier] else { return [.ignored("unexpected LE Credit Based Connection Response")] }
        var r = ByteReader(cmd.data, context: "LE Credit Based Connection Response")
        guard let dcid = try? r.readUInt16(), let mtu = try? r.readUInt16(), let mps = try? r.readUInt16(),
              let credits = try? r.readUInt16(), let result = try? r.readUInt16(), r.isAtEnd else {
            return [.ignored("malformed LE Credit Based Connection Response")]
        }
        connecting[cmd.identifier] = nil
        let outcome = CreditBasedConnectionResult(rawValue: result)
        guard outcome == .success else { return [.refused(identifier: cmd.identifier, outcome)] }
        let theirs = CreditBasedParameters(mtu: mtu, mps: mps, initialCredits: credits)
        // A success with a CID outside the dynamic range, one already in use, or
        // parameters out of range cannot be used: refuse it ourselves and tell the peer.
        guard CreditBasedChannels.dynamicCIDs.contains(dcid), !channels.values.contains(where: { $0.remoteCID == dcid }), theirs.isValid else {
            return [.refused(identifier: cmd.identifier, .unacceptableParameters)]
        }
        let ch = CreditBasedChannelState(spsm: pending.spsm, localCID: pending.localCID, remoteCID: dcid, local: pending.local, remote: theirs)
        channels[pending.localCID] = ch
        return [.opened(identifier: cmd.identifier, ch.info)]
    }

    private mutating func creditIndication(_ cmd: SignalingCommand) -> [Event] {
        var r = ByteReader(cmd.data, context: "Flow Control Credit Indication")
        guard let cid = try? r.readUInt16(), let credits = try? r.readUInt16(), r.isAtEnd else {
            return [.ignored("malformed Flow Control Credit Indication")]
        }
        // The CID is the sender's source CID, our remote CID (§4.24).
        guard let local = channels.first(where: { $0.value.remoteCID == cid })?.key, var ch = channels[local] else {
            return [.ignored("Flow Control Credit Indication for unknown CID 0x\(String(cid, radix: 16))")]
        }
        let events = ch.addCredits(credits)
        channels[local] = ch
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
        let id = takeIdentifier()
        disconnecting[id] = ch.localCID
        var w = ByteWriter(capacity: 4)
        w.write(ch.remoteCID); w.write(ch.localCID)
        return SignalingCommand(code: .disconnectionRequest, identifier: id, data: w.bytes).bytes
    }

    private mutating func creditIndication(cid: UInt16, credits: UInt16) -> [UInt8] {
        var w = ByteWriter(capacity: 4)
        w.write(cid); w.write(credits)
        return SignalingCommand(code: .flowControlCreditIndication, identifier: takeIdentifier(), data: w.bytes).bytes
    }

}
