import Foundation
import HCI
import Testing

@testable import Snoop

/// ATT PDUs in `trace show`, parameter by parameter as btmon shows them (Vol 3, Part F,
/// §3.4), and L2CAP frames split over ACL packets shown whole at their last fragment
/// (Vol 3, Part A, §7.2): on a discovery we recorded against Rootcanal
/// (Fixtures/rootcanal-gatt-read.btsnoop) and on PDUs built from the spec's formats.
@Suite(.timeLimit(.minutes(3)))
struct ATTDecodeTests {
    /// One ACL packet on `handle` carrying `data` (a basic header and what follows).
    static func acl(_ data: [UInt8], continuing: Bool = false, handle: UInt16 = 0x40, rx: Bool = true) -> TraceRecord {
        TraceRecord(timestampMicros: 0, packet: .acl(ACLDataPacket(handle: handle, boundary: continuing ? .continuing : .firstFlushable, data: data)),
                    direction: rx ? .controllerToHost : .hostToController)
    }

    /// An ATT PDU on CID 0x0004 in one ACL packet.
    static func att(_ pdu: [UInt8]) -> TraceRecord { acl([UInt8(pdu.count), 0, 0x04, 0x00] + pdu) }

    static func decoded(_ records: [TraceRecord]) -> [DecodedFrame] {
        var d = FrameDecoder()
        return records.enumerated().map { d.decode($1, number: $0 + 1, firstTimestamp: 0) }
    }

    static func one(_ pdu: [UInt8]) -> DecodedFrame { decoded([att(pdu)])[0] }

    static func details(_ pdu: [UInt8]) -> [String] { one(pdu).details.map { $0.trimmingCharacters(in: .whitespaces) } }

