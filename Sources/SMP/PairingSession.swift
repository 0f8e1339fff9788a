// One pairing on one link, sans I/O (Vol 3, Part H, §2.3–§2.4 and §3): feed it the
// SMP PDUs the peer sent, the user's answers and the link's encryption changes;
// it returns what to do (PDUs to send, prompts, the key to encrypt with) and ends
// with `.completed` or `.failed` exactly once. The runtime (SecurityManager) owns
// the 30 s timer, the controller and the bond store.
//
// Both roles, LE legacy pairing (Just Works, Passkey Entry, OOB) and LE Secure
// Connections (Just Works, Numeric Comparison, Passkey Entry, OOB).

import BLECrypto
import HCI

/// What the user is asked during pairing.
public enum PairingPrompt: Hashable, Sendable, CustomStringConvertible {
    /// Just Works: accept pairing with this peer (no MITM protection)?
    case confirmPairing
    /// Show these six digits; the peer's user types them.
    case displayPasskey(UInt32)
    /// Type the six digits the peer shows.
    case enterPasskey
    /// Both devices show this number; confirm it matches.
    case confirmNumber(UInt32)

    public var description: String {
        switch self {
        case .confirmPairing: return "confirm pairing"
        case let .displayPasskey(n): return "display passkey \(PairingPrompt.sixDigits(n))"
        case .enterPasskey: return "enter passkey"
        case let .confirmNumber(n): return "confirm number \(PairingPrompt.sixDigits(n))"
        }
    }

    public static func sixDigits(_ n: UInt32) -> String {
        let s = String(n % 1_000_000)
        return String(repeating: "0", count: 6 - s.count) + s
    }
}

/// The user's answer to a prompt.
public enum PairingAnswer: Hashable, Sendable {
    case confirmed(Bool)
    /// The passkey typed, or nil when the user cancelled.
    case passkey(UInt32?)
}

/// Why a pairing ended without keys.
public enum PairingError: Error, Hashable, Sendable, CustomStringConvertible {
    /// We sent Pairing Failed with this reason.
    case local(PairingFailureReason)
    /// The peer sent Pairing Failed with this reason.
    case remote(PairingFailureReason)
    /// No SMP progress for 30 s (§3.4); no more SMP on this link.
    case timeout
    /// The link ended first.
    case disconnected
    /// The controller refused to encrypt (status of Encryption Change or Command Status).
    case encryption(HCIStatus)

    public var description: String {
        switch self {
        case let .local(r): return "pairing failed here: \(r)"
        case let .remote(r): return "peer failed pairing: \(r)"
        case .timeout: return "SMP timeout (30 s)"
        case .disconnected: return "link disconnected"
        case let .encryption(s): return "encryption failed: \(s)"
        }
    }
}

/// What a pairing produced.
public struct PairingResult: Hashable, Sendable {
    public var method: PairingMethod
    public var security: LinkSecurityState
    public var keys: PairingKeys
    /// Both sides asked to bond: the keys are to be stored.
    public var bonding: Bool
    /// Why the bond could not be stored, when we wanted to bond: the bond store's error
    /// when both sides asked to bond and the store refused it, or the bond limit's when
    /// the store held `BondLimit.maximum` bonds and our side asked for no bonding (then
    /// `bonding` is false, and the peer keeps no bond either). The link is paired and
    /// encrypted, but no bond outlives it (`security.bonded` is false). Nil otherwise.
    public var bondNotStored: String? = nil
    /// The bonds of other peers removed to make room for this one's
    /// (`BondLimit.WhenFull.replaceOldest`), each also told as
    /// `SecurityEvent.bondEvicted`. Empty otherwise.
    public var bondsEvicted: [Bond] = []
}

/// What a pairing session asks its runtime to do.
public enum PairingAction: Hashable, Sendable {
    case send(SMPPDU)
    case prompt(PairingPrompt)
    /// Central: start encryption with this key (LE Enable Encryption).
    case startEncryption(LongTermKey)
    case keypress(KeypressType)
    case completed(PairingResult)
    case failed(PairingError)
}

