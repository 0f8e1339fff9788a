import BLETesting
import Foundation
import HCI
import Testing
@testable import Snoop

@Suite(.timeLimit(.minutes(3)))
struct TraceFormatTests {
    static let records: [TraceRecord] = [
        TraceRecord(timestampMicros: 1_700_000_000_000_000, packet: Reset().packet, direction: .hostToController),
        TraceRecord(timestampMicros: 1_700_000_000_001_500, packet: HCIEvent.commandComplete(CommandComplete(commandOpcode: .reset, returnParameters: [0])).packet, direction: .controllerToHost),
        TraceRecord(timestampMicros: 1_700_000_000_002_000, packet: .acl(ACLDataPacket(handle: 0x40, boundary: .firstNonFlushable, data: [3, 0, 4, 0, 0x0A, 0x03, 0x00])), direction: .hostToController),
        TraceRecord(timestampMicros: 1_700_000_000_003_000, packet: .acl(ACLDataPacket(handle: 0x40, boundary: .firstFlushable, data: [2, 0, 4, 0, 0x0B, 0x01])), direction: .controllerToHost),
    ]

    static func file(_ output: TraceEncoder.Output, _ records: [TraceRecord] = records) -> [UInt8] {
        let e = TraceEncoder(output)
        return e.header + records.compactMap { e.record($0) }.flatMap { $0 }
    }

    @Test(arguments: [
        TraceEncoder.Output.btsnoop(datalink: 1001), .btsnoop(datalink: 1002), .btsnoop(datalink: 2001),
        .pcap(linkType: 201), .pcap(linkType: 254), .pcapng(linkType: 201), .pcapng(linkType: 254),
    ])
    func writtenFilesReadBack(output: TraceEncoder.Output) throws {
        let t = try TraceReader.read(Self.file(output))
        #expect(t.damage == nil)
        #expect(t.records.map(\.packet) == Self.records.map(\.packet))
        #expect(t.records.map(\.direction) == Self.records.map(\.direction))
        #expect(t.records.map(\.timestampMicros) == Self.records.map(\.timestampMicros))
    }

    /// A file several times the stream's chunk size reads the same streamed from disk as
    /// from memory: records cut by a chunk boundary are reassembled, in every format.
    @Test(arguments: [TraceEncoder.Output.btsnoop(datalink: 1002), .pcap(linkType: 201), .pcapng(linkType: 201), .pcapng(linkType: 254)])
    func streamingAcrossChunksMatchesReadingWhole(output: TraceEncoder.Output) throws {
        let many = (0..<60_000).map { i in
            TraceRecord(timestampMicros: 1_700_000_000_000_000 + Int64(i), packet: .acl(ACLDataPacket(handle: 0x40, boundary: .firstFlushable,
                        data: [UInt8(i % 40 + 4), 0, 4, 0] + Array(repeating: UInt8(i & 0xFF), count: i % 40 + 4))), direction: i % 2 == 0 ? .hostToController : .controllerToHost)
        }
        let bytes = Self.file(output, many)
        #expect(bytes.count > 3 * TraceStream.chunkSize)
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("stream-\(getpid())-\(output).trace").path
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let streamed = try TraceReader.read(contentsOf: path)
        #expect(streamed.damage == nil)
        // Compared field by field (a monitor file adds the adapter index), without
        // printing megabytes on failure.
        #expect(streamed.records.count == many.count)
        #expect(streamed.records.map(\.packet) == many.map(\.packet), "packets differ")
        #expect(streamed.records.map(\.timestampMicros) == many.map(\.timestampMicros), "timestamps differ")
        #expect(streamed.records.map(\.direction) == many.map(\.direction), "directions differ")
        // Cut mid-record: the same damage offset both ways.
        try Data(bytes.dropLast(5)).write(to: URL(fileURLWithPath: path))
        let cut = try TraceReader.read(contentsOf: path)
        #expect(cut.records.count == many.count - 1)
        #expect(cut.damage == (try TraceReader.read(Array(bytes.dropLast(5)))).damage)
    }

