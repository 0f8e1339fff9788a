// The dynamic L2CAP channels a trace opens, learned from its signaling (Core v5.4,
// Vol 3, Part A, §4): BR/EDR Connection Request/Response (PSM, basic mode), LE
// Credit Based and (enhanced) Credit Based Connection Request/Response (SPSM,
// credit-based). A frame's CID is the receiver's endpoint, so each channel has two
// entries: the requester's source CID for frames towards the requester, the
// responder's CID for frames towards the responder. Credit-based channels also
// track where an SDU starts (its first K-frame carries the SDU length).

import HCI
import L2CAP

struct ChannelTable: Sendable {
    struct Channel: Sendable {
        var psm: UInt16
        var creditBased: Bool
        /// The CID of the channel's other end: the one frames the other way use.
        var peerCID: UInt16 = 0
        /// Bytes of the current SDU still to come on this channel (credit-based only).
        var sduRemaining = 0

        /// ATT rides on EATT (SPSM 0x0027, credit-based) and on BR/EDR PSM 0x001F.
        var carriesATT: Bool { creditBased ? psm == 0x0027 : psm == 0x001F }

        var psmName: StaticString? {
            switch (psm, creditBased) {
            case (0x0001, false): return "SDP"
            case (0x0003, false): return "RFCOMM"
            case (0x000F, false): return "BNEP"
            case (0x0011, false): return "HID Control"
            case (0x0013, false): return "HID Interrupt"
            case (0x0017, false): return "AVCTP"
            case (0x0019, false): return "AVDTP"
            case (0x001B, false): return "AVCTP Browsing"
            case (0x001F, false): return "ATT"
            case (0x0023, true): return "IPSP"
            case (0x0025, true): return "OTS"
            case (0x0027, _): return "EATT"
            default: return nil
            }
        }
    }

    struct Key: Hashable, Sendable {
        var handle: UInt16
        var cid: UInt16
        /// The direction of the frames that use this CID.
        var direction: TraceRecord.Direction
    }

    struct Request: Hashable, Sendable {
        var handle: UInt16
        var identifier: UInt8
        var direction: TraceRecord.Direction
    }

    private var open: [Key: Channel] = [:]
    private var pending: [Request: (psm: UInt16, creditBased: Bool, sourceCIDs: [UInt16])] = [:]
    /// Bounds both tables: a trace that opens channels and never closes them (or sends
    /// requests nobody answers) does not grow them without limit.
    static let limit = 4096

    func channel(handle: UInt16, cid: UInt16, direction: TraceRecord.Direction) -> Channel? {
        open[Key(handle: handle, cid: cid, direction: direction)]
    }

    /// For a K-frame: the SDU length when this frame starts an SDU (nil for a
    /// continuation, or when the frame is too short to carry the length).
    mutating func startsSDU(handle: UInt16, cid: UInt16, direction: TraceRecord.Direction, payload: ArraySlice<UInt8>) -> Int? {
        let key = Key(handle: handle, cid: cid, direction: direction)
        guard var c = open[key] else { return nil }
        defer { open[key] = c }
        if c.sduRemaining > 0 {
            c.sduRemaining = Swift.max(0, c.sduRemaining - payload.count)
            return nil
        }
        guard payload.count >= 2 else { return nil }
        let length = Int(UInt16(payload[payload.startIndex]) | UInt16(payload[payload.startIndex + 1]) << 8)
        c.sduRemaining = Swift.max(0, length - (payload.count - 2))
        return length
    }

    private mutating func add(_ key: Key, _ c: Channel) {
        if open.count >= Self.limit { open.removeAll() }
        open[key] = c
    }

    /// Forgets every channel of a link (Disconnection Complete).
    mutating func forget(handle: UInt16) {
        open = open.filter { $0.key.handle != handle }
        pending = pending.filter { $0.key.handle != handle }
    }

    mutating func learn(_ cmd: SignalingCommand, fields: [(name: String, value: Int)], handle: UInt16, direction: TraceRecord.Direction) {
        func value(_ name: String) -> UInt16? { fields.first { $0.name == name }.map { UInt16(truncatingIfNeeded: $0.value) } }
        let cids = fields.filter { $0.name.hasPrefix("cid") && $0.name != "cid" }.map { UInt16(truncatingIfNeeded: $0.value) }
        let request = Request(handle: handle, identifier: cmd.identifier, direction: direction)
        let answered = Request(handle: handle, identifier: cmd.identifier, direction: direction.opposite)
        func remember(_ psm: UInt16?, creditBased: Bool, _ scids: [UInt16]) {
            guard let psm else { return }
            if pending.count >= Self.limit { pending.removeAll() }
            pending[request] = (psm, creditBased, scids)
        }
        /// A response in `direction` pairs the requester's source CIDs with the responder's.
        func accept(_ dcids: [UInt16]) {
            guard let p = pending.removeValue(forKey: answered) else { return }
            for (scid, dcid) in zip(p.sourceCIDs, dcids) where dcid != 0 {
                // towards the requester, then towards the responder
                add(Key(handle: handle, cid: scid, direction: direction), Channel(psm: p.psm, creditBased: p.creditBased, peerCID: dcid))
                add(Key(handle: handle, cid: dcid, direction: direction.opposite), Channel(psm: p.psm, creditBased: p.creditBased, peerCID: scid))
            }
        }
        switch cmd.code.rawValue {
        case 0x02: remember(value("psm"), creditBased: false, value("scid").map { [$0] } ?? [])
        case 0x03: if value("result") == 0, let d = value("dcid") { accept([d]) } else if value("result") != 1 { pending[answered] = nil }
        case 0x14: remember(value("spsm"), creditBased: true, value("scid").map { [$0] } ?? [])
        case 0x15: if value("result") == 0, let d = value("dcid") { accept([d]) } else { pending[answered] = nil }
        case 0x17: remember(value("spsm"), creditBased: true, cids)
        case 0x18: accept(cids)
        case 0x07:  // Disconnection Response: dcid is the responder's CID, scid the requester's
            if let d = value("dcid"), let s = value("scid") {
                open[Key(handle: handle, cid: d, direction: direction.opposite)] = nil
                open[Key(handle: handle, cid: s, direction: direction)] = nil
            }
        default: break
        }
    }
}

extension TraceRecord.Direction {
    /// The way an answer to a packet sent this way goes.
    var opposite: TraceRecord.Direction {
        switch self {
        case .hostToController: return .controllerToHost
        case .controllerToHost: return .hostToController
        case .unknown: return .unknown
        }
    }
}
