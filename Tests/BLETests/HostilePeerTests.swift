// The whole host under a hostile peer, seeded: a raw HCI host on the virtual radio
// connects to our peripheral (a GATT server with EATT, a published L2CAP channel,
// pairing enabled) and sends thousands of frames drawn from a seeded generator: ATT,
// LE signaling and SMP PDUs of every opcode with plausible and implausible fields,
// K-frames on the channels our host grants (ATT PDUs on its enhanced ATT bearers),
// frames for unknown CIDs, L2CAP lengths
// that lie, fragments out of place. Between batches the peer reads one characteristic
// no random frame touches; it must get the right value every time (our host neither
// crashed, nor hung, nor dropped the link). Every frame our host sends must be one
// well-formed L2CAP frame, and every ATT PDU no longer than the ATT_MTU in force.
// A failure names the seed and the frame; the same seed sends the same frames.

import BLE
import BLETesting
import Foundation
import HCI
import L2CAP
import Synchronization
import Testing

/// What the raw peer receives: whole L2CAP frames (reassembled), its link's events.
private enum PeerInput: Sendable {
    case connected(UInt16)
    case frame(ChannelID, [UInt8])
    case malformed(String)
    case disconnected(HCIStatus)
    /// The wait for the probe of this round ran out.
    case timeout(round: Int)
    /// Encryption Change.
    case encrypted(HCIStatus, on: Bool)
}

func le16(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }

/// Draws the hostile peer's frames. `granted` are the channels our host accepted (its
/// CID and the peer's), learned from its answers, so later frames reach real channels.
struct HostileTraffic {
    var rng: SeededGenerator
    let probe: UInt16
    /// A channel our host accepted: its CID and the peer's, whether it is an enhanced
    /// ATT bearer (SPSM 0x0027), and our host's MTU and MPS on it.
    struct Granted { var ours: UInt16, theirs: UInt16, eatt: Bool, mtu: UInt16, mps: UInt16 }
    var granted: [Granted] = []
    /// How many channels our host granted in all, LE-mode and EATT (`granted` keeps the last 16).
    var grants = (le: 0, eatt: 0)
    /// The peer's own CIDs in its channel requests.
    var nextSourceCID: UInt16 = 0x0040
    /// The source CIDs of each channel request and whether it asked for EATT, by its
    /// identifier (the first of requests sharing one: answers come in order).
    var requested: [UInt8: (sources: [UInt16], eatt: Bool)] = [:]

    init(seed: UInt64, probe: UInt16) {
        rng = SeededGenerator(seed)
        self.probe = probe
    }


    /// Any handle but the probe's: the database's own, the edges, anything.
    mutating func handle() -> UInt16 {
        let h: UInt16 = rng.chance(0.7) ? UInt16.random(in: 1...0x20, using: &rng) : rng.pick([0, 0xFFFF, 0x7FFF, UInt16.random(in: .min ... .max, using: &rng)])
        return h == probe ? 0 : h
    }

    mutating func value() -> [UInt8] { rng.bytes(rng.pick([0, 1, 2, 20, rng.count(upTo: 600)])) }

    mutating func uuid() -> [UInt8] {
        rng.pick([le16(0x2800), le16(0x2801), le16(0x2802), le16(0x2803), le16(0x2902), le16(UInt16.random(in: .min ... .max, using: &rng)),
              rng.bytes(16), rng.bytes(rng.count(upTo: 18))])
    }

    mutating func range() -> [UInt8] {
        rng.chance(0.5) ? le16(0x0001) + le16(0xFFFF) : le16(handle()) + le16(handle())
    }

