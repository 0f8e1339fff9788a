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

    /// Bumble's EATT client against our server (Fixtures/bumble-eatt-serve.btsnoop): the
    /// decoder follows the two channels its Credit Based Connection Request opened, and
    /// each response is read as the answer to the request on its own channel.
    @Test func bumblesEnhancedBearersReadAsBtmonWouldShowThem() throws {
        let root = String(#filePath).components(separatedBy: "/Tests/").first ?? "."
        let trace = try TraceReader.read([UInt8](try Data(contentsOf: URL(fileURLWithPath: root + "/Fixtures/bumble-eatt-serve.btsnoop"))))
        var d = FrameDecoder()
        let frames = trace.records.enumerated().map { d.decode($1, number: $0 + 1, firstTimestamp: 0) }
        let eatt = frames.filter { $0.json["psm_name"] == .string("EATT") }
        #expect(Set(eatt.compactMap { f -> Int? in if case let .int(c)? = f.json["cid"] { c } else { nil } }) == [0x40, 0x41])
        func details(_ name: String, _ cid: Int) -> [[String]] {
            eatt.filter { $0.json["att_name"] == .string(name) && $0.json["cid"] == .int(cid) }.map { $0.details.map { $0.trimmingCharacters(in: .whitespaces) } }
        }
        // EA01 read by type on both bearers at once: a value, not a declaration.
        #expect(details("Read By Type Response", 0x40) == [["Handle 0x0012: 0e0a77"]], "\(details("Read By Type Response", 0x40))")
        #expect(details("Read By Type Response", 0x41) == [["Handle 0x0012: 0e0a77"]])
        #expect(details("Read By Group Type Response", 0x41).first == ["0x0001-0x0005: Generic Access (1800)", "0x0006-0x000f: Generic Attribute (1801)",
                                                                       "0x0010-0x0012: EA00"])
        #expect(details("Error Response", 0x40).last == ["Request: Exchange MTU Request (0x02)", "Error: Request Not Supported (0x06)"])
    }

    /// EATT (Vol 3, Part A, §4.25, §4.26; ATT over SPSM 0x0027): a response split over
    /// K-frames of one SDU (§3.4) is decoded whole at its last K-frame, and a Read By Type
    /// Response shows declarations when its request went the other way on the same
    /// channel (the request on the responder's CID, the response on the requester's).
    @Test func eattSDUsAreReassembledAndTheirDeclarationsDecoded() {
        func frame(_ cid: UInt16, _ l2: [UInt8], rx: Bool) -> TraceRecord {
            Self.acl([UInt8(l2.count & 0xFF), UInt8(l2.count >> 8), UInt8(cid & 0xFF), UInt8(cid >> 8)] + l2, rx: rx)
        }
        let request: [UInt8] = [0x08, 0x01, 0x00, 0xFF, 0xFF, 0x03, 0x28]
        // Two declarations: 0x0002 (Read, value 0x0003, 2A00), 0x000F (Read Notify, value 0x0010, 2A19).
        let response: [UInt8] = [0x09, 0x07, 0x02, 0x00, 0x02, 0x03, 0x00, 0x00, 0x2A, 0x0F, 0x00, 0x12, 0x10, 0x00, 0x19, 0x2A]
        func split(_ cid: UInt16) -> [TraceRecord] {  // 16 octets: 2 + 5, 6, 5
            [frame(cid, [16, 0] + response[0..<5], rx: true), frame(cid, Array(response[5..<11]), rx: true),
             frame(cid, Array(response[11...]), rx: true)]
        }
        let frames = Self.decoded([
            // We open 0x0040 and 0x0041; the peer answers with 0x0050 and 0x0051.
            frame(0x0005, [0x17, 7, 12, 0, 0x27, 0, 0x00, 0x02, 0xF7, 0, 10, 0, 0x40, 0, 0x41, 0], rx: false),
            frame(0x0005, [0x18, 7, 12, 0, 0x00, 0x02, 0xF7, 0, 10, 0, 0, 0, 0x50, 0, 0x51, 0], rx: true),
            frame(0x0050, [UInt8(request.count), 0] + request, rx: false),
        ] + split(0x0040) + split(0x0041))  // answered on 0x0040; nobody asked on 0x0041
        #expect(frames[3].json["att_fragment"] == .bool(true) && frames[3].json["att_name"] == .string("Read By Type Response"))
        #expect(frames[4].json["att_opcode"] == nil && frames[4].json["sdu_reassembled"] == nil)
        let whole = frames[5]
        #expect(whole.json["sdu_reassembled"] == .int(3))
        #expect(whole.summary.hasSuffix("psm=0x0027 (EATT) SDU continuation 5 bytes [3 K-frames] ATT Read By Type Response"), "\(whole.summary)")
        #expect(whole.details.map { $0.trimmingCharacters(in: .whitespaces) } == [
            "Handle 0x0002: 020300002a (Device Name (2A00) at 0x0003: Read)",
            "Handle 0x000f: 121000192a (Battery Level (2A19) at 0x0010: Read, Notify)",
        ], "\(whole.details)")
        let unasked = frames[8]
        #expect(unasked.json["sdu_reassembled"] == .int(3))
        #expect(unasked.details.map { $0.trimmingCharacters(in: .whitespaces) } == ["Handle 0x0002: 020300002a", "Handle 0x000f: 121000192a"],
                "\(unasked.details)")
        // The link's end forgets the SDU (and the channel): the K-frame after it is left as bytes.
        let stray = Self.decoded([frame(0x0005, [0x17, 7, 12, 0, 0x27, 0, 0x00, 0x02, 0xF7, 0, 10, 0, 0x40, 0, 0x41, 0], rx: false),
                                  frame(0x0005, [0x18, 7, 12, 0, 0x00, 0x02, 0xF7, 0, 10, 0, 0, 0, 0x50, 0, 0x51, 0], rx: true),
                                  frame(0x0040, [16, 0] + response[0..<5], rx: true),
                                  TraceRecord(timestampMicros: 0, packet: HCIEvent.disconnectionComplete(.init(connectionHandle: 0x40, reason: .remoteUserTerminatedConnection)).packet,
                                              direction: .controllerToHost),
                                  frame(0x0040, Array(response[5..<11]), rx: true)])
        #expect(stray[4].json["att_opcode"] == nil && stray[4].json["sdu_reassembled"] == nil, "\(stray[4].json)")
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
