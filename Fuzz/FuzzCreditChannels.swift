// libFuzzer target: one link's credit-based channels (`CreditBasedChannels`, both
// modes) driven by a peer that sends anything. The input is a series of operations,
// each an op byte then its bytes: 0 a signaling command (length byte, bytes), 1 a
// K-frame on a CID (CID byte, length byte, bytes), 2 an SDU we send (CID byte, two
// length bytes), 3 the application consuming an SDU (CID byte, frame count byte), 4
// our close (CID byte), 5 our LE connection request (SPSM byte), 6 our enhanced
// request (SPSM byte, count byte), 7 our reconfiguration (CID byte, MTU and MPS two
// bytes each), 8 the link's security changing (one byte). SPSM 0x81 asks for an
// encrypted link. Nothing may trap; every K-frame we send fits the peer's MPS;
// credits we hold or grant never pass 65535; an enhanced channel's MTU and MPS stay
// at 64 or more. K-frames arrive as slices of the input, with its indices, as the L2CAP
// host hands them on (a slice of the ACL data).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    var link = CreditBasedChannels()
    link.listen(spsm: 0x80, CreditBasedParameters(mtu: 100, mps: 23, initialCredits: 2))
    link.listen(spsm: 0x81, CreditBasedParameters(mtu: 100, mps: 64, initialCredits: 1), security: ChannelSecurity(level: .encrypted))
    var i = 0
    func take(_ n: Int) -> [UInt8] {
        let end = Swift.min(bytes.count, i + n)
        defer { i = end }
        return Array(bytes[i..<end])
    }
    func slice(_ n: Int) -> ArraySlice<UInt8> {
        let end = Swift.min(bytes.count, i + n)
        defer { i = end }
        return bytes[i..<end]
    }
    while i < bytes.count {
        let op = take(1)[0] % 9
        var events: [CreditBasedChannels.Event] = []
        switch op {
        case 0:
            let n = Int(take(1).first ?? 0)
            if let cmd = try? SignalingCommand(bytes: take(n)) { events = link.receive(cmd) ?? [] }
        case 1:
            let cid = 0x40 + UInt16((take(1).first ?? 0) & 0x3F)
            let n = Int(take(1).first ?? 0)
            events = link.receive(slice(n), on: cid) ?? []
        case 2:
            let cid = 0x40 + UInt16((take(1).first ?? 0) & 0x3F)
            let l = take(2)
            let n = l.count == 2 ? Int(l[0]) | Int(l[1] & 0x07) << 8 : 0
            events = (try? link.send(Array(repeating: 0xA5, count: n), on: cid, token: 1)) ?? []
        case 3:
            let cid = 0x40 + UInt16((take(1).first ?? 0) & 0x3F)
            events = link.consumed(frames: Int(take(1).first ?? 0), on: cid)
        case 4:
            events = link.disconnect(0x40 + UInt16((take(1).first ?? 0) & 0x3F))
        case 5:
            events = link.connect(spsm: UInt16(take(1).first ?? 0), CreditBasedParameters()).map { [.signal($0.bytes)] } ?? []
        case 6:
            let spsm = UInt16(take(1).first ?? 0)
            events = link.connectEnhanced(spsm: spsm, CreditBasedParameters(), count: Int(take(1).first ?? 0) % 7).map { [.signal($0.bytes)] } ?? []
        case 7:
            let cid = 0x40 + UInt16((take(1).first ?? 0) & 0x3F)
            let v = take(4) + [0, 0, 0, 0]
            if case let .success(r) = link.reconfigure([cid], mtu: UInt16(v[0]) | UInt16(v[1]) << 8, mps: UInt16(v[2]) | UInt16(v[3]) << 8) {
                events = [.signal(r.bytes)]
            }
        default:
            let b = take(1).first ?? 0
            link.linkSecurity = LinkSecurityState(encrypted: b & 1 != 0, authenticated: b & 2 != 0, keySize: Int(b >> 3) % 17)
        }
        for e in events {
            if case let .frame(remote, payload, _) = e {
                let mps = link.channels.values.first { $0.remoteCID == remote }?.remote.mps ?? 65533
                precondition(payload.count <= Int(mps), "K-frame over the peer's MPS")
            }
        }
        for ch in link.channels.values {
            precondition(ch.sendCredits <= 65535 && ch.receiveCredits <= 65535)
            if ch.enhanced { precondition(ch.local.mtu >= 64 && ch.local.mps >= 64 && ch.remote.mtu >= 64 && ch.remote.mps >= 64) }
        }
    }
    return 0
}