    @Test func btsnoopHeaderIsTheFormatsMagic() {
        #expect(Array(Self.file(.btsnoop(datalink: 1002)).prefix(16)) == Array("btsnoop\0".utf8) + [0, 0, 0, 1, 0, 0, 0x03, 0xEA])
    }

    @Test(arguments: [1001, 1002, 2001] as [UInt32])
    func truncationAtEveryByteKeepsCompleteRecordsAndReportsTheOffset(datalink: UInt32) throws {
        let whole = Self.file(.btsnoop(datalink: datalink))
        var boundaries = [16]
        for r in Self.records { boundaries.append(boundaries.last! + 24 + (TraceEncoder(.btsnoop(datalink: datalink)).record(r)!.count - 24)) }  // safe: test data
        for cut in 16..<whole.count {
            let t = try TraceReader.read(Array(whole.prefix(cut)))
            let complete = boundaries.filter { $0 <= cut }.count - 1
            #expect(t.records.count == complete, "cut at \(cut)")
            if boundaries.contains(cut) {
                #expect(t.damage == nil)
            } else {
                #expect(t.damage?.offset == boundaries[complete], "cut at \(cut)")
            }
        }
    }

    @Test func corruptLengthIsReportedNotTrusted() throws {
        var f = Self.file(.btsnoop(datalink: 1002))
        // Second record's included length: 0xFFFFFFF0.
        let second = 16 + 24 + Reset().packet.h4Bytes.count
        f[second + 4] = 0xFF; f[second + 5] = 0xFF; f[second + 6] = 0xFF; f[second + 7] = 0xF0
        let t = try TraceReader.read(f)
        #expect(t.records.count == 1)
        #expect(t.damage?.offset == second)
        #expect(t.damage?.reason.contains("impossible record length") == true)
    }

    /// Found by Fuzz/FuzzBtsnoop: a timestamp near Int64.min made the epoch conversion trap.
    @Test func hostileTimestampsDoNotTrap() throws {
        var w = ByteWriter()
        let body = Reset().packet.h4Bytes
        w.writeBE(UInt32(body.count)); w.writeBE(UInt32(body.count)); w.writeBE(UInt32(0)); w.writeBE(UInt32(0))
        w.writeBE(UInt64(0x8000_0000_0000_0001))
        let t = try TraceReader.read(TraceEncoder(.btsnoop(datalink: 1002)).header + w.bytes + body)
        #expect(t.records.count == 1)
        var d = FrameDecoder()
        let frame = d.decode(t.records[0], number: 1, firstTimestamp: Int64.max)
        #expect(frame.summary.contains("Reset"))
        #expect(TraceEncoder(.btsnoop(datalink: 1002)).record(t.records[0]) != nil)
    }

    @Test func notATraceIsAFormatError() {
        #expect(throws: TraceFormatError.self) { try TraceReader.read(Array("hello world".utf8)) }
        #expect(throws: TraceFormatError.self) { try TraceReader.read(Array("btsnoop\0".utf8) + [0, 0, 0, 1, 0, 0, 0, 7]) }
        #expect(throws: TraceFormatError.self) { try TraceReader.read([]) }
    }

    @Test func badPacketInsideAGoodRecordIsKeptAsUndecodable() throws {
        var f = TraceEncoder(.btsnoop(datalink: 1002)).header
        var w = ByteWriter()
        let bad: [UInt8] = [0x04, 0x0E, 0x09, 0x01]  // event claims 9 bytes, has 1
        w.writeBE(UInt32(bad.count)); w.writeBE(UInt32(bad.count)); w.writeBE(UInt32(1)); w.writeBE(UInt32(0)); w.writeBE(UInt64(0x00DC_DDB3_0F2F_8000))
        f += w.bytes + bad
        let t = try TraceReader.read(f)
        #expect(t.damage == nil)
        guard case let .undecodable(type, bytes, _) = t.records.first?.content else { Issue.record("expected undecodable"); return }
        #expect(type == .event)
        #expect(bytes == [0x0E, 0x09, 0x01])
    }