/// A link's addresses as pairing uses them: the ones the link was made with.
public struct PairingAddresses: Hashable, Sendable {
    public var initiator: BluetoothAddress
    public var initiatorType: AddressType
    public var responder: BluetoothAddress
    public var responderType: AddressType
    public init(initiator: BluetoothAddress, initiatorType: AddressType, responder: BluetoothAddress, responderType: AddressType) {
        self.initiator = initiator
        self.initiatorType = initiatorType
        self.responder = responder
        self.responderType = responderType
    }
}

public struct PairingSession: Sendable {
    public let isInitiator: Bool
    public let configuration: PairingConfiguration
    let addresses: PairingAddresses
    let random: SecurityRandom

    enum Step: Hashable, Sendable {
        case idle, waitResponse, waitPublicKey, waitConfirm, waitRandom, waitDHKeyCheck
        /// Legacy or passkey: the user's passkey is still to come before we can confirm.
        case waitPasskey
        /// Waiting for the user to accept a comparison or Just Works.
        case waitUser
        case waitEncryption, distributing, done
    }
    var step = Step.idle
    public private(set) var finished = false

    var request: PairingFeatures?
    var response: PairingFeatures?
    public private(set) var method: PairingMethod?
    var secure = false
    var keySize = 16

    // Legacy.
    var tk = [UInt8](repeating: 0, count: 16)
    var localRandom: [UInt8] = []
    var peerConfirm: [UInt8]?
    // Secure Connections (values most significant first, as the toolbox takes them).
    var keyPair: P256KeyPair?
    var localPK: (x: [UInt8], y: [UInt8]) = ([], [])
    var peerPK: (x: [UInt8], y: [UInt8]) = ([], [])
    var dhKey: [UInt8] = []
    var na: [UInt8] = [], nb: [UInt8] = []
    var passkey: UInt32?
    var round = 0
    var peerCheck: [UInt8]?

    /// The key the link is (to be) encrypted with: the STK or SC LTK, PDU order.
    public private(set) var encryptionKey: LongTermKey?
    var keys = PairingKeys()
    /// Keys still to arrive from the peer, in order.
    var expecting: [SMPCode] = []
    var pendingPeerLTK: [UInt8]?
    var pendingIRK: [UInt8]?

    public init(initiator: Bool, configuration: PairingConfiguration, addresses: PairingAddresses, random: SecurityRandom) {
        self.isInitiator = initiator
        self.configuration = configuration
        self.addresses = addresses
        self.random = random
    }

    /// Our side's fields: the keys we distribute (only an identity we have) and the
    /// keys we ask the peer for.
    var localFeatures: PairingFeatures {
        var give = configuration.distributable, take = configuration.keys.intersection(.all)
        if configuration.deriveLinkKey {
            give.insert(.linkKey)
            take.insert(.linkKey)
        }
        return PairingFeatures(ioCapability: configuration.ioCapability, oobDataPresent: configuration.oobDataPresent,
                               authentication: configuration.authentication,
                               maximumKeySize: configuration.maximumKeySize,
                               initiatorKeys: isInitiator ? give : take, responderKeys: isInitiator ? take : give)
    }

    /// Initiator: sends Pairing Request.
    public mutating func start() -> [PairingAction] {
        guard isInitiator, step == .idle else { return [] }
        let f = localFeatures
        request = f
        step = .waitResponse
        return [.send(.pairingRequest(f))]
    }

    /// Responder: Security Request (§3.6.7), asking the central to pair or encrypt.
    public func securityRequest() -> SMPPDU { .securityRequest(configuration.authentication) }

    // MARK: - Input

    /// One SMP PDU from the peer.
    public mutating func receive(_ bytes: [UInt8]) -> [PairingAction] {
        guard !finished else { return [] }
        let pdu: SMPPDU
        do { pdu = try SMPPDU(bytes) } catch let e as SMPDecodeError {
            return fail(e.reason)
        } catch { return fail(.unspecifiedReason) }
        do { return try receive(pdu) } catch let r as PairingFailureReason {
            return fail(r)
        } catch P256Error.invalidPublicKey {
            return fail(.dhKeyCheckFailed)
        } catch { return fail(.unspecifiedReason) }
    }

