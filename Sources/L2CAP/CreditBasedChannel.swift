// Credit-based connection-oriented channels (Core Specification v5.4, Vol 3, Part A:
// §3.4.3 K-frames, §4.22–§4.28 signaling, §10.1 flow control), sans I/O, in both
// modes: LE credit-based (one channel per request) and enhanced credit-based (up to
// five per request, MTU and MPS reconfigurable). The data path is the same for both.
// `CreditBasedChannelState` is one channel's data path: SDUs cut into K-frames no
// larger than the peer's MPS, sent only against the peer's credits; K-frames in,
// reassembled into SDUs with every check §10.1 asks for. `CreditBasedChannels` is one
// link's set of them: listening SPSMs, connection requests both ways, credits and
// disconnection, driven by the signaling commands `LESignalingChannel` parses.

import HCI

/// Result of an LE Credit Based Connection Request (§4.23) or a Credit Based
/// Connection Request (§4.26, where 0x0004, 0x0009 and 0x000A refuse only some of the
/// channels and the others are open).
public struct CreditBasedConnectionResult: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    public static let success = Self(rawValue: 0x0000)
    public static let spsmNotSupported = Self(rawValue: 0x0002)
    public static let noResourcesAvailable = Self(rawValue: 0x0004)
    public static let insufficientAuthentication = Self(rawValue: 0x0005)
    public static let insufficientAuthorization = Self(rawValue: 0x0006)
    public static let encryptionKeySizeTooShort = Self(rawValue: 0x0007)
    public static let insufficientEncryption = Self(rawValue: 0x0008)
    public static let invalidSourceCID = Self(rawValue: 0x0009)
    public static let sourceCIDAlreadyAllocated = Self(rawValue: 0x000A)
    public static let unacceptableParameters = Self(rawValue: 0x000B)
    /// Enhanced mode only: the request itself is invalid (§4.26).
    public static let invalidParameters = Self(rawValue: 0x000C)

    public var description: String {
        switch rawValue {
        case 0x0000: return "success"
        case 0x0002: return "SPSM not supported"
        case 0x0004: return "no resources available"
        case 0x0005: return "insufficient authentication"
        case 0x0006: return "insufficient authorization"
        case 0x0007: return "encryption key size too short"
        case 0x0008: return "insufficient encryption"
        case 0x0009: return "invalid Source CID"
        case 0x000A: return "Source CID already allocated"
        case 0x000B: return "unacceptable parameters"
        case 0x000C: return "invalid parameters"
        default: return "result 0x" + hex4(rawValue)
        }
    }
}

/// Result of a Credit Based Reconfigure Request (§4.28).
public struct CreditBasedReconfigureResult: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    public static let success = Self(rawValue: 0x0000)
    public static let mtuReductionNotAllowed = Self(rawValue: 0x0001)
    public static let mpsReductionNotAllowed = Self(rawValue: 0x0002)
    public static let invalidDestinationCIDs = Self(rawValue: 0x0003)
    public static let unacceptableParameters = Self(rawValue: 0x0004)
    /// Not a result on the wire: the peer answered with Command Reject (it does not
    /// know the command).
    public static let rejected = Self(rawValue: 0xFFFF)

    public var description: String {
        switch rawValue {
        case 0x0000: return "success"
        case 0x0001: return "reduction of the MTU not allowed"
        case 0x0002: return "reduction of the MPS not allowed for more than one channel at a time"
        case 0x0003: return "one or more Destination CIDs invalid"
        case 0x0004: return "unacceptable parameters"
        case 0xFFFF: return "rejected (Command Reject)"
        default: return "result 0x" + hex4(rawValue)
        }
    }
}

/// What one side of a channel receives: SDUs up to `mtu` bytes, K-frames up to `mps`
/// bytes of payload, and the credits it grants at the start.
public struct CreditBasedParameters: Hashable, Sendable {
    public var mtu: UInt16
    public var mps: UInt16
    public var initialCredits: UInt16
    /// LE mode: MTU ≥ 23, MPS 23...65533 (§4.22); enhanced mode: MTU ≥ 64, MPS
    /// 64...65533 (§4.25).
    public init(mtu: UInt16 = 512, mps: UInt16 = 247, initialCredits: UInt16 = 8) {
        self.mtu = mtu
        self.mps = mps
        self.initialCredits = initialCredits
    }

    var isValid: Bool { isValid(enhanced: false) }

    func isValid(enhanced: Bool) -> Bool {
        let least: UInt16 = enhanced ? 64 : 23
        return mtu >= least && (least...65533).contains(mps)
    }

    /// These parameters raised to enhanced mode's minimum of 64 (a listener's, offered
    /// to a peer that asked for enhanced channels).
    var enhancedMinimum: CreditBasedParameters {
        CreditBasedParameters(mtu: Swift.max(mtu, 64), mps: Swift.max(mps, 64), initialCredits: initialCredits)
    }
}

