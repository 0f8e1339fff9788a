// Turns trace records into what `btctl trace show` prints: one human summary line
// plus detail lines, and one JSON object per frame (schema: docs/trace-json.md).
// Command and event parameters are listed field by field from the typed codecs;
// ACL frames are opened down to the L2CAP channel and the ATT / SMP / signaling
// opcode so later layers' traffic is visible.

import HCI
import L2CAP
import SMP

public struct DecodedFrame: Sendable {
    public var json: JSONValue
    public var summary: String
    public var details: [String]
}

public struct FrameDecoder: Sendable {
    /// Show key material (LTK, IRK, CSRK, SMP confirm/random/DHKey check values, the
    /// LTK in LE Enable Encryption and LTK Request Reply). Off: shown as "<redacted>".
    public var showKeys: Bool

    public init(showKeys: Bool = false) { self.showKeys = showKeys }

    /// One packet by name, as `trace show` prints it: the summary, then its fields.
    public func describe(_ packet: HCIPacket) -> String {
        var f = Builder()
        decodePacket(packet, into: &f)
        return ([f.summary] + f.details.map { String($0.drop { $0 == " " }) }).joined(separator: "; ")
    }

    public func decode(_ record: TraceRecord, number: Int, firstTimestamp: Int64) -> DecodedFrame {
        var f = Builder()
        f.add("frame", .int(number))
        f.add("ts_us", .int(Int(record.timestampMicros)))
        f.add("dir", .string(record.direction.rawValue))
        if let idx = record.adapterIndex { f.add("index", .int(Int(idx))) }
        let rel = record.timestampMicros &- firstTimestamp
        let numberColumn: String = pad("#\(number)", 7)
        let dirColumn: String = pad(record.direction.rawValue, 7)
        let head: String = numberColumn + " " + formatSeconds(rel) + "  " + dirColumn + " "
        switch record.content {
        case let .packet(p):
            f.add("type", .string(p.type.description))
            decodePacket(p, into: &f)
        case let .undecodable(type, bytes, error):
            f.add("type", .string(type?.description ?? "unknown"))
            f.add("error", .string(error.description))
            f.add("bytes", .string(bytes.hexString))
            f.summary = "\(type?.description ?? "unknown") (malformed: \(error))"
        case let .monitor(opcode, data):
            f.add("type", .string("monitor"))
            f.add("monitor_opcode", .int(Int(opcode)))
            let name = monitorNames[Int(opcode)] ?? "Opcode \(opcode)"
            f.add("name", .string(name))
            if opcode == 12 || opcode == 13 {  // system note, user logging
                let text = String(decoding: data.prefix { $0 != 0 }, as: UTF8.self)
                f.add("text", .string(text))
                f.summary = "monitor \(name): \(text)"
            } else {
                f.add("bytes", .string(data.hexString))
                f.summary = "monitor \(name)"
            }
        }
        return DecodedFrame(json: .object(f.fields), summary: head + f.summary, details: f.details)
    }

    struct Builder {
        var fields: [(String, JSONValue)] = []
        var summary = ""
        var details: [String] = []
        mutating func add(_ k: String, _ v: JSONValue) { fields.append((k, v)) }
    }

    func decodePacket(_ p: HCIPacket, into f: inout Builder) {
        switch p {
        case let .command(opcode, params):
            f.add("opcode", .int(Int(opcode.rawValue)))
            f.add("ogf", .int(Int(opcode.ogf)))
            f.add("ocf", .int(Int(opcode.ocf)))
            f.add("name", .string(opcode.description))
            f.summary = "command  \(opcode) [0x\(hex(opcode.rawValue, 4))]"
            do {
                if let c = try HCICommandRegistry.decode(opcode: opcode, parameters: params) {
                    let fields = redact(Self.fields(of: c))
                    addParams(fields, into: &f)
                } else if !params.isEmpty {
                    f.add("params_hex", .string(params.hexString))
                    f.details.append("parameters: \(params.hexString)")
                }
            } catch {
                f.add("error", .string("\(error)"))
                f.add("params_hex", .string(params.hexString))
                f.details.append("malformed parameters (\(error)): \(params.hexString)")
            }
        case let .event(code, params):
            f.add("event", .int(Int(code.rawValue)))
            f.summary = "event    \(code)"
            do {
                let e = try HCIEvent(code: code, parameters: params)
                decodeEvent(e, into: &f)
            } catch {
                f.add("name", .string(code.description))
                f.add("error", .string("\(error)"))
                f.add("params_hex", .string(params.hexString))
                f.details.append("malformed parameters (\(error)): \(params.hexString)")
            }
        case let .acl(a):
            decodeACL(a, into: &f)
        case let .sco(raw), let .iso(raw):
            let handle = raw.count >= 2 ? Int(UInt16(raw[0]) | UInt16(raw[1] & 0x0F) << 8) : 0
            f.add("handle", .int(handle))
            f.add("length", .int(Swift.max(0, raw.count - (p.type == .iso ? 4 : 3))))
            f.summary = "\(p.type)      handle=0x\(hex(UInt16(handle), 4)) \(raw.count) bytes"
        }
    }