    mutating func att() -> [UInt8] {
        let opcode: UInt8 = rng.chance(0.9)
            ? rng.pick([0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12, 0x13,
                    0x16, 0x17, 0x18, 0x19, 0x1B, 0x1D, 0x1E, 0x20, 0x21, 0x23, 0x52, 0xD2])
            : rng.byte()
        var body: [UInt8]
        switch opcode {
        case 0x02: body = le16(rng.pick([0, 22, 23, 24, 64, 185, 247, 517, 0xFFFF]))
        case 0x04: body = range()
        case 0x06: body = range() + le16(rng.pick([0x2800, 0x2801, UInt16.random(in: .min ... .max, using: &rng)])) + value()
        case 0x08, 0x10: body = range() + uuid()
        case 0x0A: body = le16(handle())
        case 0x0C: body = le16(handle()) + le16(rng.pick([0, 1, 4, 22, 600, 0xFFFF]))
        case 0x0E, 0x20: body = (0..<rng.pick([0, 1, 2, 5, 40])).flatMap { _ in le16(handle()) }
        case 0x12, 0x52, 0x1B, 0x1D: body = le16(handle()) + value()
        case 0x16: body = le16(handle()) + le16(rng.pick([0, 1, 22, 512, 0xFFFF])) + value()
        case 0x18: body = [rng.pick([0, 1, 2, rng.byte()])]
        case 0xD2: body = le16(handle()) + value() + rng.bytes(12)
        case 0x23: body = (0..<rng.pick([1, 2, 3])).flatMap { _ in le16(handle()) + le16(UInt16(rng.count(upTo: 30))) + rng.bytes(rng.count(upTo: 30)) }
        default: body = rng.bytes(rng.pick([0, 1, 4, rng.count(upTo: 40)]))
        }
        return mutated([opcode] + body)
    }

    mutating func signaling() -> [UInt8] {
        let code: UInt8 = rng.chance(0.9) ? rng.pick([0x01, 0x06, 0x07, 0x0A, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1A]) : rng.byte()
        let channel = granted.isEmpty ? Granted(ours: 0x0040, theirs: 0x0040, eatt: false, mtu: 23, mps: 23) : rng.pick(granted)
        let other = rng.pick([0, 1, 0x0004, 0x003F, 0xFFFF, UInt16.random(in: 0x40...0x7F, using: &rng)])
        let (ours, theirs) = (rng.chance(0.8) ? channel.ours : other, rng.chance(0.8) ? channel.theirs : other)
        // (Never 1 or 2: those are the fixed channel requests', whose answers must be theirs.)
        let identifier: UInt8 = rng.chance(0.1) ? 0 : max(3, rng.byte())
        var data: [UInt8]
        switch code {
        case 0x06, 0x07: data = le16(ours) + le16(theirs)
        case 0x12: data = le16(6) + le16(rng.pick([6, 40, 3200, 0xFFFF])) + le16(rng.pick([0, 499, 500])) + le16(rng.pick([10, 3200, 0]))
        case 0x14:
            let source = sourceCID()
            if requested[identifier] == nil { requested[identifier] = ([source], false) }
            // (An LE-mode channel to 0x0027 is accepted, then closed: EATT is enhanced mode only.)
            data = le16(rng.chance(0.8) ? 0x0080 : rng.pick([0, 0x0001, 0x0027, 0x0081, 0x00FF, 0x0100])) + le16(source)
                + le16(rng.pick([0, 22, 23, 100, 0xFFFF])) + le16(rng.pick([0, 22, 23, 100, 65533, 0xFFFF])) + le16(rng.pick([0, 1, 10, 0xFFFF]))
        case 0x16: data = le16(theirs) + le16(rng.pick([0, 1, 10, 0x8000, 0xFFFF]))
        case 0x17:
            let sources = (0..<rng.pick([0, 1, 2, 5, 6])).map { _ in sourceCID() }
            let spsm: UInt16 = rng.pick([0x0080, 0x0080, 0x0027, 0x0027, 0x0081])
            if requested[identifier] == nil { requested[identifier] = (sources, spsm == 0x0027) }
            data = le16(spsm) + le16(rng.pick([0, 63, 64, 100, 0xFFFF])) + le16(rng.pick([0, 63, 64, 65533]))
                + le16(rng.pick([0, 1, 0xFFFF])) + sources.flatMap(le16)
        case 0x19: data = le16(rng.pick([0, 64, 100, 0xFFFF])) + le16(rng.pick([0, 64, 65533])) + (0..<rng.pick([0, 1, 2])).flatMap { _ in le16(theirs) }
        default: data = rng.bytes(rng.pick([0, 2, 4, 8, rng.count(upTo: 30)]))
        }
        var length = UInt16(data.count)
        if rng.chance(0.1) { length = rng.pick([0, length &+ 1, length &- 1, 0xFFFF]) }
        return mutated([code, identifier] + le16(length) + data)
    }

