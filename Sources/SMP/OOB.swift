// Out-of-band pairing data (Vol 3, Part H, §2.3.5.6.4 for LE Secure Connections,
// §2.3.5.5 for legacy pairing): what one device hands the other over NFC, a QR code
// or any channel other than the LE link. The byte order is the one the AD types carry
// (LE Secure Connections Confirmation Value 0x22, Random Value 0x23, Security Manager
// TK Value 0x10): least significant octet first.

import BLECrypto
import HCI

/// A device's LE Secure Connections OOB data, as it hands it to a peer.
public struct SecureConnectionsOOBData: Hashable, Sendable, Codable {
    public var address: BluetoothAddress
    public var addressType: AddressType
    /// r: 16 octets.
    public var random: [UInt8]
    /// C = f4(PKx, PKx, r, 0): 16 octets; it commits the device to its public key.
    public var confirm: [UInt8]

    public init(address: BluetoothAddress, addressType: AddressType, random: [UInt8], confirm: [UInt8]) {
        self.address = address
        self.addressType = addressType
        self.random = random
        self.confirm = confirm
    }
}

/// Our side of LE Secure Connections OOB: the key pair the next pairings use (its
/// public key is what `shared.confirm` commits to) and r. Hand `shared` to the peer
/// out of band; keep this value in `OOBConfiguration.local`.
public struct LocalOOBData: Hashable, Sendable, CustomStringConvertible {
    /// The P-256 private scalar, 32 octets, most significant first. Never logged.
    let privateKey: [UInt8]
    public let shared: SecureConnectionsOOBData

    /// A fresh key pair and r from `random`, for our `address`.
    public init(address: BluetoothAddress, addressType: AddressType, random: SecurityRandom = .system) throws {
        var pair: (P256KeyPair, [UInt8])?
        // A scalar of 0 or not below the group order is refused; another draw is
        // practically certain to be valid.
        for _ in 0..<8 where pair == nil {
            let k = random.bytes(32)
            if let p = try? P256KeyPair(privateKey: k) { pair = (p, k) }
        }
        guard let (keyPair, scalar) = pair else { throw PairingFailureReason.unspecifiedReason }
        let r = random.bytes(16)
        let c = try SecurityToolbox.f4(u: keyPair.publicKey.x, v: keyPair.publicKey.x, x: r.reversed(), z: 0)
        privateKey = scalar
        shared = SecureConnectionsOOBData(address: address, addressType: addressType, random: r, confirm: c.reversed())
    }

    public var description: String { "local OOB data for \(shared.address) (key not shown)" }
}

/// The OOB data a pairing may use.
public struct OOBConfiguration: Hashable, Sendable {
    /// What we handed the peer (Secure Connections); needed when the peer says it has it.
    public var local: LocalOOBData?
    /// What the peer handed us (Secure Connections): sets our OOB data flag, and its
    /// confirm is checked against the public key the peer sends.
    public var peer: SecureConnectionsOOBData?
    /// Legacy pairing: the 16-octet TK both devices hold (OOB is used when both set
    /// the flag).
    public var legacyTemporaryKey: [UInt8]?

    public init(local: LocalOOBData? = nil, peer: SecureConnectionsOOBData? = nil, legacyTemporaryKey: [UInt8]? = nil) {
        self.local = local
        self.peer = peer
        self.legacyTemporaryKey = legacyTemporaryKey
    }
}