    mutating func receive(_ pdu: SMPPDU) throws -> [PairingAction] {
        switch (pdu, step) {
        case let (.pairingFailed(reason), _):
            finished = true
            step = .done
            return [.failed(.remote(reason))]
        case let (.keypressNotification(t), _):
            return [.keypress(t)]
        case let (.pairingRequest(f), .idle) where !isInitiator:
            return try receivedRequest(f)
        case let (.pairingResponse(f), .waitResponse):
            return try receivedResponse(f)
        case let (.pairingPublicKey(x, y), .waitPublicKey):
            return try receivedPublicKey(x: Array(x.reversed()), y: Array(y.reversed()))
        case let (.pairingConfirm(c), .waitConfirm):
            peerConfirm = c
            return try confirmReceived()
        case let (.pairingConfirm(c), .waitPasskey) where !isInitiator, let (.pairingConfirm(c), .waitUser) where !isInitiator && !secure:
            // The initiator may commit before our user has typed or accepted.
            peerConfirm = c
            return []
        case let (.pairingRandom(r), .waitRandom):
            return try randomReceived(Array(r.reversed()))
        case let (.pairingDHKeyCheck(e), .waitDHKeyCheck):
            peerCheck = Array(e.reversed())
            return try dhKeyCheckReceived()
        case let (.pairingDHKeyCheck(e), .waitUser) where !isInitiator && secure:
            // Ea may come before our user confirmed the number; Eb waits for the user.
            peerCheck = Array(e.reversed())
            return []
        case (.encryptionInformation, .distributing), (.centralIdentification, .distributing),
             (.identityInformation, .distributing), (.identityAddressInformation, .distributing),
             (.signingInformation, .distributing):
            return try keyReceived(pdu)
        case (.securityRequest, _) where isInitiator:
            return []  // already pairing
        default:
            throw PairingFailureReason.unspecifiedReason
        }
    }

    /// The user's answer to the last prompt.
    public mutating func answer(_ a: PairingAnswer) -> [PairingAction] {
        guard !finished else { return [] }
        do {
            switch (a, step) {
            case let (.passkey(value), .waitPasskey):
                guard let value, value <= 999_999 else { return fail(.passkeyEntryFailed) }
                let completed: [PairingAction] = keypressAgreed ? [.send(.keypressNotification(.entryCompleted))] : []
                return completed + (try passkeyKnown(value))
            case let (.confirmed(ok), .waitUser):
                guard ok else { return fail(method == .numericComparison ? .numericComparisonFailed : .unspecifiedReason) }
                return try userAccepted()
            default:
                return []
            }
        } catch let r as PairingFailureReason {
            return fail(r)
        } catch { return fail(.unspecifiedReason) }
    }

    /// Both sides set the Keypress flag.
    var keypressAgreed: Bool {
        (request?.authentication.contains(.keypress) ?? false) && (response?.authentication.contains(.keypress) ?? false)
    }

    /// While we type the passkey: a Keypress Notification for a digit entered or
    /// erased or the entry cleared, when both sides asked for them; nothing otherwise.
    public mutating func keypress(_ type: KeypressType) -> [PairingAction] {
        guard !finished, step == .waitPasskey, keypressAgreed, [.digitEntered, .digitErased, .cleared].contains(type) else { return [] }
        return [.send(.keypressNotification(type))]
    }

    /// The link's encryption came on (Encryption Change or Key Refresh Complete).
    public mutating func encryptionChanged(status: HCIStatus, enabled: Bool) -> [PairingAction] {
        guard !finished, step == .waitEncryption else { return [] }
        guard status.isSuccess, enabled else {
            finished = true
            step = .done
            return [.failed(.encryption(status.isSuccess ? .unspecifiedError : status))]
        }
        step = .distributing
        var out: [PairingAction] = []
        if !isInitiator { out += sendKeys() }
        expecting = expectedKeys(from: isInitiator ? agreedResponderKeys : agreedInitiatorKeys)
        if expecting.isEmpty {
            if isInitiator { out += sendKeys() }
            out += complete()
        }
        return out
    }

    /// The 30 s SMP timer fired.
    public mutating func timedOut() -> [PairingAction] {
        guard !finished else { return [] }
        finished = true
        step = .done
        return [.failed(.timeout)]
    }

    /// The link went down.
    public mutating func disconnected() -> [PairingAction] {
        guard !finished else { return [] }
        finished = true
        step = .done
        return [.failed(.disconnected)]
    }

