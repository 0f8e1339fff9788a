// libFuzzer target: two pairing sessions (`PairingSession`, initiator and responder)
// wired back to back, with the input steering what happens to each PDU in flight
// and to the prompts. The first bytes choose both sides' configurations (IO
// capabilities, SC, MITM, key sizes, keys, OOB data either way, a legacy TK,
// keypress notifications, link key derivation); then per PDU one op byte: deliver,
// deliver with one byte changed (position, xor), drop it, deliver it to its sender,
// inject a PDU of the input's bytes, answer a pending prompt (value bytes), fail
// encryption, time out a side. Nothing may trap; each side ends at most once and
// says nothing after; every PDU a session sends decodes; when both complete with the
// same key size, they hold the same encryption key (different sizes only in LE Secure
// Connections, whose checks do not cover the size fields).
import BLECrypto

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    var i = 0
    func take(_ n: Int) -> [UInt8] {
        let end = Swift.min(bytes.count, i + n)
        defer { i = end }
        return Array(bytes[i..<end])
    }
    func byte() -> UInt8 { take(1).first ?? 0 }
    // OOB data for each side, made once (a P-256 key pair each).
    let oob = [try? LocalOOBData(address: .zero, addressType: .random, random: .seeded(11)),
               try? LocalOOBData(address: .zero, addressType: .public, random: .seeded(12))]
    func config(_ side: Int) -> PairingConfiguration {
        let b = take(4) + [0, 0, 0, 0]
        let extra = b[3]
        let out = OOBConfiguration(local: extra & 4 != 0 ? oob[side] : nil, peer: extra & 8 != 0 ? oob[1 - side]?.shared : nil,
                                   legacyTemporaryKey: extra & 16 != 0 ? Array(repeating: extra, count: 16) : nil)
        return PairingConfiguration(
            ioCapability: IOCapability(rawValue: b[0] % 6), bonding: b[1] & 1 != 0, mitm: b[1] & 2 != 0,
            secureConnections: b[1] & 4 != 0, secureConnectionsOnly: b[1] & 8 != 0, maximumKeySize: 7 + b[2] % 10,
            minimumKeySize: 7 + (b[2] >> 4) % 10, confirmJustWorks: b[1] & 16 != 0,
            keys: KeyDistribution(rawValue: b[1] >> 5),
            identity: b[1] & 0x80 != 0 ? IdentityKey(irk: Array(repeating: 1, count: 16), address: .zero, addressType: .public) : nil,
            deriveLinkKey: extra & 1 != 0, keypressNotifications: extra & 2 != 0, oob: extra & 28 != 0 ? out : nil)
    }
    let addresses = PairingAddresses(initiator: .zero, initiatorType: .random, responder: .zero, responderType: .public)
    var sides = [
        PairingSession(initiator: true, configuration: config(0), addresses: addresses, random: .seeded(1)),
        PairingSession(initiator: false, configuration: config(1), addresses: addresses, random: .seeded(2)),
    ]
    var ended = [false, false]
    var results: [PairingResult?] = [nil, nil]
    var queue: [(Int, PairingAction)] = sides[0].start().map { (0, $0) }
    var prompts: [Int] = []
    var steps = 0
    func absorb(_ side: Int, _ actions: [PairingAction]) {
        if ended[side] && !actions.isEmpty { fatalError("side \(side) spoke after it ended: \(actions)") }
        queue += actions.map { (side, $0) }
    }
    while steps < 2_000 {
        steps += 1
        if queue.isEmpty {
            guard !prompts.isEmpty, i < bytes.count else { break }
            let side = prompts.removeFirst()
            let v = take(3) + [0, 0, 0]
            let answer: PairingAnswer = v[0] & 1 == 0 ? .confirmed(v[0] & 2 == 0) : .passkey(v[0] & 2 == 0 ? nil : UInt32(v[1]) << 12 | UInt32(v[2]))
            absorb(side, sides[side].answer(answer))
            continue
        }
        let (side, action) = queue.removeFirst()
        let other = 1 - side
        switch action {
        case let .send(pdu):
            let wire = pdu.bytes
            guard (try? SMPPDU(wire)) == pdu else { fatalError("sent PDU does not decode: \(wire)") }
            switch byte() % 8 {
            case 1:
                var m = wire
                let at = Int(byte()) % m.count
                m[at] ^= byte() | 1
                absorb(other, sides[other].receive(m))
            case 2:
                break  // lost
            case 3:
                absorb(side, sides[side].receive(wire))
            case 4:
                absorb(other, sides[other].receive(take(Int(byte() % 70))))
                absorb(other, sides[other].receive(wire))
            case 5:
                absorb(other, sides[other].timedOut())
            default:
                absorb(other, sides[other].receive(wire))
            }
        case .prompt:
            prompts.append(side)
        case .startEncryption:
            let ok = byte() % 8 != 0
            let status: HCIStatus = ok ? .success : .pinOrKeyMissing
            absorb(other, sides[other].encryptionChanged(status: status, enabled: ok))
            absorb(side, sides[side].encryptionChanged(status: status, enabled: ok))
        case .keypress:
            break
        case let .completed(r):
            if ended[side] { fatalError("side \(side) ended twice") }
            ended[side] = true
            results[side] = r
        case .failed:
            if ended[side] { fatalError("side \(side) ended twice") }
            ended[side] = true
        }
    }
    if let a = results[0], let b = results[1], a.keys.encryptionKey(asCentral: true) != nil || b.keys.encryptionKey(asCentral: false) != nil {
        if a.security.keySize != b.security.keySize {
            // LE Secure Connections does not authenticate the Maximum Encryption Key Size
            // of the Pairing Request and Response (the DHKey checks cover AuthReq, the OOB
            // flag and the IO capability, Vol 3, Part H, §2.3.5.6.5): a size changed in
            // flight leaves the sides with keys of different sizes, which the link layer
            // refuses when encryption starts. Legacy pairing's c1 covers both PDUs whole.
            if !(a.security.secureConnections && b.security.secureConnections) {
                fatalError("legacy pairing completed with different key sizes: \(a.security) \(b.security)")
            }
        } else if sides[0].encryptionKey != sides[1].encryptionKey {
            fatalError("both completed with different keys: \(a.security) \(b.security)")
        }
    }
    return 0
}
