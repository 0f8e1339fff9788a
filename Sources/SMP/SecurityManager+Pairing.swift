// The Security Manager's pairings: starting one (as central, or by a Security
// Request as peripheral, §3.6.7), carrying out what a link's `PairingSession` asks
// (PDUs, prompts to the delegate, encryption), the SMP timer (§3.4), the pairing's
// end for its waiters, and the repeated-attempts back-off (§2.3.6).

import HCI
import L2CAP
import Logging
import NIOCore

extension SecurityManager {
    // MARK: - Starting a pairing

    func beginPairing(handle: UInt16, level: SecurityLevel) {
        guard var link = links[handle], link.session == nil else { return }
        var config = pairingConfiguration(for: &link)
        if level >= .authenticated { config.mitm = true }
        var session = PairingSession(initiator: true, configuration: config, addresses: addresses(link), random: random)
        let actions = session.start()
        link.session = session
        links[handle] = link
        perform(actions, handle: handle)
    }

    /// What a pairing on `link` announces: `configuration`, with no bonding when the
    /// store could not keep a new bond with this peer (`BondLimit`): both sides then
    /// know no bond results (Vol 3, Part H, §2.3.1), instead of the peer keeping one we
    /// do not. A peer already bonded may always pair again (its bond is replaced).
    func pairingConfiguration(for link: inout Link) -> PairingConfiguration {
        var config = configuration
        link.bondingWithheld = nil
        guard config.bonding, let stored = try? store.bonds() else { return config }
        let peer = link.connection.peer, type = link.connection.peerType
        guard !stored.contains(where: { $0.matches(peer, type: type) }) else { return config }
        if room(for: Bond(address: peer, addressType: type, keys: PairingKeys()), among: stored) == nil {
            config.bonding = false
            link.bondingWithheld = "\(BondLimitReached(maximum: config.bondLimit.maximum))"
        }
        return config
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
        if !result.bonding, let why = link.bondingWithheld { result.bondNotStored = why }
        link.bondingWithheld = nil
        // The bond is stored before anyone hears of the pairing: a store that refuses
        // it (a file that cannot be written or read) is part of the result, so a caller
        // is not told 'bonded' of keys that will not outlive the link.
        var stored: Bond?
        if result.bonding {
            let (bond, replacing) = self.bond(from: result, link: link, handle: handle)
            do {
                // The peer's earlier bonds in other places go first (their keys are
                // spent: the peer holds the new ones), so they make no count at the limit.
                for old in replacing {
                    try removeBond(address: old.address, type: old.addressType)
                    logger.info("bond replaced", metadata: ["ble.peer": "\(old.address)", "ble.identity": "\(bond.address)"])
                }
                try makeRoom(for: bond, removed: &result.bondsEvicted)
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


    /// Within `configuration.bondLimit`: removes the bonds a new `bond` replaces, each
    /// added to `removed` as it goes, or throws when it is refused.
    func makeRoom(for bond: Bond, removed: inout [Bond]) throws {
        let limit = configuration.bondLimit
        guard let evicted = room(for: bond, among: try store.bonds()) else { throw BondLimitReached(maximum: limit.maximum) }
        for old in evicted {
            try removeBond(address: old.address, type: old.addressType)
            logger.info("bond removed to make room", metadata: ["ble.peer": "\(old.address)", "smp.bondLimit": "\(limit.maximum)"])
            removed.append(old)
            emit(.bondEvicted(old))
        }
    }

    /// `BondLimit.room(for:among:connected:)` with the peers of the links up now.
    func room(for bond: Bond, among stored: [Bond]) -> [Bond]? {
        let live = links.values.map { ($0.connection.peer, $0.connection.peerType) }
        return configuration.bondLimit.room(for: bond, among: stored, connected: { b in live.contains { b.matches($0.0, type: $0.1) } })
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
}

/// Why a bond was not stored: the store holds `BondLimit.maximum` bonds and the limit
/// refuses new ones (or every bond stored belongs to a connected peer).
struct BondLimitReached: Error, CustomStringConvertible {
    var maximum: Int
    var description: String { "the bond store holds its limit of \(maximum) bonds (PairingConfiguration.bondLimit)" }
}