    mutating func fail(_ reason: PairingFailureReason) -> [PairingAction] {
        guard !finished else { return [] }
        finished = true
        step = .done
        return [.send(.pairingFailed(reason)), .failed(.local(reason))]
    }

    // MARK: - Phase 1: feature exchange

    mutating func receivedRequest(_ f: PairingFeatures) throws -> [PairingAction] {
        try validate(f)
        request = f
        var rsp = localFeatures
        // The responder sets only keys the initiator asked for (§3.6.1).
        rsp.initiatorKeys = f.initiatorKeys.intersection(rsp.initiatorKeys)
        rsp.responderKeys = f.responderKeys.intersection(rsp.responderKeys)
        if !f.authentication.contains(.bonding) { rsp.authentication.remove(.bonding) }
        response = rsp
        var out: [PairingAction] = [.send(.pairingResponse(rsp))]
        out += try negotiated()
        return out
    }

    mutating func receivedResponse(_ f: PairingFeatures) throws -> [PairingAction] {
        try validate(f)
        guard let req = request, f.initiatorKeys.isSubset(of: req.initiatorKeys), f.responderKeys.isSubset(of: req.responderKeys)
        else { throw PairingFailureReason.invalidParameters }
        response = f
        return try negotiated()
    }

    /// A maximum key size outside 7...16 is Encryption Key Size, as BlueZ and Zephyr
    /// answer it; a reserved IO capability, Invalid Parameters (§3.5.5).
    func validate(_ f: PairingFeatures) throws {
        guard (7...16).contains(f.maximumKeySize) else { throw PairingFailureReason.encryptionKeySize }
        guard IOCapability.all.contains(f.ioCapability) else { throw PairingFailureReason.invalidParameters }
    }

    /// Both feature sets known: choose the method and key size, then start phase 2.
    mutating func negotiated() throws -> [PairingAction] {
        guard let req = request, let rsp = response else { throw PairingFailureReason.unspecifiedReason }
        secure = req.authentication.contains(.secureConnections) && rsp.authentication.contains(.secureConnections)
        if configuration.secureConnectionsOnly && !secure { throw PairingFailureReason.authenticationRequirements }
        let size = Int(min(req.maximumKeySize, rsp.maximumKeySize))
        guard size >= Int(configuration.minimumKeySize) else { throw PairingFailureReason.encryptionKeySize }
        keySize = size
        let m = PairingMethod.select(initiator: req, responder: rsp, secureConnections: secure)
        if configuration.mitm && !m.authenticated { throw PairingFailureReason.authenticationRequirements }
        method = m
        if m == .outOfBand {
            if !secure {
                // Legacy OOB: both sides hold the TK.
                guard let tk = configuration.oob?.legacyTemporaryKey, tk.count == 16 else { throw PairingFailureReason.oobNotAvailable }
                self.tk = tk.reversed()
                return try legacyReady()
            }
            // The peer holds our data only if we handed it out: then our key pair is the one behind it.
            let peerHasOurs = isInitiator ? rsp.oobDataPresent : req.oobDataPresent
            if peerHasOurs && configuration.oob?.local == nil { throw PairingFailureReason.oobNotAvailable }
        }
        if secure {
            let pair = try configuration.oob?.local.map { try P256KeyPair(privateKey: $0.privateKey) } ?? P256KeyPair(random: { random.bytes(32) })
            keyPair = pair
            localPK = pair.publicKey
            step = .waitPublicKey
            return isInitiator ? [.send(publicKeyPDU)] : []
        }
        return try legacyStart()
    }

    var publicKeyPDU: SMPPDU { .pairingPublicKey(x: localPK.x.reversed(), y: localPK.y.reversed()) }

    /// Prompts for the method once both sides know it; returns whether the passkey is
    /// already known (Just Works, or we display it).
    mutating func passkeyPrompt() -> [PairingAction] {
        guard case let .passkeyEntry(initiatorInputs, responderInputs) = method else { return [] }
        let weInput = isInitiator ? initiatorInputs : responderInputs
        if weInput {
            step = .waitPasskey
            return (keypressAgreed ? [.send(.keypressNotification(.entryStarted))] : []) + [.prompt(.enterPasskey)]
        }
        let value = configuration.passkey ?? UInt32(random.uint64() % 1_000_000)
        passkey = value
        return [.prompt(.displayPasskey(value))]
    }