    mutating func sourceCID() -> UInt16 {
        guard rng.chance(0.85) else { return rng.pick([0, 0x0001, 0x0005, 0xFFFF, nextSourceCID &- 1]) }
        return validSourceCID()
    }

    mutating func validSourceCID() -> UInt16 {
        defer { nextSourceCID = nextSourceCID >= 0x007F ? 0x0040 : nextSourceCID + 1 }
        return nextSourceCID
    }

    mutating func smp() -> [UInt8] {
        let code: UInt8 = rng.chance(0.9) ? UInt8.random(in: 0x01...0x0E, using: &rng) : rng.byte()
        let body: [UInt8]
        switch code {
        case 0x01, 0x02:
            body = [rng.pick([0, 1, 3, 4, 5, rng.byte()]), rng.pick([0, 1, 2]), rng.pick([0x00, 0x01, 0x05, 0x09, 0x0D, 0x2D, rng.byte()]),
                    rng.pick([0, 6, 7, 16, 17, rng.byte()]), rng.byte(), rng.byte()]
        case 0x03, 0x04, 0x06, 0x0D: body = rng.bytes(16)
        case 0x05: body = [rng.byte()]
        case 0x07: body = rng.bytes(10)
        case 0x08: body = rng.bytes(16)
        case 0x09: body = [rng.pick([0, 1, rng.byte()])] + rng.bytes(6)
        case 0x0A: body = rng.bytes(16)
        case 0x0B: body = [rng.byte()]
        case 0x0C: body = rng.bytes(64)
        case 0x0E: body = [rng.pick([0, 1, 2, 3, 4, rng.byte()])]
        default: body = rng.bytes(rng.count(upTo: 70))
        }
        return mutated([code] + body)
    }

    /// A K-frame on a channel our host granted (or near one): an SDU length on most;
    /// on an enhanced ATT bearer mostly a whole SDU holding an ATT PDU (cut to fit our
    /// host's MTU and one K-frame).
    mutating func kFrame() -> (UInt16, [UInt8]) {
        if let bearer = granted.filter(\.eatt).randomElement(using: &rng), rng.chance(0.6) {
            let pdu = Array(att().prefix(Int(min(bearer.mtu, bearer.mps &- 2))))
            return (bearer.ours, le16(UInt16(pdu.count)) + pdu)
        }
        let cid = granted.isEmpty || rng.chance(0.1) ? UInt16.random(in: 0x40...0x7F, using: &rng) : rng.pick(granted).ours
        let sdu = UInt16(rng.pick([0, 1, 10, 100, 0xFFFF, rng.count(upTo: 300)]))
        return (cid, (rng.chance(0.7) ? le16(sdu) : []) + rng.bytes(rng.pick([0, 1, 20, rng.count(upTo: 260)])))
    }

    /// Sometimes cut short, sometimes padded, rarely replaced altogether.
    mutating func mutated(_ pdu: [UInt8]) -> [UInt8] {
        if rng.chance(0.15) { return Array(pdu.prefix(rng.count(upTo: pdu.count))) }
        if rng.chance(0.1) { return pdu + rng.bytes(1 + rng.count(upTo: 30)) }
        if rng.chance(0.03) { return rng.bytes(rng.count(upTo: 80)) }
        return pdu
    }

    /// How many frames were drawn.
    var drawn = 0

