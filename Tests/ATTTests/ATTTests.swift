import HCI
import Testing
@testable import ATT

@Suite(.timeLimit(.minutes(3)))
struct ATTPDUTests {
    static let battery = BluetoothUUID(0x180F)
    static let custom = BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!

    static let all: [ATTPDU] = [
        .errorResponse(request: .readRequest, handle: 0x0003, error: .readNotPermitted),
        .exchangeMTURequest(clientRxMTU: 517), .exchangeMTUResponse(serverRxMTU: 247),
        .findInformationRequest(start: 1, end: 0xFFFF),
        .findInformationResponse([.init(handle: 1, uuid: BluetoothUUID(0x2800)), .init(handle: 2, uuid: BluetoothUUID(0x2803))]),
        .findInformationResponse([.init(handle: 5, uuid: custom)]),
        .findByTypeValueRequest(start: 1, end: 0xFFFF, type: 0x2800, value: [0x0F, 0x18]),
        .findByTypeValueResponse([.init(found: 1, groupEnd: 5), .init(found: 6, groupEnd: 9)]),
        .readByTypeRequest(start: 1, end: 0xFFFF, type: BluetoothUUID(0x2803)),
        .readByTypeRequest(start: 1, end: 0xFFFF, type: custom),
        .readByTypeResponse([.init(handle: 2, value: [0x02, 0x03, 0x00, 0x19, 0x2A]), .init(handle: 4, value: [0x10, 0x05, 0x00, 0x37, 0x2A])]),
        .readRequest(handle: 3), .readResponse(value: [0x64]),
        .readBlobRequest(handle: 3, offset: 22), .readBlobResponse(value: [1, 2]),
        .readMultipleRequest(handles: [3, 5]), .readMultipleResponse(values: [1, 2, 3]),
        .readByGroupTypeRequest(start: 1, end: 0xFFFF, type: BluetoothUUID(0x2800)),
        .readByGroupTypeResponse([.init(handle: 1, groupEnd: 5, value: [0x00, 0x18]), .init(handle: 6, groupEnd: 9, value: [0x0F, 0x18])]),
        .writeRequest(handle: 7, value: [1, 0]), .writeResponse,
        .prepareWriteRequest(handle: 9, offset: 0, value: [1, 2, 3]), .prepareWriteResponse(handle: 9, offset: 0, value: [1, 2, 3]),
        .executeWriteRequest(flags: 1), .executeWriteResponse,
        .handleValueNotification(handle: 3, value: [0x55]), .handleValueIndication(handle: 3, value: [0x56]), .handleValueConfirmation,
        .readMultipleVariableRequest(handles: [3, 5]), .readMultipleVariableResponse(values: [.init([1]), .init([2, 3]), .init(length: 40, value: [4, 5])]),
        .multipleHandleValueNotification([.init(handle: 3, value: [1]), .init(handle: 5, value: [2, 2])]),
        .writeCommand(handle: 7, value: [9]), .signedWriteCommand(handle: 7, value: [9], signature: [UInt8](repeating: 0xAB, count: 12)),
        .unknown(opcode: ATTOpcode(rawValue: 0x30), parameters: [1, 2]),
    ]

    @Test func everyPDURoundTrips() throws {
        for p in Self.all {
            #expect(try ATTPDU(bytes: p.bytes) == p, "\(p.opcode)")
            #expect(p.bytes.first == p.opcode.rawValue)
            #expect(p.encodedCount == p.bytes.count, "\(p.opcode)")
        }
    }