    @Test func aRecordedDiscoveryReadsAsBtmonWouldShowIt() throws {
        let root = String(#filePath).components(separatedBy: "/Tests/").first ?? "."
        let trace = try TraceReader.read([UInt8](try Data(contentsOf: URL(fileURLWithPath: root + "/Fixtures/rootcanal-gatt-read.btsnoop"))))
        let frames = Self.decoded(trace.records)
        func lines(_ summary: String) -> [String]? {
            frames.first { $0.summary.hasSuffix(summary) }?.details.map { $0.trimmingCharacters(in: .whitespaces) }
        }
        #expect(lines("ATT Exchange MTU Request") == ["Client RX MTU: 517"])
        #expect(lines("ATT Read By Group Type Response") == [
            "0x0001-0x0005: Generic Access (1800)", "0x0006-0x000d: Generic Attribute (1801)", "0x000e-0x0012: Battery Service (180F)",
        ])
        #expect(lines("ATT Error Response handle=0x001b error=0x0a") == ["Request: Read By Group Type Request (0x10)", "Error: Attribute Not Found (0x0a)"])
        // The characteristic declarations came in two ACL packets: the first is named,
        // the second shows the whole response.
        let split = try #require(frames.firstIndex { $0.summary.hasSuffix("ATT Read By Type Response (first fragment: 23 of 44 bytes)") })
        #expect(frames[split].details.isEmpty && frames[split].json["att_fragment"] == .bool(true))
        #expect(frames[split + 1].summary.hasSuffix("pb=continuing 21 bytes [2 fragments] ATT Read By Type Response"), "\(frames[split + 1].summary)")
        #expect(frames[split + 1].json["l2cap_reassembled"] == .int(2) && frames[split + 1].json["l2cap_length"] == .int(44))
        guard case let .array(entries)? = frames[split + 1].json["att_entries"] else { Issue.record("no entries"); return }
        // They answer a Read By Type Request for 2803: each is a characteristic declaration.
        #expect(entries.count == 6 && entries.first == .object([
            ("handle", .int(2)), ("value", .string("020300002a")), ("properties", .int(2)), ("properties_names", .string("Read")),
            ("value_handle", .int(3)), ("uuid", .string("2A00")),
        ]), "\(entries)")
        #expect(frames[split + 1].details.map { $0.trimmingCharacters(in: .whitespaces) }.last == "Handle 0x000f: 121000192a (Battery Level (2A19) at 0x0010: Read, Notify)")
    }

    /// A Read By Type Response's entries are declarations when the request on that link's
    /// bearer, the other way, asked for 2803 or 2802; not for another type, another link,
    /// or a response in the request's own direction.
    @Test func declarationsAreDecodedByTheTypeTheirRequestAsked() {
        let request: (UInt16, Bool, UInt16) -> TraceRecord = { handle, rx, type in
            Self.acl([7, 0, 4, 0, 0x08, 0x01, 0x00, 0xFF, 0xFF, UInt8(type & 0xFF), UInt8(type >> 8)], handle: handle, rx: rx)
        }
        let characteristics: (UInt16, Bool) -> TraceRecord = { handle, rx in
            Self.acl([9, 0, 4, 0, 0x09, 0x07, 0x02, 0x00, 0x3A, 0x03, 0x00, 0x19, 0x2A], handle: handle, rx: rx)
        }
        let frames = Self.decoded([
            request(0x40, false, 0x2803), characteristics(0x40, true),  // answered
            characteristics(0x41, true),  // another link asked nothing
            request(0x40, false, 0x2A19), characteristics(0x40, true),  // a value of 2A19, not a declaration
            request(0x40, true, 0x2803), characteristics(0x40, true),  // asked the other way
            request(0x40, false, 0x2802),
            Self.acl([10, 0, 4, 0, 0x09, 0x08, 0x05, 0x00, 0x10, 0x00, 0x15, 0x00, 0x0F, 0x18], handle: 0x40),
            Self.acl([8, 0, 4, 0, 0x09, 0x06, 0x05, 0x00, 0x10, 0x00, 0x20, 0x00], handle: 0x40),
        ])
        func line(_ f: DecodedFrame) -> String? { f.details.first?.trimmingCharacters(in: .whitespaces) }
        #expect(line(frames[1]) == "Handle 0x0002: 3a0300192a (Battery Level (2A19) at 0x0003: Read, Write, Notify, Indicate)")
        #expect(line(frames[2]) == "Handle 0x0002: 3a0300192a")
        #expect(line(frames[4]) == "Handle 0x0002: 3a0300192a")
        #expect(line(frames[6]) == "Handle 0x0002: 3a0300192a")
        #expect(line(frames[8]) == "Handle 0x0005: 100015000f18 (includes 0x0010-0x0015: Battery Service (180F))")
        #expect(line(frames[9]) == "Handle 0x0005: 10002000 (includes 0x0010-0x0020)")
        guard case let .array(e)? = frames[8].json["att_entries"] else { Issue.record("no entries"); return }
        #expect(e.first?["included_start"] == .int(0x10) && e.first?["included_end"] == .int(0x15) && e.first?["uuid"] == .string("180F"))
    }

    @Test func requestsShowTheirParameters() {
        #expect(Self.details([0x02, 0x05, 0x02]) == ["Client RX MTU: 517"])
        #expect(Self.one([0x03, 0x17, 0x00]).json["att_mtu"] == .int(23))
        #expect(Self.details([0x04, 0x01, 0x00, 0xFF, 0xFF]) == ["Handle range: 0x0001-0xffff"])
        #expect(Self.details([0x06, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x28, 0x0F, 0x18]) == [
            "Handle range: 0x0001-0xffff", "Attribute type: Primary Service (2800)", "Value: 0f18",
        ])
        let byType = Self.one([0x08, 0x01, 0x00, 0x05, 0x00, 0x03, 0x28])
        #expect(byType.details.map { $0.trimmingCharacters(in: .whitespaces) } == ["Handle range: 0x0001-0x0005", "Attribute type: Characteristic (2803)"])
        #expect(byType.json["att_start"] == .int(1) && byType.json["att_end"] == .int(5) && byType.json["att_type"] == .string("2803"))
        #expect(Self.details([0x0C, 0x03, 0x00, 0x16, 0x00]) == ["Offset: 22"])
        #expect(Self.details([0x0E, 0x03, 0x00, 0x05, 0x00]) == ["Handles: 0x0003, 0x0005"])
        #expect(Self.one([0x20, 0x03, 0x00, 0x05, 0x00]).json["att_handles"] == .array([.int(3), .int(5)]))
        #expect(Self.details([0x12, 0x04, 0x00, 0x01, 0x00]) == ["Value: 0100"])
        #expect(Self.details([0x16, 0x04, 0x00, 0x02, 0x00, 0xAA]) == ["Offset: 2", "Value: aa"])
        #expect(Self.details([0x18, 0x01]) == ["Flags: Immediately write all pending prepared values (0x01)"])
        #expect(Self.details([0x18, 0x00]) == ["Flags: Cancel all prepared writes (0x00)"])
        #expect(Self.details([0xD2, 0x04, 0x00, 0x01] + Array(repeating: 0xEE, count: 12)) == ["Value: 01", "Signature: " + String(repeating: "ee", count: 12)])
    }

    @Test func responsesShowEachEntry() {
        #expect(Self.details([0x05, 0x01, 0x03, 0x00, 0x00, 0x2A, 0x04, 0x00, 0x01, 0x2A]) == [
            "0x0003: Device Name (2A00)", "0x0004: Appearance (2A01)",
        ])
        #expect(Self.details([0x05, 0x02, 0x10, 0x00] + Array(0..<16)) == ["0x0010: 0F0E0D0C-0B0A-0908-0706-050403020100"])
        #expect(Self.details([0x07, 0x01, 0x00, 0x05, 0x00]) == ["Handle range: 0x0001-0x0005"])
        #expect(Self.details([0x09, 0x04, 0x03, 0x00, 0x41, 0x42, 0x05, 0x00, 0x43, 0x44]) == ["Handle 0x0003: 4142", "Handle 0x0005: 4344"])
        #expect(Self.details([0x0B, 0x64]) == ["Value: 64"])
        #expect(Self.details([0x21, 0x02, 0x00, 0x01, 0x02, 0x03, 0x00, 0x05]) == ["Length 2: 0102", "Length 3: 05 (cut short)"])
        #expect(Self.details([0x23, 0x03, 0x00, 0x01, 0x00, 0x07, 0x05, 0x00, 0x02, 0x00, 0x08, 0x09]) == ["Handle 0x0003: 07", "Handle 0x0005: 0809"])
        #expect(Self.details([0x1B, 0x03, 0x00, 0x64]) == ["Value: 64"])
        let error = Self.one([0x01, 0x0A, 0x03, 0x00, 0x05])
        #expect(error.details.map { $0.trimmingCharacters(in: .whitespaces) } == ["Request: Read Request (0x0a)", "Error: Insufficient Authentication (0x05)"])
        #expect(error.json["att_request"] == .int(0x0A) && error.json["att_error_name"] == .string("Insufficient Authentication"))
        #expect(Self.details([0x13]).isEmpty && Self.details([0x1E]).isEmpty)
    }

    @Test func aMalformedPDUSaysWhyAndTheFrameAfterItIsDecoded() {
        let frames = Self.decoded([Self.att([0x02, 0x05]), Self.att([0x09, 0x04, 0x01, 0x00]), Self.att([0x02, 0x05, 0x02])])
        #expect(frames[0].json["att_malformed"] != nil && frames[0].details.first?.contains("Malformed: ") == true, "\(frames[0].details)")
        #expect(frames[1].json["att_malformed"] != nil, "\(frames[1].json)")  // an entry length the PDU does not hold
        #expect(frames[2].details.map { $0.trimmingCharacters(in: .whitespaces) } == ["Client RX MTU: 517"])
    }

    @Test func fragmentsAreHeldByLinkAndDirectionAndGivenUp() {
        // A 6-octet Read Response split 3 + 3 on link 0x40, with link 0x41's whole PDU
        // and the other direction's first fragment in between.
        let frames = Self.decoded([
            Self.acl([7, 0, 0x04, 0x00, 0x0B, 0x01, 0x02]),
            Self.acl([2, 0, 0x04, 0x00, 0x0B, 0x09], handle: 0x41),
            Self.acl([7, 0, 0x04, 0x00, 0x0B], rx: false),
            Self.acl([0x03, 0x04, 0x05, 0x06], continuing: true),
        ])
        #expect(frames[0].json["att_fragment"] == .bool(true))
        #expect(frames[1].details.map { $0.trimmingCharacters(in: .whitespaces) } == ["Value: 09"])
        #expect(frames[3].json["l2cap_reassembled"] == .int(2))
        #expect(frames[3].details.map { $0.trimmingCharacters(in: .whitespaces) } == ["Value: 010203040506"])
        // A continuation with nothing started, and a first fragment ended by another
        // first fragment: neither is shown as a frame.
        let stray = Self.decoded([
            Self.acl([0x01, 0x02], continuing: true),
            Self.acl([7, 0, 0x04, 0x00, 0x0B, 0x01]),
            Self.acl([2, 0, 0x04, 0x00, 0x0B, 0x09]),
            Self.acl([0x03, 0x04, 0x05, 0x06, 0x07], continuing: true),
        ])
        #expect(stray[0].json["l2cap_reassembled"] == nil && stray[0].json["cid"] == nil)
        #expect(stray[3].json["l2cap_reassembled"] == nil)
        // A link's end gives its frames up.
        let ended = Self.decoded([
            Self.acl([7, 0, 0x04, 0x00, 0x0B, 0x01]),
            TraceRecord(timestampMicros: 0, packet: HCIEvent.disconnectionComplete(DisconnectionComplete(connectionHandle: 0x40, reason: .remoteUserTerminatedConnection)).packet,
                        direction: .controllerToHost),
            Self.acl([0x02, 0x03, 0x04, 0x05, 0x06], continuing: true),
        ])
        #expect(ended[2].json["l2cap_reassembled"] == nil)
    }

    @Test func reassemblyHoldsAtMostItsLimitOfFrames() {
        var r = ACLReassembly()
        for h in 0..<UInt16(ACLReassembly.limit + 10) {
            r.start(.init(handle: h, direction: .controllerToHost), [10, 0, 4, 0, 0x0B], length: 14)
        }
        #expect(r.count == ACLReassembly.limit)
        // The oldest were given up; the newest complete.
        #expect(r.continuing(.init(handle: 0, direction: .controllerToHost), Array(repeating: 1, count: 9)) == nil)
        let last = UInt16(ACLReassembly.limit + 9)
        #expect(r.continuing(.init(handle: last, direction: .controllerToHost), Array(repeating: 1, count: 9))?.fragments == 2)
    }
}
