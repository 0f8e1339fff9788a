import HCI
import Testing
@testable import L2CAP

/// Enhanced credit-based mode (Vol 3, Part A, §4.25–§4.28) and an SPSM's security
/// requirement, sans I/O, with the commands' bytes laid out as the specification gives
/// them: Credit Based Connection Request (code 0x17: SPSM, MTU, MPS, Initial Credits,
/// Source CID × 1...5), Response (0x18: MTU, MPS, Initial Credits, Result, Destination
/// CID per Source CID), Reconfigure Request (0x19: MTU, MPS, Destination CID × 1...5)
/// and Response (0x1A: Result).
@Suite(.timeLimit(.minutes(3)))
struct EnhancedCreditBasedTests {
    static let listener = CreditBasedParameters(mtu: 1000, mps: 100, initialCredits: 4)

    func le16(_ values: UInt16...) -> [UInt8] { values.flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] } }

    /// A peer's request for channels with these source CIDs (MTU 100, MPS 64, 5 credits).
    func request(spsm: UInt16 = 0x80, mtu: UInt16 = 100, mps: UInt16 = 64, _ scids: [UInt16], id: UInt8 = 1) -> SignalingCommand {
        SignalingCommand(code: .creditBasedConnectionRequest, identifier: id, data: le16(spsm, mtu, mps, 5) + scids.flatMap { le16($0) })
    }

    func refusal(_ r: Result<(identifier: UInt8, bytes: [UInt8]), ReconfigureRefusal>) -> CreditBasedReconfigureResult? {
        if case let .failure(f) = r { return f.result }
        return nil
    }

    func signal(_ events: [CreditBasedChannels.Event]?) -> [UInt8]? {
        guard case let .signal(b)? = events?.first else { return nil }
        return b
    }

    func accepted(_ events: [CreditBasedChannels.Event]?) -> [CreditBasedChannelInfo] {
        (events ?? []).compactMap { if case let .accepted(info) = $0 { return info } else { return nil } }
    }

    @Test func aPeerOpensThreeChannelsWithOneRequest() throws {
        var link = CreditBasedChannels()
        link.listen(spsm: 0x80, Self.listener)
        let events = link.receive(request([0x40, 0x41, 0x42]))
        // Response: our MTU 1000, MPS 100, 4 credits, success, our CIDs 0x40, 0x41, 0x42.
        #expect(signal(events) == [0x18, 1, 14, 0] + le16(1000, 100, 4, 0, 0x40, 0x41, 0x42))
        let infos = accepted(events)
        #expect(infos.map(\.remoteCID) == [0x40, 0x41, 0x42] && infos.allSatisfy(\.enhanced))
        #expect(infos.allSatisfy { $0.remote == CreditBasedParameters(mtu: 100, mps: 64, initialCredits: 5) && $0.local == Self.listener })
        // Data flows as in LE mode: a K-frame on the second channel is an SDU.
        #expect(link.receive([2, 0, 7, 8], on: 0x41) == [.sdu(localCID: 0x41, [7, 8], frames: 1)])
    }

    @Test func someChannelsRefusedNameTheLastReasonAndGetCIDZero() {
        var link = CreditBasedChannels()
        link.listen(spsm: 0x80, Self.listener)
        // 0x50 accepted; 0x50 again: already allocated; 0x10 outside the dynamic range.
        let events = link.receive(request([0x50, 0x50, 0x10]))
        #expect(signal(events) == [0x18, 1, 14, 0] + le16(1000, 100, 4, 0x0009, 0x40, 0, 0))
        #expect(accepted(events).map(\.remoteCID) == [0x50])
    }

    @Test(arguments: [
        (UInt16(0x81), UInt16(100), UInt16(64), 1, UInt16(0x0002)),  // nobody listens: SPSM not supported
        (0x80, 63, 64, 1, 0x000B),                                    // MTU below 64: unacceptable parameters
        (0x80, 100, 63, 1, 0x000B),                                   // MPS below 64
        (0x80, 100, 64, 6, 0x000C),                                   // six channels: invalid parameters
        (0x80, 100, 64, 0, 0x000C),                                   // none
    ])
    func refusalsOfTheWholeRequest(spsm: UInt16, mtu: UInt16, mps: UInt16, count: Int, result: UInt16) {
        var link = CreditBasedChannels()
        link.listen(spsm: 0x80, Self.listener)
        let scids = (0..<count).map { UInt16(0x40 + $0) }
        let events = link.receive(request(spsm: spsm, mtu: mtu, mps: mps, scids))
        // MTU, MPS, credits 0, the result, a Destination CID 0x0000 per Source CID.
        #expect(signal(events) == [0x18, 1, UInt8(8 + 2 * count), 0] + le16(0, 0, 0, result) + Array(repeating: 0, count: 2 * count))
        #expect(link.channels.isEmpty)
    }

    @Test func aListenerRaisesItsParametersToEnhancedModesMinimum() {
        var link = CreditBasedChannels()
        link.listen(spsm: 0x80, CreditBasedParameters(mtu: 23, mps: 23, initialCredits: 1))
        #expect(signal(link.receive(request([0x40]))) == [0x18, 1, 10, 0] + le16(64, 64, 1, 0, 0x40))
    }

    @Test func ourRequestOpensWhatThePeerAccepts() throws {
        var link = CreditBasedChannels()
        #expect(link.connectEnhanced(spsm: 0x80, CreditBasedParameters(mtu: 63, mps: 64, initialCredits: 1), count: 1) == nil)
        #expect(link.connectEnhanced(spsm: 0x80, CreditBasedParameters(), count: 6) == nil)
        let made = link.connectEnhanced(spsm: 0x27, CreditBasedParameters(mtu: 512, mps: 247, initialCredits: 3), count: 2)
        let (id, bytes) = try #require(made)
        #expect(bytes == [0x17, id, 12, 0] + le16(0x27, 512, 247, 3, 0x40, 0x41))
        // The peer accepts the first (its CID 0x60) and refuses the second for want of resources.
        let answer = SignalingCommand(code: .creditBasedConnectionResponse, identifier: id, data: le16(200, 100, 7, 0x0004, 0x60, 0))
        guard case let .opened(i, infos, result)? = link.receive(answer)?.first else { Issue.record("not opened"); return }
        #expect(i == id && result == .noResourcesAvailable)
        #expect(infos.count == 1 && infos[0].localCID == 0x40 && infos[0].remoteCID == 0x60 && infos[0].enhanced)
        #expect(infos[0].remote == CreditBasedParameters(mtu: 200, mps: 100, initialCredits: 7))
        // A refusal of all may list no CIDs at all (Bumble's does).
        let second = link.connectEnhanced(spsm: 0x81, CreditBasedParameters(), count: 3)
        let (id2, _) = try #require(second)
        let none = SignalingCommand(code: .creditBasedConnectionResponse, identifier: id2, data: le16(0, 0, 0, 0x0002))
        #expect(link.receive(none) == [.refused(identifier: id2, .spsmNotSupported)])
        // A success with parameters below enhanced mode's minimum: the peer's channel is
        // asked to go (Disconnection Request: its CID 0x61, ours), and we report a refusal.
        let third = link.connectEnhanced(spsm: 0x80, CreditBasedParameters(), count: 1)
        let (id3, _) = try #require(third)
        let bad = SignalingCommand(code: .creditBasedConnectionResponse, identifier: id3, data: le16(23, 23, 1, 0, 0x61))
        let answered = link.receive(bad)
        let events = try #require(answered)
        guard case let .signal(b)? = events.first else { Issue.record("\(events)"); return }
        #expect(b[0] == 0x06 && Array(b[2...]) == [4, 0] + le16(0x61, 0x45))  // CIDs rotate: 0x41...0x44 went to the earlier requests
        #expect(events.last == .refused(identifier: id3, .unacceptableParameters))
    }

    /// Two enhanced channels opened by the peer (its CIDs 0x40 and 0x41, MTU 100, MPS 64).
    func twoChannels() -> CreditBasedChannels {
        var link = CreditBasedChannels()
        link.listen(spsm: 0x80, Self.listener)
        _ = link.receive(request([0x40, 0x41]))
        return link
    }

    func reconfigure(mtu: UInt16, mps: UInt16, _ cids: [UInt16]) -> SignalingCommand {
        SignalingCommand(code: .creditBasedReconfigureRequest, identifier: 9, data: le16(mtu, mps) + cids.flatMap { le16($0) })
    }

    @Test(arguments: [
        (UInt16(200), UInt16(100), [UInt16(0x40), 0x41], UInt16(0x0000)),
        (99, 64, [0x40], 0x0001),           // the MTU may not shrink
        (100, 63, [0x40], 0x0004),          // below 64
        (100, 64, [0x40, 0x77], 0x0003),    // a CID that is not the peer's
        (100, 64, [], 0x0003),
    ])
    func thePeerReconfiguresItsSide(mtu: UInt16, mps: UInt16, cids: [UInt16], result: UInt16) {
        var link = twoChannels()
        let events = link.receive(reconfigure(mtu: mtu, mps: mps, cids))
        #expect(signal(events) == [0x1A, 9, 2, 0] + le16(result))
        let changed = (events ?? []).compactMap { if case let .reconfiguredByPeer(i) = $0 { return i } else { return nil } }
        #expect(changed.count == (result == 0 ? cids.count : 0))
        for info in changed { #expect(info.remote.mtu == mtu && info.remote.mps == mps) }
    }

    @Test func theMPSShrinksOnlyOneChannelAtATimeAndWaitingFramesAreCutAgain() throws {
        var link = CreditBasedChannels()
        link.listen(spsm: 0x80, Self.listener)
        // The peer grants no credits, MPS 100: our 150-byte SDU waits as two K-frames.
        let open = SignalingCommand(code: .creditBasedConnectionRequest, identifier: 1, data: le16(0x80, 200, 100, 0, 0x40, 0x41))
        _ = link.receive(open)
        let sdu = (0..<150).map { UInt8($0) }
        #expect(try link.send(sdu, on: 0x40, token: 1) == [])  // throws only for an SDU over the MTU
        #expect(signal(link.receive(reconfigure(mtu: 200, mps: 64, [0x40, 0x41]))) == [0x1A, 9, 2, 0] + le16(0x0002))
        #expect(signal(link.receive(reconfigure(mtu: 200, mps: 64, [0x40]))) == [0x1A, 9, 2, 0] + le16(0x0000))
        // Credits come: the frames go out no larger than 64 bytes, the SDU intact.
        let credit = SignalingCommand(code: .flowControlCreditIndication, identifier: 2, data: le16(0x40, 10))
        let frames = (link.receive(credit) ?? []).compactMap { e -> ([UInt8], UInt64?)? in
            if case let .frame(0x40, bytes, token) = e { return (bytes, token) } else { return nil }
        }
        #expect(frames.map(\.0.count) == [64, 36, 52])
        #expect(Array(frames.flatMap(\.0).dropFirst(2)) == sdu && frames.map(\.1) == [nil, nil, 1])
    }

    @Test func ourReconfigurationAppliesWhenAccepted() throws {
        var link = twoChannels()
        // Refused before sending, with the result the peer would give.
        #expect(refusal(link.reconfigure([0x40], mtu: 999, mps: 100)) == .mtuReductionNotAllowed)
        #expect(refusal(link.reconfigure([0x40, 0x41], mtu: 1000, mps: 99)) == .mpsReductionNotAllowed)
        #expect(refusal(link.reconfigure([0x40, 0x55], mtu: 2000, mps: 100)) == .invalidDestinationCIDs)
        guard case let .success((id, bytes)) = link.reconfigure([0x40, 0x41], mtu: 2000, mps: 200) else { Issue.record("not sent"); return }
        #expect(bytes == [0x19, id, 8, 0] + le16(2000, 200, 0x40, 0x41))
        // Until the peer accepts, the old limits hold.
        #expect(link.channels[0x40]?.local.mtu == 1000)
        let ok = SignalingCommand(code: .creditBasedReconfigureResponse, identifier: id, data: le16(0))
        guard case let .reconfigureAnswered(i, .success, infos)? = link.receive(ok)?.first else { Issue.record("no answer"); return }
        #expect(i == id && infos.map(\.local.mtu) == [2000, 2000] && infos.map(\.local.mps) == [200, 200])
        // A 150-byte K-frame (over the old MPS 100) is now fine.
        #expect(link.receive(le16(148) + Array(repeating: 1, count: 148), on: 0x40) == [.sdu(localCID: 0x40, Array(repeating: 1, count: 148), frames: 1)])
        // A peer that does not know the command rejects it.
        guard case let .success((id2, _)) = link.reconfigure([0x41], mtu: 3000, mps: 200) else { Issue.record("not sent"); return }
        let reject = SignalingCommand(code: .commandReject, identifier: id2, data: [0, 0])
        #expect(link.receive(reject) == [.reconfigureAnswered(identifier: id2, .rejected, channels: [])])
    }

    @Test func anLEModeChannelCannotBeReconfigured() throws {
        var link = CreditBasedChannels()
        link.listen(spsm: 0x80, Self.listener)
        _ = link.receive(SignalingCommand(code: .leCreditBasedConnectionRequest, identifier: 1, data: le16(0x80, 0x40, 100, 64, 1)))
        #expect(refusal(link.reconfigure([0x40], mtu: 2000, mps: 100)) == .invalidDestinationCIDs)
        #expect(signal(link.receive(reconfigure(mtu: 200, mps: 64, [0x40]))) == [0x1A, 9, 2, 0] + le16(0x0003))
    }

    // MARK: Security on an SPSM

    /// Vol 3, Part C, §10.3.1: an unencrypted link is told to pair (Insufficient
    /// Authentication) unless a key for it is stored, when it is told to encrypt with
    /// it (Insufficient Encryption); once encrypted, the stored key changes nothing.
    @Test(arguments: [
        (LinkSecurityState(), false, UInt16(0x0005)),                                                     // unencrypted, no key
        (LinkSecurityState(), true, 0x0008),                                                              // unencrypted, a key stored
        (LinkSecurityState(encrypted: true, keySize: 16), true, 0x0005),                                  // not authenticated
        (LinkSecurityState(encrypted: true, authenticated: true, keySize: 10), true, 0x0007),             // key too short
        (LinkSecurityState(encrypted: true, authenticated: true, keySize: 16), false, 0x0000),
    ] as [(LinkSecurityState, Bool, UInt16)])
    func anSPSMsSecurityRequirementIsChecked(link security: LinkSecurityState, keyStored: Bool, result: UInt16) {
        for enhanced in [false, true] {
            var link = CreditBasedChannels()
            link.listen(spsm: 0x80, Self.listener, security: ChannelSecurity(level: .authenticated, minimumKeySize: 16))
            link.linkSecurity = security
            link.keyStored = keyStored
            let events: [CreditBasedChannels.Event]?
            if enhanced {
                events = link.receive(request([0x40]))
                #expect(signal(events).map { Array($0[10..<12]) } == le16(result))
            } else {
                events = link.receive(SignalingCommand(code: .leCreditBasedConnectionRequest, identifier: 1, data: le16(0x80, 0x40, 100, 64, 1)))
                #expect(signal(events).map { Array($0[12..<14]) } == le16(result))
            }
            #expect(accepted(events).count == (result == 0 ? 1 : 0))
        }
        // An SPSM without a requirement takes any link.
        #expect(ChannelSecurity.none.refusal(for: LinkSecurityState()) == nil)
    }
}
