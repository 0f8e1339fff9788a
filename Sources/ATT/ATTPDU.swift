// Every ATT PDU of Core Specification v5.4, Vol 3, Part F, §3.4, as a value that
// mirrors the wire. Decoding a malformed PDU throws `ATTDecodeError` carrying the
// opcode, so a server can answer a bad request with Error Response (Invalid PDU)
// for that opcode; unknown opcodes decode to `.unknown` and re-encode byte for byte.

import HCI

public struct ATTDecodeError: Error, Hashable, Sendable, CustomStringConvertible {
    public var opcode: ATTOpcode
    public var reason: String
    public var description: String { "malformed \(opcode): \(reason)" }
}

public enum ATTPDU: Hashable, Sendable {
    case errorResponse(request: ATTOpcode, handle: UInt16, error: ATTErrorCode)
    case exchangeMTURequest(clientRxMTU: UInt16)
    case exchangeMTUResponse(serverRxMTU: UInt16)
    case findInformationRequest(start: UInt16, end: UInt16)
    /// (handle, UUID) pairs; all UUIDs the same size (format 1: 16-bit, 2: 128-bit).
    case findInformationResponse([HandleUUID])
    case findByTypeValueRequest(start: UInt16, end: UInt16, type: UInt16, value: [UInt8])
    case findByTypeValueResponse([HandleRange])
    case readByTypeRequest(start: UInt16, end: UInt16, type: BluetoothUUID)
    /// (handle, value) pairs, every value the same length.
    case readByTypeResponse([HandleValue])
    case readRequest(handle: UInt16)
    case readResponse(value: [UInt8])
    case readBlobRequest(handle: UInt16, offset: UInt16)
    case readBlobResponse(value: [UInt8])
    case readMultipleRequest(handles: [UInt16])
    case readMultipleResponse(values: [UInt8])
    case readByGroupTypeRequest(start: UInt16, end: UInt16, type: BluetoothUUID)
    /// (handle, end group handle, value) triples, every value the same length.
    case readByGroupTypeResponse([GroupValue])
    case writeRequest(handle: UInt16, value: [UInt8])
    case writeResponse
    case prepareWriteRequest(handle: UInt16, offset: UInt16, value: [UInt8])
    case prepareWriteResponse(handle: UInt16, offset: UInt16, value: [UInt8])
    /// flags: 0x00 cancel all prepared writes, 0x01 write them.
    case executeWriteRequest(flags: UInt8)
    case executeWriteResponse
    case handleValueNotification(handle: UInt16, value: [UInt8])
    case handleValueIndication(handle: UInt16, value: [UInt8])
    case handleValueConfirmation
    case readMultipleVariableRequest(handles: [UInt16])
    case readMultipleVariableResponse(values: [LengthValue])
    case multipleHandleValueNotification([HandleValue])
    case writeCommand(handle: UInt16, value: [UInt8])
    case signedWriteCommand(handle: UInt16, value: [UInt8], signature: [UInt8])
    case unknown(opcode: ATTOpcode, parameters: [UInt8])

    public struct HandleUUID: Hashable, Sendable {
        public var handle: UInt16
        public var uuid: BluetoothUUID
        public init(handle: UInt16, uuid: BluetoothUUID) { self.handle = handle; self.uuid = uuid }
    }
    public struct HandleRange: Hashable, Sendable {
        public var found: UInt16
        public var groupEnd: UInt16
        public init(found: UInt16, groupEnd: UInt16) { self.found = found; self.groupEnd = groupEnd }
    }
    public struct HandleValue: Hashable, Sendable {
        public var handle: UInt16
        public var value: [UInt8]
        public init(handle: UInt16, value: [UInt8]) { self.handle = handle; self.value = value }
    }
    /// One Length Value Tuple of Read Multiple Variable Length Response (§3.4.4.12):
    /// the attribute value's whole length, and as much of the value as the response
    /// had room for (the list is cut at ATT_MTU - 1 octets).
    public struct LengthValue: Hashable, Sendable {
        public var length: UInt16
        public var value: [UInt8]
        /// The value as the server holds it, whole.
        public init(_ value: [UInt8]) { self.init(length: UInt16(clamping: value.count), value: value) }
        public init(length: UInt16, value: [UInt8]) { self.length = length; self.value = value }
        /// Whether `value` is all of it (the response did not cut it short).
        public var isComplete: Bool { value.count == Int(length) }
    }
    public struct GroupValue: Hashable, Sendable {
        public var handle: UInt16
        public var groupEnd: UInt16
        public var value: [UInt8]
        public init(handle: UInt16, groupEnd: UInt16, value: [UInt8]) { self.handle = handle; self.groupEnd = groupEnd; self.value = value }
    }