    // MARK: - LE legacy pairing (§2.3.5.5)

    mutating func legacyStart() throws -> [PairingAction] {
        var out: [PairingAction] = []
        if method == .justWorks && configuration.confirmJustWorks {
            step = .waitUser
            return [.prompt(.confirmPairing)]
        }
        out += passkeyPrompt()
        if step == .waitPasskey { return out }
        if let p = passkey { tk = Self.passkeyBlock(p) }
        return out + (try legacyReady())
    }

    /// TK known: the initiator sends its confirm; the responder waits for (or answers) the initiator's.
    mutating func legacyReady() throws -> [PairingAction] {
        localRandom = random.bytes(16)
        if isInitiator {
            step = .waitConfirm
            return [.send(.pairingConfirm(try legacyConfirm(localRandom).reversed()))]
        }
        step = .waitConfirm
        return peerConfirm == nil ? [] : try confirmReceived()
    }

    func legacyConfirm(_ r: [UInt8]) throws -> [UInt8] {
        guard let req = request, let rsp = response else { throw PairingFailureReason.unspecifiedReason }
        return try SecurityToolbox.c1(
            k: tk, r: r, preq: SMPPDU.pairingRequest(req).bytes.reversed(), pres: SMPPDU.pairingResponse(rsp).bytes.reversed(),
            iat: addresses.initiatorType.rawValue & 1, rat: addresses.responderType.rawValue & 1,
            ia: addresses.initiator.bytes.reversed(), ra: addresses.responder.bytes.reversed())
    }

    static func passkeyBlock(_ p: UInt32) -> [UInt8] {
        [UInt8](repeating: 0, count: 12) + [UInt8(p >> 24 & 0xFF), UInt8(p >> 16 & 0xFF), UInt8(p >> 8 & 0xFF), UInt8(p & 0xFF)]
    }

    // MARK: - Secure Connections (§2.3.5.6)

    mutating func receivedPublicKey(x: [UInt8], y: [UInt8]) throws -> [PairingAction] {
        guard let pair = keyPair else { throw PairingFailureReason.unspecifiedReason }
        // A peer that echoes our own key is reflecting it (§2.3.5.6.1 note).
        if x == localPK.x { throw PairingFailureReason.invalidParameters }
        dhKey = try pair.dhKey(peerX: x, peerY: y)
        peerPK = (x, y)
        var out: [PairingAction] = isInitiator ? [] : [.send(publicKeyPDU)]
        switch method {
        case .outOfBand:
            // Check the peer's key against the confirm it handed us out of band (§2.3.5.6.4).
            if let peer = configuration.oob?.peer {
                guard try SecurityToolbox.f4(u: x, v: x, x: peer.random.reversed(), z: 0) == peer.confirm.reversed() else {
                    throw PairingFailureReason.confirmValueFailed
                }
            }
            step = .waitRandom
            guard isInitiator else { return out }
            na = random.bytes(16)
            return out + [.send(.pairingRandom(na.reversed()))]
        case .passkeyEntry:
            out += passkeyPrompt()
            if step == .waitPasskey { return out }
            return out + (try passkeyRoundStart())
        default:
            // Just Works / Numeric Comparison: the responder commits first.
            if isInitiator {
                step = .waitConfirm
                return out
            }
            nb = random.bytes(16)
            let cb = try SecurityToolbox.f4(u: localPK.x, v: peerPK.x, x: nb, z: 0)
            step = .waitRandom
            return out + [.send(.pairingConfirm(cb.reversed()))]
        }
    }

    /// The passkey's bit for this round, as f4's Z (§2.3.5.6.3).
    var roundBit: UInt8 { 0x80 | UInt8((passkey ?? 0) >> UInt32(round) & 1) }

    mutating func passkeyKnown(_ value: UInt32) throws -> [PairingAction] {
        passkey = value
        if secure { return try passkeyRoundStart() }
        tk = Self.passkeyBlock(value)
        return try legacyReady()
    }