    /// How the bearer decodes: from a slice of the L2CAP frame, bytes on both sides of it
    /// (the frame's header before, other bytes after) never read.
    @Test func everyPDUDecodesInPlaceFromASliceOfItsFrame() throws {
        for p in Self.all {
            let frame: [UInt8] = [UInt8(p.bytes.count & 0xFF), UInt8(p.bytes.count >> 8), 0x04, 0x00] + p.bytes + [0xEE, 0xEE]
            let slice = frame[4..<(4 + p.bytes.count)]
            #expect(try ATTPDU(bytes: slice) == p, "\(p.opcode)")
        }
        // A truncated PDU in a slice is still an error, though the array goes on.
        let frame: [UInt8] = [0, 0, 0x04, 0x00, 0x0A, 0x03, 0x00, 0x04]  // Read Request whose handle ends at the slice
        #expect(throws: ATTDecodeError.self) { try ATTPDU(bytes: frame[4..<6]) }
    }

    @Test func exactEncodingsFromTheSpecLayouts() {
        #expect(ATTPDU.exchangeMTURequest(clientRxMTU: 517).bytes == [0x02, 0x05, 0x02])
        #expect(ATTPDU.errorResponse(request: .readRequest, handle: 3, error: .readNotPermitted).bytes == [0x01, 0x0A, 0x03, 0x00, 0x02])
        #expect(ATTPDU.readByGroupTypeRequest(start: 1, end: 0xFFFF, type: BluetoothUUID(0x2800)).bytes == [0x10, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x28])
        #expect(ATTPDU.findInformationResponse([.init(handle: 5, uuid: Self.custom)]).bytes
                == [0x05, 0x02, 0x05, 0x00] + Self.custom.littleEndianBytes)
        #expect(Self.custom.littleEndianBytes.first == 0x9E)
        #expect(ATTPDU.readByTypeResponse([.init(handle: 2, value: [0xAA])]).bytes == [0x09, 0x03, 0x02, 0x00, 0xAA])
    }

    @Test func malformedPDUsNameTheirOpcode() {
        let cases: [([UInt8], ATTOpcode)] = [
            ([0x02, 0x05], .exchangeMTURequest),                   // MTU cut short
            ([0x0A, 0x03, 0x00, 0x00], .readRequest),              // one byte too many
            ([0x08, 0x01, 0x00, 0xFF, 0xFF, 0x03], .readByTypeRequest),  // 1-byte UUID
            ([0x0E, 0x03, 0x00], .readMultipleRequest),            // a single handle
            ([0x09, 0x01, 0x02], .readByTypeResponse),             // length below 2
            ([0x11, 0x06, 0x01, 0x00, 0x05], .readByGroupTypeResponse),  // partial entry
            ([0x05, 0x03, 0x01, 0x00, 0x00, 0x28], .findInformationResponse),  // format 3
            ([0x18, 0x02], .executeWriteRequest),                  // flags 2
            ([0x12, 0x07], .writeRequest),                         // no handle
            ([0xD2, 0x07, 0x00, 1, 2, 3], .signedWriteCommand),    // no room for the signature
            ([0x23, 0x03, 0x00, 0x05, 0x00, 1], .multipleHandleValueNotification),  // length runs past the end
        ]
        for (bytes, op) in cases {
            #expect(throws: ATTDecodeError.self, "\(bytes)") { try ATTPDU(bytes: bytes) }
            do { _ = try ATTPDU(bytes: bytes) } catch let e as ATTDecodeError { #expect(e.opcode == op) } catch {}
        }
        #expect(throws: ATTDecodeError.self) { try ATTPDU(bytes: []) }
    }

    @Test func uuidForms() {
        #expect(BluetoothUUID(0x180F) == BluetoothUUID("0000180F-0000-1000-8000-00805F9B34FB"))
        #expect(BluetoothUUID(0x180F).description == "180F")
        #expect(BluetoothUUID("180f")?.uint16 == 0x180F)
        #expect(Self.custom.uint16 == nil)
        #expect(Self.custom.description == "6E400001-B5A3-F393-E0A9-E50E24DCCA9E")
        #expect(BluetoothUUID("not-a-uuid") == nil)
        #expect(BluetoothUUID(alias32: 0x1234_5678).attBytes.count == 16)  // ATT has no 32-bit form
    }
}