    func decodeEvent(_ e: HCIEvent, into f: inout Builder) {
        switch e {
        case let .commandComplete(cc):
            f.add("name", .string("Command Complete"))
            f.add("opcode", .int(Int(cc.commandOpcode.rawValue)))
            f.add("ogf", .int(Int(cc.commandOpcode.ogf)))
            f.add("ocf", .int(Int(cc.commandOpcode.ocf)))
            f.add("command", .string(cc.commandOpcode.description))
            f.add("ncmd", .int(Int(cc.numHCICommandPackets)))
            var line = "event    Command Complete: \(cc.commandOpcode)"
            if let s = cc.status {
                f.add("status", .int(Int(s.rawValue)))
                f.add("status_name", .string(s.name ?? "unknown"))
                line += " status=\(s)"
                let rest = Array(cc.returnParameters.dropFirst())
                if s.isSuccess, let r = try? HCICommandRegistry.decodeReturn(opcode: cc.commandOpcode, returnParameters: rest) {
                    addParams(redact(Self.fields(of: r)), into: &f)
                } else if !rest.isEmpty {
                    f.add("params_hex", .string(rest.hexString))
                    f.details.append("return parameters: \(rest.hexString)")
                }
            }
            f.summary = line
        case let .commandStatus(cs):
            f.add("name", .string("Command Status"))
            f.add("opcode", .int(Int(cs.commandOpcode.rawValue)))
            f.add("ogf", .int(Int(cs.commandOpcode.ogf)))
            f.add("ocf", .int(Int(cs.commandOpcode.ocf)))
            f.add("command", .string(cs.commandOpcode.description))
            f.add("ncmd", .int(Int(cs.numHCICommandPackets)))
            f.add("status", .int(Int(cs.status.rawValue)))
            f.add("status_name", .string(cs.status.name ?? "unknown"))
            f.summary = "event    Command Status: \(cs.commandOpcode) status=\(cs.status)"
        case let .le(le):
            f.add("name", .string(le.subevent.description))
            f.add("subevent", .int(Int(le.subevent.rawValue)))
            f.summary = "event    LE Meta: \(le.subevent)"
            decodeLE(le, into: &f)
        case let .unknown(code, params):
            f.add("name", .string(code.description))
            if !params.isEmpty {
                f.add("params_hex", .string(params.hexString))
                f.details.append("parameters: \(params.hexString)")
            }
        default:
            f.add("name", .string(e.code.description))
            let fields = Self.fields(of: Self.payload(of: e))
            if let s = fields.first(where: { $0.0 == "status" }), case let .int(v) = s.1 { f.add("status", .int(v)) }
            if let h = fields.first(where: { $0.0 == "connectionHandle" }), case let .int(v) = h.1 { f.add("handle", .int(v)) }
            addParams(fields, into: &f)
        }
    }

    static func payload(of e: HCIEvent) -> Any {
        switch e {
        case let .disconnectionComplete(x): return x
        case let .numberOfCompletedPackets(x): return x
        case let .encryptionChange(x): return x
        case let .encryptionKeyRefreshComplete(x): return x
        case let .readRemoteVersionInformationComplete(x): return x
        case let .hardwareError(x): return x
        case let .dataBufferOverflow(x): return x
        default: return ()
        }
    }

