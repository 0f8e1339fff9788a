// The L2CAP signaling channels and the dynamic channels they open, as the frame
// decoder shows them (FrameDecoder.swift): each signaling command with its fields,
// which `ChannelTable` learns from; frames on the channels it opened, with EATT SDUs
// split over K-frames reassembled (`SDUReassembly`) and ATT inside decoded.

import L2CAP

extension FrameDecoder {
    /// A signaling command (LE: CID 0x0005; BR/EDR: CID 0x0001), its fields, and what it
    /// says about dynamic channels.
    mutating func signaling<S: FrameSink>(_ payload: [UInt8], handle: UInt16, direction: TraceRecord.Direction, le: Bool,
                                         into s: inout S) {
        let kind: StaticString = le ? "LE signaling" : "signaling"
        guard let code = payload.first else {
            s.summary { o in o.put(" "); o.put(kind); o.put(" (empty frame)") }
            return
        }
        s.field("signaling_code", int: Int(code))
        guard let cmd = try? SignalingCommand(bytes: payload) else {
            s.summary { o in
                o.put(" ")
                o.put(kind)
                o.put(" code=0x")
                o.hex(UInt64(code), width: 2)
                o.put(" (malformed)")
            }
            return
        }
        s.field("signaling_name", string: cmd.code.description)
        s.field("signaling_id", int: Int(cmd.identifier))
        let fields = cmd.fields
        if !fields.isEmpty {
            s.beginParams()
            for f in fields {
                s.key(f.name)
                s.int(f.value)
            }
            s.endParams()
        }
        s.summary { o in
            o.put(" ")
            o.put(kind)
            o.put(" ")
            o.put(cmd.code.description)
            o.put(" id=")
            o.decimal(Int(cmd.identifier))
            for f in fields {
                o.put(" ")
                o.put(f.name)
                o.put("=")
                if f.name.hasSuffix("cid") || f.name.hasPrefix("cid") || f.name == "spsm" || f.name == "psm" {
                    o.put("0x")
                    o.hex(UInt64(UInt16(truncatingIfNeeded: f.value)), width: 4)
                } else {
                    o.decimal(f.value)
                }
            }
        }
        channels.learn(cmd, fields: fields, handle: handle, direction: direction)
    }

    /// A frame on a dynamic channel: a K-frame of a credit-based channel, or a B-frame of
    /// a BR/EDR basic-mode channel. ATT inside is decoded when the signaling that opened
    /// the channel named EATT (SPSM 0x0027) or ATT (PSM 0x001F).
    mutating func dynamicChannel<S: FrameSink>(_ cid: UInt16, _ payload: ArraySlice<UInt8>, handle: UInt16,
                                              direction: TraceRecord.Direction, into s: inout S) {
        guard let channel = channels.channel(handle: handle, cid: cid, direction: direction) else {
            // Opened before the trace began: an LE K-frame (its SDU length, on an SDU's
            // first K-frame, needs the channel's history to tell) or a B-frame.
            s.field("k_frame", bool: true)
            s.summary { o in
                o.put(" L2CAP dynamic cid=0x")
                o.hex(UInt64(cid), width: 4)
                o.put(" ")
                o.decimal(payload.count)
                o.put(" bytes")
            }
            return
        }
        s.field("psm", int: Int(channel.psm))
        if let name = channel.psmName { s.field("psm_name", name) }
        let key = ChannelTable.Key(handle: handle, cid: cid, direction: direction)
        let bearer = ATTBearer(key: key, peerCID: channel.peerCID)
        func summary(_ tail: (inout OutputBytes) -> Void) {
            s.summary { o in
                o.put(" L2CAP cid=0x")
                o.hex(UInt64(cid), width: 4)
                o.put(" psm=0x")
                o.hex(UInt64(channel.psm), width: 4)
                if let name = channel.psmName { o.put(" ("); o.put(name); o.put(")") }
                tail(&o)
            }
        }
        guard channel.creditBased else {
            summary { _ in }
            // A B-frame is whole (ATT over BR/EDR).
            if channel.carriesATT { att(payload, length: payload.count, bearer: nil, into: &s) }
            return
        }
        s.field("k_frame", bool: true)
        guard let sduLength = channels.startsSDU(handle: handle, cid: cid, direction: direction, payload: payload) else {
            // A continuation K-frame: an ATT SDU it completes is decoded whole here.
            s.field("sdu_continuation", bool: true)
            let whole = channel.carriesATT ? sduReassembly.continuing(key, payload) : nil
            summary { o in
                o.put(" SDU continuation ")
                o.decimal(payload.count)
                o.put(" bytes")
                if let whole { o.put(" ["); o.decimal(whole.fragments); o.put(" K-frames]") }
            }
            if let whole {
                s.field("sdu_reassembled", int: whole.fragments)
                att(whole.frame[...], length: whole.frame.count, bearer: bearer, into: &s)
            }
            return
        }
        s.field("sdu_length", int: sduLength)
        summary { _ in }
        let sdu = payload.dropFirst(2)
        guard channel.carriesATT else { return }
        if sdu.count < sduLength { sduReassembly.start(key, Array(sdu), length: sduLength) } else { sduReassembly.drop(key) }
        if !sdu.isEmpty { att(sdu, length: sduLength, bearer: bearer, into: &s) }
    }
}