    /// Starts round `round` of the 20 passkey rounds: the initiator commits first.
    mutating func passkeyRoundStart() throws -> [PairingAction] {
        step = .waitConfirm
        localRandom = random.bytes(16)
        if isInitiator {
            let c = try SecurityToolbox.f4(u: localPK.x, v: peerPK.x, x: localRandom, z: roundBit)
            return [.send(.pairingConfirm(c.reversed()))]
        }
        return peerConfirm == nil ? [] : try confirmReceived()
    }

    /// A Pairing Confirm arrived while we wait for one.
    mutating func confirmReceived() throws -> [PairingAction] {
        if !secure {
            if isInitiator {
                step = .waitRandom
                return [.send(.pairingRandom(localRandom.reversed()))]
            }
            step = .waitRandom
            return [.send(.pairingConfirm(try legacyConfirm(localRandom).reversed()))]
        }
        if case .passkeyEntry = method {
            step = .waitRandom
            if isInitiator { return [.send(.pairingRandom(localRandom.reversed()))] }
            let c = try SecurityToolbox.f4(u: localPK.x, v: peerPK.x, x: localRandom, z: roundBit)
            return [.send(.pairingConfirm(c.reversed()))]
        }
        // Just Works / Numeric Comparison, initiator: Cb in hand, send Na.
        guard isInitiator else { throw PairingFailureReason.unspecifiedReason }
        na = random.bytes(16)
        step = .waitRandom
        return [.send(.pairingRandom(na.reversed()))]
    }

    mutating func randomReceived(_ r: [UInt8]) throws -> [PairingAction] {
        if secure && method == .outOfBand {
            // No confirms: the nonces go straight to the DHKey checks.
            if isInitiator {
                nb = r
                return try stageTwo()
            }
            na = r
            nb = random.bytes(16)
            return [.send(.pairingRandom(nb.reversed()))] + (try stageTwo())
        }
        guard let confirm = peerConfirm.map({ Array($0.reversed()) }) ?? (isInitiator ? nil : []) else {
            throw PairingFailureReason.unspecifiedReason
        }
        if !secure {
            // Legacy: check the peer's confirm, then the STK (§2.3.5.5).
            guard try legacyConfirm(r) == confirm else { throw PairingFailureReason.confirmValueFailed }
            var out: [PairingAction] = isInitiator ? [] : [.send(.pairingRandom(localRandom.reversed()))]
            let (srand, mrand) = isInitiator ? (r, localRandom) : (localRandom, r)
            let stk = try SecurityToolbox.s1(k: tk, r1: srand, r2: mrand)
            encryptionKey = LongTermKey(key: mask(stk).reversed(), keySize: keySize, authenticated: method?.authenticated ?? false, secureConnections: false)
            out += waitEncryption()
            return out
        }
        if case .passkeyEntry = method {
            guard try SecurityToolbox.f4(u: peerPK.x, v: localPK.x, x: r, z: roundBit) == confirm else {
                throw PairingFailureReason.confirmValueFailed
            }
            var out: [PairingAction] = isInitiator ? [] : [.send(.pairingRandom(localRandom.reversed()))]
            (na, nb) = isInitiator ? (localRandom, r) : (r, localRandom)
            peerConfirm = nil
            round += 1
            if round < 20 {
                if isInitiator { out += try passkeyRoundStart() } else { step = .waitConfirm; localRandom = random.bytes(16) }
                return out
            }
            return out + (try stageTwo())
        }
        // Just Works / Numeric Comparison.
        if isInitiator {
            nb = r
            guard try SecurityToolbox.f4(u: peerPK.x, v: localPK.x, x: nb, z: 0) == confirm else {
                throw PairingFailureReason.confirmValueFailed
            }
        } else {
            na = r
        }
        let out: [PairingAction] = isInitiator ? [] : [.send(.pairingRandom(nb.reversed()))]
        let (pkax, pkbx) = isInitiator ? (localPK.x, peerPK.x) : (peerPK.x, localPK.x)
        if method == .numericComparison {
            let v = try SecurityToolbox.g2(u: pkax, v: pkbx, x: na, y: nb) % 1_000_000
            step = .waitUser
            return out + [.prompt(.confirmNumber(v))]
        }
        if configuration.confirmJustWorks {
            step = .waitUser
            return out + [.prompt(.confirmPairing)]
        }
        return out + (try stageTwo())
    }

