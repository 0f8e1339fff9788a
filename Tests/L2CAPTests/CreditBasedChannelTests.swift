import HCI
import Testing
@testable import L2CAP

/// LE credit-based channels, sans I/O, with bytes laid out as Vol 3, Part A, §3.4.3
/// (K-frames), §4.6/§4.7 and §4.22–§4.24 (signaling) give them.
@Suite(.timeLimit(.minutes(3)))
struct CreditBasedChannelTests {
    static let small = CreditBasedParameters(mtu: 100, mps: 23, initialCredits: 2)

    func channel(local: CreditBasedParameters = small, remote: CreditBasedParameters = small) -> CreditBasedChannelState {
        CreditBasedChannelState(spsm: 0x80, localCID: 0x40, remoteCID: 0x41, local: local, remote: remote)
    }

    @Test func anSDUIsCutIntoKFramesAndWaitsForCredits() throws {
        var ch = channel()
        let sdu = (0..<50).map { UInt8($0) }
        // MPS 23: the first K-frame carries the SDU length and 21 bytes, then 23, then 6.
        let first = try ch.send(sdu, token: 7)
        #expect(first == [.frame([50, 0] + Array(sdu[0..<21]), token: nil), .frame(Array(sdu[21..<44]), token: nil)])
        #expect(ch.sendCredits == 0 && ch.framesWaiting == 1)
        #expect(ch.addCredits(3) == [.frame(Array(sdu[44..<50]), token: 7)])
        #expect(ch.sendCredits == 2)
        #expect(throws: ChannelSendError.sduTooLong(101, mtu: 100)) { try ch.send(Array(repeating: 0, count: 101), token: nil) }
        // An empty SDU is one K-frame with length 0.
        #expect(try ch.send([], token: 8) == [.frame([0, 0], token: 8)])
    }

    @Test func kFramesReassembleIntoSDUs() {
        var ch = channel(local: CreditBasedParameters(mtu: 100, mps: 23, initialCredits: 10))
        #expect(ch.receive([5, 0, 1, 2, 3, 4, 5]) == [.sdu([1, 2, 3, 4, 5], frames: 1)])
        // A K-frame that leaves its SDU unfinished gives its credit back at once; the
        // last one's credit waits until the application takes the SDU.
        #expect(ch.receive([30, 0] + Array(repeating: 1, count: 21)) == [.returnCredit])
        #expect(ch.grant(1) == 1)
        #expect(ch.receive(Array(repeating: 2, count: 9)) == [.sdu(Array(repeating: 1, count: 21) + Array(repeating: 2, count: 9), frames: 1)])
        #expect(ch.receiveCredits == 8)
        #expect(ch.grant(2) == 2 && ch.receiveCredits == 10)
    }

    @Test(arguments: [
        ([[UInt8]](arrayLiteral: [101, 0]), "exceeds our MTU"),                         // SDU length > MTU
        ([Array(repeating: 0, count: 24)], "exceeds our MPS"),                         // K-frame > MPS
        ([[3, 0, 1, 2, 3, 4]], "for an SDU of 3"),                                      // first frame longer than its SDU
        ([[4, 0, 1, 2], [3, 4, 5]], "for an SDU of 4"),                                 // continuation overruns the SDU
        ([[9]], "without its SDU length"),
        ([[30, 0], [1], [2]], "no credits"),                                            // third frame, 2 credits never returned
    ])
    func aPeerBreakingTheRulesClosesTheChannel(frames: [[UInt8]], why: String) {
        var ch = channel()
        var last: [CreditBasedChannelState.Event] = []
        for f in frames { last = ch.receive(f) }
        guard case let .violation(text)? = last.first else {
            Issue.record("no violation: \(last)")
            return
        }
        #expect(text.contains(why), "\(text)")
    }

    @Test func creditsBeyond65535CloseTheChannel() {
        var ch = channel()
        #expect(ch.addCredits(65533) == [])
        guard case .violation? = ch.addCredits(1).first else { Issue.record("65536 credits accepted"); return }
        #expect(ch.addCredits(0) == [])  // 0 credits: ignored
    }

    // MARK: Signaling

    /// LE Credit Based Connection Request: SPSM 0x0080, SCID 0x0040, MTU 512, MPS 247, 8 credits.
    static let request: [UInt8] = [0x14, 0x01, 0x0A, 0x00, 0x80, 0x00, 0x40, 0x00, 0x00, 0x02, 0xF7, 0x00, 0x08, 0x00]

