// The LE Security Manager's cryptographic toolbox (Core Specification v5.4, Vol 3,
// Part H, §2.2): c1 and s1 for LE legacy pairing, f4, f5, f6 and g2 for LE Secure
// Connections, h6 and h7 for key conversion, ah for resolvable private addresses,
// and P-256 Diffie-Hellman with the peer's key checked to lie on the curve.
//
// Every value here is written most significant byte first, exactly as the
// specification writes its sample data (Appendix D); SMP PDUs carry the same
// values least significant byte first, and the SMP module reverses them at the
// PDU boundary.

import Crypto

public enum SecurityToolbox {
    /// c1 (§2.2.3): the legacy pairing confirm value. `preq` and `pres` are the
    /// 7-octet Pairing Request and Response (most significant octet first, i.e. the
    /// PDU bytes reversed), `ia`/`ra` the 6-octet addresses, `iat`/`rat` their types
    /// (0 public, 1 random).
    public static func c1(k: [UInt8], r: [UInt8], preq: [UInt8], pres: [UInt8], iat: UInt8, rat: UInt8, ia: [UInt8], ra: [UInt8]) throws -> [UInt8] {
        let p1 = pres + preq + [rat & 1, iat & 1]
        let p2 = [UInt8](repeating: 0, count: 4) + ia + ra
        guard p1.count == 16, p2.count == 16 else { throw BLECryptoError.wrongLength(key: k.count, block: p1.count) }
        let first = try BLECrypto.e(key: k, xor(r, p1))
        return try BLECrypto.e(key: k, xor(first, p2))
    }

    /// s1 (§2.2.4): the legacy Short Term Key from the two randoms' low 64 bits.
    public static func s1(k: [UInt8], r1: [UInt8], r2: [UInt8]) throws -> [UInt8] {
        guard r1.count == 16, r2.count == 16 else { throw BLECryptoError.wrongLength(key: k.count, block: r1.count) }
        return try BLECrypto.e(key: k, Array(r1[8...]) + Array(r2[8...]))
    }

    /// f4 (§2.2.6): Secure Connections confirm value, AES-CMAC_X(U || V || Z).
    public static func f4(u: [UInt8], v: [UInt8], x: [UInt8], z: UInt8) throws -> [UInt8] {
        try BLECrypto.cmac(key: x, u + v + [z])
    }

    /// The salt of f5 (§2.2.7).
    static let f5Salt: [UInt8] = [0x6C, 0x88, 0x83, 0x91, 0xAA, 0xF5, 0xA5, 0x38, 0x60, 0x37, 0x0B, 0xDB, 0x5A, 0x60, 0x83, 0xBE]

    /// f5 (§2.2.7): MacKey and LTK from the DHKey `w`, both nonces and both 56-bit
    /// addresses (type octet, then the address).
    public static func f5(w: [UInt8], n1: [UInt8], n2: [UInt8], a1: [UInt8], a2: [UInt8]) throws -> (macKey: [UInt8], ltk: [UInt8]) {
        let t = try BLECrypto.cmac(key: f5Salt, w)
        let keyID: [UInt8] = [0x62, 0x74, 0x6C, 0x65]
        let tail = keyID + n1 + n2 + a1 + a2 + [0x01, 0x00]
        return (try BLECrypto.cmac(key: t, [0] + tail), try BLECrypto.cmac(key: t, [1] + tail))
    }

    /// f6 (§2.2.8): the DHKey check value. `ioCap` is AuthReq || OOB flag || IO capability.
    public static func f6(w: [UInt8], n1: [UInt8], n2: [UInt8], r: [UInt8], ioCap: [UInt8], a1: [UInt8], a2: [UInt8]) throws -> [UInt8] {
        try BLECrypto.cmac(key: w, n1 + n2 + r + ioCap + a1 + a2)
    }

    /// g2 (§2.2.9): the 32-bit value whose last six decimal digits both users compare.
    public static func g2(u: [UInt8], v: [UInt8], x: [UInt8], y: [UInt8]) throws -> UInt32 {
        let m = try BLECrypto.cmac(key: x, u + v + y)
        return m[12...].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
    }

    /// h6 (§2.2.10): AES-CMAC_W(keyID).
    public static func h6(w: [UInt8], keyID: [UInt8]) throws -> [UInt8] { try BLECrypto.cmac(key: w, keyID) }

    /// h7 (§2.2.11): AES-CMAC_SALT(W).
    public static func h7(salt: [UInt8], w: [UInt8]) throws -> [UInt8] { try BLECrypto.cmac(key: salt, w) }