    func decodeLE(_ le: LEMetaEvent, into f: inout Builder) {
        switch le {
        case let .advertisingReport(r):
            f.add("reports", .array(r.reports.enumerated().map { i, rp in
                report("report \(i): \(advTypeName(rp.eventType)) \(rp.address) (\(rp.addressType)) rssi=\(rp.rssi) dBm",
                       address: rp.address, type: rp.addressType, rssi: rp.rssi, eventType: Int(rp.eventType), data: rp.data, into: &f)
            }))
        case let .extendedAdvertisingReport(r):
            f.add("reports", .array(r.reports.enumerated().map { i, rp in
                report("report \(i): event_type=0x\(hex(rp.eventType, 4)) \(rp.address) (\(rp.addressType)) rssi=\(rp.rssi) dBm tx_power=\(rp.txPower)",
                       address: rp.address, type: rp.addressType, rssi: rp.rssi, eventType: Int(rp.eventType), data: rp.data, into: &f)
            }))
        case let .directedAdvertisingReport(r):
            var reports: [JSONValue] = []
            for rp in r.reports {
                f.details.append("report: \(rp.address) (\(rp.addressType)) → \(rp.directAddress) rssi=\(rp.rssi) dBm")
                reports.append(.object([("address", .string(rp.address.description)), ("address_type", .string(rp.addressType.description)),
                                        ("rssi", .int(Int(rp.rssi))), ("ad_types", .array([]))]))
            }
            f.add("reports", .array(reports))
        case .scanTimeout:
            break
        case let .unknown(_, params):
            if !params.isEmpty { f.add("params_hex", .string(params.hexString)) }
        default:
            let payload: Any
            switch le {
            case let .connectionComplete(x): payload = x
            case let .connectionUpdateComplete(x): payload = x
            case let .readRemoteFeaturesComplete(x): payload = x
            case let .longTermKeyRequest(x): payload = x
            case let .dataLengthChange(x): payload = x
            case let .enhancedConnectionComplete(x): payload = x
            case let .phyUpdateComplete(x): payload = x
            case let .advertisingSetTerminated(x): payload = x
            case let .channelSelectionAlgorithm(x): payload = x
            default: payload = ()
            }
            let fields = Self.fields(of: payload)
            if let s = fields.first(where: { $0.0 == "status" }), case let .int(v) = s.1 { f.add("status", .int(v)) }
            if let h = fields.first(where: { $0.0 == "connectionHandle" }), case let .int(v) = h.1 { f.add("handle", .int(v)) }
            addParams(fields, into: &f)
        }
    }

    /// One advertising report: its detail line, then each AD structure, and its JSON.
    /// Assigned-number names for an AD structure's value: the services a UUID list names,
    /// the company of manufacturer data, the appearance, a service data UUID.
    static func adMeaning(_ s: ADStructure) -> String? {
        func uuids(_ width: Int) -> String? {
            guard width > 0, s.data.count % width == 0 else { return nil }
            let names = stride(from: 0, to: s.data.count, by: width).compactMap { i -> String? in
                (try? BluetoothUUID(littleEndian: Array(s.data[i..<i + width])))?.name
            }
            return names.isEmpty ? nil : names.joined(separator: ", ")
        }
        func u16(_ i: Int) -> UInt16? { s.data.count >= i + 2 ? UInt16(s.data[i]) | UInt16(s.data[i + 1]) << 8 : nil }
        switch s.type {
        case 0x02, 0x03, 0x14: return uuids(2)
        case 0x04, 0x05, 0x1F: return uuids(4)
        case 0x06, 0x07, 0x15: return uuids(16)
        case 0x16: return u16(0).flatMap { BluetoothUUID($0).name }
        case 0x19: return u16(0).flatMap(AssignedNumbers.appearanceName)
        case 0xFF: return u16(0).flatMap(AssignedNumbers.companyName)
        default: return nil
        }
    }