    /// The next frame as the ACL packets that carry it (the peer's buffers hold 251 bytes),
    /// and its ATT PDU when it is one that arrives whole. The first two ask for channels
    /// our host grants (one LE-mode to 0x0080, two enhanced to EATT's 0x0027), and every
    /// 250 frames two more enhanced ones (the hostile frames soon close them), so every
    /// seed reaches the channel paths and the enhanced ATT bearers.
    mutating func next(handle: UInt16) -> (packets: [ACLDataPacket], att: [UInt8]?) {
        drawn += 1
        if drawn == 1 || drawn % 250 == 2 {
            let request: [UInt8]
            if drawn == 1 {
                let source = validSourceCID()
                requested[1] = ([source], false)
                request = [0x14, 1] + le16(10) + le16(0x0080) + le16(source) + le16(100) + le16(100) + le16(10)
            } else {
                let sources = [validSourceCID(), validSourceCID()]
                requested[2] = (sources, true)
                request = [0x17, 2] + le16(12) + le16(0x0027) + le16(100) + le16(100) + le16(10) + sources.flatMap(le16)
            }
            return ([ACLDataPacket(handle: handle, boundary: .firstNonFlushable, data: le16(UInt16(request.count)) + le16(0x0005) + request)], nil)
        }
        let channel: UInt16, payload: [UInt8]
        switch Int.random(in: 0..<100, using: &rng) {
        case 0..<40: (channel, payload) = (0x0004, att())
        case 40..<65: (channel, payload) = (0x0005, signaling())
        case 65..<80: (channel, payload) = (0x0006, smp())
        case 80..<95: (channel, payload) = kFrame()
        default: (channel, payload) = (rng.pick([0x0000, 0x0001, 0x0002, 0x0003, 0x0007, 0x003F, 0x0080, 0xFFFF]), rng.bytes(rng.count(upTo: 40)))
        }
        var length = UInt16(payload.count)
        var intact = true
        if rng.chance(0.05) { length = rng.pick([0, length &+ 1, length &+ 300, 0xFFFF, length &- 1]); intact = length == UInt16(payload.count) }
        let frame = le16(length) + le16(channel) + payload
        var pieces: [[UInt8]] = []
        var rest = frame[...]
        let cut = rng.chance(0.2) ? max(1, rng.count(upTo: frame.count)) : 251
        while !rest.isEmpty {
            let n = min(rest.count, pieces.isEmpty ? cut : 251)
            pieces.append(Array(rest.prefix(n)))
            rest = rest.dropFirst(n)
        }
        var packets = pieces.enumerated().map { i, piece in
            ACLDataPacket(handle: handle, boundary: i == 0 ? .firstNonFlushable : .continuing, data: piece)
        }
        // A continuation without its start, or a start whose rest never comes.
        if rng.chance(0.03) { packets[0] = ACLDataPacket(handle: handle, boundary: .continuing, data: packets[0].data); intact = false }
        if packets.count > 1, rng.chance(0.05) { packets.removeLast(); intact = false }
        return (packets, intact && channel == 0x0004 ? payload : nil)
    }

    /// Learns the channels our host granted from its answers.
    mutating func learn(_ channel: ChannelID, _ payload: [UInt8]) {
        guard channel == .leSignaling, payload.count >= 4 else { return }
        let data = payload.dropFirst(4)
        func u16(_ i: Int) -> UInt16 { UInt16(data[data.startIndex + i]) | UInt16(data[data.startIndex + i + 1]) << 8 }
        let request = requested.removeValue(forKey: payload[1]) ?? ([], false)
        switch payload[0] {
        case 0x15 where data.count == 10 && u16(8) == 0 && u16(0) != 0 && request.sources.count == 1:
            remember(Granted(ours: u16(0), theirs: request.sources[0], eatt: false, mtu: u16(2), mps: u16(4)))
        case 0x18 where data.count >= 8:
            // Every non-zero Destination CID is a channel, whatever the result says of the others.
            for (n, i) in stride(from: 8, to: data.count - 1, by: 2).enumerated() where u16(i) != 0 && n < request.sources.count {
                remember(Granted(ours: u16(i), theirs: request.sources[n], eatt: request.eatt, mtu: u16(0), mps: u16(2)))
            }
        default: break
        }
    }

