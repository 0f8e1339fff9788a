// Turns trace records into what `btctl trace show` and `btctl monitor` print: one
// JSON object per frame (schema: docs/trace-json.md), or a human summary line plus
// detail lines. Frames are written straight into an output buffer through a
// `FrameSink` (FrameOutput.swift); command and event parameters are listed by name
// from the typed codecs (`FieldListing`, no reflection). ACL frames are opened down
// to the L2CAP channel and the ATT / SMP / signaling PDU, including ATT carried on
// dynamic channels (EATT, ATT over BR/EDR PSM 0x001F), which the decoder recognises
// by following the signaling that opened them: it keeps that state between frames.

import ATT
import HCI
import L2CAP
import SMP

public struct DecodedFrame: Sendable {
    public var json: JSONValue
    public var summary: String
    public var details: [String]
}

public struct FrameDecoder: Sendable {
    /// How `write` prints a frame.
    public enum Style: Sendable {
        /// One JSON object per line.
        case json
        /// A summary line and its detail lines.
        case text
        /// The summary line only.
        case brief
    }

    /// Show key material (LTK, IRK, CSRK, SMP confirm/random/DHKey check values, the
    /// LTK in LE Enable Encryption and LTK Request Reply). Off: shown as "<redacted>".
    public var showKeys: Bool

    /// Dynamic L2CAP channels learned from signaling, by where their frames go.
    var channels = ChannelTable()
    /// L2CAP frames split over ACL packets, until their last fragment.
    var reassembly = ACLReassembly()
    /// SDUs of EATT channels split over K-frames, until their last K-frame.
    var sduReassembly = SDUReassembly()
    /// The attribute type of the last Read By Type Request on each ATT bearer (the LE
    /// bearer on CID 0x0004, or an EATT channel), by link, the CID and the direction the
    /// request went: its response's declarations are decoded by it.
    var attTypeRequested: [ChannelTable.Key: BluetoothUUID] = [:]

    /// Where an ATT PDU travels: its link, CID and direction, and the CID that answers
    /// to it come back on (0x0004 for the LE bearer; the channel's other end for EATT).
    struct ATTBearer {
        var key: ChannelTable.Key
        var peerCID: UInt16
        /// Where a request answered by a PDU on this bearer was filed.
        var answered: ChannelTable.Key { ChannelTable.Key(handle: key.handle, cid: peerCID, direction: key.direction.opposite) }
    }

    public init(showKeys: Bool = false) { self.showKeys = showKeys }

    /// Appends one record, printed in `style`, to `out`. `firstTimestamp` is the
    /// trace's first record's time (the text view shows seconds since then).
    public mutating func write(_ record: TraceRecord, number: Int, firstTimestamp: Int64, style: Style, into out: OutputBuffer) {
        switch style {
        case .json:
            var sink = JSONFrameSink(out: out.main, showKeys: showKeys)
            frame(record, number: number, firstTimestamp: firstTimestamp, into: &sink)
            out.main = sink.out
        case .text, .brief:
            var sink = TextFrameSink(out: out.main, details: out.side, showKeys: showKeys, brief: style == .brief)
            frame(record, number: number, firstTimestamp: firstTimestamp, into: &sink)
            (out.main, out.side) = (sink.out, sink.details)
        }
    }

