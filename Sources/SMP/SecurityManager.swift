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
        case let .notConnected(h): return "no connection 0x\(hex4(h))"
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
    /// A bond removed to make room for a new one (`BondLimit.WhenFull.replaceOldest`),
    /// before the new one's `bonded`.
    case bondEvicted(Bond)
    /// The peer, typing the passkey we display, pressed a key (§3.5.8).
    case keypress(handle: UInt16, KeypressType)
    /// Another program changed the bonds (`BondStore.changesByOthers`): each link's
    /// "key stored" is looked up again; the facade brings its resolving list in line.
    case bondsChangedElsewhere
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
        /// Why the running pairing asked for no bonding though ours asks for it (the
        /// bond store is at `BondLimit.maximum`), for its result's `bondNotStored`.
        var bondingWithheld: String?
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
    var clientRecordSource: ClientRecordSource?
    /// Called with each event as it is emitted, on the loop (`addEventObserver`).
    private var observers: [@Sendable (SecurityEvent) -> Void] = []
    private var nextContinuation: UInt64 = 0
    private var started = false
    /// The transport ended: every link has gone and the event streams are finished.
    private var closed = false
    /// How often the store is asked whether another program changed it.
    public nonisolated let storeCheckInterval: Duration
    /// `store.changesByOthers()` when last asked.
    private var othersChangesSeen: UInt64?
    private var storeCheck: LoopTimer?

    public init(l2cap: L2CAPHost, configuration: PairingConfiguration = PairingConfiguration(), store: any BondStore = InMemoryBondStore(),
                delegate: any PairingDelegate = AutomaticPairingDelegate(), random: SecurityRandom = .system,
                timeout: Duration = .seconds(30), storeCheckInterval: Duration = .seconds(1), logger: Logger) {
        self.l2cap = l2cap
        self.timeout = timeout
        self.storeCheckInterval = storeCheckInterval
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
        othersChangesSeen = store.changesByOthers()
        if othersChangesSeen != nil { scheduleStoreCheck() }
    }

    /// A store another program may change is asked every `storeCheckInterval` (one
    /// stat(2) of a bond file) until the transport ends.
    private func scheduleStoreCheck() {
        storeCheck = LoopTimer(after: storeCheckInterval, on: loop) { [weak self] in self?.onLoop { $0.checkStore() } }
    }

    /// When another program changed the bonds since the last look: each link's "key
    /// stored" follows the store again, and `bondsChangedElsewhere` is emitted.
    func checkStore() {
        guard !closed else { return }
        defer { scheduleStoreCheck() }
        let now = store.changesByOthers()
        guard now != othersChangesSeen else { return }
        othersChangesSeen = now
        logger.info("bonds changed by another program")
        refreshKeyStored()
        emit(.bondsChangedElsewhere)
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
        storeCheck?.cancel()
        storeCheck = nil
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
            var session = PairingSession(initiator: false, configuration: pairingConfiguration(for: &link), addresses: addresses(link), random: random)
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
}