@Suite(.timeLimit(.minutes(3)))
struct ATTBearerTests {
    @Test func requestsQueueBehindTheOutstandingOne() {
        var b = ATTBearerState()
        let (a, e1) = b.sendRequest(.readRequest(handle: 3))
        #expect(e1 == [.send([0x0A, 0x03, 0x00]), .startTimer(a)])
        let (c, e2) = b.sendRequest(.readRequest(handle: 5))
        #expect(e2.isEmpty)
        #expect(b.receive([0x0B, 0x64]) == [.cancelTimer(a), .responded(id: a, .readResponse(value: [0x64])), .send([0x0A, 0x05, 0x00]), .startTimer(c)])
        #expect(b.receive([0x01, 0x0A, 0x05, 0x00, 0x02]) == [.cancelTimer(c), .failed(id: c, .errorResponse(request: .readRequest, handle: 5, error: .readNotPermitted))])
    }

    @Test func timeoutMakesTheBearerUnusable() {
        var b = ATTBearerState()
        let (a, _) = b.sendRequest(.readRequest(handle: 3))
        let (c, _) = b.sendRequest(.readRequest(handle: 4))
        let events = b.timedOut(id: a)
        #expect(events.contains(.failed(id: a, .transactionTimeout(.readRequest))))
        #expect(events.contains { if case .failed(c, .bearerUnusable) = $0 { return true }; return false })
        #expect(b.unusableReason != nil)
        // Nothing more is sent, and a late response is dropped.
        let (d, e) = b.sendRequest(.readRequest(handle: 9))
        #expect(e.count == 1 && { if case .failed(d, .bearerUnusable) = e[0] { return true }; return false }())
        #expect(b.receive([0x0B, 0x01]).isEmpty)
        #expect(b.sendUnacknowledged(.writeCommand(handle: 1, value: [])).isEmpty)
        // A timer that fires after its transaction completed changes nothing.
        var ok = ATTBearerState()
        let (x, _) = ok.sendRequest(.readRequest(handle: 1))
        _ = ok.receive([0x0B])
        #expect(ok.timedOut(id: x).isEmpty)
        #expect(ok.unusableReason == nil)
    }

    @Test func mtuExchangeInBothRoles() {
        var client = ATTBearerState(localRxMTU: 517)
        let (id, _) = client.sendRequest(.exchangeMTURequest(clientRxMTU: 517))
        #expect(client.receive([0x03, 0xF7, 0x00]) == [.mtuChanged(247), .cancelTimer(id), .responded(id: id, .exchangeMTUResponse(serverRxMTU: 247))])
        #expect(client.mtu == 247)
        var server = ATTBearerState(localRxMTU: 100)
        #expect(server.receive([0x02, 0x05, 0x02]) == [.send([0x03, 100, 0]), .mtuChanged(100)])
        // A peer offering less than 23 leaves the default.
        var small = ATTBearerState()
        #expect(small.receive([0x02, 0x10, 0x00]) == [.send([0x03, 0x05, 0x02])])
        #expect(small.mtu == 23)
    }

    @Test func badInputFromThePeerGetsTheSpecsAnswer() {
        var b = ATTBearerState()
        // Malformed request: Error Response, Invalid PDU, for that opcode.
        #expect(b.receive([0x0A, 0x03]).first == .send([0x01, 0x0A, 0x00, 0x00, 0x04]))
        // Unknown request opcode: Request Not Supported.
        #expect(b.receive([0x3F, 1, 2]) == [.send([0x01, 0x3F, 0x00, 0x00, 0x06])])
        // Unknown command (command flag set): ignored.
        #expect(b.receive([0x7F, 1, 2]).isEmpty)
        // A response with no request outstanding is noted, not acted on.
        if case .protocolViolation = b.receive([0x13]).first {} else { Issue.record("unexpected response accepted") }
    }

