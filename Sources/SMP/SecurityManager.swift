// The Security Manager of one controller: the SMP fixed channel (CID 0x0006) of
// every link on the per-controller pipeline, on the controller's event loop. It
// runs a `PairingSession` per link, owns the 30 s SMP timer (§3.4) and the
// repeated-attempts back-off (§2.3.6), answers the controller's LTK requests from
// the session or the bond store, starts encryption as central (from a bond or
// after pairing), keeps each link's security, and stores bonds.

import HCI
import L2CAP
@_exported import struct L2CAP.LinkSecurityState
@_exported import enum L2CAP.SecurityLevel
import Logging
import NIOCore

/// Answers pairing prompts for the application (a terminal, a UI, a fixed policy).
/// Called off the loop; a prompt unanswered when the pairing ends is ignored.
public protocol PairingDelegate: Sendable {
    /// `.displayPasskey` needs no answer (return `.confirmed(true)`); `.enterPasskey`
    /// wants `.passkey`; the confirmations want `.confirmed`.
    func answer(_ prompt: PairingPrompt, peer: BluetoothAddress) async -> PairingAnswer
}

/// Accepts Just Works and Numeric Comparison, types `passkey` when asked (or
/// cancels when it is nil). Suits tests and headless daemons with a fixed passkey.
public struct AutomaticPairingDelegate: PairingDelegate {
    public var passkey: UInt32?
    public var acceptComparisons: Bool
    public init(passkey: UInt32? = nil, acceptComparisons: Bool = true) {
        self.passkey = passkey
        self.acceptComparisons = acceptComparisons
    }
    public func answer(_ prompt: PairingPrompt, peer: BluetoothAddress) async -> PairingAnswer {
        switch prompt {
        case .enterPasskey: return .passkey(passkey)
        case .displayPasskey: return .confirmed(true)
        case .confirmNumber, .confirmPairing: return .confirmed(acceptComparisons)
        }
    }
}

/// Why a security request on a link did not give the level asked for.
public enum SecurityError: Error, Hashable, Sendable, CustomStringConvertible {
    case pairing(PairingError)
    /// The link ended or never existed.
    case notConnected(handle: UInt16)
    /// Pairing finished but gave less than asked (e.g. Just Works when MITM was needed).
    case insufficient(got: LinkSecurityState, wanted: SecurityLevel)
    /// SMP timed out on this link earlier; no more SMP until it reconnects (§3.4).
    case smpDisabled
    /// No bond with this peer holds a CSRK we distributed, so we cannot sign (pair with
    /// `KeyDistribution.signingKey`), or its SignCounter is spent: pair again.
    case noSigningKey

    public var description: String {
        switch self {
        case let .pairing(e): return "\(e)"
        case let .notConnected(h): return "no connection 0x\(String(h, radix: 16))"
        case let .insufficient(got, wanted): return "got \(got), wanted \(wanted)"
        case .smpDisabled: return "SMP disabled on this link after a timeout"
        case .noSigningKey: return "no signing key (CSRK) we distributed is bonded with this peer"
        }
    }
}

/// Something that happened to a link's security.
public enum SecurityEvent: Sendable, Equatable {
    case prompt(handle: UInt16, PairingPrompt)
    case paired(handle: UInt16, peer: BluetoothAddress, PairingResult)
    case pairingFailed(handle: UInt16, peer: BluetoothAddress, PairingError)
    /// The link's encryption changed (pairing, a bond's key, or a refresh).
    case securityChanged(handle: UInt16, LinkSecurityState)
    case bonded(Bond)
    /// The peer, typing the passkey we display, pressed a key (§3.5.8).
    case keypress(handle: UInt16, KeypressType)
}