    func report(_ line: String, address: BluetoothAddress, type: AddressType, rssi: Int8, eventType: Int, data: [UInt8],
                into f: inout Builder) -> JSONValue {
        f.details.append(line)
        let (ads, damage) = ADStructure.parse(data)
        var ad: [JSONValue] = []
        for s in ads {
            let name = s.typeName ?? "Unknown AD type"
            let value: String
            if s.type == 0x08 || s.type == 0x09 || s.type == 0x30 {
                value = "\"" + String(decoding: s.data, as: UTF8.self) + "\""
            } else {
                value = s.data.hexString
            }
            let meaning = Self.adMeaning(s)
            f.details.append("  AD 0x\(hex(s.type, 2)) \(name): \(value)" + (meaning.map { " (\($0))" } ?? ""))
            var o: [(String, JSONValue)] = [("type", .int(Int(s.type))), ("name", .string(name)), ("value", .string(value))]
            if let meaning { o.append(("meaning", .string(meaning))) }
            ad.append(.object(o))
        }
        if let damage { f.details.append("  AD damaged: \(damage)") }
        var o: [(String, JSONValue)] = [
            ("address", .string(address.description)), ("address_type", .string(type.description)),
            ("rssi", .int(Int(rssi))), ("event_type", .int(eventType)),
            ("ad_types", .array(ads.map { .int(Int($0.type)) })), ("ad", .array(ad)),
        ]
        if let damage { o.append(("ad_error", .string(damage.description))) }
        return .object(o)
    }

    func decodeACL(_ a: ACLDataPacket, into f: inout Builder) {
        f.add("handle", .int(Int(a.handle)))
        f.add("pb", .int(Int(a.boundary.rawValue)))
        f.add("bc", .int(Int(a.broadcast)))
        f.add("length", .int(a.data.count))
        f.summary = "acl      handle=0x\(hex(a.handle, 4)) pb=\(a.boundary) \(a.data.count) bytes"
        guard a.boundary != .continuing, a.data.count >= 4 else { return }
        let l2len = Int(UInt16(a.data[0]) | UInt16(a.data[1]) << 8)
        let cid = UInt16(a.data[2]) | UInt16(a.data[3]) << 8
        f.add("l2cap_length", .int(l2len))
        f.add("cid", .int(Int(cid)))
        let payload = Array(a.data.dropFirst(4))
        guard let op = payload.first else {
            f.summary += " L2CAP cid=0x\(hex(cid, 4))"
            return
        }
        switch cid {
        case 0x0004:
            f.add("att_opcode", .int(Int(op)))
            let name = attNames[op] ?? "ATT opcode 0x\(hex(op, 2))"
            f.add("att_name", .string(name))
            var text = " ATT \(name)"
            if [0x01].contains(op), payload.count >= 5 {
                let h = Int(UInt16(payload[2]) | UInt16(payload[3]) << 8)
                f.add("att_handle", .int(h))
                f.add("att_error", .int(Int(payload[4])))
                text += " handle=0x\(hex(UInt16(h), 4)) error=0x\(hex(payload[4], 2))"
            } else if [0x0A, 0x0C, 0x12, 0x16, 0x17, 0x1B, 0x1D, 0x52, 0xD2].contains(op), payload.count >= 3 {
                let h = Int(UInt16(payload[1]) | UInt16(payload[2]) << 8)
                f.add("att_handle", .int(h))
                text += " handle=0x\(hex(UInt16(h), 4))"
            }
            f.summary += text
        case 0x0005:
            f.add("signaling_code", .int(Int(op)))
            guard let cmd = try? SignalingCommand(bytes: payload) else {
                f.summary += " LE signaling code=0x\(hex(op, 2)) (malformed)"
                return
            }
            f.add("signaling_name", .string(cmd.code.description))
            f.add("signaling_id", .int(Int(cmd.identifier)))
            let fields = cmd.fields
            addParams(fields.map { ($0.name, JSONValue.int($0.value)) }, into: &f)
            let text = fields.map { $0.name.hasSuffix("cid") || $0.name.hasPrefix("cid") || $0.name == "spsm" ? "\($0.name)=0x\(hex(UInt16(truncatingIfNeeded: $0.value), 4))" : "\($0.name)=\($0.value)" }
            f.summary += " LE signaling \(cmd.code) id=\(cmd.identifier)" + (text.isEmpty ? "" : " " + text.joined(separator: " "))
        case 0x0040...0x007F:
            // A dynamic channel: a K-frame of an LE credit-based channel (its SDU length,
            // on an SDU's first K-frame, needs the channel's history to tell).
            f.add("k_frame", .bool(true))
            f.summary += " L2CAP dynamic cid=0x\(hex(cid, 4)) \(payload.count) bytes"
        case 0x0006:
            f.add("smp_opcode", .int(Int(op)))
            // A PDU longer than this fragment (Pairing Public Key over 27-byte buffers)
            // continues in the next ACL packets: named here, not decoded.
            guard payload.count >= l2len else {
                f.add("l2cap_fragment", .bool(true))
                let name = SMPCode(rawValue: op)?.name ?? "opcode 0x\(hex(op, 2))"
                f.summary += " SMP \(name) (first fragment: \(payload.count) of \(l2len) bytes)"
                return
            }
            decodeSMP(payload, into: &f)
        default:
            f.summary += " L2CAP cid=0x\(hex(cid, 4))"
        }
    }