    mutating func userAccepted() throws -> [PairingAction] {
        // Legacy Just Works is confirmed before the exchange starts; Secure Connections
        // after the nonces, before the DHKey checks.
        secure ? try stageTwo() : try legacyReady()
    }

    /// Authentication stage 2 (§2.3.5.6.5): derive the keys, exchange DHKey checks.
    mutating func stageTwo() throws -> [PairingAction] {
        guard let req = request, let rsp = response else { throw PairingFailureReason.unspecifiedReason }
        let a1 = [addresses.initiatorType.rawValue & 1] + addresses.initiator.bytes.reversed()
        let a2 = [addresses.responderType.rawValue & 1] + addresses.responder.bytes.reversed()
        let (mac, ltk) = try SecurityToolbox.f5(w: dhKey, n1: na, n2: nb, a1: a1, a2: a2)
        encryptionKey = LongTermKey(key: mask(ltk).reversed(), keySize: keySize, authenticated: method?.authenticated ?? false, secureConnections: true)
        var (ra, rb) = { let r = passkey.map(Self.passkeyBlock) ?? [UInt8](repeating: 0, count: 16); return (r, r) }()
        if method == .outOfBand {
            // ra: the initiator's OOB random if the responder holds it; rb: the responder's if the initiator does.
            let zero = [UInt8](repeating: 0, count: 16)
            let local = configuration.oob?.local.map { Array($0.shared.random.reversed()) } ?? zero
            let peer = configuration.oob?.peer.map { Array($0.random.reversed()) } ?? zero
            ra = rsp.oobDataPresent ? (isInitiator ? local : peer) : zero
            rb = req.oobDataPresent ? (isInitiator ? peer : local) : zero
        }
        let ioA = [req.authentication.rawValue, req.oobDataPresent ? 1 : 0, req.ioCapability.rawValue]
        let ioB = [rsp.authentication.rawValue, rsp.oobDataPresent ? 1 : 0, rsp.ioCapability.rawValue]
        let ea = try SecurityToolbox.f6(w: mac, n1: na, n2: nb, r: rb, ioCap: ioA, a1: a1, a2: a2)
        let eb = try SecurityToolbox.f6(w: mac, n1: nb, n2: na, r: ra, ioCap: ioB, a1: a2, a2: a1)
        if isInitiator {
            step = .waitDHKeyCheck
            expectedCheck = eb
            return [.send(.pairingDHKeyCheck(ea.reversed()))]
        }
        expectedCheck = ea
        localCheck = eb
        step = .waitDHKeyCheck
        return peerCheck == nil ? [] : try dhKeyCheckReceived()
    }

    var expectedCheck: [UInt8] = []
    var localCheck: [UInt8] = []

    mutating func dhKeyCheckReceived() throws -> [PairingAction] {
        guard let check = peerCheck, !expectedCheck.isEmpty else { return [] }
        guard check == expectedCheck else { throw PairingFailureReason.dhKeyCheckFailed }
        if isInitiator { return waitEncryption() }
        return [.send(.pairingDHKeyCheck(localCheck.reversed()))] + waitEncryption()
    }

    mutating func waitEncryption() -> [PairingAction] {
        step = .waitEncryption
        guard isInitiator, var key = encryptionKey else { return [] }
        key.ediv = 0
        key.rand = 0
        return [.startEncryption(key)]
    }

    /// Masks a key (most significant first) to the negotiated size (§2.3.4).
    func mask(_ key: [UInt8]) -> [UInt8] {
        [UInt8](repeating: 0, count: 16 - keySize) + key[(16 - keySize)...]
    }

    // MARK: - Phase 3: key distribution (§2.4.3, §3.6)

    var agreedInitiatorKeys: KeyDistribution { keysFor(response?.initiatorKeys ?? []) }
    var agreedResponderKeys: KeyDistribution { keysFor(response?.responderKeys ?? []) }

    func keysFor(_ k: KeyDistribution) -> KeyDistribution {
        var k = k.intersection(.all)
        if secure { k.remove(.encryptionKey) }
        return k
    }