    /// A response that does not answer the outstanding request (another kind, or an
    /// Error Response for another request) ends that request at once with the error
    /// naming it, not after the 30 s timeout; the next request goes out on a usable bearer.
    @Test func aResponseForAnotherRequestEndsTheOutstandingOne() {
        var b = ATTBearerState()
        let (r1, _) = b.sendRequest(.readByGroupTypeRequest(start: 1, end: 0xFFFF, type: BluetoothUUID(0x2800)))
        let (r2, queued) = b.sendRequest(.readRequest(handle: 3))
        #expect(queued.isEmpty)
        #expect(b.receive([0x0B, 0x00]) == [.cancelTimer(r1),
                                            .failed(id: r1, .unexpectedResponse(received: .readResponse, errorFor: nil, request: .readByGroupTypeRequest)),
                                            .send([0x0A, 0x03, 0x00]), .startTimer(r2)])
        #expect(b.receive([0x01, 0x10, 0x01, 0x00, 0x0A]) == [.cancelTimer(r2),
                                                             .failed(id: r2, .unexpectedResponse(received: .errorResponse, errorFor: .readByGroupTypeRequest, request: .readRequest))])
        #expect(b.unusableReason == nil)
        let (r3, sent) = b.sendRequest(.readRequest(handle: 3))
        #expect(sent == [.send([0x0A, 0x03, 0x00]), .startTimer(r3)])
        #expect(b.receive([0x0B, 0x07]) == [.cancelTimer(r3), .responded(id: r3, .readResponse(value: [7]))])
    }

    @Test func incomingRequestsAndIndicationsAreHandedUp() {
        var b = ATTBearerState()
        #expect(b.receive([0x0A, 0x03, 0x00]) == [.request(.readRequest(handle: 3))])
        #expect(b.respond(.readResponse(value: [1])) == [.send([0x0B, 1])])
        #expect(b.receive([0x1D, 0x03, 0x00, 0x07]) == [.indication(handle: 3, value: [7])])
        #expect(b.confirm() == [.send([0x1E])])
        #expect(b.receive([0x23, 0x03, 0x00, 0x01, 0x00, 0x09, 0x05, 0x00, 0x00, 0x00]) == [.notification(handle: 3, value: [9]), .notification(handle: 5, value: [])])
        #expect(b.receive([0x52, 0x07, 0x00, 0x01]) == [.command(.writeCommand(handle: 7, value: [1]))])
    }

    @Test func oneIndicationOutstandingConfirmationReleasesTheNext() {
        var b = ATTBearerState()
        let (i1, e1) = b.sendIndication(handle: 3, value: [1])
        #expect(e1 == [.send([0x1D, 0x03, 0x00, 0x01]), .startTimer(i1)])
        let (i2, e2) = b.sendIndication(handle: 3, value: [2])
        #expect(e2.isEmpty)
        #expect(b.receive([0x1E]) == [.cancelTimer(i1), .confirmed(id: i1), .send([0x1D, 0x03, 0x00, 0x02]), .startTimer(i2)])
        #expect(b.receive([0x1E]) == [.cancelTimer(i2), .confirmed(id: i2)])
        if case .protocolViolation = b.receive([0x1E]).first {} else { Issue.record("stray confirmation accepted") }
    }

    @Test func closingFailsEverythingPending() {
        var b = ATTBearerState()
        let (a, _) = b.sendRequest(.readRequest(handle: 1))
        let (i, _) = b.sendIndication(handle: 2, value: [])
        let events = b.close(reason: "disconnected: Remote User Terminated Connection")
        #expect(events.contains(.failed(id: a, .bearerUnusable("disconnected: Remote User Terminated Connection"))))
        #expect(events.contains(.failed(id: i, .bearerUnusable("disconnected: Remote User Terminated Connection"))))
        #expect(events.contains(.cancelTimer(a)) && events.contains(.cancelTimer(i)))
    }
}