    /// An SMP command (Vol 3, Part H, §3), field by field; key material only with `showKeys`.
    func decodeSMP(_ payload: [UInt8], into f: inout Builder) {
        let pdu: SMPPDU
        do { pdu = try SMPPDU(payload) } catch {
            f.add("smp_error", .string("\(error)"))
            f.summary += " SMP opcode=0x\(hex(payload[0], 2)) (\(error))"
            return
        }
        f.add("smp_name", .string(pdu.code.name))
        var fields: [(String, JSONValue)] = []
        func key(_ name: String, _ bytes: [UInt8]) {
            // Values on the wire are least significant octet first; shown as the spec writes them.
            fields.append((name, .string(showKeys ? Array(bytes.reversed()).hexString : "<redacted>")))
        }
        func features(_ p: PairingFeatures) {
            fields += [("io_capability", .string(p.ioCapability.description)), ("oob", .bool(p.oobDataPresent)),
                       ("bonding", .bool(p.authentication.contains(.bonding))), ("mitm", .bool(p.authentication.contains(.mitm))),
                       ("sc", .bool(p.authentication.contains(.secureConnections))), ("keypress", .bool(p.authentication.contains(.keypress))),
                       ("ct2", .bool(p.authentication.contains(.ct2))), ("max_key_size", .int(Int(p.maximumKeySize))),
                       ("initiator_keys", .string(Self.keyNames(p.initiatorKeys))), ("responder_keys", .string(Self.keyNames(p.responderKeys)))]
        }
        switch pdu {
        case let .pairingRequest(p), let .pairingResponse(p): features(p)
        case let .pairingConfirm(v): key("confirm", v)
        case let .pairingRandom(v): key("random", v)
        case let .pairingFailed(r): fields += [("reason", .int(Int(r.rawValue))), ("reason_name", .string(r.description))]
        case let .encryptionInformation(ltk): key("ltk", ltk)
        case let .centralIdentification(ediv, rand):
            fields += [("ediv", .string(showKeys ? "0x" + hex(ediv, 4) : "<redacted>")), ("rand", .string(showKeys ? "0x" + String(rand, radix: 16) : "<redacted>"))]
        case let .identityInformation(irk): key("irk", irk)
        case let .identityAddressInformation(type, address): fields += [("address_type", .string(type.description)), ("address", .string(address.description))]
        case let .signingInformation(csrk): key("csrk", csrk)
        case let .securityRequest(a):
            fields += [("bonding", .bool(a.contains(.bonding))), ("mitm", .bool(a.contains(.mitm))), ("sc", .bool(a.contains(.secureConnections)))]
        case let .pairingPublicKey(x, y):
            // Public keys are not secret.
            fields += [("x", .string(Array(x.reversed()).hexString)), ("y", .string(Array(y.reversed()).hexString))]
        case let .pairingDHKeyCheck(v): key("dhkey_check", v)
        case let .keypressNotification(t): fields.append(("notification", .string(t.description)))
        }
        addParams(fields, into: &f)
        let brief = fields.filter { ["io_capability", "mitm", "sc", "reason_name", "address"].contains($0.0) }.map { "\($0.0)=\(Self.text($0.1))" }
        f.summary += " SMP \(pdu.code.name)" + (brief.isEmpty ? "" : " " + brief.joined(separator: " "))
    }

    static func keyNames(_ k: KeyDistribution) -> String {
        var names: [String] = []
        if k.contains(.encryptionKey) { names.append("EncKey") }
        if k.contains(.identityKey) { names.append("IdKey") }
        if k.contains(.signingKey) { names.append("SignKey") }
        if k.contains(.linkKey) { names.append("LinkKey") }
        return names.isEmpty ? "none" : names.joined(separator: "|")
    }