    /// One record as a JSON value, a summary line and detail lines (for tests and tools
    /// that inspect frames; `write` is the fast path).
    public mutating func decode(_ record: TraceRecord, number: Int, firstTimestamp: Int64) -> DecodedFrame {
        var scratch = self
        let j = OutputBuffer(capacity: 1024)
        scratch.write(record, number: number, firstTimestamp: firstTimestamp, style: .json, into: j)
        let t = OutputBuffer(capacity: 1024)
        write(record, number: number, firstTimestamp: firstTimestamp, style: .text, into: t)
        let json = (try? JSONValue(parsing: j.bytes)) ?? .null
        var lines = String(decoding: t.bytes, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        if lines.last == "" { lines.removeLast() }
        let summary = lines.first ?? ""
        let details = lines.dropFirst().map { String($0.dropFirst(TextFrameSink.indent)) }
        return DecodedFrame(json: json, summary: summary, details: Array(details))
    }

    /// One packet by name, as `trace show` prints it: the summary, then its fields.
    public func describe(_ packet: HCIPacket) -> String {
        var copy = self
        let f = copy.decode(TraceRecord(timestampMicros: 0, packet: packet, direction: .unknown), number: 0, firstTimestamp: 0)
        let head = f.summary.dropFirst(TextFrameSink.indent)
        return ([String(head)] + f.details.map { String($0.drop { $0 == " " }) }).joined(separator: "; ")
    }

    mutating func frame<S: FrameSink>(_ record: TraceRecord, number: Int, firstTimestamp: Int64, into s: inout S) {
        s.begin(number: number, timestampMicros: record.timestampMicros, relative: record.timestampMicros &- firstTimestamp,
                direction: record.direction, index: record.adapterIndex)
        switch record.content {
        case let .packet(p):
            s.field("type", string: p.type.description)
            packet(p, direction: record.direction, into: &s)
        case let .undecodable(type, bytes, error):
            let name = type?.description ?? "unknown"
            s.field("type", string: name)
            s.field("error", string: error.description)
            s.field("bytes", hex: bytes)
            s.summary { o in
                o.put(name)
                o.put(" (malformed: ")
                o.put(error.description)
                o.put(")")
            }
        case let .monitor(opcode, data):
            s.field("type", "monitor")
            s.field("monitor_opcode", int: Int(opcode))
            let name = Self.monitorNames[Int(opcode)]
            s.key("name")
            if let name { s.string(name) } else { s.string("Opcode \(opcode)") }
            s.summary { o in
                o.put("monitor ")
                if let name { o.put(name) } else { o.put("Opcode "); o.decimal(Int(opcode)) }
            }
            if opcode == 12 || opcode == 13 {  // system note, user logging
                let text = String(decoding: data.prefix { $0 != 0 }, as: UTF8.self)
                s.field("text", string: text)
                s.summary { o in
                    o.put(": ")
                    o.put(text)
                }
            } else {
                s.field("bytes", hex: data)
            }
        }
        s.end()
    }

    mutating func packet<S: FrameSink>(_ p: HCIPacket, direction: TraceRecord.Direction, into s: inout S) {
        switch p {
        case let .command(opcode, params):
            s.field("opcode", int: Int(opcode.rawValue))
            s.field("ogf", int: Int(opcode.ogf))
            s.field("ocf", int: Int(opcode.ocf))
            s.field("name", string: opcode.description)
            s.summary { o in
                o.put("command  ")
                o.put(opcode.description)
                o.put(" [0x")
                o.hex(UInt64(opcode.rawValue), width: 4)
                o.put("]")
            }
            do {
                if let c = try HCICommandRegistry.decode(opcode: opcode, parameters: params) {
                    Self.params(c, opcode: opcode.rawValue, into: &s)
                } else if !params.isEmpty {
                    s.field("params_hex", hex: params)
                    s.detail { o in o.put("parameters: "); o.hexBytes(params) }
                }
            } catch {
                Self.malformed(error, params, into: &s)
            }
        case let .event(code, params):
            s.field("event", int: Int(code.rawValue))
            do {
                let e = try HCIEvent(code: code, parameters: params)
                event(e, into: &s)
            } catch {
                s.field("name", string: code.description)
                s.summary { o in o.put("event    "); o.put(code.description) }
                Self.malformed(error, params, into: &s)
            }
        case let .acl(a):
            acl(a, direction: direction, into: &s)
        case let .sco(raw), let .iso(raw):
            let handle = raw.count >= 2 ? Int(UInt16(raw[0]) | UInt16(raw[1] & 0x0F) << 8) : 0
            s.field("handle", int: handle)
            s.field("length", int: Swift.max(0, raw.count - (p.type == .iso ? 4 : 3)))
            s.summary { o in
                o.put(p.type.description)
                o.put("      handle=0x")
                o.hex(UInt64(handle), width: 4)
                o.put(" ")
                o.decimal(raw.count)
                o.put(" bytes")
            }
        }
    }

    static func malformed<S: FrameSink>(_ error: any Error, _ params: [UInt8], into s: inout S) {
        let text = "\(error)"
        s.field("error", string: text)
        s.field("params_hex", hex: params)
        s.detail { o in
            o.put("malformed parameters (")
            o.put(text)
            o.put("): ")
            o.hexBytes(params)
        }
    }

    /// A codec value's fields as `params` (JSON) or `name: value` detail lines; nothing
    /// for a value without fields.
    static func params<S: FrameSink>(_ value: some FieldListing, opcode: UInt16? = nil, into s: inout S) {
        s.beginHCIParams(opcode: opcode)
        value.listFields(into: &s)
        s.endParams()
    }

    /// The commands a Supported_Commands mask claims, one detail line each in bit order,
    /// as btmon lists them (text view only; JSON keeps the mask's bytes).
    static func claimed<S: FrameSink>(_ commands: SupportedCommands, into s: inout S) {
        guard s.writesDetails else { return }
        listed("Commands: ", " claimed", Array(zip(commands.claimedNames, commands.claimedBits)), octets: true, into: &s)
    }

    /// The states and combinations an LE Supported States mask claims (§7.8.27), one
    /// detail line each in bit order (text view only; JSON keeps the number).
    static func supported<S: FrameSink>(_ states: LESupportedStates, into s: inout S) {
        guard s.writesDetails else { return }
        let bits = states.claimedBits
        listed("States: ", " supported", bits.map { (LESupportedStates.name(ofBit: $0) ?? "reserved", $0) }, octets: false, into: &s)
    }

    /// "Title N suffix", then "  name (octet x bit y)" or "  name (bit n)" per entry.
    private static func listed<S: FrameSink>(_ title: StaticString, _ suffix: StaticString, _ entries: [(name: String, bit: Int)],
                                             octets: Bool, into s: inout S) {
        s.detail { o in o.put(title); o.decimal(entries.count); o.put(suffix) }
        for (name, bit) in entries {
            s.detail { o in
                o.put("  ")
                o.put(name)
                if octets {
                    o.put(" (octet ")
                    o.decimal(bit / 8)
                    o.put(" bit ")
                    o.decimal(bit % 8)
                } else {
                    o.put(" (bit ")
                    o.decimal(bit)
                }
                o.put(")")
            }
        }
    }

    static func opcodeFields<S: FrameSink>(_ op: HCIOpcode, ncmd: UInt8, into s: inout S) {
        s.field("opcode", int: Int(op.rawValue))
        s.field("ogf", int: Int(op.ogf))
        s.field("ocf", int: Int(op.ocf))
        s.field("command", string: op.description)
        s.field("ncmd", int: Int(ncmd))
    }

    mutating func event<S: FrameSink>(_ e: HCIEvent, into s: inout S) {
        switch e {
        case let .commandComplete(cc):
            s.field("name", "Command Complete")
            Self.opcodeFields(cc.commandOpcode, ncmd: cc.numHCICommandPackets, into: &s)
            s.summary { o in
                o.put("event    Command Complete: ")
                o.put(cc.commandOpcode.description)
            }
            if let st = cc.status {
                s.field("status", int: Int(st.rawValue))
                s.field("status_name", string: st.name ?? "unknown")
                s.summary { o in o.put(" status="); o.put(st.description) }
                let rest = Array(cc.returnParameters.dropFirst())
                if st.isSuccess, let r = try? HCICommandRegistry.decodeReturn(opcode: cc.commandOpcode, returnParameters: rest) {
                    Self.params(r, opcode: cc.commandOpcode.rawValue, into: &s)
                    if let commands = (r as? ReadLocalSupportedCommands.ReturnParameters)?.supportedCommands { Self.claimed(commands, into: &s) }
                    if cc.commandOpcode == .leReadSupportedStates, let states = r as? HCIMask64Return {
                        Self.supported(LESupportedStates(rawValue: states.mask), into: &s)
                    }
                } else if !rest.isEmpty {
                    s.field("params_hex", hex: rest)
                    s.detail { o in o.put("return parameters: "); o.hexBytes(rest) }
                }
            }
        case let .commandStatus(cs):
            s.field("name", "Command Status")
            Self.opcodeFields(cs.commandOpcode, ncmd: cs.numHCICommandPackets, into: &s)
            s.field("status", int: Int(cs.status.rawValue))
            s.field("status_name", string: cs.status.name ?? "unknown")
            s.summary { o in
                o.put("event    Command Status: ")
                o.put(cs.commandOpcode.description)
                o.put(" status=")
                o.put(cs.status.description)
            }
        case let .le(le):
            s.field("name", string: le.subevent.description)
            s.field("subevent", int: Int(le.subevent.rawValue))
            s.summary { o in o.put("event    LE Meta: "); o.put(le.subevent.description) }
            leEvent(le, into: &s)
        case let .unknown(code, params):
            s.field("name", string: code.description)
            s.summary { o in o.put("event    "); o.put(code.description) }
            if !params.isEmpty {
                s.field("params_hex", hex: params)
                s.detail { o in o.put("parameters: "); o.hexBytes(params) }
            }
        default:
            s.field("name", string: e.code.description)
            s.summary { o in o.put("event    "); o.put(e.code.description) }
            switch e {
            case let .disconnectionComplete(x):
                Self.handleAndParams(x, into: &s)
                channels.forget(handle: x.connectionHandle)
                reassembly.forget(handle: x.connectionHandle)
                sduReassembly.forget(handle: x.connectionHandle)
                attTypeRequested = attTypeRequested.filter { $0.key.handle != x.connectionHandle }
            case let .numberOfCompletedPackets(x): Self.handleAndParams(x, into: &s)
            case let .encryptionChange(x): Self.handleAndParams(x, into: &s)
            case let .encryptionChangeV2(x): Self.handleAndParams(x, into: &s)
            case let .encryptionKeyRefreshComplete(x): Self.handleAndParams(x, into: &s)
            case let .readRemoteVersionInformationComplete(x): Self.handleAndParams(x, into: &s)
            case let .hardwareError(x): Self.handleAndParams(x, into: &s)
            case let .dataBufferOverflow(x): Self.handleAndParams(x, into: &s)
            default: break
            }
        }
    }

    /// An event's `handle` (when it has a `connectionHandle`), then its parameters.
    static func handleAndParams<S: FrameSink>(_ x: some FieldListing, into s: inout S) {
        var finder = HandleFinder()
        x.listFields(into: &finder)
        if let h = finder.handle { s.field("handle", int: h) }
        params(x, into: &s)
    }

    mutating func leEvent<S: FrameSink>(_ le: LEMetaEvent, into s: inout S) {
        switch le {
        case let .advertisingReport(r):
            s.key("reports")
            s.beginArray()
            for (i, rp) in r.reports.enumerated() {
                s.detail { o in
                    o.put("report ")
                    o.decimal(i)
                    o.put(": ")
                    if let n = Self.advTypeNames[safe: Int(rp.eventType)] { o.put(n) } else { o.put("type "); o.decimal(Int(rp.eventType)) }
                    Self.addressRSSI(rp.address, rp.addressType, rp.rssi, into: &o)
                }
                Self.report(address: rp.address, type: rp.addressType, rssi: rp.rssi, eventType: Int(rp.eventType), data: rp.data, into: &s)
            }
            s.endArray()
        case let .extendedAdvertisingReport(r):
            s.key("reports")
            s.beginArray()
            for (i, rp) in r.reports.enumerated() {
                s.detail { o in
                    o.put("report ")
                    o.decimal(i)
                    o.put(": event_type=0x")
                    o.hex(UInt64(rp.eventType), width: 4)
                    ParameterMeaning.extendedReportType(rp.eventType, into: &o)
                    Self.addressRSSI(rp.address, rp.addressType, rp.rssi, into: &o)
                    o.put(" tx_power=")
                    ParameterMeaning.reportedPower.write(Int64(rp.txPower), into: &o)
                }
                Self.report(address: rp.address, type: rp.addressType, rssi: rp.rssi, eventType: Int(rp.eventType), data: rp.data, into: &s)
            }
            s.endArray()
        case let .directedAdvertisingReport(r):
            s.key("reports")
            s.beginArray()
            for rp in r.reports {
                s.detail { o in
                    o.put("report: ")
                    o.address(rp.address)
                    o.put(" (")
                    o.put(rp.addressType.description)
                    o.put(") → ")
                    o.address(rp.directAddress)
                    o.put(" rssi=")
                    o.decimal(Int(rp.rssi))
                    o.put(" dBm")
                }
                s.beginObject()
                s.key("address"); s.address(rp.address)
                s.field("address_type", string: rp.addressType.description)
                s.field("rssi", int: Int(rp.rssi))
                s.key("ad_types"); s.beginArray(); s.endArray()
                s.endObject()
            }
            s.endArray()
        case .scanTimeout:
            break
        case let .unknown(_, params):
            if !params.isEmpty { s.field("params_hex", hex: params) }
        case let .connectionComplete(x): Self.handleAndParams(x, into: &s)
        case let .connectionUpdateComplete(x): Self.handleAndParams(x, into: &s)
        case let .readRemoteFeaturesComplete(x): Self.handleAndParams(x, into: &s)
        case let .longTermKeyRequest(x): Self.handleAndParams(x, into: &s)
        case let .dataLengthChange(x): Self.handleAndParams(x, into: &s)
        case let .enhancedConnectionComplete(x): Self.handleAndParams(x, into: &s)
        case let .phyUpdateComplete(x): Self.handleAndParams(x, into: &s)
        case let .advertisingSetTerminated(x): Self.handleAndParams(x, into: &s)
        case let .channelSelectionAlgorithm(x): Self.handleAndParams(x, into: &s)
        case let .periodicAdvertisingSyncEstablished(x): Self.handleAndParams(x, into: &s)
        case let .periodicAdvertisingReport(x): Self.handleAndParams(x, into: &s)
        case let .periodicAdvertisingSyncLost(x): Self.handleAndParams(x, into: &s)
        }
    }

    static func addressRSSI(_ a: BluetoothAddress, _ t: AddressType, _ rssi: Int8, into o: inout OutputBytes) {
        o.put(" ")
        o.address(a)
        o.put(" (")
        o.put(t.description)
        o.put(") rssi=")
        o.decimal(Int(rssi))
        o.put(" dBm")
    }

    mutating func acl<S: FrameSink>(_ a: ACLDataPacket, direction: TraceRecord.Direction, into s: inout S) {
        s.field("handle", int: Int(a.handle))
        s.field("pb", int: Int(a.boundary.rawValue))
        s.field("bc", int: Int(a.broadcast))
        s.field("length", int: a.data.count)
        s.summary { o in
            o.put("acl      handle=0x")
            o.hex(UInt64(a.handle), width: 4)
            o.put(" pb=")
            o.put(a.boundary.description)
            o.put(" ")
            o.decimal(a.data.count)
            o.put(" bytes")
        }
        let key = LinkDirection(handle: a.handle, direction: direction)
        if a.boundary == .continuing {
            // The last fragment of a frame: the whole frame is decoded here.
            guard let (frame, fragments) = reassembly.continuing(key, a.data) else { return }
            s.field("l2cap_reassembled", int: fragments)
            s.summary { o in o.put(" ["); o.decimal(fragments); o.put(" fragments]") }
            l2cap(frame[...], handle: a.handle, direction: direction, into: &s)
            return
        }
        guard a.data.count >= 4 else { reassembly.drop(key); return }
        let length = 4 + Int(UInt16(a.data[0]) | UInt16(a.data[1]) << 8)
        if a.data.count < length { reassembly.start(key, a.data, length: length) } else { reassembly.drop(key) }
        l2cap(a.data[...], handle: a.handle, direction: direction, into: &s)
    }

    /// An L2CAP frame (Vol 3, Part A, §3.1): its basic header, then what it carries by
    /// CID. `frame` is the whole frame, or only its first fragment: then ATT and SMP PDUs
    /// are named and marked as fragments, and the rest waits for the last fragment.
    mutating func l2cap<S: FrameSink>(_ frame: ArraySlice<UInt8>, handle: UInt16, direction: TraceRecord.Direction, into s: inout S) {
        let b = frame.startIndex
        let l2len = Int(UInt16(frame[b]) | UInt16(frame[b + 1]) << 8)
        let cid = UInt16(frame[b + 2]) | UInt16(frame[b + 3]) << 8
        s.field("l2cap_length", int: l2len)
        s.field("cid", int: Int(cid))
        let payload = frame.dropFirst(4)
        guard let op = payload.first else {
            s.summary { o in o.put(" L2CAP cid=0x"); o.hex(UInt64(cid), width: 4) }
            return
        }
        let complete = payload.count >= l2len
        func firstFragment(_ o: inout OutputBytes) { Self.firstFragment(payload.count, of: l2len, into: &o) }
        switch cid {
        case 0x0004:
            att(payload, length: l2len, bearer: ATTBearer(key: ChannelTable.Key(handle: handle, cid: cid, direction: direction), peerCID: cid),
                into: &s)
        case 0x0001, 0x0005:
            guard complete else {
                s.field("l2cap_fragment", bool: true)
                s.summary { o in o.put(cid == 0x0005 ? " LE signaling" : " signaling"); firstFragment(&o) }
                return
            }
            signaling(Array(payload.prefix(l2len)), handle: handle, direction: direction, le: cid == 0x0005, into: &s)
        case 0x0006, 0x0007:
            s.field("smp_opcode", int: Int(op))
            // A PDU longer than this fragment (Pairing Public Key over 27-byte buffers)
            // continues in the next ACL packets: named here, decoded at its last.
            guard complete else {
                s.field("l2cap_fragment", bool: true)
                let name = SMPCode(rawValue: op)?.name
                s.summary { o in
                    o.put(" SMP ")
                    if let name { o.put(name) } else { o.put("opcode 0x"); o.hex(UInt64(op), width: 2) }
                    firstFragment(&o)
                }
                return
            }
            smp(Array(payload.prefix(l2len)), into: &s)
        case 0x0040...:
            guard complete else {
                s.field("l2cap_fragment", bool: true)
                s.summary { o in o.put(" L2CAP dynamic cid=0x"); o.hex(UInt64(cid), width: 4); firstFragment(&o) }
                return
            }
            dynamicChannel(cid, payload.prefix(l2len), handle: handle, direction: direction, into: &s)
        default:
            s.summary { o in o.put(" L2CAP cid=0x"); o.hex(UInt64(cid), width: 4) }
        }
    }

    /// " (first fragment: 23 of 44 bytes)": a PDU of which this packet holds the start.
    static func firstFragment(_ have: Int, of length: Int, into o: inout OutputBytes) {
        o.put(" (first fragment: ")
        o.decimal(have)
        o.put(" of ")
        o.decimal(length)
        o.put(" bytes)")
    }

    /// An ATT PDU's opcode, its name and (for the PDUs that carry one) the handle; then,
    /// when `payload` holds all `length` octets of the PDU (not only the first fragment
    /// of it), its parameters (`attParameters`).
    /// `bearer` is the LE ATT bearer (CID 0x0004) or the EATT channel the PDU travels
    /// on, where the decoder follows Read By Type Requests to show the declarations
    /// their responses carry; nil on BR/EDR.
    mutating func att<S: FrameSink>(_ payload: ArraySlice<UInt8>, length: Int, bearer: ATTBearer?, into s: inout S) {
        guard let op = payload.first else { return }
        let b = payload.startIndex
        s.field("att_opcode", int: Int(op))
        let name = Self.attNameTable[Int(op)]
        s.key("att_name")
        if let name { s.string(name) } else { s.string("ATT opcode 0x" + hex(op, 2)) }
        s.summary { o in
            o.put(" ATT ")
            if let name { o.put(name) } else { o.put("ATT opcode 0x"); o.hex(UInt64(op), width: 2) }
        }
        if op == 0x01, payload.count >= 5 {
            let h = UInt16(payload[b + 2]) | UInt16(payload[b + 3]) << 8
            s.field("att_handle", int: Int(h))
            s.field("att_error", int: Int(payload[b + 4]))
            s.summary { o in
                o.put(" handle=0x")
                o.hex(UInt64(h), width: 4)
                o.put(" error=0x")
                o.hex(UInt64(payload[b + 4]), width: 2)
            }
        } else if [0x0A, 0x0C, 0x12, 0x16, 0x17, 0x1B, 0x1D, 0x52, 0xD2].contains(op), payload.count >= 3 {
            let h = UInt16(payload[b + 1]) | UInt16(payload[b + 2]) << 8
            s.field("att_handle", int: Int(h))
            s.summary { o in o.put(" handle=0x"); o.hex(UInt64(h), width: 4) }
        }
        guard payload.count >= length else {
            // The rest follows, in continuing ACL packets or in the next K-frames of an
            // EATT SDU: the PDU is decoded at the last of them (`Reassembly`).
            s.field("att_fragment", bool: true)
            s.summary { o in Self.firstFragment(payload.count, of: length, into: &o) }
            return
        }
        do {
            let pdu = try ATTPDU(bytes: payload.prefix(length))
            var declarations: BluetoothUUID?
            if let bearer {
                switch pdu {
                case let .readByTypeRequest(_, _, type):
                    if attTypeRequested.count >= ChannelTable.limit { attTypeRequested.removeAll() }
                    attTypeRequested[bearer.key] = type
                case .readByTypeResponse: declarations = attTypeRequested[bearer.answered]
                default: break
                }
            }
            Self.attParameters(pdu, declarations: declarations, into: &s)
        } catch {
            let text = "\(error)"
            s.field("att_malformed", string: text)
            s.detail { o in o.put("Malformed: "); o.put(text) }
        }
    }

    /// An SMP command (Vol 3, Part H, §3), field by field; key material only with `showKeys`.
    func smp<S: FrameSink>(_ payload: [UInt8], into s: inout S) {
        let pdu: SMPPDU
        do { pdu = try SMPPDU(payload) } catch {
            let text = "\(error)"
            s.field("smp_error", string: text)
            s.summary { o in
                // An L2CAP length of 0 leaves no opcode to show.
                if let op = payload.first {
                    o.put(" SMP opcode=0x")
                    o.hex(UInt64(op), width: 2)
                } else {
                    o.put(" SMP")
                }
                o.put(" (")
                o.put(text)
                o.put(")")
            }
            return
        }
        s.field("smp_name", string: pdu.code.name)
        s.summary { o in o.put(" SMP "); o.put(pdu.code.name) }
        let keys = showKeys
        func key(_ name: StaticString, _ bytes: [UInt8]) {
            // Values on the wire are least significant octet first; shown as the spec writes them.
            s.key(name)
            if keys { s.string(Array(bytes.reversed()).hexString) } else { s.string("<redacted>") }
        }
        func flag(_ name: StaticString, _ v: Bool) {
            s.key(name)
            s.bool(v)
            s.summary { o in o.put(" "); o.put(name); o.put(v ? "=true" : "=false") }
        }
        func named(_ name: StaticString, _ v: String, brief: Bool) {
            s.key(name)
            s.string(v)
            if brief { s.summary { o in o.put(" "); o.put(name); o.put("="); o.put(v) } }
        }
        s.beginParams()
        switch pdu {
        case let .pairingRequest(p), let .pairingResponse(p):
            named("io_capability", p.ioCapability.description, brief: true)
            s.field("oob", bool: p.oobDataPresent)
            s.field("bonding", bool: p.authentication.contains(.bonding))
            flag("mitm", p.authentication.contains(.mitm))
            flag("sc", p.authentication.contains(.secureConnections))
            s.field("keypress", bool: p.authentication.contains(.keypress))
            s.field("ct2", bool: p.authentication.contains(.ct2))
            s.field("max_key_size", int: Int(p.maximumKeySize))
            s.field("initiator_keys", string: Self.keyNames(p.initiatorKeys))
            s.field("responder_keys", string: Self.keyNames(p.responderKeys))
        case let .pairingConfirm(v): key("confirm", v)
        case let .pairingRandom(v): key("random", v)
        case let .pairingFailed(r):
            s.field("reason", int: Int(r.rawValue))
            named("reason_name", r.description, brief: true)
        case let .encryptionInformation(ltk): key("ltk", ltk)
        case let .centralIdentification(ediv, rand):
            s.field("ediv", string: showKeys ? "0x" + hex(ediv, 4) : "<redacted>")
            s.field("rand", string: showKeys ? "0x" + String(rand, radix: 16) : "<redacted>")
        case let .identityInformation(irk): key("irk", irk)
        case let .identityAddressInformation(type, address):
            s.field("address_type", string: type.description)
            named("address", address.description, brief: true)
        case let .signingInformation(csrk): key("csrk", csrk)
        case let .securityRequest(a):
            s.field("bonding", bool: a.contains(.bonding))
            flag("mitm", a.contains(.mitm))
            flag("sc", a.contains(.secureConnections))
        case let .pairingPublicKey(x, y):
            // Public keys are not secret.
            s.field("x", string: Array(x.reversed()).hexString)
            s.field("y", string: Array(y.reversed()).hexString)
        case let .pairingDHKeyCheck(v): key("dhkey_check", v)
        case let .keypressNotification(t): s.field("notification", string: t.description)
        }
        s.endParams()
    }

    static func keyNames(_ k: KeyDistribution) -> String {
        var names: [String] = []
        if k.contains(.encryptionKey) { names.append("EncKey") }
        if k.contains(.identityKey) { names.append("IdKey") }
        if k.contains(.signingKey) { names.append("SignKey") }
        if k.contains(.linkKey) { names.append("LinkKey") }
        return names.isEmpty ? "none" : names.joined(separator: "|")
    }

    static let monitorNames: [Int: String] = [
        0: "New Index", 1: "Delete Index", 8: "Open Index", 9: "Close Index", 10: "Index Info", 11: "Vendor Diagnostic",
        12: "System Note", 13: "User Logging", 14: "Control Open", 15: "Control Close", 16: "Control Command",
        17: "Control Event",
    ]

    static let attNames: [UInt8: String] = [
        0x01: "Error Response", 0x02: "Exchange MTU Request", 0x03: "Exchange MTU Response",
        0x04: "Find Information Request", 0x05: "Find Information Response", 0x06: "Find By Type Value Request",
        0x07: "Find By Type Value Response", 0x08: "Read By Type Request", 0x09: "Read By Type Response",
        0x0A: "Read Request", 0x0B: "Read Response", 0x0C: "Read Blob Request", 0x0D: "Read Blob Response",
        0x0E: "Read Multiple Request", 0x0F: "Read Multiple Response", 0x10: "Read By Group Type Request",
        0x11: "Read By Group Type Response", 0x12: "Write Request", 0x13: "Write Response", 0x16: "Prepare Write Request",
        0x17: "Prepare Write Response", 0x18: "Execute Write Request", 0x19: "Execute Write Response",
        0x1B: "Handle Value Notification", 0x1D: "Handle Value Indication", 0x1E: "Handle Value Confirmation",
        0x20: "Read Multiple Variable Request", 0x21: "Read Multiple Variable Response",
        0x23: "Multiple Handle Value Notification", 0x52: "Write Command", 0xD2: "Signed Write Command",
    ]

    /// `attNames` indexed by opcode.
    static let attNameTable: [String?] = (0..<256).map { attNames[UInt8($0)] }

    static let advTypeNames = ["ADV_IND", "ADV_DIRECT_IND", "ADV_SCAN_IND", "ADV_NONCONN_IND", "SCAN_RSP"]
}

/// Finds a value's top-level `connectionHandle`.
struct HandleFinder: FieldVisitor {
    var handle: Int?
    private var depth = 0
    private var wanted = false
    mutating func key(_ name: StaticString) {
        wanted = depth == 0 && name.utf8CodeUnitCount == 16 && name.withUTF8Buffer { $0.elementsEqual("connectionHandle".utf8) }
    }
    mutating func int(_ value: Int) { if wanted { handle = value }; wanted = false }
    mutating func uint64(_ value: UInt64) { wanted = false }
    mutating func bool(_ value: Bool) { wanted = false }
    mutating func null() { wanted = false }
    mutating func text(_ value: String) { wanted = false }
    mutating func hex(_ bytes: [UInt8]) { wanted = false }
    mutating func beginObject() { depth += 1; wanted = false }
    mutating func endObject() { depth -= 1 }
    mutating func beginArray() { depth += 1; wanted = false }
    mutating func endArray() { depth -= 1 }
}

extension Array {
    subscript(safe i: Int) -> Element? { indices.contains(i) ? self[i] : nil }
}

func hex<T: BinaryInteger>(_ v: T, _ width: Int) -> String {
    let s = String(v, radix: 16)
    return String(repeating: "0", count: Swift.max(0, width - s.count)) + s
}
