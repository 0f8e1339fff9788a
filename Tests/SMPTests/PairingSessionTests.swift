// The pairing state machine in both roles, two sessions wired back to back: every
// method of LE legacy and Secure Connections pairing, key distribution, and the
// spec's failure answers. Interop with other stacks is in InteropTests
// (BumbleSMPTests); here the session's logic and its error paths.

import HCI
import SMP
import Testing

/// Runs two sessions against each other until both end.
struct PairingRun {
    var initiator: PairingSession
    var responder: PairingSession
    var outcomes: [Bool: PairingAction] = [:]
    var prompts: [Bool: [PairingPrompt]] = [true: [], false: []]
    var sent: [(fromInitiator: Bool, pdu: SMPPDU)] = []
    var encryptedWith: LongTermKey?
    /// Keypress notifications each side's session reported from the peer.
    var keypresses: [Bool: [KeypressType]] = [true: [], false: []]
    /// Keys the typing side presses before it answers (sent through `keypress(_:)`).
    var pressBeforeAnswer: [KeypressType] = []

    init(_ i: PairingConfiguration, _ r: PairingConfiguration, seed: UInt64 = 1) {
        let addresses = PairingAddresses(initiator: BluetoothAddress("A1:A2:A3:A4:A5:A6")!, initiatorType: .random,
                                         responder: BluetoothAddress("B1:B2:B3:B4:B5:B6")!, responderType: .public)
        initiator = PairingSession(initiator: true, configuration: i, addresses: addresses, random: .seeded(seed))
        responder = PairingSession(initiator: false, configuration: r, addresses: addresses, random: .seeded(seed &+ 1000))
    }

    /// `typed` answers an Enter Passkey prompt (side is initiator?) given what the
    /// other side displayed; `accept` answers confirmations; `tamper` may rewrite a PDU.
    mutating func run(typed: (Bool, UInt32?) -> UInt32? = { $1 ?? 123_456 }, accept: (Bool) -> Bool = { _ in true },
                      tamper: (Bool, SMPPDU) -> [UInt8]? = { _, _ in nil }) {
        var queue: [(Bool, PairingAction)] = initiator.start().map { (true, $0) }
        var inputs: [Bool] = []
        var displayed: UInt32?
        var steps = 0
        while steps < 10_000 {
            steps += 1
            if queue.isEmpty {
                guard !inputs.isEmpty else { break }
                let side = inputs.removeFirst()
                for k in pressBeforeAnswer {
                    queue += (side ? initiator.keypress(k) : responder.keypress(k)).map { (side, $0) }
                }
                let actions = side ? initiator.answer(.passkey(typed(side, displayed))) : responder.answer(.passkey(typed(side, displayed)))
                queue += actions.map { (side, $0) }
                continue
            }
            let (side, action) = queue.removeFirst()
            switch action {
            case let .send(pdu):
                sent.append((side, pdu))
                let bytes = tamper(side, pdu) ?? pdu.bytes
                let out = side ? responder.receive(bytes) : initiator.receive(bytes)
                queue += out.map { (!side, $0) }
            case let .prompt(p):
                prompts[side, default: []].append(p)
                switch p {
                case let .displayPasskey(n): displayed = n
                case .enterPasskey: inputs.append(side)
                case .confirmNumber, .confirmPairing:
                    let out = side ? initiator.answer(.confirmed(accept(side))) : responder.answer(.confirmed(accept(side)))
                    queue += out.map { (side, $0) }
                }
            case let .startEncryption(key):
                encryptedWith = key
                let same = responder.encryptionKey?.key == key.key
                let r = responder.encryptionChanged(status: same ? .success : .connectionTerminatedDueToMICFailure, enabled: same)
                let i = initiator.encryptionChanged(status: same ? .success : .connectionTerminatedDueToMICFailure, enabled: same)
                queue += r.map { (false, $0) } + i.map { (true, $0) }
            case let .keypress(k):
                keypresses[side, default: []].append(k)
            case .completed, .failed:
                outcomes[side] = action
            }
        }
    }