    /// Hides the LTK in LE Enable Encryption / LTK Request Reply unless `showKeys`.
    func redact(_ fields: [(String, JSONValue)]) -> [(String, JSONValue)] {
        guard !showKeys else { return fields }
        return fields.map { $0.0 == "longTermKey" ? ($0.0, .string("<redacted>")) : $0 }
    }

    func addParams(_ fields: [(String, JSONValue)], into f: inout Builder) {
        guard !fields.isEmpty else { return }
        f.add("params", .object(fields))
        for (k, v) in fields { f.details.append("\(k): \(Self.text(v))") }
    }

    static func text(_ v: JSONValue) -> String {
        switch v {
        case let .string(s): return s
        case let .int(i): return String(i)
        case .double: return v.rendered
        case let .bool(b): return String(b)
        case .null: return "null"
        case let .array(a): return "[" + a.map(text).joined(separator: ", ") + "]"
        case let .object(o): return "{" + o.map { "\($0.0)=\(text($0.1))" }.joined(separator: ", ") + "}"
        }
    }

    /// The stored properties of a codec value as JSON, by reflection (names are the
    /// Swift property names; the types are the codecs', so this cannot drift from them).
    static func fields(of value: Any) -> [(String, JSONValue)] {
        Mirror(reflecting: value).children.compactMap { child in
            guard let label = child.label else { return nil }
            return (label, json(child.value))
        }
    }

    static func json(_ v: Any) -> JSONValue {
        switch v {
        case let b as [UInt8]: return .string(b.hexString)
        case let i as UInt8: return .int(Int(i))
        case let i as Int8: return .int(Int(i))
        case let i as UInt16: return .int(Int(i))
        case let i as UInt32: return .int(Int(i))
        case let i as UInt64: return i <= UInt64(Int.max) ? .int(Int(i)) : .string(String(i))
        case let i as Int: return .int(i)
        case let b as Bool: return .bool(b)
        case let s as HCIStatus: return .string(s.description)
        case let a as BluetoothAddress: return .string(a.description)
        case let c as any CustomStringConvertible where !(v is any Collection) && Mirror(reflecting: v).displayStyle != .struct:
            return .string(c.description)
        default:
            let m = Mirror(reflecting: v)
            if m.displayStyle == .optional {
                guard let inner = m.children.first?.value else { return .null }
                return json(inner)
            }
            if m.displayStyle == .collection { return .array(m.children.map { json($0.value) }) }
            if let rv = (v as? any RawRepresentable)?.rawValue as? UInt8 {
                let d = (v as? any CustomStringConvertible)?.description
                return d.map { .string($0) } ?? .int(Int(rv))
            }
            if m.children.isEmpty { return .string("\(v)") }
            return .object(fields(of: v))
        }
    }

    let monitorNames: [Int: String] = [
        0: "New Index", 1: "Delete Index", 8: "Open Index", 9: "Close Index", 10: "Index Info", 11: "Vendor Diagnostic",
        12: "System Note", 13: "User Logging", 14: "Control Open", 15: "Control Close", 16: "Control Command",
        17: "Control Event",
    ]

    let attNames: [UInt8: String] = [
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

    func advTypeName(_ t: UInt8) -> String {
        ["ADV_IND", "ADV_DIRECT_IND", "ADV_SCAN_IND", "ADV_NONCONN_IND", "SCAN_RSP"][safe: Int(t)] ?? "type \(t)"
    }
}

extension Array {
    subscript(safe i: Int) -> Element? { indices.contains(i) ? self[i] : nil }
}

func hex<T: BinaryInteger>(_ v: T, _ width: Int) -> String {
    let s = String(v, radix: 16)
    return String(repeating: "0", count: Swift.max(0, width - s.count)) + s
}

/// Microseconds as seconds with six decimals ("-0.000001" for negative values).
func formatSeconds(_ micros: Int64) -> String {
    let sign = micros < 0 ? "-" : ""
    let m = micros.magnitude
    let fs = String(m % 1_000_000)
    return sign + String(m / 1_000_000) + "." + String(repeating: "0", count: 6 - fs.count) + fs
}

func pad(_ s: String, _ width: Int) -> String {
    s.count >= width ? s : s + String(repeating: " ", count: width - s.count)
}