    func response(_ events: [CreditBasedChannels.Event]?) -> [UInt8]? {
        guard case let .signal(b)? = events?.first else { return nil }
        return b
    }

    @Test func aListeningSPSMAcceptsAndAnswersWithItsParameters() throws {
        var link = CreditBasedChannels()
        link.listen(spsm: 0x80, CreditBasedParameters(mtu: 1000, mps: 100, initialCredits: 4))
        let events = link.receive(try SignalingCommand(bytes: Self.request))
        // Response: DCID 0x0040 (ours), MTU 1000, MPS 100, credits 4, result success.
        #expect(response(events) == [0x15, 0x01, 0x0A, 0x00, 0x40, 0x00, 0xE8, 0x03, 0x64, 0x00, 0x04, 0x00, 0x00, 0x00])
        guard case let .accepted(info)? = events?.last else { Issue.record("not accepted"); return }
        #expect(info.localCID == 0x40 && info.remoteCID == 0x40 && info.remote == CreditBasedParameters(mtu: 512, mps: 247, initialCredits: 8))
        // The same source CID again: already allocated (0x000A).
        #expect(response(link.receive(try SignalingCommand(bytes: Self.request)))?.suffix(2) == [0x0A, 0x00])
    }

    @Test(arguments: [
        (UInt16(0x0081), UInt16(0x0040), UInt16(247), UInt8(0x02)),  // nobody listens: SPSM not supported
        (0x0080, 0x0020, 247, 0x09),                                // source CID outside the dynamic range
        (0x0080, 0x0040, 22, 0x0B),                                 // MPS below 23: unacceptable parameters
    ])
    func refusalsCarryTheSpecsResult(spsm: UInt16, scid: UInt16, mps: UInt16, result: UInt8) throws {
        var link = CreditBasedChannels()
        link.listen(spsm: 0x80, CreditBasedParameters())
        let cmd = SignalingCommand(code: .leCreditBasedConnectionRequest, identifier: 9,
                                   data: [UInt8(spsm & 0xFF), UInt8(spsm >> 8), UInt8(scid & 0xFF), UInt8(scid >> 8), 0x00, 0x02, UInt8(mps & 0xFF), UInt8(mps >> 8), 1, 0])
        #expect(response(link.receive(cmd)) == [0x15, 9, 0x0A, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, result, 0])
        #expect(link.channels.isEmpty)
    }

    @Test func ourRequestOpensOnSuccessAndFailsWithTheResult() throws {
        var link = CreditBasedChannels()
        let request = link.connect(spsm: 0x25, CreditBasedParameters(mtu: 64, mps: 64, initialCredits: 1))
        let (id, bytes) = try #require(request)
        #expect(bytes == [0x14, id, 0x0A, 0x00, 0x25, 0x00, 0x40, 0x00, 0x40, 0x00, 0x40, 0x00, 0x01, 0x00])
        let ok = SignalingCommand(code: .leCreditBasedConnectionResponse, identifier: id, data: [0x55, 0x00, 0x17, 0x00, 0x17, 0x00, 0x02, 0x00, 0x00, 0x00])
        guard case let .opened(i, infos, .success)? = link.receive(ok)?.first, let info = infos.first else { Issue.record("not opened"); return }
        #expect(infos.count == 1 && !info.enhanced)
        #expect(i == id && info.localCID == 0x40 && info.remoteCID == 0x55 && info.remote.mtu == 23 && info.remote.initialCredits == 2)
        // A second request takes the next CID; the peer refuses it.
        let second = link.connect(spsm: 0x25, CreditBasedParameters())
        let (id2, bytes2) = try #require(second)
        #expect(bytes2[6] == 0x41)
        let no = SignalingCommand(code: .leCreditBasedConnectionResponse, identifier: id2, data: [0, 0, 0, 0, 0, 0, 0, 0, 0x05, 0x00])
        #expect(link.receive(no) == [.refused(identifier: id2, .insufficientAuthentication)])
        // A response nobody asked for is ignored.
        guard case .ignored? = link.receive(no)?.first else { Issue.record("stray response used"); return }
        // A success whose parameters are out of range (MPS 22): refused here, and the
        // peer's channel (its CID 0x56) is asked to go.
        let third = link.connect(spsm: 0x25, CreditBasedParameters())
        let (id3, bytes3) = try #require(third)
        let bad = SignalingCommand(code: .leCreditBasedConnectionResponse, identifier: id3, data: [0x56, 0x00, 0x17, 0x00, 0x16, 0x00, 0x01, 0x00, 0x00, 0x00])
        let answered = link.receive(bad)
        let events = try #require(answered)
        guard case let .signal(b)? = events.first else { Issue.record("\(events)"); return }
        #expect(b[0] == 0x06 && Array(b[2...]) == [0x04, 0x00, 0x56, 0x00, bytes3[6], 0x00])
        #expect(events.last == .refused(identifier: id3, .unacceptableParameters) && link.channels.count == 1)
    }