public actor SecurityManager: LoopIsolated {
    public nonisolated let l2cap: L2CAPHost
    public nonisolated var unownedExecutor: UnownedSerialExecutor { l2cap.unownedExecutor }
    public nonisolated var loop: any EventLoop { l2cap.loop }
    public nonisolated let logger: Logger
    public nonisolated let store: any BondStore
    public var configuration: PairingConfiguration
    public var delegate: any PairingDelegate
    let random: SecurityRandom
    /// The SMP timeout (§3.4: 30 s): a pairing, or a Security Request nobody answers.
    public let timeout: Duration

    struct Link {
        var connection: L2CAPHost.Connection
        /// The addresses the link was made with (pairing's IA/RA): ours as the
        /// controller used it, and the peer's over the air even when the controller
        /// resolved it to an identity.
        var local: (BluetoothAddress, AddressType)
        /// The controller reported `local` (a resolvable private address it made).
        var localReported = false
        var peerOnAir: (BluetoothAddress, AddressType)
        var session: PairingSession?
        var security = LinkSecurityState()
        /// A long-term key for the link is stored with the peer's bond (looked up when the
        /// link comes, set when a pairing bonds, cleared when the bond is removed).
        var keyStored = false
        var timer: LoopTimer?
        var smpDisabled = false
        /// Central: a bond's key sent with LE Enable Encryption, until Encryption Change.
        var encryptingWith: LongTermKey?
        var waiters: [(level: SecurityLevel, continuation: CheckedContinuation<LinkSecurityState, any Error>)] = []
        var pairWaiters: [CheckedContinuation<PairingResult, any Error>] = []
    }
    var links: [UInt16: Link] = [:]
    /// The addresses the controller connects from as central and advertises from as
    /// peripheral (the host's random addresses under privacy): the local address of
    /// the links it makes in each role.
    var ownAddress: [ConnectionRole: (BluetoothAddress, AddressType)] = [:]
    /// Advertising sets that advertise from their own address (LE Set Advertising Set
    /// Random Address): a link one of them makes has it as ours.
    var advertisingSetAddresses: [UInt8: (BluetoothAddress, AddressType)] = [:]
    /// §2.3.6: peers whose pairing failed, with how long to refuse them (on the loop's clock).
    var backoff: [BluetoothAddress: (failures: Int, until: NIODeadline)] = [:]
    private var continuations: [UInt64: BufferedStream<SecurityEvent>.Continuation] = [:]
    /// What our GATT server holds for the client on a link (`setClientRecordSource`).
    private var clientRecordSource: ClientRecordSource?
    /// Called with each event as it is emitted, on the loop (`addEventObserver`).
    private var observers: [@Sendable (SecurityEvent) -> Void] = []
    private var nextContinuation: UInt64 = 0
    private var started = false
    /// The transport ended: every link has gone and the event streams are finished.
    private var closed = false

    public init(l2cap: L2CAPHost, configuration: PairingConfiguration = PairingConfiguration(), store: any BondStore = InMemoryBondStore(),
                delegate: any PairingDelegate = AutomaticPairingDelegate(), random: SecurityRandom = .system,
                timeout: Duration = .seconds(30), logger: Logger) {
        self.l2cap = l2cap
        self.timeout = timeout
        self.configuration = configuration
        self.store = store
        self.delegate = delegate
        self.random = random
        self.logger = logger
    }

    /// Starts following the controller's events; links that connect afterwards get SMP.
    public func start() async {
        guard !started else { return }
        started = true
        await l2cap.addEventObserver { [weak self] e in self?.onLoop(e) { $0.event($1) } }
        await l2cap.addCloseObserver { [weak self] in self?.onLoop { $0.transportClosed() } }
        for c in await l2cap.currentConnections { attach(c) }
    }

    /// Security events (prompts, pairings, encryption changes, new bonds), in order.
    /// Buffer: the newest 256, drops counted; ends with the transport.
    public func events() -> BufferedStream<SecurityEvent> {
        let (stream, c) = BufferedStream<SecurityEvent>.makeStream(capacity: 256)
        if closed {
            c.finish()
            return stream
        }
        nextContinuation += 1
        let id = nextContinuation
        continuations[id] = c
        let loop = l2cap.loop
        c.onTermination = { [weak self] _ in
            guard let self else { return }
            loop.execute { self.onLoop { $0.continuations[id] = nil } }
        }
        return stream
    }

    public func setDelegate(_ d: any PairingDelegate) { delegate = d }
    public func setConfiguration(_ c: PairingConfiguration) { configuration = c }

    /// The link's current security (unencrypted for an unknown handle).
    public func security(handle: UInt16) -> LinkSecurityState { links[handle]?.security ?? LinkSecurityState() }

    // MARK: - Asking for security

    /// Brings the link to at least `level`: as central, from a stored bond's key when
    /// it is good enough, else by pairing; as peripheral, by a Security Request the
    /// central answers. Returns the link's security; throws `SecurityError`.
    public func secure(handle: UInt16, level: SecurityLevel = .encrypted) async throws -> LinkSecurityState {
        guard let link = links[handle] else { throw SecurityError.notConnected(handle: handle) }
        if link.security.level >= level { return link.security }
        guard !link.smpDisabled else { throw SecurityError.smpDisabled }
        return try await withCheckedThrowingContinuation { c in
            links[handle]?.waiters.append((level, c))
            guard links[handle]?.session == nil, links[handle]?.encryptingWith == nil else { return }  // under way
            if link.connection.role == .central {
                if let key = bondKey(for: link, level: level) { encrypt(handle: handle, key: key) } else { beginPairing(handle: handle, level: level) }
            } else {
                requestSecurity(handle: handle, level: level)
            }
        }
    }

    /// Pairs (again) even when a bond exists, replacing it on success: as central by
    /// starting pairing, as peripheral by a Security Request. Returns what the
    /// pairing produced; throws `SecurityError`.
    public func pair(handle: UInt16, level: SecurityLevel = .encrypted) async throws -> PairingResult {
        guard let link = links[handle] else { throw SecurityError.notConnected(handle: handle) }
        guard !link.smpDisabled else { throw SecurityError.smpDisabled }
        return try await withCheckedThrowingContinuation { c in
            links[handle]?.pairWaiters.append(c)
            guard link.session == nil else { return }
            if link.connection.role == .central { beginPairing(handle: handle, level: level) } else { requestSecurity(handle: handle, level: level) }
        }
    }

    /// The bond of the peer on link `handle`, while the link is encrypted with a key
    /// that bond holds (re-encrypted from it, or paired with bonding); nil otherwise, so
    /// nothing is restored to or stored for a peer that has not proved who it is.
    public func bond(handle: UInt16) -> Bond? {
        guard let link = links[handle], link.security.encrypted, link.security.bonded else { return nil }
        return store.bond(for: link.connection.peer, type: link.connection.peerType)
    }

    /// Keeps what our GATT server holds for the client on link `handle` with its bond:
    /// its CCCD values (Vol 3, Part G, §3.3.3.3), its Client Supported Features (§7.2)
    /// and, while it is change-aware, the Database Hash it is aware of (`record.hash`;
    /// nil keeps the one stored, so a client that leaves unaware is told at its next
    /// connection). Nothing for a link that is not bonded; the store is written only
    /// when something changes.
    public func saveClientRecord(_ record: ClientRecord, handle: UInt16) {
        guard var bond = bond(handle: handle) else { return }
        let before = bond
        bond.take(record)
        guard bond != before else { return }
        do { try store.save(bond) } catch {
            logger.error("client record not stored", metadata: ["ble.peer": "\(bond.address)", "error": "\(error)"])
        }
    }

    /// Keeps the peer's GATT layout, as our client on link `handle` discovered it, with
    /// its bond. Only while the link is encrypted with the bond's key (`bond(handle:)`),
    /// so a peer that has not proved who it is cannot fill the cache.
    public func saveDatabase(_ database: CachedDatabase, handle: UInt16) {
        guard var bond = bond(handle: handle), bond.database != database else { return }
        bond.database = database
        do { try store.save(bond) } catch {
            logger.error("GATT cache not stored", metadata: ["ble.peer": "\(bond.address)", "error": "\(error)"])
        }
    }

    /// The GATT layout stored with the bond of the peer on link `handle`, encrypted or
    /// not: it is only used after the peer's Database Hash, read on this link, matched
    /// it, and a peer answering with that hash has that layout.
    public func cachedDatabase(handle: UInt16) -> CachedDatabase? {
        guard let link = links[handle] else { return nil }
        return store.bond(for: link.connection.peer, type: link.connection.peerType)?.database
    }

    // MARK: Data signing (§2.4.5; Vol 3, Part C, §10.4)

    /// The bond of the peer on link `handle` by its address (identity, link address or a
    /// private address its IRK resolves), encrypted or not: data signing is for links
    /// that are not encrypted, and a signature proves who signed.
    func signingBond(handle: UInt16) -> Bond? {
        guard let link = links[handle] else { return nil }
        return store.bond(for: link.connection.peer, type: link.connection.peerType)
    }

    /// The peer's signing key on link `handle`, when its bond holds one: its CSRK, the
    /// last SignCounter accepted from it, and the security of the pairing that
    /// distributed it (what a verified signature proves).
    public func peerSigningKey(handle: UInt16) -> (csrk: [UInt8], counter: UInt32?, security: LinkSecurityState)? {
        guard let bond = signingBond(handle: handle), let csrk = bond.keys.peerCSRK else { return nil }
        return (csrk, bond.peerSignCounter, bond.security ?? LinkSecurityState(encrypted: true, keySize: 16, bonded: true))
    }

    /// Keeps the SignCounter of a signed write verified on link `handle` with the
    /// peer's bond; only ever raised.
    public func savePeerSignCounter(_ counter: UInt32, handle: UInt16) {
        guard var bond = signingBond(handle: handle), bond.keys.peerCSRK != nil, bond.peerSignCounter.map({ counter > $0 }) ?? true else { return }
        bond.peerSignCounter = counter
        do { try store.save(bond) } catch {
            logger.error("sign counter not stored", metadata: ["ble.peer": "\(bond.address)", "error": "\(error)"])
        }
    }

    /// Our CSRK toward the peer on link `handle` and the next SignCounter to sign a write
    /// with. The counter is stored as used before this returns, so no two writes carry
    /// the same one, even across restarts. Throws `SecurityError.noSigningKey` without a
    /// bonded CSRK of ours (or once its 2^32 counters are spent), or when storing fails.
    public func nextSignature(handle: UInt16) throws -> (csrk: [UInt8], counter: UInt32) {
        guard links[handle] != nil else { throw SecurityError.notConnected(handle: handle) }
        guard var bond = signingBond(handle: handle), let csrk = bond.keys.localCSRK else { throw SecurityError.noSigningKey }
        let next: UInt32
        if let last = bond.signCounter {
            guard last < .max else { throw SecurityError.noSigningKey }
            next = last + 1
        } else {
            next = 0
        }
        bond.signCounter = next
        try store.save(bond)
        return (csrk, next)
    }

    /// The bonds in the store.
    public func bonds() throws -> [Bond] { try store.bonds() }

    /// Forgets a bond; returns whether one was removed.
    @discardableResult
    public func removeBond(address: BluetoothAddress, type: AddressType) throws -> Bool {
        defer { for (h, link) in links { setKeyStored(bondKey(for: link, level: .encrypted) != nil, handle: h) } }
        return try store.remove(address: address, type: type)
    }

    /// Whether a long-term key for link `handle` is stored with its peer's bond, so the
    /// peer can encrypt without pairing (what the GATT server's refusals tell apart).
    public func hasStoredKey(handle: UInt16) -> Bool { links[handle]?.keyStored ?? false }

    /// Records whether link `handle` has a stored key, here and in L2CAP, which checks it
    /// when a peer asks for a channel on the link.
    func setKeyStored(_ stored: Bool, handle: UInt16) {
        guard links[handle] != nil else { return }
        links[handle]?.keyStored = stored
        l2cap.onLoop { $0.setKeyStored(stored, handle: handle) }
    }

    func bondKey(for link: Link, level: SecurityLevel) -> LongTermKey? {
        guard let bond = store.bond(for: link.connection.peer, type: link.connection.peerType),
              let key = bond.keys.encryptionKey(asCentral: link.connection.role == .central) else { return nil }
        return key.security.level >= level ? key : nil
    }

    func beginPairing(handle: UInt16, level: SecurityLevel) {
        guard var link = links[handle], link.session == nil else { return }
        var config = configuration
        if level >= .authenticated { config.mitm = true }
        var session = PairingSession(initiator: true, configuration: config, addresses: addresses(link), random: random)
        let actions = session.start()
        link.session = session
        links[handle] = link
        perform(actions, handle: handle)
    }

    /// Peripheral: asks the central to pair or encrypt (Security Request, §3.6.7),
    /// with MITM when `level` needs authentication.
    func requestSecurity(handle: UInt16, level: SecurityLevel) {
        var a = configuration.authentication
        if level >= .authenticated { a.insert(.mitm) }
        send(.securityRequest(a), handle: handle)
    }

    func addresses(_ link: Link) -> PairingAddresses {
        let peer = link.peerOnAir
        let (i, r) = link.connection.role == .central ? (link.local, peer) : (peer, link.local)
        return PairingAddresses(initiator: i.0, initiatorType: i.1, responder: r.0, responderType: r.1)
    }

    // MARK: - Controller events

    func event(_ e: HCIEvent) {
        switch e {
        case let .le(.connectionComplete(c)) where c.status.isSuccess:
            attach(L2CAPHost.Connection(handle: c.connectionHandle, role: c.role, peer: c.peerAddress, peerType: c.peerAddressType))
        case let .le(.enhancedConnectionComplete(c)) where c.status.isSuccess:
            // Addresses the controller resolved (identity types 0x02/0x03) came over the
            // air as the RPAs it reports beside them (§7.7.65.10); pairing hashes those.
            let peerRPA = c.peerResolvablePrivateAddress == .zero ? nil : c.peerResolvablePrivateAddress
            let localRPA = c.localResolvablePrivateAddress == .zero ? nil : c.localResolvablePrivateAddress
            attach(L2CAPHost.Connection(handle: c.connectionHandle, role: c.role, peer: c.peerAddress, peerType: c.peerAddressType),
                   peerOnAir: peerRPA.map { ($0, AddressType.random) }, localOnAir: localRPA.map { ($0, AddressType.random) })
        case let .le(.advertisingSetTerminated(t)) where t.status.isSuccess:
            // The set that advertised to the central says which address the link has.
            // The event comes right after the connection's complete event; a pairing
            // already under way keeps the address it started with.
            guard let a = advertisingSetAddresses[t.advertisingHandle], var link = links[t.connectionHandle],
                  !link.localReported, link.connection.role == .peripheral, link.session == nil else { return }
            link.local = a
            links[t.connectionHandle] = link
        case let .disconnectionComplete(d) where d.status.isSuccess:
            detach(handle: d.connectionHandle)
        case let .le(.longTermKeyRequest(r)):
            keyRequested(r)
        case let .encryptionChange(c):
            encryptionChanged(handle: c.connectionHandle, status: c.status, enabled: c.encryptionEnabled != 0)
        case let .encryptionChangeV2(c):
            // The key size an LE controller reports is that of the 128-bit LTK it was
            // given; the negotiated size (the LTK's masked length) is the host's, and
            // stays what the link's security says.
            encryptionChanged(handle: c.connectionHandle, status: c.status, enabled: c.encryptionEnabled != 0)
        case let .encryptionKeyRefreshComplete(c):
            encryptionChanged(handle: c.connectionHandle, status: c.status, enabled: true)
        default:
            break
        }
    }

    /// Sets the address the controller uses for the links it makes from now on in
    /// `role` (nil: both), as the host does when it sets a random address for privacy.
    /// Without it, links are made from the controller's public address.
    public func setOwnAddress(_ address: BluetoothAddress, type: AddressType, role: ConnectionRole? = nil) {
        for r in role.map({ [$0] }) ?? [.central, .peripheral] { ownAddress[r] = (address, type) }
    }

    /// Sets the address advertising set `set` advertises from (nil: the peripheral
    /// role's, `setOwnAddress`): a link the set makes has it as ours once LE
    /// Advertising Set Terminated names the set (as BlueZ takes the responder address
    /// from the set).
    public func setOwnAddress(_ address: (BluetoothAddress, AddressType)?, advertisingSet set: UInt8) {
        advertisingSetAddresses[set] = address
    }

    func attach(_ c: L2CAPHost.Connection, peerOnAir: (BluetoothAddress, AddressType)? = nil, localOnAir: (BluetoothAddress, AddressType)? = nil) {
        guard links[c.handle] == nil else { return }
        let local = localOnAir ?? ownAddress[c.role] ?? (l2cap.controller.onLoop { $0.info?.address } ?? .zero, AddressType.public)
        // An identity type (0x02/0x03) with no RPA reported: the identity itself was on the air.
        let peer = peerOnAir ?? (c.peer, AddressType(rawValue: c.peerType.rawValue & 1))
        var link = Link(connection: c, local: local, peerOnAir: peer)
        link.localReported = localOnAir != nil
        links[c.handle] = link
        setKeyStored(bondKey(for: link, level: .encrypted) != nil, handle: c.handle)
        l2cap.onLoop { host in
            host.setReceiver(.securityManager, handle: c.handle) { [weak self] input in
                self?.onLoop { $0.input(input, handle: c.handle) }
            }
        }
    }

    /// The transport ended (L2CAP has told each link's receiver `.closed`, which
    /// detached it): the event streams finish.
    func transportClosed() {
        closed = true
        for h in Array(links.keys) { detach(handle: h) }
        let ending = continuations
        continuations.removeAll()
        for (_, c) in ending { c.finish() }
    }

    func detach(handle: UInt16) {
        guard var link = links.removeValue(forKey: handle) else { return }
        link.timer?.cancel()
        if var s = link.session { report(s.disconnected(), link: link) }
        link.session = nil
        for w in link.waiters { w.continuation.resume(throwing: SecurityError.notConnected(handle: handle)) }
        for w in link.pairWaiters { w.resume(throwing: SecurityError.notConnected(handle: handle)) }
    }

    func input(_ input: ChannelInput, handle: UInt16) {
        // The link ended, or the transport did (then no Disconnection Complete follows):
        // what waits on it ends now.
        guard case let .frame(frame) = input else { return detach(handle: handle) }
        guard var link = links[handle] else { return }
        let bytes = Array(frame)  // SMP keeps PDUs (Pairing Request and Response enter the confirm values)
        guard !link.smpDisabled else { return }
        if var session = link.session {
            let actions = session.receive(bytes)
            link.session = session
            links[handle] = link
            perform(actions, handle: handle)
            return
        }
        let pdu: SMPPDU
        do { pdu = try SMPPDU(bytes) } catch {
            // No pairing running and a PDU we cannot take: the spec's answer (§3.3, §3.5.5),
            // Command Not Supported for an unknown code, Invalid Parameters for a wrong
            // length or a reserved value. A Pairing Failed is never answered, and an empty
            // frame has no code to answer.
            if let error = error as? SMPDecodeError, bytes.first != SMPCode.pairingFailed.rawValue {
                send(.pairingFailed(error.reason), handle: handle)
            }
            return
        }
        switch (pdu, link.connection.role) {
        case (.pairingRequest, .peripheral):
            if refusedForBackoff(link) {
                send(.pairingFailed(.repeatedAttempts), handle: handle)
                return
            }
            var session = PairingSession(initiator: false, configuration: configuration, addresses: addresses(link), random: random)
            let actions = session.receive(bytes)
            link.session = session
            links[handle] = link
            perform(actions, handle: handle)
        case let (.securityRequest(auth), .central):
            // §2.4.6: encrypt with a bond's key that meets the request, else pair.
            let level: SecurityLevel = auth.contains(.mitm) ? .authenticated : .encrypted
            guard link.security.level < level, link.encryptingWith == nil else { return }
            if refusedForBackoff(link) {
                send(.pairingFailed(.repeatedAttempts), handle: handle)
                return
            }
            if let key = bondKey(for: link, level: level) { encrypt(handle: handle, key: key) } else { beginPairing(handle: handle, level: level) }
        case let (.pairingFailed(reason), _):
            // The answer to our Security Request (e.g. a central without SMP: Pairing Not Supported).
            finished(handle: handle)
            failWaiters(handle: handle, SecurityError.pairing(.remote(reason)), pairing: true)
        case (.keypressNotification, _):
            return
        default:
            send(.pairingFailed(.unspecifiedReason), handle: handle)
        }
    }

    /// Peripheral: the central started encryption. The pairing's STK/LTK (EDIV and
    /// Rand 0), else a bond's key with that EDIV/Rand, else a negative reply.
    func keyRequested(_ r: LELongTermKeyRequest) {
        guard let link = links[r.connectionHandle] else { return }
        var key: [UInt8]?
        if let k = link.session?.encryptionKey, r.encryptedDiversifier == 0, r.randomNumber == 0 {
            key = k.key
        } else if let bond = store.bond(for: link.connection.peer, type: link.connection.peerType),
                  let k = bond.keys.encryptionKey(asCentral: false), k.ediv == r.encryptedDiversifier, k.rand == r.randomNumber {
            key = k.key
            links[r.connectionHandle]?.encryptingWith = k
        }
        let controller = l2cap.controller
        let handle = r.connectionHandle
        Task {
            if let key {
                _ = try? await controller.send(LELongTermKeyRequestReply(connectionHandle: handle, longTermKey: key))
            } else {
                _ = try? await controller.send(LELongTermKeyRequestNegativeReply(connectionHandle: handle))
            }
        }
    }

    func encrypt(handle: UInt16, key: LongTermKey) {
        links[handle]?.encryptingWith = key
        let controller = l2cap.controller
        Task {
            do {
                try await controller.send(LEEnableEncryption(connectionHandle: handle, randomNumber: key.rand, encryptedDiversifier: key.ediv, longTermKey: key.key))
            } catch let HCIError.commandFailed(_, status) {
                self.encryptionChanged(handle: handle, status: status, enabled: false)
            } catch {
                self.encryptionChanged(handle: handle, status: .unspecifiedError, enabled: false)
            }
        }
    }

    func encryptionChanged(handle: UInt16, status: HCIStatus, enabled: Bool) {
        guard var link = links[handle] else { return }
        if var session = link.session, session.encryptionKey != nil {
            if status.isSuccess && enabled, let k = session.encryptionKey {
                // The pairing's key; bonded only once the pairing completes and is stored.
                link.security = k.security
                link.security.bonded = false
            }
            let actions = session.encryptionChanged(status: status, enabled: enabled)
            link.session = session
            link.encryptingWith = nil
            links[handle] = link
            emit(.securityChanged(handle: handle, link.security))
            perform(actions, handle: handle)
            return
        }
        let bondKey = link.encryptingWith
        link.encryptingWith = nil
        if status.isSuccess && enabled {
            if let k = bondKey { link.security = k.security }
            links[handle] = link
            emit(.securityChanged(handle: handle, link.security))
            resolveWaiters(handle: handle)
            return
        }
        links[handle] = link
        logger.info("encryption failed", metadata: ["ble.handle": "\(handle)", "hci.status": "\(status)"])
        // A central whose stored key the peer no longer has (PIN or Key Missing) pairs afresh.
        if link.connection.role == .central, status == .pinOrKeyMissing, let level = link.waiters.map(\.level).max() {
            beginPairing(handle: handle, level: level)
            return
        }
        failWaiters(handle: handle, SecurityError.pairing(.encryption(status)))
    }

    // MARK: - Session actions

    func perform(_ actions: [PairingAction], handle: UInt16) {
        guard let link = links[handle] else { return }
        for a in actions {
            switch a {
            case let .send(pdu):
                send(pdu, handle: handle)
            case let .prompt(p):
                emit(.prompt(handle: handle, p))
                let delegate = self.delegate, peer = link.connection.peer
                if case .displayPasskey = p {
                    Task { _ = await delegate.answer(p, peer: peer) }
                } else {
                    Task {
                        let answer = await delegate.answer(p, peer: peer)
                        self.answered(answer, handle: handle)
                    }
                }
            case let .startEncryption(key):
                encrypt(handle: handle, key: key)
            case let .keypress(t):
                emit(.keypress(handle: handle, t))
            case let .completed(result):
                finished(handle: handle)
                completed(result, handle: handle)
            case let .failed(error):
                finished(handle: handle)
                failed(error, handle: handle)
            }
        }
    }

    /// While the user types the passkey on link `handle`: tells the peer a digit was
    /// entered or erased, or the entry cleared (when both sides asked for keypress
    /// notifications; otherwise nothing is sent).
    public func keypress(_ type: KeypressType, handle: UInt16) {
        drive(handle) { $0.keypress(type) }
    }

    func answered(_ answer: PairingAnswer, handle: UInt16) {
        drive(handle) { $0.answer(answer) }
    }

    /// Runs `step` on link `handle`'s pairing session, keeps the session, performs its actions.
    private func drive(_ handle: UInt16, _ step: (inout PairingSession) -> [PairingAction]) {
        guard var link = links[handle], var session = link.session else { return }
        let actions = step(&session)
        link.session = session
        links[handle] = link
        perform(actions, handle: handle)
    }

    func send(_ pdu: SMPPDU, handle: UInt16) {
        l2cap.onLoop { _ = $0.enqueue(pdu.bytes, on: .securityManager, handle: handle) }
        // §3.4: the timer restarts whenever a command is queued during a pairing; a
        // Security Request starts it too, so an unanswered one ends its waiters.
        guard links[handle]?.session != nil || pdu.code == .securityRequest else { return }
        links[handle]?.timer?.cancel()
        links[handle]?.timer = LoopTimer(after: timeout, on: l2cap.loop) { [weak self] in
            self?.onLoop { $0.timedOut(handle: handle) }
        }
    }

    func timedOut(handle: UInt16) {
        guard var link = links[handle] else { return }
        guard var session = link.session else {
            // A Security Request nobody answered.
            links[handle]?.timer = nil
            failWaiters(handle: handle, SecurityError.pairing(.timeout), pairing: true)
            return
        }
        let actions = session.timedOut()
        link.session = session
        link.smpDisabled = true
        links[handle] = link
        perform(actions, handle: handle)
    }

    func finished(handle: UInt16) {
        links[handle]?.timer?.cancel()
        links[handle]?.timer = nil
    }

    func completed(_ result: PairingResult, handle: UInt16) {
        guard var link = links[handle] else { return }
        var result = result
        // The bond is stored before anyone hears of the pairing: a store that refuses
        // it (a file that cannot be written or read) is part of the result, so a caller
        // is not told 'bonded' of keys that will not outlive the link.
        var stored: Bond?
        if result.bonding {
            let bond = self.bond(from: result, link: link, handle: handle)
            do {
                try store.save(bond)
                stored = bond
            } catch {
                logger.error("bond not stored", metadata: ["ble.peer": "\(bond.address)", "error": "\(error)"])
                result.bondNotStored = "\(error)"
                result.security.bonded = false
            }
        }
        link.session = nil
        link.security = result.security
        links[handle] = link
        backoff[link.connection.peer] = nil
        logger.info("paired", metadata: ["ble.handle": "\(handle)", "smp.method": "\(result.method)", "smp.security": "\(result.security)"])
        emit(.paired(handle: handle, peer: link.connection.peer, result))
        let pairWaiters = link.pairWaiters
        links[handle]?.pairWaiters = []
        for w in pairWaiters { w.resume(returning: result) }
        if let stored {
            setKeyStored(true, handle: handle)
            emit(.bonded(stored))
        }
        resolveWaiters(handle: handle)
    }

    /// The bond a pairing that bonded makes: the peer's identity (else the link's
    /// address), its keys, and what an earlier bond with it kept (the client's record,
    /// the GATT layout, other link addresses).
    private func bond(from result: PairingResult, link: Link, handle: UInt16) -> Bond {
        let identity = result.keys.peerIdentity
        let peer = link.connection.peer, peerType = link.connection.peerType
        var bond = Bond(address: identity?.address ?? peer, addressType: identity?.addressType ?? peerType, keys: result.keys)
        // The link address is kept too unless it is the identity or a private one the IRK resolves.
        if !bond.matches(peer, type: peerType) && !ResolvablePrivateAddress.isResolvable(peer) {
            bond.linkAddresses.append(Bond.LinkAddress(address: peer, type: peerType))
        }
        if let old = store.bond(for: bond.address, type: bond.addressType) {
            bond.clientConfigurations = old.clientConfigurations
            bond.clientSupportedFeatures = old.clientSupportedFeatures
            bond.serverDatabaseHash = old.serverDatabaseHash
            bond.database = old.database
            for a in old.linkAddresses where !bond.linkAddresses.contains(a) { bond.linkAddresses.append(a) }
        }
        // What the client set on this link before the pairing (its subscriptions) is
        // the new bond's from the start: stored with it, not after, when the link may
        // have ended.
        if let record = clientRecordSource?(handle) { bond.take(record) }
        return bond
    }

    func failed(_ error: PairingError, handle: UInt16) {
        guard var link = links[handle] else { return }
        link.session = nil
        links[handle] = link
        logger.info("pairing failed", metadata: ["ble.handle": "\(handle)", "smp.error": "\(error)"])
        switch error {
        case .local(let r), .remote(let r):
            if [.confirmValueFailed, .dhKeyCheckFailed, .passkeyEntryFailed, .numericComparisonFailed].contains(r) { recordFailure(link) }
        default:
            break
        }
        emit(.pairingFailed(handle: handle, peer: link.connection.peer, error))
        failWaiters(handle: handle, SecurityError.pairing(error), pairing: true)
    }

    func resolveWaiters(handle: UInt16) {
        guard var link = links[handle] else { return }
        let waiters = link.waiters
        link.waiters = []
        links[handle] = link
        for w in waiters {
            if link.security.level >= w.level { w.continuation.resume(returning: link.security) }
            else { w.continuation.resume(throwing: SecurityError.insufficient(got: link.security, wanted: w.level)) }
        }
    }

    /// Ends the link's `secure` waiters (and, with `pairing`, its `pair` waiters) with `error`.
    func failWaiters(handle: UInt16, _ error: SecurityError, pairing: Bool = false) {
        let waiters = links[handle]?.waiters ?? []
        links[handle]?.waiters = []
        for w in waiters { w.continuation.resume(throwing: error) }
        guard pairing else { return }
        let pairWaiters = links[handle]?.pairWaiters ?? []
        links[handle]?.pairWaiters = []
        for w in pairWaiters { w.resume(throwing: error) }
    }

    func report(_ actions: [PairingAction], link: Link) {
        for case let .failed(e) in actions {
            emit(.pairingFailed(handle: link.connection.handle, peer: link.connection.peer, e))
        }
    }

    // MARK: - Repeated attempts (§2.3.6)

    /// After a failed authentication the interval before the same peer may try
    /// again doubles, from 2 s up to 64 s; a success clears it. Time is the loop's, as
    /// for every timer of the stack (a test drives it with a testing loop).
    func recordFailure(_ link: Link) {
        let failures = (backoff[link.connection.peer]?.failures ?? 0) + 1
        backoff[link.connection.peer] = (failures, loop.now + .seconds(Int64(1) << min(failures, 6)))
    }

    func refusedForBackoff(_ link: Link) -> Bool {
        guard let b = backoff[link.connection.peer] else { return false }
        return loop.now < b.until
    }

    func emit(_ e: SecurityEvent) {
        // L2CAP checks an SPSM's requirement against the link's security when a peer
        // asks for a channel: it learns each change before anyone else.
        if case let .securityChanged(handle, state) = e { l2cap.onLoop { $0.setLinkSecurity(state, handle: handle) } }
        for o in observers { o(e) }
        for (_, c) in continuations { c.yield(e) }
    }

    /// Calls `observer` with each event as it is emitted, synchronously on the loop,
    /// before anyone waiting for the pairing or encryption resumes: for work that must be
    /// queued before the program's next operation (the facade's owed work).
    public func addEventObserver(_ observer: @escaping @Sendable (SecurityEvent) -> Void) {
        observers.append(observer)
    }

    /// What a local GATT server holds for the client on a link, as a bond keeps it.
    public struct ClientRecord: Sendable {
        public var configurations: [UInt16: UInt16]
        public var supportedFeatures: UInt8
        /// The Database Hash the client is aware of (nil: none to keep).
        public var hash: [UInt8]?
        public init(configurations: [UInt16: UInt16], supportedFeatures: UInt8, hash: [UInt8]?) {
            self.configurations = configurations
            self.supportedFeatures = supportedFeatures
            self.hash = hash
        }
    }
    /// Reads, on the loop, what the local GATT server holds for the client on link `handle`.
    public typealias ClientRecordSource = @Sendable (_ handle: UInt16) -> ClientRecord?

    /// Where a bonding pairing reads what the client set on its link before the bond
    /// existed (its CCCDs above all), so the bond is stored with it.
    public func setClientRecordSource(_ source: @escaping ClientRecordSource) { clientRecordSource = source }
}

extension Bond {
    /// Keeps what the local server holds for the client (`SecurityManager.ClientRecord`):
    /// its CCCDs, its Client Supported Features once it has set any, and the Database
    /// Hash it is aware of when there is one.
    mutating func take(_ r: SecurityManager.ClientRecord) {
        clientConfigurations = r.configurations
        if r.supportedFeatures != 0 || clientSupportedFeatures != nil { clientSupportedFeatures = r.supportedFeatures }
        if let hash = r.hash { serverDatabaseHash = hash }
    }
}