    private mutating func remember(_ channel: Granted) {
        if channel.eatt { grants.eatt += 1 } else { grants.le += 1 }
        granted.removeAll { $0.ours == channel.ours }
        granted.append(channel)
        if granted.count > 16 { granted.removeFirst() }
    }
}

@Suite(.timeLimit(.minutes(3))) struct HostilePeerTests {
    static let server = BluetoothAddress("C0:00:00:00:0B:01")!
    static let peerAddress = BluetoothAddress("C0:00:00:00:0B:02")!

    @Test(arguments: SeededGenerator.seeds)
    func seededHostileTrafficNeverStopsTheServer(seed: UInt64) async throws {
        let radio = VirtualRadio()
        // The peer is bonded (a Secure Connections LTK both sides hold) and encrypts the
        // link before its traffic: enhanced ATT bearers are granted on an encrypted link
        // only (Vol 3, Part G, §5.3.2).
        let ltk = (0..<16).map { UInt8(truncatingIfNeeded: Int(seed) &+ $0) }
        let bond = Bond(address: Self.peerAddress, addressType: .public,
                        keys: PairingKeys(peerLTK: LongTermKey(key: ltk, authenticated: false, secureConnections: true)))
        let host = BluetoothHost(transport: await radio.makeController(address: Self.server), logger: Bench.logger,
                                 security: SecurityOptions(store: InMemoryBondStore([bond]), random: .seeded(seed)), enhancedATT: true)
        try await host.start()
        let probeValue: [UInt8] = [0xC0, 0xFF, 0xEE, UInt8(truncatingIfNeeded: seed)]
        let probe = Characteristic(uuid: uuidB, properties: [.read], permissions: .read, value: probeValue)
        let open = Characteristic(uuid: uuidC, properties: [.read, .write, .writeWithoutResponse, .notify, .indicate], permissions: .readWrite, value: [1, 2, 3])
        try await host.peripheral.add(Service(uuid: uuidA, characteristics: [probe, open]))
        let probeHandle = try await host.peripheral.handles(of: probe).value
        // Channels the peer opens are taken and read until they end.
        let published = await host.publishChannel(spsm: 0x0080)
        let readers = Task {
            await withTaskGroup(of: Void.self) { g in
                for await channel in published {
                    g.addTask { do { for try await _ in channel.sdus {} } catch {} }
                }
                g.cancelAll()
            }
        }
        try await host.peripheral.startAdvertising(AdvertisingData())

        // The raw peer: reassembles what our host sends, checks its framing.
        let (inputs, input) = AsyncStream<PeerInput>.makeStream()
        let reassembler = Mutex(Reassembler())
        let peer = HCIController(transport: await radio.makeController(address: Self.peerAddress), logger: Bench.logger)
        await peer.setInboundSink { i in
            switch i {
            case let .event(.le(.connectionComplete(c))): input.yield(.connected(c.connectionHandle))
            case let .event(.disconnectionComplete(d)): input.yield(.disconnected(d.reason))
            case let .event(.encryptionChange(e)): input.yield(.encrypted(e.status, on: e.encryptionEnabled != 0))
            case let .event(.encryptionChangeV2(e)): input.yield(.encrypted(e.status, on: e.encryptionEnabled != 0))
            case let .acl(p):
                let (frame, errors) = reassembler.withLock { $0.receive(p) }
                for e in errors { input.yield(.malformed("\(e)")) }
                if let frame { input.yield(.frame(frame.channel, frame.payload)) }
            default: break
            }
        }
        _ = try await peer.initialize()
        try await peer.send(LECreateConnection(peerAddressType: .public, peerAddress: Self.server))
        var received = inputs.makeAsyncIterator()
        guard case let .connected(handle)? = await received.next() else { Issue.record("seed \(seed): no connection"); return }
        try await peer.send(LEEnableEncryption(connectionHandle: handle, randomNumber: 0, encryptedDiversifier: 0, longTermKey: ltk))
        let encryptionTimer = Task { try await Task.sleep(for: .seconds(5)); input.yield(.timeout(round: -1)) }
        let encryption = await received.next()
        encryptionTimer.cancel()
        guard case .encrypted(.success, on: true)? = encryption else { Issue.record("seed \(seed): the link was not encrypted: \(String(describing: encryption))"); return }

        var traffic = HostileTraffic(seed: seed, probe: probeHandle)
        // The client MTUs of the Exchange MTU Requests that arrived whole, in order: each
        // Exchange MTU Response answers the first and sets ATT_MTU.
        var mtu = 23, exchanges: [Int] = []
        var sent = 0, probes = 0
        var answers: [ChannelID: Int] = [:]
        /// Checks what our host sent; true when it is the probe's answer.
        func check(_ i: PeerInput?, frame n: Int) -> Bool {
            switch i {
            case let .frame(channel, payload)?:
                traffic.learn(channel, payload)
                answers[channel, default: 0] += 1
                guard channel == .att, let opcode = payload.first else { return false }
                #expect(payload.count <= mtu, "seed \(seed), after frame \(n): \(payload.count)-byte ATT PDU, ATT_MTU \(mtu): \(payload)")
                if opcode == 0x03, payload.count == 3, !exchanges.isEmpty {
                    mtu = max(23, min(exchanges.removeFirst(), Int(payload[1]) | Int(payload[2]) << 8))
                }
                return payload == [0x0B] + probeValue
            case let .malformed(what)?:
                Issue.record("seed \(seed), after frame \(n): our host sent \(what)")
            case let .disconnected(reason)?:
                Issue.record("seed \(seed), after frame \(n): the link went down (\(reason))")
            case .connected?, .timeout?, .encrypted?, nil: break
            }
            return false
        }

        for round in 0..<40 {
            for _ in 0..<50 {
                let (packets, att) = traffic.next(handle: handle)
                if let att, att.count == 3, att[0] == 0x02 { exchanges.append(Int(att[1]) | Int(att[2]) << 8) }
                for p in packets { try await peer.sendACL(p) }
                sent += 1
            }
            // The probe: a Read Request no random frame sends; its answer must come.
            try await peer.sendACL(ACLDataPacket(handle: handle, boundary: .firstNonFlushable,
                                                 data: le16(3) + le16(0x0004) + [0x0A] + le16(probeHandle)))
            probes += 1
            let timer = Task { try await Task.sleep(for: .seconds(5)); input.yield(.timeout(round: round)) }
            var answered = false
            while let i = await received.next() {
                if case let .timeout(r) = i { if r == round { break } else { continue } }
                if check(i, frame: sent) { answered = true; break }
            }
            timer.cancel()
            guard answered else {
                Issue.record("seed \(seed), round \(round): no answer to the probe after frame \(sent)")
                break
            }
        }
        // The frames reached every layer: ATT answered more than the probes, signaling
        // and SMP answered, and channels were granted (and then sent K-frames to).
        #expect(probes == 40 && answers[.att, default: 0] > probes)
        #expect(answers[.leSignaling, default: 0] > 0 && answers[.securityManager, default: 0] > 0)
        // (Whether our host answers on an enhanced bearer before the hostile frames close
        // it depends on timing: its answers there are not required.)
        #expect(traffic.grants.le > 0 && traffic.grants.eatt > 0, "seed \(seed): \(traffic.grants)")

        // The link still ends in order, and the host closes.
        let events = host.connectionEvents()
        try await peer.send(Disconnect(connectionHandle: handle))
        let gone = await firstElement(events.filter { if case .disconnected = $0 { return true }; return false }, within: .seconds(5))
        #expect(gone != nil)
        readers.cancel()
        await host.close()
        await peer.close()
    }
}