    /// ah (§2.2.2): the 24-bit hash of a resolvable private address's `prand`
    /// (3 octets) under an IRK.
    public static func ah(irk: [UInt8], prand: [UInt8]) throws -> [UInt8] {
        guard prand.count == 3 else { throw BLECryptoError.wrongLength(key: irk.count, block: prand.count) }
        let block = try BLECrypto.e(key: irk, [UInt8](repeating: 0, count: 13) + prand)
        return Array(block[13...])
    }

    static func xor(_ a: [UInt8], _ b: [UInt8]) -> [UInt8] { zip(a, b).map { $0 ^ $1 } }

    /// The length of the Authentication Signature an ATT Signed Write Command ends with.
    public static let signatureLength = 12

    /// Data signing (§2.4.5 and Vol 3, Part C, §10.4.1): the 12-octet Authentication
    /// Signature of `message` (the PDU bytes it covers: opcode, handle, value), as it
    /// goes on the air: SignCounter (4 octets) then the 64 most significant bits of
    /// AES-CMAC_CSRK(message || SignCounter), both least significant octet first.
    /// Unlike the rest of the toolbox, the CSRK and the message are in PDU order (least
    /// significant first), as SMP distributes the key and ATT carries the message.
    public static func signature(csrk: [UInt8], message: [UInt8], counter: UInt32) throws -> [UInt8] {
        let count = (0..<4).map { UInt8(truncatingIfNeeded: counter >> (8 * $0)) }
        let mac = try BLECrypto.cmac(key: csrk.reversed(), (message + count).reversed())
        return count + mac[..<8].reversed()
    }

    /// Verifies a signed PDU (`message` followed by its 12-octet signature) under `csrk`;
    /// returns the SignCounter it carries when the signature holds, nil otherwise (too
    /// short, or a signature that does not verify). The comparison takes the same time
    /// wherever the first difference is.
    public static func verifySignature(csrk: [UInt8], signedMessage: [UInt8]) -> UInt32? {
        guard signedMessage.count >= signatureLength else { return nil }
        let split = signedMessage.count - signatureLength
        let sent = signedMessage[split...]
        let counter = sent.prefix(4).reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        guard let expected = try? signature(csrk: csrk, message: Array(signedMessage[..<split]), counter: counter) else { return nil }
        return zip(expected, sent).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0 ? counter : nil
    }
}

/// A P-256 key pair for LE Secure Connections (§2.3.5.6.1).
public struct P256KeyPair: Sendable {
    /// The private scalar, 32 octets, most significant first.
    let scalar: [UInt8]
    /// The public key's X and Y, each 32 octets, most significant first.
    public let publicKey: (x: [UInt8], y: [UInt8])

    /// The key whose 32-octet scalar is `privateKey` (most significant octet first);
    /// throws when the scalar is 0 or not below the group order.
    public init(privateKey: [UInt8]) throws {
        let key = try P256.KeyAgreement.PrivateKey(rawRepresentation: privateKey)
        let raw = [UInt8](key.publicKey.rawRepresentation)
        scalar = privateKey
        publicKey = (Array(raw[..<32]), Array(raw[32...]))
    }

    /// Draws 32-octet scalars from `random` until one is a valid key (the chance of
    /// a retry is about 2^-32); gives up after 64 draws.
    public init(random: () -> [UInt8]) throws {
        for _ in 0..<64 {
            if let k = try? P256KeyPair(privateKey: random()) {
                self = k
                return
            }
        }
        throw P256Error.noValidScalar
    }

    /// The DHKey (the shared point's X, 32 octets). Throws `P256Error.invalidPublicKey`
    /// for a peer key that is not a point on P-256 (the invalid-curve attack: a
    /// point off the curve leaks the private key a few bits at a time).
    public func dhKey(peerX: [UInt8], peerY: [UInt8]) throws -> [UInt8] {
        guard peerX.count == 32, peerY.count == 32,
              let peer = try? P256.KeyAgreement.PublicKey(rawRepresentation: peerX + peerY)
        else { throw P256Error.invalidPublicKey }
        let secret = try P256.KeyAgreement.PrivateKey(rawRepresentation: scalar).sharedSecretFromKeyAgreement(with: peer)
        return secret.withUnsafeBytes { [UInt8]($0) }
    }
}

public enum P256Error: Error, Equatable, Sendable {
    case invalidPublicKey
    case noValidScalar
}
