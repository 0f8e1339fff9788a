import ATT
import BLETesting
import GATT
import HCI
import L2CAP
import Logging
import Snoop
import Synchronization
import Testing

final class Recorder: Sendable {
    let frames = Mutex<[[UInt8]]>([])
    func add(_ f: [UInt8]) { frames.withLock { $0.append(f) } }
    var all: [[UInt8]] { frames.withLock { $0 } }
}

@Suite(.timeLimit(.minutes(3)))
struct VirtualRadioTests {
    static let logger = Logger(label: "t") { _ in SwiftLogNoOpLogHandler() }
    static let a = BluetoothAddress("00:00:00:00:00:0A")!
    static let b = BluetoothAddress("00:00:00:00:00:0B")!

    /// Two hosts on one radio, each recording its HCI traffic (for the determinism check).
    static func setUp(_ radio: VirtualRadio, record: Recorder? = nil) async throws -> (HCIController, HCIController, ControllerInfo, ControllerInfo) {
        func host(_ addr: BluetoothAddress, _ tag: UInt8) async -> HCIController {
            let vc = await radio.makeController(address: addr)
            let t = RecordingTransport(wrapping: vc, now: { 0 }) { r in
                record?.add([tag, r.direction == .hostToController ? 0 : 1] + (r.packet?.h4Bytes ?? []))
            }
            return HCIController(transport: t, logger: logger)
        }
        let ha = await host(a, 0xA), hb = await host(b, 0xB)
        return (ha, hb, try await ha.initialize(), try await hb.initialize())
    }

    static func firstReport(_ events: HCIEventStream, type: UInt8) async -> LEAdvertisingReport.Report? {
        for await e in events { if case let .le(.advertisingReport(r)) = e, let rp = r.reports.first(where: { $0.eventType == type }) { return rp } }
        return nil
    }

