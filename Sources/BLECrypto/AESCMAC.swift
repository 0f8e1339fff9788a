// The Bluetooth security toolbox's AES functions (Core Specification v5.4, Vol 3,
// Part H, §2.2): e (AES-128 of one block) and AES-CMAC (RFC 4493), used by the
// GATT Database Hash (Vol 3, Part G, §7.3) and, later, by SMP.

import _CryptoExtras
import Crypto

public enum BLECryptoError: Error, Equatable, Sendable {
    /// AES-128 keys and blocks are 16 bytes.
    case wrongLength(key: Int, block: Int)
}

public enum BLECrypto {
    /// e(key, plaintext): AES-128 of one 16-byte block, big-endian as in RFC 4493.
    public static func e(key: [UInt8], _ block: [UInt8]) throws -> [UInt8] {
        guard key.count == 16, block.count == 16 else { throw BLECryptoError.wrongLength(key: key.count, block: block.count) }
        var b = block
        try AES.permute(&b, key: SymmetricKey(data: key))
        return b
    }

    /// AES-CMAC (RFC 4493) of `message` under the 16-byte `key`, most significant byte first.
    /// (The key is made once; swift-crypto's block function still expands it for each
    /// block, as its CBC mode does: it offers no expanded key to keep.)
    public static func cmac(key: [UInt8], _ message: [UInt8]) throws -> [UInt8] {
        guard key.count == 16 else { throw BLECryptoError.wrongLength(key: key.count, block: 16) }
        let k = SymmetricKey(data: key)
        func e(_ block: [UInt8]) throws -> [UInt8] {
            var b = block
            try AES.permute(&b, key: k)
            return b
        }
        let l = try e([UInt8](repeating: 0, count: 16))
        let k1 = shiftXor(l), k2 = shiftXor(k1)
        let n = Swift.max(1, (message.count + 15) / 16)
        let complete = !message.isEmpty && message.count % 16 == 0
        var last = Array(message[((n - 1) * 16)...])
        if complete {
            last = zip(last, k1).map { $0 ^ $1 }
        } else {
            last.append(0x80)
            last += [UInt8](repeating: 0, count: 16 - last.count)
            last = zip(last, k2).map { $0 ^ $1 }
        }
        var x = [UInt8](repeating: 0, count: 16)
        for i in 0..<(n - 1) {
            x = try e(zip(x, message[(i * 16)..<(i * 16 + 16)]).map { $0 ^ $1 })
        }
        return try e(zip(x, last).map { $0 ^ $1 })
    }

    /// Subkey step: shift left one bit, xor 0x87 into the last byte if a bit fell off.
    static func shiftXor(_ b: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 16)
        for i in 0..<16 { out[i] = b[i] << 1 | (i < 15 ? b[i + 1] >> 7 : 0) }
        if b[0] & 0x80 != 0 { out[15] ^= 0x87 }
        return out
    }
}