    @Test func pcapngWithNanosecondResolutionReads() throws {
        // SHB, IDB (link type 201, if_tsresol = 9), one EPB: written out per the pcapng draft.
        var w = ByteWriter()
        w.write(UInt32(0x0A0D_0D0A)); w.write(UInt32(28)); w.write(UInt32(0x1A2B_3C4D)); w.write(UInt16(1)); w.write(UInt16(0))
        w.write(UInt64.max); w.write(UInt32(28))
        w.write(UInt32(1)); w.write(UInt32(32)); w.write(UInt16(201)); w.write(UInt16(0)); w.write(UInt32(0))
        w.write(UInt16(9)); w.write(UInt16(1)); w.write(contentsOf: [9, 0, 0, 0]); w.write(UInt16(0)); w.write(UInt16(0))
        w.write(UInt32(32))
        let data: [UInt8] = [0, 0, 0, 0] + Reset().packet.h4Bytes
        let ts: UInt64 = 1_700_000_000_123_456_789
        w.write(UInt32(6)); w.write(UInt32(32 + data.count)); w.write(UInt32(0))
        w.write(UInt32(ts >> 32)); w.write(UInt32(ts & 0xFFFF_FFFF)); w.write(UInt32(data.count)); w.write(UInt32(data.count))
        w.write(contentsOf: data); w.write(UInt32(32 + data.count))
        let t = try TraceReader.read(w.bytes)
        #expect(t.format == .pcapng)
        #expect(t.damage == nil)
        #expect(t.records.first?.packet == Reset().packet)
        #expect(t.records.first?.direction == .hostToController)
        #expect(t.records.first?.timestampMicros == 1_700_000_000_123_456)
        // Cut inside the EPB: damage at its offset.
        let cut = try TraceReader.read(Array(w.bytes.dropLast(3)))
        #expect(cut.records.isEmpty)
        #expect(cut.damage?.offset == 28 + 32)
    }