/// Why a channel ended.
public enum ChannelCloseReason: Hashable, Sendable, CustomStringConvertible {
    /// We asked (`close()`), and the peer answered or the request timed out.
    case closedLocally
    /// The peer sent Disconnection Request.
    case closedByPeer
    /// The link went down (the controller's reason).
    case linkLost(HCIStatus)
    /// The peer broke §10.1 and we disconnected the channel, as the spec says to.
    case protocolViolation(String)

    public var description: String {
        switch self {
        case .closedLocally: return "closed"
        case .closedByPeer: return "closed by the peer"
        case let .linkLost(s): return "link lost (\(s))"
        case let .protocolViolation(why): return "disconnected: \(why)"
        }
    }
}

/// A channel as the application sees it: its SPSM, both CIDs, both sides' parameters.
public struct CreditBasedChannelInfo: Hashable, Sendable {
    public var spsm: UInt16
    public var localCID: UInt16
    public var remoteCID: UInt16
    /// What we receive (our MTU and MPS).
    public var local: CreditBasedParameters
    /// What the peer receives: our SDUs are at most `remote.mtu` bytes.
    public var remote: CreditBasedParameters
    /// Opened in enhanced credit-based mode (§4.25), so reconfigurable (§4.27).
    public var enhanced: Bool
}

/// One channel's data path, both directions.
public struct CreditBasedChannelState: Sendable {
    public let spsm: UInt16
    public let localCID: UInt16
    public let remoteCID: UInt16
    /// Enhanced credit-based mode (reconfigurable).
    public let enhanced: Bool
    /// What we receive (raised by our Credit Based Reconfigure Request).
    public private(set) var local: CreditBasedParameters
    /// What the peer receives: our SDUs are at most `remote.mtu`, our K-frames
    /// `remote.mps` (changed by the peer's Credit Based Reconfigure Request).
    public private(set) var remote: CreditBasedParameters
    /// K-frames we may still send (the peer's credits).
    public private(set) var sendCredits: Int
    /// K-frames the peer may still send us (our credits, not yet used).
    public private(set) var receiveCredits: Int
    /// K-frames waiting for credits (from `waitingHead` on); the last of each SDU
    /// carries its token. (A plain array: this file builds into the fuzz targets,
    /// which take no other package.)
    private var waiting: [(payload: [UInt8], token: UInt64?)] = []
    private var waitingHead = 0
    /// The SDU being reassembled: its declared length and the bytes so far.
    private var partial: (length: Int, bytes: [UInt8], frames: Int)?

    public enum Event: Hashable, Sendable {
        /// Send this K-frame payload on the peer's CID; `token` marks an SDU's last frame.
        case frame([UInt8], token: UInt64?)
        /// A whole SDU arrived; the credit of its last K-frame goes back once it is consumed.
        case sdu([UInt8], frames: Int)
        /// A K-frame that did not finish its SDU: give its credit back now (the partial
        /// SDU is bounded by our MTU), so an SDU longer than the credits can complete.
        case returnCredit
        /// The peer broke the rules: disconnect the channel (§10.1).
        case violation(String)
    }

    public init(spsm: UInt16, localCID: UInt16, remoteCID: UInt16, local: CreditBasedParameters, remote: CreditBasedParameters, enhanced: Bool = false) {
        self.spsm = spsm
        self.localCID = localCID
        self.remoteCID = remoteCID
        self.enhanced = enhanced
        self.local = local
        self.remote = remote
        self.sendCredits = Int(remote.initialCredits)
        self.receiveCredits = Int(local.initialCredits)
    }

    public var info: CreditBasedChannelInfo {
        CreditBasedChannelInfo(spsm: spsm, localCID: localCID, remoteCID: remoteCID, local: local, remote: remote, enhanced: enhanced)
    }

    /// Our reconfiguration was accepted: we now receive SDUs up to `mtu`, K-frames up to
    /// `mps` (§4.27).
    public mutating func reconfigureLocal(mtu: UInt16, mps: UInt16) {
        local.mtu = mtu
        local.mps = mps
    }

    /// The peer reconfigured its side (§4.27): our SDUs may now be up to `mtu`, our
    /// K-frames must be at most `mps`. K-frames already cut for a larger MPS and still
    /// waiting for credits are cut again (a K-frame split in two is still a valid
    /// sequence: only an SDU's first frame carries the SDU length, at its start).
    public mutating func reconfigureRemote(mtu: UInt16, mps: UInt16) {
        remote.mtu = mtu
        let shrinks = mps < remote.mps
        remote.mps = mps
        guard shrinks, framesWaiting > 0 else { return }
        let limit = Int(mps)
        var recut: [(payload: [UInt8], token: UInt64?)] = []
        for f in waiting[waitingHead...] {
            var offset = 0
            while f.payload.count - offset > limit {
                recut.append((Array(f.payload[offset..<(offset + limit)]), nil))
                offset += limit
            }
            recut.append((Array(f.payload[offset...]), f.token))
        }
        waiting = recut
        waitingHead = 0
    }

    /// K-frames queued behind the peer's credits.
    public var framesWaiting: Int { waiting.count - waitingHead }