    @Test func initialisesLikeAController() async throws {
        let radio = VirtualRadio()
        let (ha, _, ia, _) = try await Self.setUp(radio)
        #expect(ia.address == Self.a)
        #expect(ia.totalNumLEACLDataPackets == 8 && ia.leACLDataPacketLength == 251)
        await #expect(throws: HCIError.commandFailed(opcode: .leSetPHY, status: .unknownCommand)) {
            try await ha.send(LESetPHY(connectionHandle: 1))
        }
    }

    /// LE Rand: numbers that differ call to call, and the same sequence from the same
    /// controller in every run (seeded with its address), as a replay needs. LE Encrypt:
    /// FIPS-197's example (Appendix C.1), its octets in HCI's order.
    @Test func leRandRepeatsAcrossRunsAndLEEncryptIsAES() async throws {
        func numbers() async throws -> [UInt64] {
            let (ha, hb, _, _) = try await Self.setUp(VirtualRadio())
            var out: [UInt64] = []
            for _ in 0..<3 { out.append(try await ha.send(LERand()).randomNumber) }
            out.append(try await hb.send(LERand()).randomNumber)
            return out
        }
        let first = try await numbers(), second = try await numbers()
        #expect(first == second && Set(first).count == 4, "\(first) \(second)")
        let (ha, _, _, _) = try await Self.setUp(VirtualRadio())
        let key = [UInt8](0...15), plaintext: [UInt8] = [0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0xFF]
        let e = try await ha.send(LEEncrypt(key: key.reversed(), plaintextData: plaintext.reversed()))
        #expect(Array(e.encryptedData.reversed()) == [UInt8](hex: "69c4e0d86a7b0430d8cdb78070b4c55a"))
    }

    /// A 251-byte HCI buffer, 27-octet air PDUs until LE Set Data Length: the peer's
    /// host gets one ACL packet per air PDU, first then continuing fragments. The
    /// length is the sender's: the peer's host hears that it now receives 251 and
    /// still sends 27.
    @Test func dataLengthShapesWhatThePeersHostReceives() async throws {
        let radio = VirtualRadio()
        let (ha, hb, _, _) = try await Self.setUp(radio)
        let got = Mutex<[ACLDataPacket]>([]), changes = Mutex<[LEDataLengthChange]>([])
        await ha.setInboundSink { input in
            switch input {
            case let .acl(p): got.withLock { $0.append(p) }
            case let .event(.le(.dataLengthChange(c))): changes.withLock { $0.append(c) }
            default: break
            }
        }
        let bEvents = await hb.events()
        try await ha.send(LESetAdvertisingEnable(advertisingEnable: true))
        try await hb.send(LECreateConnection(peerAddressType: .public, peerAddress: Self.a))
        var handle: UInt16?
        for await e in bEvents { if case let .le(.connectionComplete(c)) = e { handle = c.connectionHandle; break } }
        let h = try #require(handle)
        let data = (0..<100).map { UInt8($0) }
        try await hb.sendACL(ACLDataPacket(handle: h, boundary: .firstNonFlushable, data: data))
        try await hb.send(ReadRSSI(connectionHandle: h))  // a round trip on the loop: the relay is done
        var pieces = got.withLock { $0 }
        #expect(pieces.map(\.data.count) == [27, 27, 27, 19])
        #expect(pieces.map(\.boundary) == [.firstFlushable, .continuing, .continuing, .continuing])
        #expect(pieces.flatMap(\.data) == data)
        try await hb.send(LESetDataLength(connectionHandle: h, txOctets: 251, txTime: 2120))
        try await hb.send(ReadRSSI(connectionHandle: h))
        let heard = changes.withLock { $0 }
        #expect(heard.map { [$0.maxTxOctets, $0.maxTxTime, $0.maxRxOctets, $0.maxRxTime] } == [[27, 328, 251, 2120]])
        got.withLock { $0 = [] }
        try await hb.sendACL(ACLDataPacket(handle: h, boundary: .firstNonFlushable, data: data))
        try await hb.send(ReadRSSI(connectionHandle: h))
        pieces = got.withLock { $0 }
        #expect(pieces.map(\.data.count) == [100])
        await ha.close(); await hb.close()
    }

    /// LE Write Suggested Default Data Length sets what each side sends on a new link:
    /// the controllers agree as it comes up and both hosts hear LE Data Length Change,
    /// each from its side. The commands refuse what §7.8.33 and §7.8.35 do not allow,
    /// with Rootcanal's statuses (VirtualAgainstRootcanalTests), and Reset forgets.
    @Test func aSuggestedDataLengthStartsALinkLong() async throws {
        let radio = VirtualRadio()
        let (ha, hb, ia, _) = try await Self.setUp(radio)
        let m = try #require(ia.maximumDataLength)
        #expect([m.supportedMaxTxOctets, m.supportedMaxTxTime, m.supportedMaxRxOctets, m.supportedMaxRxTime] == [251, 2120, 251, 2120])
        let initial = try await ha.send(LEReadSuggestedDefaultDataLength())
        #expect(initial.suggestedMaxTxOctets == 27 && initial.suggestedMaxTxTime == 328)
        for (octets, time) in [(26, 328), (252, 2120), (251, 327), (251, 0x4291)] as [(UInt16, UInt16)] {
            await #expect(throws: HCIError.commandFailed(opcode: .leWriteSuggestedDefaultDataLength, status: .invalidCommandParameters)) {
                try await ha.send(LEWriteSuggestedDefaultDataLength(suggestedMaxTxOctets: octets, suggestedMaxTxTime: time))
            }
        }
        try await ha.send(LEWriteSuggestedDefaultDataLength(suggestedMaxTxOctets: 251, suggestedMaxTxTime: 2120))
        // 200 octets asked, 912 µs allowed: 100 octets fit on LE 1M.
        try await hb.send(LEWriteSuggestedDefaultDataLength(suggestedMaxTxOctets: 200, suggestedMaxTxTime: 912))
        let read = try await hb.send(LEReadSuggestedDefaultDataLength())
        #expect(read.suggestedMaxTxOctets == 200 && read.suggestedMaxTxTime == 912)
        let aEvents = await ha.events(), bEvents = await hb.events()
        try await ha.send(LESetAdvertisingEnable(advertisingEnable: true))
        try await hb.send(LECreateConnection(peerAddressType: .public, peerAddress: Self.a))
        /// The link's handle and the lengths its first LE Data Length Change gives.
        func change(_ events: HCIEventStream) async -> [UInt16]? {
            var handle: UInt16?
            for await e in events {
                if case let .le(.connectionComplete(c)) = e { handle = c.connectionHandle }
                if case let .le(.dataLengthChange(c)) = e {
                    return c.connectionHandle == handle ? [c.connectionHandle, c.maxTxOctets, c.maxTxTime, c.maxRxOctets, c.maxRxTime] : nil
                }
            }
            return nil
        }
        #expect(await change(aEvents)?.dropFirst() == [251, 2120, 100, 912])
        let central = await change(bEvents)
        #expect(central?.dropFirst() == [100, 912, 251, 2120])
        let h = try #require(central?.first)
        await #expect(throws: HCIError.commandFailed(opcode: .leSetDataLength, status: .unknownConnectionIdentifier)) {
            try await hb.send(LESetDataLength(connectionHandle: 0x0EFF, txOctets: 251, txTime: 2120))
        }
        await #expect(throws: HCIError.commandFailed(opcode: .leSetDataLength, status: .invalidCommandParameters)) {
            try await hb.send(LESetDataLength(connectionHandle: h, txOctets: 251, txTime: 100))
        }
        try await hb.send(Reset())
        let reset = try await hb.send(LEReadSuggestedDefaultDataLength())
        #expect(reset.suggestedMaxTxOctets == 27 && reset.suggestedMaxTxTime == 328)
        await ha.close(); await hb.close()
    }

    @Test func advertisingReachesScannersWithPathLossRSSI() async throws {
        let radio = VirtualRadio()
        await radio.setDistance(10, between: Self.a, and: Self.b)
        let (ha, hb, _, _) = try await Self.setUp(radio)
        let name = ADStructure.encode([ADStructure(type: 9, data: Array("virtual".utf8))])
        try await ha.send(LESetAdvertisingData(data: name))
        try await ha.send(LESetScanResponseData(data: ADStructure.encode([ADStructure(type: 0xFF, data: [1, 2])])))
        try await ha.send(LESetAdvertisingEnable(advertisingEnable: true))
        let events = await hb.events()
        try await hb.send(LESetScanParameters(scanType: 1))
        try await hb.send(LESetScanEnable(scanEnable: true))
        let adv = await Self.firstReport(events, type: 0)
        #expect(adv?.address == Self.a && adv?.data == name)
        #expect(adv?.rssi == -61)  // 0 dBm - 41 dB - 20·log10(10)
        let rsp = await Self.firstReport(events, type: 4)
        #expect(rsp?.data == [3, 0xFF, 1, 2])
        // Duplicate filtering: a tick brings nothing new; without it, another report.
        try await hb.send(LESetScanEnable(scanEnable: false))
        try await hb.send(LESetScanEnable(scanEnable: true, filterDuplicates: true))
        #expect(await Self.firstReport(events, type: 0) != nil)
    }

    /// Connect, run GATT both ways, read RSSI, disconnect: the whole LE host path.
    static func session(_ radio: VirtualRadio, record: Recorder? = nil) async throws {
        let (ha, hb, _, _) = try await setUp(radio, record: record)
        let la = L2CAPHost(controller: ha, logger: logger), lb = L2CAPHost(controller: hb, logger: logger)
        await la.start(); await lb.start()
        var db = AttributeDatabase()
        let svc = try db.add(GATTService(uuid: BluetoothUUID(0x180F), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0x2A19), properties: [.read, .write, .notify], value: Array(repeating: 7, count: 70)),
        ]))
        let server = GATTServer(database: db, loop: ha.loop, logger: logger)
        let incoming = await la.newConnections(), outgoing = await lb.newConnections()
        try await ha.send(LESetAdvertisingEnable(advertisingEnable: true))
        try await hb.send(LECreateConnection(peerAddressType: .public, peerAddress: a))
        var ia = incoming.makeAsyncIterator(), ib = outgoing.makeAsyncIterator()
        let pc = try #require(await ia.next()), cc = try #require(await ib.next())
        #expect(pc.role == .peripheral && cc.role == .central && pc.peer == b && cc.peer == a)
        await server.attach(ATTBearer(channel: L2CAPATTChannel(host: la, handle: pc.handle), logger: logger), connection: pc.handle)
        let client = GATTClient(bearer: ATTBearer(channel: L2CAPATTChannel(host: lb, handle: cc.handle), logger: logger))
        await client.start()
        let service = try #require(try await client.discoverPrimaryServices().first)
        let c = try #require(try await client.discoverCharacteristics(of: service).first)
        #expect(try await client.read(c.valueHandle) == Array(repeating: 7, count: 70))  // long read at MTU 23
        try await client.write(c.valueHandle, value: Array(repeating: 9, count: 40))    // long write
        #expect(await server.database.attribute(c.valueHandle)?.value == Array(repeating: 9, count: 40))
        let values = try await client.subscribe(c, cccd: try #require(svc.clientConfigurations[0]))
        #expect(await server.notify(c.valueHandle, value: [1, 2, 3]) == [pc.handle])
        var it = values.makeAsyncIterator()
        #expect(await it.next() == [1, 2, 3])
        #expect(try await hb.send(ReadRSSI(connectionHandle: cc.handle)).rssi == -41)
        let aEvents = await ha.events()
        await client.bearer.drain()
        try await hb.send(Disconnect(connectionHandle: cc.handle, reason: .remoteUserTerminatedConnection))
        for await e in aEvents {
            if case let .disconnectionComplete(d) = e {
                #expect(d.reason == .remoteUserTerminatedConnection)
                break
            }
        }
        await ha.close(); await hb.close()
    }

    @Test func fullSessionOverTheRadio() async throws {
        try await Self.session(VirtualRadio())
    }

    @Test func sameRunSameBytes() async throws {
        let first = Recorder(), second = Recorder()
        try await Self.session(VirtualRadio(), record: first)
        try await Self.session(VirtualRadio(), record: second)
        let x = first.all, y = second.all
        #expect(x.count > 50)
        // Per controller, the conversation is identical byte for byte.
        for tag in [UInt8(0xA), 0xB] {
            #expect(x.filter { $0[0] == tag } == y.filter { $0[0] == tag }, "controller \(tag)")
        }
    }
}
