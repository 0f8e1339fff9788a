// The Security Manager's bonds: what is stored with a peer that bonded (its keys,
// our GATT server's record of it as a client, its GATT layout, the signing
// counters, Vol 3, Part H, §2.4.5 and Part C, §10.4), read back when it returns,
// and removed on request.

import HCI
import L2CAP
import Logging
import NIOCore

extension SecurityManager {
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
        defer { refreshKeyStored() }
        return try store.remove(address: address, type: type)
    }

    /// Looks up again, for every link, whether its peer's bond holds a key for it.
    func refreshKeyStored() {
        for (h, link) in links { setKeyStored(bondKey(for: link, level: .encrypted) != nil, handle: h) }
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

    /// The bond a pairing that bonded makes, and the peer's earlier bonds stored in
    /// other places that it replaces (one peer, one bond). The bond is under the
    /// peer's identity, else the place of its earlier bond, else the link's address.
    /// A peer that distributes no identity this time keeps the one its earlier bond
    /// held: the IRK found it on this link, and without it the bond would no longer
    /// be found from the peer's next private address (BlueZ keeps the IRK too). The
    /// bond also keeps what the earlier ones held (the client's record, the GATT
    /// layout, other link addresses).
    func bond(from result: PairingResult, link: Link, handle: UInt16) -> (bond: Bond, replacing: [Bond]) {
        let peer = link.connection.peer, peerType = link.connection.peerType
        // By the address the link was made with: an identity, a link address, or a
        // private address an earlier bond's IRK resolves.
        let earlier = store.bond(for: peer, type: peerType)
        var keys = result.keys
        if keys.peerIdentity == nil { keys.peerIdentity = earlier?.keys.peerIdentity }
        let place = keys.peerIdentity.map { ($0.address, $0.addressType) } ?? earlier.map { ($0.address, $0.addressType) } ?? (peer, peerType)
        var bond = Bond(address: place.0, addressType: place.1, keys: keys)
        var olds: [Bond] = []
        for old in [earlier, store.bond(for: bond.address, type: bond.addressType)] {
            if let old, !olds.contains(where: { $0.isEntry(of: old) }) { olds.append(old) }
        }
        if let old = olds.first {
            bond.clientConfigurations = old.clientConfigurations
            bond.clientSupportedFeatures = old.clientSupportedFeatures
            bond.serverDatabaseHash = old.serverDatabaseHash
            bond.database = old.database
        }
        // The link's address and the earlier bonds' are kept too, unless one is the
        // bond's own or a private one the IRK resolves.
        let addresses = [Bond.LinkAddress(address: peer, type: peerType)]
            + olds.flatMap { [Bond.LinkAddress(address: $0.address, type: $0.addressType)] + $0.linkAddresses }
        for a in addresses where !bond.matches(a.address, type: a.type) && !ResolvablePrivateAddress.isResolvable(a.address) {
            bond.linkAddresses.append(a)
        }
        // What the client set on this link before the pairing (its subscriptions) is
        // the new bond's from the start: stored with it, not after, when the link may
        // have ended.
        if let record = clientRecordSource?(handle) { bond.take(record) }
        return (bond, olds.filter { !$0.isEntry(of: bond) })
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
