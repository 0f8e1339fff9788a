// What pairing produces and bonding keeps (Vol 3, Part H, §2.4): the LTK with its
// EDIV/Rand, the identity (IRK and identity address) and the CSRK, in each
// direction. Keys are kept in HCI/PDU order (least significant octet first), the
// order LE Enable Encryption and LE Long Term Key Request Reply take.

import HCI
import Synchronization

/// A Long Term Key and what identifies and qualifies it.
public struct LongTermKey: Hashable, Sendable, Codable {
    /// 16 octets, least significant first, already masked to `keySize`.
    public var key: [UInt8]
    /// EDIV and Rand identify a legacy LTK; both are 0 for Secure Connections.
    public var ediv: UInt16
    public var rand: UInt64
    public var keySize: Int
    public var authenticated: Bool
    public var secureConnections: Bool

    public init(key: [UInt8], ediv: UInt16 = 0, rand: UInt64 = 0, keySize: Int = 16, authenticated: Bool, secureConnections: Bool) {
        self.key = key
        self.ediv = ediv
        self.rand = rand
        self.keySize = keySize
        self.authenticated = authenticated
        self.secureConnections = secureConnections
    }

    /// The security a link encrypted with this key has.
    public var security: LinkSecurityState {
        LinkSecurityState(encrypted: true, authenticated: authenticated, secureConnections: secureConnections, keySize: keySize, bonded: true)
    }
}

/// An identity: the IRK that resolves a device's private addresses, and its
/// identity address (public or static random).
public struct IdentityKey: Hashable, Sendable, Codable {
    /// 16 octets, least significant first.
    public var irk: [UInt8]
    public var address: BluetoothAddress
    /// `.public` or `.random` (static).
    public var addressType: AddressType

    public init(irk: [UInt8], address: BluetoothAddress, addressType: AddressType) {
        self.irk = irk
        self.address = address
        self.addressType = addressType
    }
}

/// The keys one pairing exchanged, from this host's point of view.
public struct PairingKeys: Hashable, Sendable, Codable {
    /// Secure Connections: the LTK both sides derived. Legacy: the LTK the peer
    /// distributed (used when we are central and re-encrypt).
    public var peerLTK: LongTermKey?
    /// Legacy only: the LTK we distributed (the peer, as central, encrypts with it).
    public var localLTK: LongTermKey?
    public var peerIdentity: IdentityKey?
    /// 16 octets, least significant first.
    public var peerCSRK: [UInt8]?
    public var localCSRK: [UInt8]?
    /// The BR/EDR link key derived from the Secure Connections LTK (cross-transport key
    /// derivation, when both sides asked for it; `PairingConfiguration.deriveLinkKey`).
    /// 16 octets, least significant first.
    public var linkKey: [UInt8]?

    public init(peerLTK: LongTermKey? = nil, localLTK: LongTermKey? = nil, peerIdentity: IdentityKey? = nil, peerCSRK: [UInt8]? = nil, localCSRK: [UInt8]? = nil) {
        self.peerLTK = peerLTK
        self.localLTK = localLTK
        self.peerIdentity = peerIdentity
        self.peerCSRK = peerCSRK
        self.localCSRK = localCSRK
    }

    /// The key that encrypts a link where we have `role`: a Secure Connections LTK
    /// serves both roles; a legacy central uses the key the peripheral gave it.
    public func encryptionKey(asCentral: Bool) -> LongTermKey? {
        if let k = peerLTK, k.secureConnections { return k }
        return asCentral ? peerLTK : localLTK
    }
}

/// Where pairing's random values come from: the system's generator, or, for a
/// program whose HCI conversation must be the same every run (replay tests), a
/// seeded generator. Shared by every pairing of a host; thread-safe.
public final class SecurityRandom: Sendable {
    private let state: Mutex<UInt64?>

    /// The system's cryptographically secure generator.
    public static let system = SecurityRandom(state: nil)

    /// A deterministic generator (SplitMix64) from `seed`: for tests and replay
    /// only; its keys are predictable.
    public static func seeded(_ seed: UInt64) -> SecurityRandom { SecurityRandom(state: seed) }

    private init(state: UInt64?) { self.state = Mutex(state) }

    public func bytes(_ count: Int) -> [UInt8] {
        state.withLock { s in
            guard var x = s else {
                var g = SystemRandomNumberGenerator()
                return (0..<count).map { _ in UInt8.random(in: .min ... .max, using: &g) }
            }
            var out: [UInt8] = []
            out.reserveCapacity(count + 8)
            while out.count < count {
                x &+= 0x9E37_79B9_7F4A_7C15
                var z = x
                z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
                z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
                z ^= z >> 31
                for i in 0..<8 { out.append(UInt8(truncatingIfNeeded: z >> (8 * UInt64(i)))) }
            }
            s = x
            return Array(out.prefix(count))
        }
    }

    public func uint64() -> UInt64 { bytes(8).reversed().reduce(0) { $0 << 8 | UInt64($1) } }
    public func uint16() -> UInt16 { UInt16(truncatingIfNeeded: uint64()) }
}
