// An ATT PDU's parameters as btmon shows them (Vol 3, Part F, §3.4): the MTU, handle
// ranges, attribute types by name, each entry of a discovery response, values, offsets,
// the request and error of an Error Response. Text: one detail line per parameter
// (entries one per line); JSON: `att_*` fields beside `att_opcode` (docs/trace-json.md).

import ATT
import HCI

extension FrameDecoder {
    /// The parameters of `pdu`, a whole ATT PDU (not the first fragment of one).
    /// `declarations`: the attribute type a Read By Type Response answers, when known;
    /// its characteristic and include declarations are then shown field by field.
    static func attParameters<S: FrameSink>(_ pdu: ATTPDU, declarations: BluetoothUUID? = nil, into s: inout S) {
        let json = s.writesFields
        switch pdu {
        case let .errorResponse(request, _, error):
            if json {
                s.field("att_request", int: Int(request.rawValue))
                s.field("att_request_name", string: request.description)
                s.field("att_error_name", string: error.name)
            }
            s.detail { o in
                o.put("Request: "); o.put(request.description); o.put(" (0x"); o.hex(UInt64(request.rawValue), width: 2); o.put(")")
            }
            s.detail { o in o.put("Error: "); o.put(error.name); o.put(" (0x"); o.hex(UInt64(error.rawValue), width: 2); o.put(")") }
        case let .exchangeMTURequest(mtu), let .exchangeMTUResponse(mtu):
            if json { s.field("att_mtu", int: Int(mtu)) }
            s.detail { o in o.put(pdu.opcode == .exchangeMTURequest ? "Client RX MTU: " : "Server RX MTU: "); o.decimal(Int(mtu)) }
        case let .findInformationRequest(start, end):
            range(start, end, into: &s)
        case let .findInformationResponse(entries):
            if json {
                s.key("att_entries")
                s.beginArray()
                for e in entries {
                    s.beginObject(); s.field("handle", int: Int(e.handle)); s.field("uuid", string: e.uuid.description); s.endObject()
                }
                s.endArray()
            }
            for e in entries { s.detail { o in handle(e.handle, into: &o); o.put(": "); o.put(uuidText(e.uuid)) } }
        case let .findByTypeValueRequest(start, end, type, value):
            range(start, end, into: &s)
            attributeType(BluetoothUUID(type), into: &s)
            self.value(value, into: &s)
        case let .findByTypeValueResponse(ranges):
            if json {
                s.key("att_entries")
                s.beginArray()
                for r in ranges {
                    s.beginObject(); s.field("handle", int: Int(r.found)); s.field("end", int: Int(r.groupEnd)); s.endObject()
                }
                s.endArray()
            }
            for r in ranges { s.detail { o in o.put("Handle range: "); handle(r.found, into: &o); o.put("-"); handle(r.groupEnd, into: &o) } }
        case let .readByTypeRequest(start, end, type), let .readByGroupTypeRequest(start, end, type):
            range(start, end, into: &s)
            attributeType(type, into: &s)
        case let .readByTypeResponse(entries), let .multipleHandleValueNotification(entries):
            let decoded = entries.map { declaration($0.value, type: declarations) }
            if json {
                s.key("att_entries")
                s.beginArray()
                for (e, d) in zip(entries, decoded) {
                    s.beginObject()
                    s.field("handle", int: Int(e.handle)); s.field("value", hex: e.value)
                    if let d {
                        for (k, v) in d.fields {
                            s.key(k)
                            switch v {
                            case let .int(i): s.int(i)
                            case let .string(t): s.string(t)
                            }
                        }
                    }
                    s.endObject()
                }
                s.endArray()
            }
            for (e, d) in zip(entries, decoded) {
                s.detail { o in
                    o.put("Handle "); handle(e.handle, into: &o); o.put(": "); o.hexBytes(e.value)
                    if let d { o.put(" ("); o.put(d.text); o.put(")") }
                }
            }
        case let .readByGroupTypeResponse(groups):
            if json {
                s.key("att_entries")
                s.beginArray()
                for g in groups {
                    s.beginObject()
                    s.field("handle", int: Int(g.handle)); s.field("end", int: Int(g.groupEnd)); s.field("value", hex: g.value)
                    s.endObject()
                }
                s.endArray()
            }
            // The grouping types are the service declarations: each value is a service's UUID.
            for g in groups {
                s.detail { o in
                    handle(g.handle, into: &o); o.put("-"); handle(g.groupEnd, into: &o); o.put(": ")
                    if let u = try? BluetoothUUID(littleEndian: g.value) { o.put(uuidText(u)) } else { o.hexBytes(g.value) }
                }
            }
        case .readRequest, .writeResponse, .executeWriteResponse, .handleValueConfirmation:
            break  // the handle, where there is one, is in the summary
        case let .readResponse(value), let .readBlobResponse(value), let .readMultipleResponse(value):
            self.value(value, into: &s)
        case let .readBlobRequest(_, offset):
            self.offset(offset, into: &s)
        case let .readMultipleRequest(handles), let .readMultipleVariableRequest(handles):
            if json {
                s.key("att_handles")
                s.beginArray()
                for h in handles { s.int(Int(h)) }
                s.endArray()
            }
            s.detail { o in
                o.put("Handles: ")
                for (i, h) in handles.enumerated() {
                    if i > 0 { o.put(", ") }
                    handle(h, into: &o)
                }
            }
        case let .readMultipleVariableResponse(values):
            if json {
                s.key("att_entries")
                s.beginArray()
                for v in values {
                    s.beginObject(); s.field("length", int: Int(v.length)); s.field("value", hex: v.value); s.endObject()
                }
                s.endArray()
            }
            for v in values {
                s.detail { o in
                    o.put("Length "); o.decimal(Int(v.length)); o.put(": "); o.hexBytes(v.value)
                    if !v.isComplete { o.put(" (cut short)") }
                }
            }
        case let .writeRequest(_, value), let .writeCommand(_, value), let .handleValueNotification(_, value), let .handleValueIndication(_, value):
            self.value(value, into: &s)
        case let .prepareWriteRequest(_, offset, value), let .prepareWriteResponse(_, offset, value):
            self.offset(offset, into: &s)
            self.value(value, into: &s)
        case let .executeWriteRequest(flags):
            if json { s.field("att_flags", int: Int(flags)) }
            s.detail { o in
                o.put("Flags: ")
                switch flags {
                case 0x00: o.put("Cancel all prepared writes")
                case 0x01: o.put("Immediately write all pending prepared values")
                default: o.put("Reserved")
                }
                o.put(" (0x"); o.hex(UInt64(flags), width: 2); o.put(")")
            }
        case let .signedWriteCommand(_, value, signature):
            self.value(value, into: &s)
            // The signature is the message authentication code of the value (not a key).
            if json { s.field("att_signature", hex: signature) }
            s.detail { o in o.put("Signature: "); o.hexBytes(signature) }
        case .unknown:
            break
        }
    }