    @Test func recordedInitFixtureDecodesCompletely() throws {
        let root = String(#filePath).components(separatedBy: "/Tests/").first ?? "."
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: root + "/Fixtures/rootcanal-init.btsnoop")))
        let t = try TraceReader.read(bytes)
        #expect(t.format == .btsnoop(datalink: 1002))
        #expect(t.damage == nil)
        #expect(t.records.count % 2 == 0)
        #expect(t.records.allSatisfy { $0.packet != nil })
        // Re-encoding gives the same bytes: our writer and reader agree on the format.
        #expect(Self.file(.btsnoop(datalink: 1002), t.records) == bytes)
    }

    /// LE signaling is decoded to its fields (Vol 3, Part A, §4.22 and §4.24 here), and a
    /// frame on a dynamic CID is marked as a K-frame.
    @Test func leSignalingAndKFramesAreDecoded() {
        var d = FrameDecoder()
        func acl(_ bytes: [UInt8]) -> TraceRecord {
            TraceRecord(timestampMicros: 0, packet: .acl(ACLDataPacket(handle: 0x40, boundary: .firstNonFlushable, data: bytes)), direction: .hostToController)
        }
        // LE Credit Based Connection Request: SPSM 0x0080, SCID 0x0040, MTU 512, MPS 247, 8 credits.
        let req = d.decode(acl([0x0E, 0x00, 0x05, 0x00, 0x14, 0x01, 0x0A, 0x00, 0x80, 0x00, 0x40, 0x00, 0x00, 0x02, 0xF7, 0x00, 0x08, 0x00]), number: 1, firstTimestamp: 0)
        #expect(req.json["signaling_name"] == .string("LE Credit Based Connection Request"))
        #expect(req.json["signaling_id"] == .int(1))
        #expect(req.json["params"] == .object([("spsm", .int(0x80)), ("scid", .int(0x40)), ("mtu", .int(512)), ("mps", .int(247)), ("initial_credits", .int(8))]))
        #expect(req.summary.hasSuffix("LE signaling LE Credit Based Connection Request id=1 spsm=0x0080 scid=0x0040 mtu=512 mps=247 initial_credits=8"))
        let credit = d.decode(acl([0x08, 0x00, 0x05, 0x00, 0x16, 0x02, 0x04, 0x00, 0x41, 0x00, 0x03, 0x00]), number: 2, firstTimestamp: 0)
        #expect(credit.summary.hasSuffix("Flow Control Credit Indication id=2 cid=0x0041 credits=3"))
        let k = d.decode(acl([0x05, 0x00, 0x41, 0x00, 0x03, 0x00, 1, 2, 3]), number: 3, firstTimestamp: 0)
        #expect(k.json["k_frame"] == .bool(true))
        #expect(k.summary.hasSuffix("L2CAP dynamic cid=0x0041 5 bytes"))
    }

    /// An SMP frame whose L2CAP length is 0 (with bytes after it) has no opcode: the
    /// decoder says it is malformed rather than reading past the PDU (found by FuzzACL).
    @Test func anSMPFrameOfLengthZeroIsMalformedNotATrap() throws {
        var d = FrameDecoder()
        let body: [UInt8] = [0x2A, 0x00, 0x06, 0x00, 0x00, 0x00, 0x06, 0x00, 0x09, 0x00]
        let packet = try HCIPacket(type: .acl, body: body)
        let f = d.decode(TraceRecord(timestampMicros: 0, packet: packet, direction: .controllerToHost), number: 1, firstTimestamp: 0)
        #expect(f.json["smp_error"] != nil)
        #expect(f.summary.contains(" SMP ("))
    }

    /// ATT on dynamic channels: EATT (SPSM 0x0027, opened by Credit Based Connection
    /// Request/Response, Vol 3, Part A, §4.25, §4.26) and ATT over BR/EDR PSM 0x001F
    /// (Connection Request/Response, §4.2, §4.3). The decoder learns each channel's CIDs
    /// per direction from the signaling, finds SDU starts in K-frames, and forgets a
    /// channel on Disconnection Response.
    @Test func attOnEATTAndBREDRChannelsIsDecoded() {
        var d = FrameDecoder()
        var n = 0
        func frame(_ cid: UInt16, _ l2: [UInt8], _ dir: TraceRecord.Direction) -> DecodedFrame {
            n += 1
            let data = [UInt8(l2.count & 0xFF), UInt8(l2.count >> 8), UInt8(cid & 0xFF), UInt8(cid >> 8)] + l2
            return d.decode(TraceRecord(timestampMicros: 0, packet: .acl(ACLDataPacket(handle: 0x40, boundary: .firstNonFlushable, data: data)), direction: dir),
                            number: n, firstTimestamp: 0)
        }
        // Before any signaling, a dynamic CID is only a K-frame.
        #expect(frame(0x0040, [3, 0, 0x0B, 1, 2], .controllerToHost).json["att_opcode"] == nil)
        // We ask for two EATT channels (source CIDs 0x0040, 0x0041); the peer accepts with 0x0050, 0x0051.
        _ = frame(0x0005, [0x17, 7, 12, 0, 0x27, 0, 0x00, 0x02, 0xF7, 0, 10, 0, 0x40, 0, 0x41, 0], .hostToController)
        _ = frame(0x0005, [0x18, 7, 12, 0, 0x00, 0x02, 0xF7, 0, 10, 0, 0, 0, 0x50, 0, 0x51, 0], .controllerToHost)
        let rsp = frame(0x0040, [3, 0, 0x0B, 1, 2], .controllerToHost)
        #expect(rsp.json["psm"] == .int(0x27))
        #expect(rsp.json["psm_name"] == .string("EATT"))
        #expect(rsp.json["sdu_length"] == .int(3))
        #expect(rsp.json["att_opcode"] == .int(0x0B))
        #expect(rsp.summary.hasSuffix("L2CAP cid=0x0040 psm=0x0027 (EATT) ATT Read Response"))
        let write = frame(0x0051, [5, 0, 0x12, 0x2A, 0x00, 1, 2], .hostToController)
        #expect(write.json["att_handle"] == .int(0x2A))
        // Frames towards the peer use the peer's CIDs: 0x0040 from us is not EATT.
        #expect(frame(0x0040, [3, 0, 0x0B, 1, 2], .hostToController).json["psm"] == nil)
        // An SDU of 10 bytes over two K-frames: the first names the notification, the
        // second continues the SDU and completes it, and the notification is decoded
        // whole there (as an ATT PDU split over ACL packets is at its last fragment).
        let first = frame(0x0041, [10, 0, 0x1B, 0x2C, 0x00, 9], .controllerToHost)
        #expect(first.json["att_name"] == .string("Handle Value Notification"))
        #expect(first.json["att_fragment"] == .bool(true) && first.json["att_value"] == nil)
        let rest = frame(0x0041, [1, 2, 3, 4, 5, 6], .controllerToHost)
        #expect(rest.json["sdu_continuation"] == .bool(true))
        #expect(rest.json["sdu_reassembled"] == .int(2))
        #expect(rest.json["att_handle"] == .int(0x2C) && rest.json["att_value"] == .string("09010203040506"), "\(rest.json)")
        #expect(rest.summary.hasSuffix("SDU continuation 6 bytes [2 K-frames] ATT Handle Value Notification handle=0x002c"), "\(rest.summary)")
        #expect(frame(0x0041, [3, 0, 0x1E, 0, 0], .controllerToHost).json["att_name"] == .string("Handle Value Confirmation"))

        // BR/EDR: Connection Request for PSM 0x001F from us (source CID 0x0045), accepted as 0x0060.
        let req = frame(0x0001, [0x02, 9, 4, 0, 0x1F, 0, 0x45, 0], .hostToController)
        #expect(req.summary.hasSuffix("signaling Connection Request id=9 psm=0x001f scid=0x0045"))
        _ = frame(0x0001, [0x03, 9, 8, 0, 0x60, 0, 0x45, 0, 0, 0, 0, 0], .controllerToHost)
        let notification = frame(0x0045, [0x1B, 0x03, 0x00, 0x01], .controllerToHost)
        #expect(notification.json["psm_name"] == .string("ATT"))
        #expect(notification.json["k_frame"] == nil)
        #expect(notification.json["att_handle"] == .int(3))
        #expect(frame(0x0060, [0x0A, 0x03, 0x00], .hostToController).json["att_name"] == .string("Read Request"))
        // We close it (Disconnection Request dcid 0x0060 scid 0x0045; the response echoes them).
        _ = frame(0x0001, [0x06, 10, 4, 0, 0x60, 0, 0x45, 0], .hostToController)
        _ = frame(0x0001, [0x07, 10, 4, 0, 0x60, 0, 0x45, 0], .controllerToHost)
        #expect(frame(0x0045, [0x1B, 0x03, 0x00, 0x01], .controllerToHost).json["psm"] == nil)

        // SMP over BR/EDR (CID 0x0007) decodes like LE SMP.
        let smp = frame(0x0007, [0x01, 0x03, 0x00, 0x0D, 0x10, 0x03, 0x03], .hostToController)
        #expect(smp.json["smp_name"] == .string("Pairing Request"))
    }

    @Test func frameDecoderJSONHasTheDocumentedKeys() throws {
        var d = FrameDecoder()
        let report = HCIEvent.le(.advertisingReport(LEAdvertisingReport(reports: [.init(eventType: 0, addressType: .random, address: BluetoothAddress("C0:01:02:03:04:05")!, data: [2, 1, 6, 4, 9, 0x61, 0x62, 0x63], rssi: -70)])))
        let j = d.decode(TraceRecord(timestampMicros: 5, packet: report.packet, direction: .controllerToHost), number: 3, firstTimestamp: 0).json
        #expect(j["frame"] == .int(3))
        #expect(j["ts_us"] == .int(5))
        #expect(j["dir"] == .string("rx"))
        #expect(j["type"] == .string("event"))
        #expect(j["event"] == .int(0x3E))
        #expect(j["subevent"] == .int(2))
        guard case let .array(reports)? = j["reports"], let r = reports.first else { Issue.record("no reports"); return }
        #expect(r["address"] == .string("C0:01:02:03:04:05"))
        #expect(r["address_type"] == .string("random"))
        #expect(r["rssi"] == .int(-70))
        #expect(r["ad_types"] == .array([.int(1), .int(9)]))
        let cmd = d.decode(TraceRecord(timestampMicros: 0, packet: LESetScanEnable(scanEnable: true).packet, direction: .hostToController), number: 1, firstTimestamp: 0).json
        #expect(cmd["opcode"] == .int(0x200C))
        #expect(cmd["ogf"] == .int(8))
        #expect(cmd["ocf"] == .int(0x0C))
        let acl = d.decode(Self.records[2], number: 1, firstTimestamp: 0).json
        #expect(acl["handle"] == .int(0x40))
        #expect(acl["pb"] == .int(0))
        #expect(acl["cid"] == .int(4))
        #expect(acl["att_opcode"] == .int(0x0A))
        #expect(acl["att_handle"] == .int(3))
        let status = d.decode(Self.records[1], number: 2, firstTimestamp: 0).json
        #expect(status["status"] == .int(0))
    }
}