    public var opcode: ATTOpcode {
        switch self {
        case .errorResponse: return .errorResponse
        case .exchangeMTURequest: return .exchangeMTURequest
        case .exchangeMTUResponse: return .exchangeMTUResponse
        case .findInformationRequest: return .findInformationRequest
        case .findInformationResponse: return .findInformationResponse
        case .findByTypeValueRequest: return .findByTypeValueRequest
        case .findByTypeValueResponse: return .findByTypeValueResponse
        case .readByTypeRequest: return .readByTypeRequest
        case .readByTypeResponse: return .readByTypeResponse
        case .readRequest: return .readRequest
        case .readResponse: return .readResponse
        case .readBlobRequest: return .readBlobRequest
        case .readBlobResponse: return .readBlobResponse
        case .readMultipleRequest: return .readMultipleRequest
        case .readMultipleResponse: return .readMultipleResponse
        case .readByGroupTypeRequest: return .readByGroupTypeRequest
        case .readByGroupTypeResponse: return .readByGroupTypeResponse
        case .writeRequest: return .writeRequest
        case .writeResponse: return .writeResponse
        case .prepareWriteRequest: return .prepareWriteRequest
        case .prepareWriteResponse: return .prepareWriteResponse
        case .executeWriteRequest: return .executeWriteRequest
        case .executeWriteResponse: return .executeWriteResponse
        case .handleValueNotification: return .handleValueNotification
        case .handleValueIndication: return .handleValueIndication
        case .handleValueConfirmation: return .handleValueConfirmation
        case .readMultipleVariableRequest: return .readMultipleVariableRequest
        case .readMultipleVariableResponse: return .readMultipleVariableResponse
        case .multipleHandleValueNotification: return .multipleHandleValueNotification
        case .writeCommand: return .writeCommand
        case .signedWriteCommand: return .signedWriteCommand
        case let .unknown(op, _): return op
        }
    }

    public var bytes: [UInt8] {
        var w = ByteWriter(capacity: encodedCapacity)
        w.write(opcode.rawValue)
        switch self {
        case let .errorResponse(req, h, e): w.write(req.rawValue); w.write(h); w.write(e.rawValue)
        case let .exchangeMTURequest(m), let .exchangeMTUResponse(m): w.write(m)
        case let .findInformationRequest(s, e): w.write(s); w.write(e)
        case let .readRequest(h): w.write(h)
        case let .findInformationResponse(list):
            let wide = list.contains { $0.uuid.uint16 == nil }
            w.write(UInt8(wide ? 2 : 1))
            for x in list { w.write(x.handle); w.write(contentsOf: wide ? x.uuid.littleEndianBytes : x.uuid.attBytes) }
        case let .findByTypeValueRequest(s, e, t, v): w.write(s); w.write(e); w.write(t); w.write(contentsOf: v)
        case let .findByTypeValueResponse(list): for x in list { w.write(x.found); w.write(x.groupEnd) }
        case let .readByTypeRequest(s, e, t), let .readByGroupTypeRequest(s, e, t): w.write(s); w.write(e); w.write(contentsOf: t.attBytes)
        case let .readByTypeResponse(list):
            w.write(UInt8(truncatingIfNeeded: 2 + (list.first?.value.count ?? 0)))
            for x in list { w.write(x.handle); w.write(contentsOf: x.value) }
        case let .readResponse(v), let .readBlobResponse(v), let .readMultipleResponse(v): w.write(contentsOf: v)
        case let .readBlobRequest(h, o): w.write(h); w.write(o)
        case let .readMultipleRequest(hs), let .readMultipleVariableRequest(hs): for h in hs { w.write(h) }
        case let .readByGroupTypeResponse(list):
            w.write(UInt8(truncatingIfNeeded: 4 + (list.first?.value.count ?? 0)))
            for x in list { w.write(x.handle); w.write(x.groupEnd); w.write(contentsOf: x.value) }
        case let .writeRequest(h, v), let .writeCommand(h, v), let .handleValueNotification(h, v), let .handleValueIndication(h, v):
            w.write(h); w.write(contentsOf: v)
        case let .prepareWriteRequest(h, o, v), let .prepareWriteResponse(h, o, v): w.write(h); w.write(o); w.write(contentsOf: v)
        case let .executeWriteRequest(f): w.write(f)
        case .writeResponse, .executeWriteResponse, .handleValueConfirmation: break
        case let .readMultipleVariableResponse(values): for v in values { w.write(v.length); w.write(contentsOf: v.value) }
        case let .multipleHandleValueNotification(list):
            for x in list { w.write(x.handle); w.write(UInt16(truncatingIfNeeded: x.value.count)); w.write(contentsOf: x.value) }
        case let .signedWriteCommand(h, v, sig): w.write(h); w.write(contentsOf: v); w.write(contentsOf: sig)
        case let .unknown(_, p): w.write(contentsOf: p)
        }
        return w.bytes
    }

    /// How many octets `bytes` has. Counted without encoding for an Error Response and
    /// the PDUs that carry one value (a client checks every response against ATT_MTU).
    public var encodedCount: Int {
        switch self {
        case .errorResponse: return 5
        case .writeRequest, .writeCommand, .handleValueNotification, .handleValueIndication,
             .readResponse, .readBlobResponse, .readMultipleResponse, .prepareWriteRequest, .prepareWriteResponse:
            return encodedCapacity
        default: return bytes.count
        }
    }

    /// Room for the encoding of the PDUs that carry one value (exact for those: no
    /// growth while writing), 32 octets for the others (grown when needed).
    private var encodedCapacity: Int {
        switch self {
        case let .writeRequest(_, v), let .writeCommand(_, v), let .handleValueNotification(_, v), let .handleValueIndication(_, v):
            return 3 + v.count
        case let .readResponse(v), let .readBlobResponse(v), let .readMultipleResponse(v): return 1 + v.count
        case let .prepareWriteRequest(_, _, v), let .prepareWriteResponse(_, _, v): return 5 + v.count
        default: return 32
        }
    }
}
