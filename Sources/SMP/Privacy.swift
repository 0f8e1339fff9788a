// Resolvable private addresses (Vol 6, Part B, §1.3.2.2; Vol 3, Part H, §2.2.2):
// prand's two most significant bits are 0b01, hash = ah(IRK, prand), and the
// address is prand || hash (hash in the three least significant octets).

import BLECrypto
import HCI

public enum ResolvablePrivateAddress {
    /// Whether `address` is a resolvable private address (top bits 0b01).
    public static func isResolvable(_ address: BluetoothAddress) -> Bool { address.octet(5) >> 6 == 0b01 }

    /// Whether `irk` (16 octets, least significant first) resolves `address`.
    public static func resolves(_ address: BluetoothAddress, irk: [UInt8]) -> Bool {
        guard isResolvable(address), irk.count == 16 else { return false }
        let prand = Array(address.bytes[3...5].reversed())
        guard let hash = try? SecurityToolbox.ah(irk: irk.reversed(), prand: prand) else { return false }
        return hash == Array(address.bytes[0...2].reversed())
    }

    /// A new resolvable private address under `irk` with a random prand from `random`.
    public static func generate(irk: [UInt8], random: SecurityRandom) -> BluetoothAddress? {
        for _ in 0..<16 {
            var prand = random.bytes(3)
            prand[0] = prand[0] & 0x3F | 0x40
            // prand's random part must be neither all zeros nor all ones.
            let part = [prand[0] & 0x3F, prand[1], prand[2]]
            if part == [0, 0, 0] || part == [0x3F, 0xFF, 0xFF] { continue }
            guard irk.count == 16, let hash = try? SecurityToolbox.ah(irk: irk.reversed(), prand: prand) else { return nil }
            return try? BluetoothAddress(wireBytes: Array((prand + hash).reversed()))
        }
        return nil
    }
}