    func result(_ side: Bool) -> PairingResult? {
        if case let .completed(r) = outcomes[side] { return r }
        return nil
    }

    func error(_ side: Bool) -> PairingError? {
        if case let .failed(e) = outcomes[side] { return e }
        return nil
    }
}

let identityI = IdentityKey(irk: Array(1...16), address: BluetoothAddress("C0:00:00:00:00:01")!, addressType: .random)
let identityR = IdentityKey(irk: Array(17...32), address: BluetoothAddress("00:11:22:33:44:55")!, addressType: .public)

@Suite(.timeLimit(.minutes(3))) struct PairingSessionTests {
    @Test(arguments: [false, true])
    func justWorksPairsAndBothSidesHoldTheSameKey(secure: Bool) throws {
        var run = PairingRun(PairingConfiguration(secureConnections: secure, identity: identityI),
                             PairingConfiguration(secureConnections: secure, identity: identityR))
        run.run()
        let i = try #require(run.result(true)), r = try #require(run.result(false))
        #expect(i.method == .justWorks && r.method == .justWorks)
        #expect(i.security.level == .encrypted && !i.security.authenticated)
        #expect(i.security.secureConnections == secure)
        #expect(i.bonding && r.bonding)
        // Identities crossed over.
        #expect(i.keys.peerIdentity == identityR)
        #expect(r.keys.peerIdentity == identityI)
        if secure {
            #expect(i.keys.peerLTK == r.keys.peerLTK)
            #expect(i.keys.peerLTK?.ediv == 0 && i.keys.peerLTK?.rand == 0)
            #expect(!run.sent.contains { $0.pdu.code == .encryptionInformation })
        } else {
            // Legacy: each side's distributed LTK is the other's peer LTK.
            #expect(i.keys.localLTK == r.keys.peerLTK)
            #expect(r.keys.localLTK == i.keys.peerLTK)
            #expect(i.keys.peerLTK != nil && r.keys.peerLTK != nil)
        }
        // Key distribution order (§3.6.1): the responder's keys first.
        let firstKey = try #require(run.sent.firstIndex { $0.pdu.code == .identityInformation })
        #expect(run.sent[firstKey].fromInitiator == false)
    }

    @Test(arguments: [false, true])
    func passkeyEntryWithTheResponderDisplaying(secure: Bool) throws {
        var run = PairingRun(PairingConfiguration(ioCapability: .keyboardOnly, mitm: true, secureConnections: secure),
                             PairingConfiguration(ioCapability: .displayOnly, mitm: true, secureConnections: secure))
        run.run()
        let i = try #require(run.result(true)), r = try #require(run.result(false))
        #expect(i.method == .passkeyEntry(initiatorInputs: true, responderInputs: false))
        #expect(i.security.authenticated && r.security.authenticated)
        #expect(i.security.level == (secure ? .secureConnections : .authenticated))
        #expect(run.prompts[true] == [.enterPasskey])
        guard case .displayPasskey = run.prompts[false]?.first else { Issue.record("responder did not display"); return }
        if secure {
            // Twenty rounds of confirm and random from each side.
            #expect(run.sent.filter { $0.pdu.code == .pairingConfirm }.count == 40)
        }
    }

    /// §2.3.5.1: with the Keypress flag on both sides the typing side tells the
    /// displaying side entry started, each digit, and entry completed; with the flag on
    /// one side only, no notification is sent.
    @Test(arguments: [false, true])
    func keypressNotificationsGoFromTheTypingSide(both: Bool) throws {
        var run = PairingRun(PairingConfiguration(ioCapability: .keyboardOnly, mitm: true, keypressNotifications: true),
                             PairingConfiguration(ioCapability: .displayOnly, mitm: true, keypressNotifications: both))
        run.pressBeforeAnswer = [.digitEntered, .digitEntered, .digitErased, .digitEntered, .cleared] + Array(repeating: .digitEntered, count: 6)
        run.run()
        #expect(run.result(true) != nil && run.result(false) != nil)
        let notifications = run.sent.filter { $0.pdu.code == .keypressNotification }
        #expect(notifications.allSatisfy { $0.fromInitiator })
        if both {
            #expect(run.keypresses[false] == [.entryStarted] + run.pressBeforeAnswer + [.entryCompleted])
        } else {
            #expect(notifications.isEmpty && run.keypresses[false] == [])
        }
        #expect(run.keypresses[true] == [])
    }

    /// LE Secure Connections OOB (§2.3.5.6.4) with the data handed one way or both:
    /// no prompt, no confirms, an authenticated key both sides agree on.
    @Test(arguments: [(true, true), (true, false), (false, true)])
    func secureConnectionsOOB(initiatorHasResponders: Bool, responderHasInitiators: Bool) throws {
        let a = try LocalOOBData(address: BluetoothAddress("A1:A2:A3:A4:A5:A6")!, addressType: .random, random: .seeded(5))
        let b = try LocalOOBData(address: BluetoothAddress("B1:B2:B3:B4:B5:B6")!, addressType: .public, random: .seeded(6))
        var run = PairingRun(PairingConfiguration(oob: OOBConfiguration(local: a, peer: initiatorHasResponders ? b.shared : nil)),
                             PairingConfiguration(oob: OOBConfiguration(local: b, peer: responderHasInitiators ? a.shared : nil)))
        run.run()
        let i = try #require(run.result(true)), r = try #require(run.result(false))
        #expect(i.method == .outOfBand && i.security.authenticated && i.security.secureConnections)
        #expect(i.keys.peerLTK == r.keys.peerLTK)
        #expect(run.prompts[true] == [] && run.prompts[false] == [])
        #expect(run.sent.filter { $0.pdu.code == .pairingConfirm }.isEmpty)
    }

    /// The peer's public key must be the one its OOB confirm commits to: data from
    /// another key pair fails with Confirm Value Failed.
    @Test func secureConnectionsOOBDataForAnotherKeyFails() throws {
        let a = try LocalOOBData(address: BluetoothAddress("A1:A2:A3:A4:A5:A6")!, addressType: .random, random: .seeded(5))
        let b = try LocalOOBData(address: BluetoothAddress("B1:B2:B3:B4:B5:B6")!, addressType: .public, random: .seeded(6))
        let stale = try LocalOOBData(address: BluetoothAddress("B1:B2:B3:B4:B5:B6")!, addressType: .public, random: .seeded(7))
        var run = PairingRun(PairingConfiguration(oob: OOBConfiguration(local: a, peer: stale.shared)),
                             PairingConfiguration(oob: OOBConfiguration(local: b)))
        run.run()
        #expect(run.error(true) == .local(.confirmValueFailed))
        #expect(run.error(false) == .remote(.confirmValueFailed))
    }

    /// Legacy OOB: both hold the TK; a different TK fails with Confirm Value Failed;
    /// only one side with a TK is not OOB (both flags are needed).
    @Test func legacyOOB() throws {
        let tk = Array(UInt8(1)...16)
        var run = PairingRun(PairingConfiguration(mitm: true, secureConnections: false, oob: OOBConfiguration(legacyTemporaryKey: tk)),
                             PairingConfiguration(secureConnections: false, oob: OOBConfiguration(legacyTemporaryKey: tk)))
        run.run()
        let i = try #require(run.result(true))
        #expect(i.method == .outOfBand && i.security.authenticated && !i.security.secureConnections)
        #expect(run.prompts[true] == [] && run.prompts[false] == [])

        var wrong = PairingRun(PairingConfiguration(secureConnections: false, oob: OOBConfiguration(legacyTemporaryKey: tk)),
                               PairingConfiguration(secureConnections: false, oob: OOBConfiguration(legacyTemporaryKey: tk.reversed())))
        wrong.run()
        #expect(wrong.error(false) == .local(.confirmValueFailed))

        var oneSided = PairingRun(PairingConfiguration(secureConnections: false, oob: OOBConfiguration(legacyTemporaryKey: tk)),
                                  PairingConfiguration(secureConnections: false))
        oneSided.run()
        #expect(oneSided.result(true)?.method == .justWorks)
    }

    @Test(arguments: [false, true])
    func passkeyEntryWithTheInitiatorDisplaying(secure: Bool) throws {
        var run = PairingRun(PairingConfiguration(ioCapability: .displayOnly, mitm: true, secureConnections: secure),
                             PairingConfiguration(ioCapability: .keyboardDisplay, mitm: true, secureConnections: secure))
        run.run()
        #expect(run.result(true)?.method == .passkeyEntry(initiatorInputs: false, responderInputs: true))
        #expect(run.result(false)?.security.authenticated == true)
    }

    @Test(arguments: [false, true])
    func aWrongPasskeyFailsWithConfirmValueFailed(secure: Bool) throws {
        var run = PairingRun(PairingConfiguration(ioCapability: .keyboardOnly, mitm: true, secureConnections: secure),
                             PairingConfiguration(ioCapability: .displayOnly, mitm: true, secureConnections: secure))
        run.run(typed: { _, shown in (shown ?? 0) ^ 1 })
        // Legacy: the responder checks the initiator's confirm first. SC: the first
        // round's bit differs, so the responder's check of Ca1 fails.
        #expect(run.error(false) == .local(.confirmValueFailed))
        #expect(run.error(true) == .remote(.confirmValueFailed))
        #expect(run.encryptedWith == nil)
    }

    @Test func aCancelledPasskeyFailsWithPasskeyEntryFailed() {
        var run = PairingRun(PairingConfiguration(ioCapability: .keyboardOnly, mitm: true),
                             PairingConfiguration(ioCapability: .displayOnly, mitm: true))
        run.run(typed: { _, _ in nil })
        #expect(run.error(true) == .local(.passkeyEntryFailed))
        #expect(run.error(false) == .remote(.passkeyEntryFailed))
    }

    @Test func numericComparisonShowsTheSameNumberOnBothSides() throws {
        var run = PairingRun(PairingConfiguration(ioCapability: .displayYesNo, mitm: true),
                             PairingConfiguration(ioCapability: .keyboardDisplay, mitm: true))
        run.run()
        #expect(run.result(true)?.method == .numericComparison)
        let a = try #require(run.prompts[true]?.first), b = try #require(run.prompts[false]?.first)
        guard case .confirmNumber = a else { Issue.record("no comparison: \(a)"); return }
        #expect(a == b)
        #expect(run.result(false)?.security.level == .secureConnections)
    }

    @Test func aRejectedComparisonFailsWithNumericComparisonFailed() {
        var run = PairingRun(PairingConfiguration(ioCapability: .displayYesNo, mitm: true),
                             PairingConfiguration(ioCapability: .displayYesNo, mitm: true))
        run.run(accept: { side in side })  // the responder's user says no
        #expect(run.error(false) == .local(.numericComparisonFailed))
        #expect(run.error(true) == .remote(.numericComparisonFailed))
    }

    @Test func secureConnectionsOnlyRefusesLegacyPairing() {
        var run = PairingRun(PairingConfiguration(secureConnections: false),
                             PairingConfiguration(secureConnectionsOnly: true))
        run.run()
        #expect(run.error(false) == .local(.authenticationRequirements))
        #expect(run.error(true) == .remote(.authenticationRequirements))
    }

    @Test func mitmRequiredButImpossibleFailsWithAuthenticationRequirements() {
        var run = PairingRun(PairingConfiguration(ioCapability: .noInputNoOutput),
                             PairingConfiguration(ioCapability: .keyboardDisplay, mitm: true))
        run.run()
        #expect(run.error(false) == .local(.authenticationRequirements))
    }

    @Test func theKeySizeIsTheSmallerMaximumAndTheMinimumIsEnforced() throws {
        var run = PairingRun(PairingConfiguration(maximumKeySize: 16), PairingConfiguration(maximumKeySize: 10))
        run.run()
        let r = try #require(run.result(true))
        #expect(r.security.keySize == 10)
        // Masked: the six most significant octets (the last six in PDU order) are zero.
        #expect(run.encryptedWith?.key.suffix(6) == [0, 0, 0, 0, 0, 0])
        #expect(r.security.level == .encrypted)

        var refused = PairingRun(PairingConfiguration(minimumKeySize: 16), PairingConfiguration(maximumKeySize: 12))
        refused.run()
        #expect(refused.error(true) == .local(.encryptionKeySize))
    }

    @Test func signingKeysAndLegacyKeysAreDistributedInBothDirections() throws {
        let keys: KeyDistribution = [.encryptionKey, .identityKey, .signingKey]
        var run = PairingRun(PairingConfiguration(secureConnections: false, keys: keys, identity: identityI),
                             PairingConfiguration(secureConnections: false, keys: keys, identity: identityR))
        run.run()
        let i = try #require(run.result(true)), r = try #require(run.result(false))
        #expect(i.keys.peerCSRK != nil && i.keys.peerCSRK == r.keys.localCSRK)
        #expect(r.keys.peerCSRK == i.keys.localCSRK)
        #expect(i.keys.encryptionKey(asCentral: true) == r.keys.encryptionKey(asCentral: false))
        let codes = run.sent.map(\.pdu.code)
        #expect(codes.suffix(10) == [.encryptionInformation, .centralIdentification, .identityInformation, .identityAddressInformation,
                                     .signingInformation, .encryptionInformation, .centralIdentification, .identityInformation,
                                     .identityAddressInformation, .signingInformation])
    }

    @Test func aPublicKeyOffTheCurveEndsPairing() {
        var run = PairingRun(PairingConfiguration(), PairingConfiguration())
        run.run(tamper: { fromInitiator, pdu in
            guard fromInitiator, case let .pairingPublicKey(x, y) = pdu else { return nil }
            var bad = y
            bad[0] ^= 0x01
            return SMPPDU.pairingPublicKey(x: x, y: bad).bytes
        })
        #expect(run.error(false) == .local(.dhKeyCheckFailed))
        #expect(run.encryptedWith == nil)
    }

    /// A Pairing Response may only narrow the keys the Pairing Request asked for
    /// (§3.5.2): one that offers the responder's signing key, not asked for, is refused.
    @Test func aResponseOfferingKeysNotAskedForIsRefused() {
        var run = PairingRun(PairingConfiguration(identity: identityI), PairingConfiguration(identity: identityR))
        run.run(tamper: { fromInitiator, pdu in
            guard !fromInitiator, case .pairingResponse = pdu else { return nil }
            var b = pdu.bytes
            b[6] |= 0x04  // Responder Key Distribution: SignKey
            return b
        })
        #expect(run.error(true) == .local(.invalidParameters))
        #expect(run.encryptedWith == nil)
    }

    /// Keys promised and never sent: a Pairing Response whose Responder Key
    /// Distribution was altered on the way to ask for the identity a responder without
    /// one will not send. Nothing in the pairing's cryptography covers that field in LE
    /// Secure Connections (f6 takes AuthReq, OOB and IO capability only), so the link
    /// is encrypted and the responder completes. The initiator can no more tell this
    /// from a slow peer than BlueZ or Bumble can; it waits, and only the SMP timer ends
    /// the pairing (§3.4).
    @Test func keysPromisedAndNeverSentEndOnlyWithTheTimer() {
        var run = PairingRun(PairingConfiguration(), PairingConfiguration())
        run.run(tamper: { fromInitiator, pdu in
            guard !fromInitiator, case .pairingResponse = pdu else { return nil }
            var b = pdu.bytes
            b[6] |= 0x02  // Responder Key Distribution: IdKey, which the request asked for
            return b
        })
        #expect(run.encryptedWith != nil)
        #expect(run.result(false) != nil)
        #expect(run.outcomes[true] == nil)
        #expect(run.initiator.timedOut() == [.failed(.timeout)])
    }

    @Test func aReflectedPublicKeyIsRefused() {
        var run = PairingRun(PairingConfiguration(), PairingConfiguration())
        var initiatorKey: SMPPDU?
        run.run(tamper: { fromInitiator, pdu in
            guard case .pairingPublicKey = pdu else { return nil }
            if fromInitiator { initiatorKey = pdu; return nil }
            return initiatorKey?.bytes
        })
        #expect(run.error(true) == .local(.invalidParameters))
    }

    @Test func aTamperedConfirmFailsTheCheck() {
        var run = PairingRun(PairingConfiguration(), PairingConfiguration())
        run.run(tamper: { fromInitiator, pdu in
            guard !fromInitiator, case var .pairingConfirm(c) = pdu else { return nil }
            c[0] ^= 0xFF
            return SMPPDU.pairingConfirm(c).bytes
        })
        #expect(run.error(true) == .local(.confirmValueFailed))
        #expect(run.error(false) == .remote(.confirmValueFailed))
    }

    @Test func malformedAndUnknownPDUsGetTheSpecsReasons() {
        let addresses = PairingAddresses(initiator: .zero, initiatorType: .public, responder: .zero, responderType: .public)
        func responder() -> PairingSession { PairingSession(initiator: false, configuration: PairingConfiguration(), addresses: addresses, random: .seeded(3)) }
        var s = responder()
        #expect(s.receive([0x01, 0x03, 0x00, 0x01]) == [.send(.pairingFailed(.invalidParameters)), .failed(.local(.invalidParameters))])
        s = responder()
        #expect(s.receive([0x7F]) == [.send(.pairingFailed(.commandNotSupported)), .failed(.local(.commandNotSupported))])
        s = responder()
        // Maximum key size 6 or 17 is out of range: Encryption Key Size, as BlueZ and Zephyr say.
        #expect(s.receive([0x01, 0x03, 0x00, 0x01, 0x06, 0x00, 0x00]) == [.send(.pairingFailed(.encryptionKeySize)), .failed(.local(.encryptionKeySize))])
        s = responder()
        #expect(s.receive([0x01, 0x03, 0x00, 0x01, 0x11, 0x00, 0x00]) == [.send(.pairingFailed(.encryptionKeySize)), .failed(.local(.encryptionKeySize))])
        s = responder()
        // A reserved IO capability (0x05): Invalid Parameters.
        #expect(s.receive([0x01, 0x05, 0x00, 0x01, 0x10, 0x00, 0x00]) == [.send(.pairingFailed(.invalidParameters)), .failed(.local(.invalidParameters))])
        s = responder()
        // A Pairing Random before anything: unexpected.
        #expect(s.receive([0x04] + [UInt8](repeating: 0, count: 16)).first == .send(.pairingFailed(.unspecifiedReason)))
        // After the end nothing more is said.
        #expect(s.receive([0x01, 0x03, 0x00, 0x01, 0x10, 0x00, 0x00]) == [])
        s = responder()
        #expect(s.receive([0x05, 0x09]) == [.failed(.remote(.repeatedAttempts))])
    }

    @Test func theSameSeedGivesTheSameConversation() {
        var a = PairingRun(PairingConfiguration(), PairingConfiguration(), seed: 42)
        var b = PairingRun(PairingConfiguration(), PairingConfiguration(), seed: 42)
        a.run()
        b.run()
        #expect(a.sent.map(\.pdu) == b.sent.map(\.pdu))
        var c = PairingRun(PairingConfiguration(), PairingConfiguration(), seed: 43)
        c.run()
        #expect(a.sent.map(\.pdu) != c.sent.map(\.pdu))
    }

    @Test func methodSelectionFollowsTheSpecificationsTable() {
        func m(_ i: IOCapability, _ r: IOCapability, sc: Bool) -> PairingMethod {
            let f = { (io: IOCapability) in PairingFeatures(ioCapability: io, authentication: .mitm, initiatorKeys: [], responderKeys: []) }
            return PairingMethod.select(initiator: f(i), responder: f(r), secureConnections: sc)
        }
        #expect(m(.displayYesNo, .displayYesNo, sc: false) == .justWorks)
        #expect(m(.displayYesNo, .displayYesNo, sc: true) == .numericComparison)
        #expect(m(.keyboardDisplay, .keyboardDisplay, sc: false) == .passkeyEntry(initiatorInputs: false, responderInputs: true))
        #expect(m(.keyboardDisplay, .keyboardDisplay, sc: true) == .numericComparison)
        #expect(m(.keyboardOnly, .keyboardOnly, sc: true) == .passkeyEntry(initiatorInputs: true, responderInputs: true))
        #expect(m(.displayOnly, .keyboardOnly, sc: false) == .passkeyEntry(initiatorInputs: false, responderInputs: true))
        #expect(m(.keyboardDisplay, .displayYesNo, sc: false) == .passkeyEntry(initiatorInputs: true, responderInputs: false))
        #expect(m(.keyboardDisplay, .keyboardOnly, sc: true) == .passkeyEntry(initiatorInputs: false, responderInputs: true))
        #expect(m(.noInputNoOutput, .keyboardDisplay, sc: true) == .justWorks)
        #expect(m(.displayOnly, .displayYesNo, sc: true) == .justWorks)
        // Without MITM on either side, Just Works whatever the IO.
        let plain = PairingFeatures(ioCapability: .keyboardDisplay, authentication: [], initiatorKeys: [], responderKeys: [])
        #expect(PairingMethod.select(initiator: plain, responder: plain, secureConnections: true) == .justWorks)
    }

    @Test func everyPDURoundTrips() throws {
        let f = PairingFeatures(ioCapability: .keyboardDisplay, oobDataPresent: true, authentication: [.bonding, .mitm, .secureConnections],
                                maximumKeySize: 16, initiatorKeys: .all, responderKeys: [.identityKey])
        let pdus: [SMPPDU] = [
            .pairingRequest(f), .pairingResponse(f), .pairingConfirm(Array(0..<16)), .pairingRandom(Array(16..<32)),
            .pairingFailed(.dhKeyCheckFailed), .encryptionInformation(longTermKey: Array(0..<16)),
            .centralIdentification(ediv: 0x1234, rand: 0x0102_0304_0506_0708), .identityInformation(irk: Array(0..<16)),
            .identityAddressInformation(type: .random, address: BluetoothAddress("C1:02:03:04:05:06")!),
            .signingInformation(csrk: Array(0..<16)), .securityRequest([.bonding, .mitm]),
            .pairingPublicKey(x: Array(repeating: 1, count: 32), y: Array(repeating: 2, count: 32)),
            .pairingDHKeyCheck(Array(0..<16)), .keypressNotification(.digitEntered),
        ]
        for p in pdus { #expect(try SMPPDU(p.bytes) == p) }
        // The spec's c1 example request and response (§2.2.3): 01 01 00 00 10 07 07.
        #expect(SMPPDU.pairingRequest(PairingFeatures(ioCapability: .displayYesNo, authentication: [], maximumKeySize: 16,
                                                      initiatorKeys: .all, responderKeys: .all)).bytes == [0x01, 0x01, 0x00, 0x00, 0x10, 0x07, 0x07])
        #expect(throws: SMPDecodeError.self) { try SMPPDU([0x03] + [UInt8](repeating: 0, count: 15)) }
        #expect(throws: SMPDecodeError.self) { try SMPPDU([0x09, 0x02] + [UInt8](repeating: 0, count: 6)) }
        #expect(throws: SMPDecodeError.self) { try SMPPDU([0x0E, 0x05]) }
    }
}