    enum DeclarationField { case int(Int), string(String) }

    /// A characteristic (2803) or include (2802) declaration's fields (Vol 3, Part G,
    /// §3.3.1, §3.2), when `type` says the value is one and its length is one's.
    static func declaration(_ value: [UInt8], type: BluetoothUUID?) -> (fields: [(StaticString, DeclarationField)], text: String)? {
        func u16(_ i: Int) -> UInt16 { UInt16(value[i]) | UInt16(value[i + 1]) << 8 }
        func handleText(_ h: UInt16) -> String { "0x" + hex(h, 4) }
        switch type {
        case GATTTypes.characteristic where value.count == 5 || value.count == 19:
            guard let uuid = try? BluetoothUUID(littleEndian: Array(value[3...])) else { return nil }
            let properties = value[0], valueHandle = u16(1)
            let names = propertyNames.indices.filter { properties & (1 << $0) != 0 }.map { propertyNames[$0] }.joined(separator: ", ")
            return ([("properties", .int(Int(properties))), ("properties_names", .string(names)), ("value_handle", .int(Int(valueHandle))),
                     ("uuid", .string(uuid.description))],
                    "\(uuidText(uuid)) at \(handleText(valueHandle)): \(names.isEmpty ? "no properties" : names)")
        case GATTTypes.include where value.count == 4 || value.count == 6:
            let start = u16(0), end = u16(2)
            let uuid = value.count == 6 ? BluetoothUUID(u16(4)) : nil
            return ([("included_start", .int(Int(start))), ("included_end", .int(Int(end)))] + (uuid.map { [("uuid", .string($0.description))] } ?? []),
                    "includes \(handleText(start))-\(handleText(end))" + (uuid.map { ": " + uuidText($0) } ?? ""))
        default:
            return nil
        }
    }

    /// The declaration types a Read By Type Response's entries are decoded by.
    enum GATTTypes {
        static let include = BluetoothUUID(0x2802)
        static let characteristic = BluetoothUUID(0x2803)
    }

    /// A characteristic's properties by bit (Vol 3, Part G, §3.3.1.1).
    static let propertyNames = ["Broadcast", "Read", "Write Without Response", "Write", "Notify", "Indicate",
                                "Authenticated Signed Writes", "Extended Properties"]

    private static func handle(_ h: UInt16, into o: inout OutputBytes) {
        o.put("0x")
        o.hex(UInt64(h), width: 4)
    }

    /// A UUID by name with its digits ("Primary Service (2800)"), else its digits.
    static func uuidText(_ u: BluetoothUUID) -> String { u.name.map { "\($0) (\(u))" } ?? u.description }

    private static func range<S: FrameSink>(_ start: UInt16, _ end: UInt16, into s: inout S) {
        if s.writesFields {
            s.field("att_start", int: Int(start))
            s.field("att_end", int: Int(end))
        }
        s.detail { o in o.put("Handle range: "); handle(start, into: &o); o.put("-"); handle(end, into: &o) }
    }

    private static func attributeType<S: FrameSink>(_ type: BluetoothUUID, into s: inout S) {
        if s.writesFields { s.field("att_type", string: type.description) }
        s.detail { o in o.put("Attribute type: "); o.put(uuidText(type)) }
    }

    private static func value<S: FrameSink>(_ value: [UInt8], into s: inout S) {
        if s.writesFields { s.field("att_value", hex: value) }
        s.detail { o in o.put("Value: "); o.hexBytes(value) }
    }

    private static func offset<S: FrameSink>(_ offset: UInt16, into s: inout S) {
        if s.writesFields { s.field("att_offset", int: Int(offset)) }
        s.detail { o in o.put("Offset: "); o.decimal(Int(offset)) }
    }
}
