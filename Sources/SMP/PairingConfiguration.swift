// What our side announces and accepts in pairing (Vol 3, Part H, §3.5.1): IO
// capability, AuthReq flags, key sizes, keys, and the data some methods need (a
// fixed passkey, OOB data).

import HCI

/// Local pairing policy: what we announce in Pairing Request/Response.
public struct PairingConfiguration: Hashable, Sendable {
    public var ioCapability: IOCapability
    public var bonding: Bool
    /// Ask for MITM protection (and refuse a pairing that cannot give it).
    public var mitm: Bool
    public var secureConnections: Bool
    /// Refuse LE legacy pairing (Secure Connections Only mode).
    public var secureConnectionsOnly: Bool
    public var maximumKeySize: UInt8
    /// The smallest key size accepted (7...16).
    public var minimumKeySize: UInt8
    /// Ask the user to accept a Just Works pairing (`.confirmPairing`); when false,
    /// Just Works proceeds without a prompt.
    public var confirmJustWorks: Bool
    /// The keys we distribute and ask for (always within IRK, CSRK and legacy LTK).
    public var keys: KeyDistribution
    /// Our identity, distributed when the peer asks for identity keys.
    public var identity: IdentityKey?
    /// A fixed passkey to display instead of a random one (what a headless device
    /// with a printed code does; BlueZ and Bumble offer the same). A fixed passkey
    /// that leaks loses the MITM protection: prefer a random one.
    public var passkey: UInt32?
    /// Cross-transport key derivation (§2.4.2.4): ask for the BR/EDR link key to be
    /// derived from a Secure Connections LTK (LinkKey in both key distribution fields)
    /// and offer h7 (CT2). When both sides agree, `PairingKeys.linkKey` holds it, for a
    /// dual-mode controller's BR/EDR side; this stack is LE-only and does not use it.
    public var deriveLinkKey: Bool
    /// Keypress notifications (§2.3.5.1): set the Keypress flag; when both sides set it
    /// and we type the passkey, Passkey Entry Started goes out with the prompt, Passkey
    /// Entry Completed with the answer, and `SecurityManager.keypress(_:handle:)` sends
    /// the digits entered, erased and cleared between them. The peer's arrive as
    /// `SecurityEvent.keypress`.
    public var keypressNotifications: Bool
    /// Out-of-band data (§2.3.5.6.4, §2.3.5.5): what we handed the peer and what it
    /// handed us over another channel. With it the OOB data flag is set and, when the
    /// spec's rules pick OOB, pairing uses it (authenticated, no prompt).
    public var oob: OOBConfiguration?
    /// How many bonds are kept, and what a new one does once that many are stored.
    public var bondLimit: BondLimit

    public init(ioCapability: IOCapability = .noInputNoOutput, bonding: Bool = true, mitm: Bool = false,
                secureConnections: Bool = true, secureConnectionsOnly: Bool = false, maximumKeySize: UInt8 = 16,
                minimumKeySize: UInt8 = 7, confirmJustWorks: Bool = false, keys: KeyDistribution = [.encryptionKey, .identityKey],
                identity: IdentityKey? = nil, passkey: UInt32? = nil, deriveLinkKey: Bool = false, keypressNotifications: Bool = false,
                oob: OOBConfiguration? = nil, bondLimit: BondLimit = BondLimit()) {
        self.ioCapability = ioCapability
        self.bonding = bonding
        self.mitm = mitm
        self.secureConnections = secureConnections
        self.secureConnectionsOnly = secureConnectionsOnly
        self.maximumKeySize = maximumKeySize
        self.minimumKeySize = minimumKeySize
        self.confirmJustWorks = confirmJustWorks
        self.keys = keys
        self.identity = identity
        self.passkey = passkey.map { $0 % 1_000_000 }
        self.deriveLinkKey = deriveLinkKey
        self.keypressNotifications = keypressNotifications
        self.oob = oob
        self.bondLimit = bondLimit
    }

    /// The OOB data flag we send: for Secure Connections, whether we hold the peer's
    /// data; for legacy-only pairing, whether we hold a TK.
    var oobDataPresent: Bool {
        guard let oob else { return false }
        return oob.peer != nil || (!secureConnections && !secureConnectionsOnly && oob.legacyTemporaryKey != nil)
    }

    var authentication: AuthenticationRequirements {
        var a: AuthenticationRequirements = []
        if bonding { a.insert(.bonding) }
        if mitm { a.insert(.mitm) }
        if secureConnections || secureConnectionsOnly { a.insert(.secureConnections) }
        if deriveLinkKey { a.insert(.ct2) }
        if keypressNotifications { a.insert(.keypress) }
        return a
    }

    var distributable: KeyDistribution {
        var k = keys.intersection(.all)
        if identity == nil { k.remove(.identityKey) }
        return k
    }
}

/// How many bonds the Security Manager keeps (Zephyr's CONFIG_BT_MAX_PAIRED, NimBLE's
/// BLE_STORE_MAX_BONDS). Without a bound, a host that bonds with any peer (Just Works)
/// keeps a bond for every address a peer pairs from, and a file store rewrites all of
/// them on every change. A pairing with a peer already bonded replaces its bond and
/// counts once.
public struct BondLimit: Hashable, Sendable {
    public enum WhenFull: Hashable, Sendable {
        /// The new bond is not stored, and a new peer's pairing asks for no bonding, so
        /// the peer keeps no bond with us either (Vol 3, Part H, §2.3.1): the pairing
        /// still encrypts the link, and its result says why no bond was kept
        /// (`PairingResult.bondNotStored`); the bonds stored stay (Zephyr's default).
        case refuseNew
        /// The bonds saved longest ago whose peers are not connected are removed to make
        /// room (`SecurityEvent.bondEvicted`), as NimBLE's `ble_store_util_status_rr`
        /// and Zephyr's BT_KEYS_OVERWRITE_OLDEST do. "Longest ago" is the order the
        /// store lists its bonds in: `InMemoryBondStore` and `FileBondStore` list them
        /// in the order they were last saved, and a bond is saved again when its
        /// client's subscriptions, its signing counter or its GATT layout change. When
        /// every stored bond's peer is connected, the new bond is refused.
        case replaceOldest
    }

    /// The most bonds kept (0: none).
    public var maximum: Int
    public var whenFull: WhenFull

    public init(maximum: Int = 1000, whenFull: WhenFull = .refuseNew) {
        self.maximum = Swift.max(0, maximum)
        self.whenFull = whenFull
    }

    /// The bonds to remove before `new` is stored among `stored` (empty: none), or nil
    /// when `new` is refused. `connected` tells a bond whose peer has a link now.
    public func room(for new: Bond, among stored: [Bond], connected: (Bond) -> Bool) -> [Bond]? {
        if stored.contains(where: { $0.isEntry(of: new) }) { return [] }
        let excess = stored.count + 1 - maximum
        guard excess > 0 else { return [] }
        guard whenFull == .replaceOldest else { return nil }
        var oldest: [Bond] = []
        for b in stored where !connected(b) {
            oldest.append(b)
            if oldest.count == excess { return oldest }
        }
        return nil
    }
}
