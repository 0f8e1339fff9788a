// Decoding ATT PDUs (Vol 3, Part F, §3.4) through the bounds-checked reader.
// Every length rule the specification states is checked: fixed-size PDUs must be
// exactly that size, list PDUs must hold whole entries, UUIDs are 2 or 16 bytes,
// Read Multiple needs at least two handles.

import HCI

extension ATTPDU {
    /// Decodes one PDU. Throws `ATTDecodeError` (with the opcode) for malformed input.
    public init(bytes: [UInt8]) throws {
        try self.init(bytes: bytes[...])
    }

    /// Decodes one PDU from a slice of a frame, reading it in place: only the fields a
    /// PDU keeps (values, UUIDs, lists) are copied out.
    public init(bytes: ArraySlice<UInt8>) throws {
        guard let first = bytes.first else {
            throw ATTDecodeError(opcode: ATTOpcode(rawValue: 0), reason: "empty PDU")
        }
        let op = ATTOpcode(rawValue: first)
        var r = ByteReader(bytes.dropFirst(), context: op.description)
        func bad(_ why: String) -> ATTDecodeError { ATTDecodeError(opcode: op, reason: why) }
        func exact(_ n: Int) throws { if r.remaining != n { throw bad("parameters are \(r.remaining) bytes, expected \(n)") } }
        func u16() throws -> UInt16 { try r.readUInt16() }
        func uuid() throws -> BluetoothUUID {
            guard r.remaining == 2 || r.remaining == 16 else { throw bad("attribute type is \(r.remaining) bytes, expected 2 or 16") }
            return try BluetoothUUID(littleEndian: r.readRemaining())
        }
        do {
            switch op {
            case .errorResponse:
                try exact(4)
                self = .errorResponse(request: ATTOpcode(rawValue: try r.readUInt8()), handle: try u16(), error: ATTErrorCode(rawValue: try r.readUInt8()))
            case .exchangeMTURequest: try exact(2); self = .exchangeMTURequest(clientRxMTU: try u16())
            case .exchangeMTUResponse: try exact(2); self = .exchangeMTUResponse(serverRxMTU: try u16())
            case .findInformationRequest: try exact(4); self = .findInformationRequest(start: try u16(), end: try u16())
            case .findInformationResponse:
                let format = try r.readUInt8("Format")
                guard format == 1 || format == 2 else { throw bad("format \(format), expected 1 or 2") }
                let size = format == 1 ? 4 : 18
                guard r.remaining > 0, r.remaining % size == 0 else { throw bad("\(r.remaining) bytes is not a whole number of \(size)-byte entries") }
                var list: [HandleUUID] = []
                while !r.isAtEnd {
                    let h = try u16()
                    list.append(HandleUUID(handle: h, uuid: try BluetoothUUID(littleEndian: r.readBytes(size - 2))))
                }
                self = .findInformationResponse(list)
            case .findByTypeValueRequest:
                guard r.remaining >= 6 else { throw bad("parameters are \(r.remaining) bytes, expected at least 6") }
                self = .findByTypeValueRequest(start: try u16(), end: try u16(), type: try u16(), value: r.readRemaining())
            case .findByTypeValueResponse:
                guard r.remaining > 0, r.remaining % 4 == 0 else { throw bad("\(r.remaining) bytes is not a whole number of 4-byte entries") }
                var list: [HandleRange] = []
                while !r.isAtEnd { list.append(HandleRange(found: try u16(), groupEnd: try u16())) }
                self = .findByTypeValueResponse(list)
            case .readByTypeRequest, .readByGroupTypeRequest:
                guard r.remaining == 6 || r.remaining == 20 else { throw bad("parameters are \(r.remaining) bytes, expected 6 or 20") }
                let s = try u16(), e = try u16(), t = try uuid()
                self = op == .readByTypeRequest ? .readByTypeRequest(start: s, end: e, type: t) : .readByGroupTypeRequest(start: s, end: e, type: t)
            case .readByTypeResponse:
                let len = Int(try r.readUInt8("Length"))
                guard len >= 2, r.remaining > 0, r.remaining % len == 0 else { throw bad("length \(len) does not divide \(r.remaining) bytes") }
                var list: [HandleValue] = []
                while !r.isAtEnd { list.append(HandleValue(handle: try u16(), value: try r.readBytes(len - 2))) }
                self = .readByTypeResponse(list)
            case .readRequest: try exact(2); self = .readRequest(handle: try u16())
            case .readResponse: self = .readResponse(value: r.readRemaining())
            case .readBlobRequest: try exact(4); self = .readBlobRequest(handle: try u16(), offset: try u16())
            case .readBlobResponse: self = .readBlobResponse(value: r.readRemaining())
            case .readMultipleRequest, .readMultipleVariableRequest:
                guard r.remaining >= 4, r.remaining % 2 == 0 else { throw bad("needs at least two 2-byte handles, got \(r.remaining) bytes") }
                var hs: [UInt16] = []
                while !r.isAtEnd { hs.append(try u16()) }
                self = op == .readMultipleRequest ? .readMultipleRequest(handles: hs) : .readMultipleVariableRequest(handles: hs)
            case .readMultipleResponse: self = .readMultipleResponse(values: r.readRemaining())
            case .readByGroupTypeResponse:
                let len = Int(try r.readUInt8("Length"))
                guard len >= 4, r.remaining > 0, r.remaining % len == 0 else { throw bad("length \(len) does not divide \(r.remaining) bytes") }
                var list: [GroupValue] = []
                while !r.isAtEnd { list.append(GroupValue(handle: try u16(), groupEnd: try u16(), value: try r.readBytes(len - 4))) }
                self = .readByGroupTypeResponse(list)
            case .writeRequest, .writeCommand, .handleValueNotification, .handleValueIndication:
                guard r.remaining >= 2 else { throw bad("no attribute handle") }
                let h = try u16(), v = r.readRemaining()
                switch op {
                case .writeRequest: self = .writeRequest(handle: h, value: v)
                case .writeCommand: self = .writeCommand(handle: h, value: v)
                case .handleValueNotification: self = .handleValueNotification(handle: h, value: v)
                default: self = .handleValueIndication(handle: h, value: v)
                }
            case .writeResponse: try exact(0); self = .writeResponse
            case .prepareWriteRequest, .prepareWriteResponse:
                guard r.remaining >= 4 else { throw bad("parameters are \(r.remaining) bytes, expected at least 4") }
                let h = try u16(), o = try u16(), v = r.readRemaining()
                self = op == .prepareWriteRequest ? .prepareWriteRequest(handle: h, offset: o, value: v) : .prepareWriteResponse(handle: h, offset: o, value: v)
            case .executeWriteRequest:
                try exact(1)
                let f = try r.readUInt8()
                guard f <= 1 else { throw bad("flags 0x\(hex2(f)), expected 0x00 or 0x01") }
                self = .executeWriteRequest(flags: f)
            case .executeWriteResponse: try exact(0); self = .executeWriteResponse
            case .handleValueConfirmation: try exact(0); self = .handleValueConfirmation
            case .readMultipleVariableResponse:
                var values: [LengthValue] = []
                // The list is cut at ATT_MTU - 1 octets (§3.4.4.12): the last value may be
                // short of its length, and a lone octet at the end is half of a length.
                while r.remaining >= 2 {
                    let n = try u16()
                    values.append(LengthValue(length: n, value: try r.readBytes(Swift.min(Int(n), r.remaining))))
                }
                _ = r.readRemaining()
                self = .readMultipleVariableResponse(values: values)
            case .multipleHandleValueNotification:
                guard r.remaining >= 4 else { throw bad("needs at least one handle and length") }
                var list: [HandleValue] = []
                while !r.isAtEnd {
                    let h = try u16(), n = Int(try u16())
                    list.append(HandleValue(handle: h, value: try r.readBytes(n)))
                }
                self = .multipleHandleValueNotification(list)
            case .signedWriteCommand:
                guard r.remaining >= 14 else { throw bad("parameters are \(r.remaining) bytes, expected at least 14 (handle, signature)") }
                let h = try u16()
                let v = try r.readBytes(r.remaining - 12)
                self = .signedWriteCommand(handle: h, value: v, signature: r.readRemaining())
            default:
                self = .unknown(opcode: op, parameters: r.readRemaining())
            }
        } catch let e as ATTDecodeError {
            throw e
        } catch {
            throw bad("\(error)")
        }
    }
}