    func expectedKeys(from k: KeyDistribution) -> [SMPCode] {
        var out: [SMPCode] = []
        if k.contains(.encryptionKey) { out += [.encryptionInformation, .centralIdentification] }
        if k.contains(.identityKey) { out += [.identityInformation, .identityAddressInformation] }
        if k.contains(.signingKey) { out.append(.signingInformation) }
        return out
    }

    mutating func sendKeys() -> [PairingAction] {
        let k = isInitiator ? agreedInitiatorKeys : agreedResponderKeys
        var out: [PairingAction] = []
        if k.contains(.encryptionKey) {
            let ltk = mask(random.bytes(16))
            let key = LongTermKey(key: ltk.reversed(), ediv: random.uint16(), rand: random.uint64(), keySize: keySize,
                                  authenticated: method?.authenticated ?? false, secureConnections: false)
            keys.localLTK = key
            out += [.send(.encryptionInformation(longTermKey: key.key)), .send(.centralIdentification(ediv: key.ediv, rand: key.rand))]
        }
        if k.contains(.identityKey), let id = configuration.identity {
            out += [.send(.identityInformation(irk: id.irk)),
                    .send(.identityAddressInformation(type: id.addressType, address: id.address))]
        }
        if k.contains(.signingKey) {
            let csrk = random.bytes(16)
            keys.localCSRK = csrk
            out.append(.send(.signingInformation(csrk: csrk)))
        }
        return out
    }

    mutating func keyReceived(_ pdu: SMPPDU) throws -> [PairingAction] {
        guard pdu.code == expecting.first else { throw PairingFailureReason.unspecifiedReason }
        expecting.removeFirst()
        switch pdu {
        case let .encryptionInformation(ltk): pendingPeerLTK = ltk
        case let .centralIdentification(ediv, rand):
            keys.peerLTK = LongTermKey(key: pendingPeerLTK ?? [], ediv: ediv, rand: rand, keySize: keySize,
                                       authenticated: method?.authenticated ?? false, secureConnections: false)
        case let .identityInformation(irk): pendingIRK = irk
        case let .identityAddressInformation(type, address):
            keys.peerIdentity = IdentityKey(irk: pendingIRK ?? [], address: address, addressType: type)
        case let .signingInformation(csrk): keys.peerCSRK = csrk
        default: break
        }
        guard expecting.isEmpty else { return [] }
        var out: [PairingAction] = []
        if isInitiator { out += sendKeys() }
        return out + complete()
    }

    mutating func complete() -> [PairingAction] {
        finished = true
        step = .done
        if secure {
            keys.peerLTK = encryptionKey
            keys.linkKey = derivedLinkKey()
        }
        let bonding = (request?.authentication.contains(.bonding) ?? false) && (response?.authentication.contains(.bonding) ?? false)
        let security = LinkSecurityState(encrypted: true, authenticated: method?.authenticated ?? false, secureConnections: secure,
                                         keySize: keySize, bonded: bonding)
        return [.completed(PairingResult(method: method ?? .justWorks, security: security, keys: keys, bonding: bonding))]
    }
}

extension PairingSession {
    /// The BR/EDR link key from the Secure Connections LTK (§2.4.2.4), when the agreed
    /// key distribution has LinkKey: h7 with SALT "tmp1" when both sides set CT2, else
    /// h6 with "tmp1"; then h6 with "lebr". PDU order, as the LTK.
    func derivedLinkKey() -> [UInt8]? {
        guard secure, let req = request, let rsp = response, let ltk = encryptionKey?.key,
              rsp.initiatorKeys.union(rsp.responderKeys).contains(.linkKey) else { return nil }
        let w = Array(ltk.reversed())
        let tmp1: [UInt8] = [0x74, 0x6D, 0x70, 0x31], lebr: [UInt8] = [0x6C, 0x65, 0x62, 0x72]
        let ct2 = req.authentication.contains(.ct2) && rsp.authentication.contains(.ct2)
        guard let ilk = try? (ct2 ? SecurityToolbox.h7(salt: [UInt8](repeating: 0, count: 12) + tmp1, w: w) : SecurityToolbox.h6(w: w, keyID: tmp1)),
              let key = try? SecurityToolbox.h6(w: ilk, keyID: lebr) else { return nil }
        return key.reversed()
    }
}

extension PairingFailureReason: Error {}