/// SMP in captures of our pairings with Bumble (Fixtures/rootcanal-smp-*.btsnoop,
/// recorded by BumbleSMPTests; tshark's view of the same files is checked there).
@Suite(.timeLimit(.minutes(3)))
struct SMPDecodeTests {
    static func frames(_ fixture: String, showKeys: Bool) throws -> [JSONValue] {
        let root = String(#filePath).components(separatedBy: "/Tests/").first ?? "."
        let trace = try TraceReader.read([UInt8](try Data(contentsOf: URL(fileURLWithPath: root + "/Fixtures/" + fixture))))
        var d = FrameDecoder(showKeys: showKeys)
        return trace.records.enumerated().map { d.decode($1, number: $0 + 1, firstTimestamp: 0).json }
    }

    @Test(arguments: ["rootcanal-smp-sc-passkey.btsnoop", "rootcanal-smp-legacy-passkey.btsnoop"])
    func everySMPFrameDecodesAndKeysStayHiddenUnlessAsked(fixture: String) throws {
        let hidden = try Self.frames(fixture, showKeys: false).filter { $0["smp_opcode"] != nil }
        let shown = try Self.frames(fixture, showKeys: true).filter { $0["smp_opcode"] != nil }
        #expect(hidden.count >= 8)
        #expect(hidden.allSatisfy { $0["smp_error"] == nil })
        let names = Set(hidden.compactMap { if case let .string(s)? = $0["smp_name"] { return s }; return nil })
        #expect(names.isSuperset(of: ["Pairing Request", "Pairing Response", "Pairing Confirm", "Pairing Random", "Identity Information"]))
        func keys(_ frames: [JSONValue]) -> [String] {
            frames.compactMap { f -> String? in
                guard case let .object(p)? = f["params"] else { return nil }
                return p.first { ["irk", "ltk", "confirm", "random", "dhkey_check"].contains($0.0) }.flatMap { if case let .string(s) = $0.1 { return s }; return nil }
            }
        }
        #expect(!keys(hidden).isEmpty && keys(hidden).allSatisfy { $0 == "<redacted>" })
        #expect(keys(shown).allSatisfy { $0.count == 32 && $0 != "<redacted>" })
    }
}