    @Test func creditsFlowAndDisconnectionEndsTheChannel() throws {
        var link = CreditBasedChannels()
        link.listen(spsm: 0x80, CreditBasedParameters(mtu: 100, mps: 23, initialCredits: 1))
        _ = link.receive(try SignalingCommand(bytes: [0x14, 0x01, 0x0A, 0x00, 0x80, 0x00, 0x40, 0x00, 0x64, 0x00, 0x17, 0x00, 0x00, 0x00]))
        // The peer granted no credits: our SDU waits; its Flow Control Credit Indication
        // (CID = its source CID 0x0040, 1 credit) releases it.
        #expect(try link.send([1, 2, 3], on: 0x40, token: 1) == [])
        let credit = SignalingCommand(code: .flowControlCreditIndication, identifier: 2, data: [0x40, 0x00, 0x01, 0x00])
        #expect(link.receive(credit) == [.frame(remoteCID: 0x40, [3, 0, 1, 2, 3], token: 1)])
        // An SDU in: once consumed, its credit goes back (CID = our source CID 0x0040).
        #expect(link.receive([2, 0, 9, 9], on: 0x40) == [.sdu(localCID: 0x40, [9, 9], frames: 1)])
        guard case let .signal(b)? = link.consumed(frames: 1, on: 0x40).first else { Issue.record("no credit"); return }
        #expect(b[0] == 0x16 && Array(b[2...]) == [0x04, 0x00, 0x40, 0x00, 0x01, 0x00])
        // Disconnection Request for an unknown CID: Command Reject, Invalid CID, both CIDs echoed.
        let unknown = SignalingCommand(code: .disconnectionRequest, identifier: 3, data: [0x77, 0x00, 0x40, 0x00])
        #expect(response(link.receive(unknown)) == [0x01, 3, 0x06, 0x00, 0x02, 0x00, 0x77, 0x00, 0x40, 0x00])
        // For ours: Disconnection Response with the same CIDs, the channel ends.
        let bye = SignalingCommand(code: .disconnectionRequest, identifier: 4, data: [0x40, 0x00, 0x40, 0x00])
        let events = link.receive(bye)
        #expect(response(events) == [0x07, 4, 0x04, 0x00, 0x40, 0x00, 0x40, 0x00])
        #expect(events?.last == .closed(localCID: 0x40, .closedByPeer, unsent: []))
        #expect(link.receive([0, 0], on: 0x40) == nil)
    }

    @Test func aViolationSendsOurDisconnectionRequest() throws {
        var link = CreditBasedChannels()
        link.listen(spsm: 0x80, CreditBasedParameters(mtu: 100, mps: 23, initialCredits: 1))
        _ = link.receive(try SignalingCommand(bytes: Self.request))
        _ = try link.send(Array(repeating: 0, count: 300), on: 0x40, token: 5)  // waits for credits? no: 8 credits, 2 frames
        let received = link.receive([0xFF, 0x00], on: 0x40)                       // SDU length 255 > MTU 100
        let events = try #require(received)
        guard case let .signal(b)? = events.first, case let .closed(cid, .protocolViolation, unsent)? = events.last else {
            Issue.record("\(events)")
            return
        }
        #expect(b[0] == 0x06 && Array(b[2...]) == [0x04, 0x00, 0x40, 0x00, 0x40, 0x00])
        #expect(cid == 0x40 && unsent.isEmpty)
        #expect(link.channels.isEmpty)
        // The peer's Disconnection Response (same identifier, same CIDs) completes it.
        let answer = SignalingCommand(code: .disconnectionResponse, identifier: b[1], data: [0x40, 0x00, 0x40, 0x00])
        #expect(link.receive(answer) == [.disconnectAnswered(localCID: 0x40)])
        guard case .ignored? = link.receive(answer)?.first else { Issue.record("a second answer was taken"); return }
    }
}