    /// Cuts `sdu` into K-frames (the first with the 2-byte SDU length) and returns those
    /// the credits allow now; the rest wait for `addCredits`. Throws when the SDU is
    /// longer than the peer's MTU.
    public mutating func send(_ sdu: [UInt8], token: UInt64?) throws(ChannelSendError) -> [Event] {
        guard sdu.count <= Int(remote.mtu) else { throw .sduTooLong(sdu.count, mtu: Int(remote.mtu)) }
        let mps = Int(remote.mps)
        var first = ByteWriter(capacity: Swift.min(mps, sdu.count + 2))
        first.write(UInt16(sdu.count))
        let head = Swift.min(sdu.count, mps - 2)
        first.write(contentsOf: sdu[0..<head])
        var frames = [first.bytes]
        var offset = head
        while offset < sdu.count {
            let end = Swift.min(sdu.count, offset + mps)
            frames.append(Array(sdu[offset..<end]))
            offset = end
        }
        for (i, f) in frames.enumerated() { waiting.append((f, i == frames.count - 1 ? token : nil)) }
        return flush()
    }

    /// The peer granted `credits` more K-frames (Flow Control Credit Indication).
    public mutating func addCredits(_ credits: UInt16) -> [Event] {
        guard credits > 0 else { return [] }  // §4.24: 0 is not a valid credit count; ignore
        guard sendCredits + Int(credits) <= 65535 else {
            return [.violation("credits overflow 65535 (\(sendCredits) + \(credits))")]
        }
        sendCredits += Int(credits)
        return flush()
    }

    /// Gives the peer `frames` credits back (after the application took an SDU):
    /// the count for a Flow Control Credit Indication, 0 when none is due.
    public mutating func grant(_ frames: Int) -> UInt16 {
        let room = 65535 - receiveCredits
        let n = Swift.max(0, Swift.min(frames, room))
        receiveCredits += n
        return UInt16(n)
    }

    /// One K-frame from the peer, with every check of §10.1.
    public mutating func receive(_ payload: [UInt8]) -> [Event] { receive(payload[...]) }

    /// One K-frame from the peer, as a slice of the frame it came in.
    public mutating func receive(_ payload: ArraySlice<UInt8>) -> [Event] {
        guard receiveCredits > 0 else { return [.violation("K-frame received with no credits left")] }
        receiveCredits -= 1
        guard payload.count <= Int(local.mps) else { return [.violation("K-frame of \(payload.count) bytes exceeds our MPS \(local.mps)")] }
        if var p = partial.take() {
            // Taken out of `partial` first, so the append grows the SDU in place: appended
            // to a copy while `partial` still shared its buffer, it would copy every byte
            // so far on each K-frame.
            p.bytes += payload
            p.frames += 1
            guard p.bytes.count <= p.length else {
                return [.violation("K-frames carry \(p.bytes.count) bytes for an SDU of \(p.length)")]
            }
            if p.bytes.count == p.length {
                partial = nil
                return [.sdu(p.bytes, frames: 1)]
            }
            partial = p
            return [.returnCredit]
        }
        guard payload.count >= 2 else { return [.violation("first K-frame of an SDU without its SDU length")] }
        let s = payload.startIndex  // a slice keeps its frame's indices
        let length = Int(payload[s]) | Int(payload[s + 1]) << 8
        guard length <= Int(local.mtu) else { return [.violation("SDU length \(length) exceeds our MTU \(local.mtu)")] }
        let bytes = Array(payload[(s + 2)...])
        guard bytes.count <= length else { return [.violation("K-frame carries \(bytes.count) bytes for an SDU of \(length)")] }
        if bytes.count == length { return [.sdu(bytes, frames: 1)] }
        partial = (length, bytes, 1)
        return [.returnCredit]
    }

    /// Drops what waits (the channel is closing); returns the tokens of SDUs not sent.
    public mutating func abandon() -> [UInt64] {
        defer { waiting.removeAll(); waitingHead = 0 }
        return waiting[waitingHead...].compactMap(\.token)
    }

    private mutating func flush() -> [Event] {
        var out: [Event] = []
        while sendCredits > 0, waitingHead < waiting.count {
            let f = waiting[waitingHead]
            waitingHead += 1
            sendCredits -= 1
            out.append(.frame(f.payload, token: f.token))
        }
        if waitingHead == waiting.count {
            waiting.removeAll(keepingCapacity: true)
            waitingHead = 0
        } else if waitingHead > 1024 && waitingHead * 2 > waiting.count {
            waiting.removeFirst(waitingHead)
            waitingHead = 0
        }
        return out
    }
}

/// Why an SDU could not be sent.
public enum ChannelSendError: Error, Hashable, Sendable, CustomStringConvertible {
    case sduTooLong(Int, mtu: Int)
    case closed(ChannelCloseReason)

    public var description: String {
        switch self {
        case let .sduTooLong(n, mtu): return "SDU of \(n) bytes exceeds the peer's MTU \(mtu)"
        case let .closed(reason): return "channel \(reason)"
        }
    }
}
