// The virtual radio's extended advertising, scanning and connecting, at HCI: the
// statuses Vol 4, Part E, §7.8.53–§7.8.66 give the host's mistakes, the reports a
// scanner gets (legacy scanners hear legacy PDUs only; long data comes in pieces),
// and what a connection to a set says on both sides.

import BLETesting
import HCI
import Logging
import Synchronization
import Testing

@Suite(.timeLimit(.minutes(3)))
struct ExtendedAdvertisingRadioTests {
    static let logger = VirtualRadioTests.logger
    static let a = BluetoothAddress("00:00:00:00:0E:0A")!
    static let b = BluetoothAddress("00:00:00:00:0E:0B")!
    static let c = BluetoothAddress("00:00:00:00:0E:0C")!

    static func host(_ radio: VirtualRadio, _ address: BluetoothAddress, extended: Bool = true) async throws -> (HCIController, ControllerInfo) {
        let h = HCIController(transport: await radio.makeController(address: address, extendedAdvertising: extended), logger: logger)
        return (h, try await h.initialize())
    }

    static func parameters(_ handle: UInt8, _ properties: UInt16, own: AddressType = .public, sid: UInt8 = 0) -> LESetExtendedAdvertisingParameters {
        LESetExtendedAdvertisingParameters(advertisingHandle: handle, advertisingEventProperties: properties, primaryAdvertisingIntervalMin: 0xA0,
                                           primaryAdvertisingIntervalMax: 0xA0, ownAddressType: own, advertisingSID: sid)
    }

    static func enable(_ handles: UInt8..., on: Bool = true) -> LESetExtendedAdvertisingEnable {
        LESetExtendedAdvertisingEnable(enable: on, sets: handles.map { .init(advertisingHandle: $0) })
    }

    @Test func anExtendedControllerSaysWhatItHas() async throws {
        let radio = VirtualRadio()
        let (_, extended) = try await Self.host(radio, Self.a)
        #expect(extended.supportsExtendedAdvertising)
        #expect(extended.numberOfSupportedAdvertisingSets == 4 && extended.maximumAdvertisingDataLength == 1650)
        let (_, legacy) = try await Self.host(radio, Self.b, extended: false)
        #expect(!legacy.supportsExtendedAdvertising && legacy.maximumAdvertisingDataLength == nil)
    }

    /// Vol 4, Part E, §3.1.1: after one kind of advertising command, the other kind is
    /// Command Disallowed until Reset; commands of neither kind go on working.
    @Test func legacyAndExtendedCommandsDoNotMix() async throws {
        let radio = VirtualRadio()
        let (h, _) = try await Self.host(radio, Self.a)
        #expect(try await h.status(of: Self.parameters(0, 0x13)) == .success)
        #expect(try await h.status(of: LESetAdvertisingEnable(advertisingEnable: true)) == .commandDisallowed)
        #expect(try await h.status(of: LESetScanParameters()) == .commandDisallowed)
        #expect(try await h.status(of: LECreateConnection(peerAddressType: .public, peerAddress: Self.b)) == .commandDisallowed)
        #expect(try await h.status(of: LESetRandomAddress(randomAddress: BluetoothAddress("C0:00:00:00:0E:01")!)) == .success)
        try await h.send(Reset())
        #expect(try await h.status(of: LESetAdvertisingParameters()) == .success)
        #expect(try await h.status(of: LEReadMaximumAdvertisingDataLength()) == .commandDisallowed)
        #expect(try await h.status(of: LEExtendedCreateConnection(peerAddressType: .public, peerAddress: Self.b)) == .commandDisallowed)
        #expect(try await h.status(of: LESetExtendedScanEnable(enable: true)) == .commandDisallowed)
    }

    /// The statuses §7.8.53–§7.8.60 give what a set may not do.
    @Test func setCommandsAnswerAsTheSpecSays() async throws {
        let radio = VirtualRadio()
        let (h, _) = try await Self.host(radio, Self.a)
        func data(_ handle: UInt8, _ n: Int, operation: UInt8 = 3) -> LESetExtendedAdvertisingData {
            LESetExtendedAdvertisingData(advertisingHandle: handle, operation: operation, data: [UInt8](repeating: 0xAB, count: n))
        }
        // No such set.
        #expect(try await h.status(of: data(7, 3)) == .unknownAdvertisingIdentifier)
        #expect(try await h.status(of: Self.enable(7)) == .unknownAdvertisingIdentifier)
        #expect(try await h.status(of: LERemoveAdvertisingSet(advertisingHandle: 7)) == .unknownAdvertisingIdentifier)
        // Properties no advertising has: connectable and scannable extended, high duty cycle extended, a legacy combination not in Table 7.2.
        #expect(try await h.status(of: Self.parameters(0, 0x03)) == .invalidCommandParameters)
        #expect(try await h.status(of: Self.parameters(0, 0x0D)) == .invalidCommandParameters)
        #expect(try await h.status(of: Self.parameters(0, 0x11)) == .invalidCommandParameters)
        // Legacy PDUs: 31 octets, in one complete operation.
        #expect(try await h.status(of: Self.parameters(0, 0x13)) == .success)
        #expect(try await h.status(of: data(0, 32)) == .invalidCommandParameters)
        #expect(try await h.status(of: data(0, 20, operation: 1)) == .invalidCommandParameters)
        #expect(try await h.status(of: data(0, 31)) == .success)
        // Connectable extended: one AUX_ADV_IND's worth (246 octets) is enabled, one more is not.
        #expect(try await h.status(of: Self.parameters(1, 0x01)) == .success)
        #expect(try await h.status(of: data(1, 247)) == .success)
        #expect(try await h.status(of: Self.enable(1)) == .invalidCommandParameters)
        #expect(try await h.status(of: data(1, 246)) == .success)
        #expect(try await h.status(of: Self.enable(1)) == .success)
        // Enabled: no fragments, no new parameters, no removal; too long is Packet Too Long (and the data goes).
        #expect(try await h.status(of: data(1, 100, operation: 1)) == .commandDisallowed)
        #expect(try await h.status(of: Self.parameters(1, 0x00)) == .commandDisallowed)
        #expect(try await h.status(of: LERemoveAdvertisingSet(advertisingHandle: 1)) == .commandDisallowed)
        #expect(try await h.status(of: LEClearAdvertisingSets()) == .commandDisallowed)
        #expect(try await h.status(of: data(1, 247)) == .packetTooLong)
        #expect(try await h.status(of: Self.enable(1, on: false)) == .success)
        // Non-connectable extended: fragments up to 1650; a set with a fragment pending is not enabled.
        #expect(try await h.status(of: Self.parameters(2, 0x00)) == .success)
        #expect(try await h.status(of: data(2, 251, operation: 1)) == .success)
        #expect(try await h.status(of: Self.enable(2)) == .commandDisallowed)
        #expect(try await h.status(of: data(2, 0, operation: 0)) == .invalidCommandParameters)
        for _ in 0..<5 { #expect(try await h.status(of: data(2, 251, operation: 0)) == .success) }
        #expect(try await h.status(of: data(2, 145, operation: 2)) == .memoryCapacityExceeded)  // 1651 octets: all discarded
        #expect(try await h.status(of: data(2, 144)) == .success)
        #expect(try await h.status(of: Self.enable(2)) == .success)
        // Scannable extended: no advertising data, and a scan response before it is enabled.
        #expect(try await h.status(of: Self.parameters(3, 0x02)) == .success)
        #expect(try await h.status(of: data(3, 10)) == .invalidCommandParameters)
        #expect(try await h.status(of: Self.enable(3)) == .commandDisallowed)
        #expect(try await h.status(of: LESetExtendedScanResponseData(advertisingHandle: 3, data: [2, 1, 6])) == .success)
        // A random own address needs the set's random address.
        #expect(try await h.status(of: Self.parameters(3, 0x02, own: .random)) == .success)
        #expect(try await h.status(of: Self.enable(3)) == .invalidCommandParameters)
        #expect(try await h.status(of: LESetAdvertisingSetRandomAddress(advertisingHandle: 3, randomAddress: BluetoothAddress("C0:00:00:00:0E:03")!)) == .success)
        #expect(try await h.status(of: Self.enable(3)) == .success)
        // Four sets at most; the same set twice in one enable is refused.
        #expect(try await h.status(of: Self.parameters(4, 0x00)) == .memoryCapacityExceeded)
        #expect(try await h.status(of: Self.enable(0, 0)) == .invalidCommandParameters)
        // Enable off with no sets stops them all, then they can go.
        #expect(try await h.status(of: LESetExtendedAdvertisingEnable(enable: false, sets: [])) == .success)
        #expect(try await h.status(of: LEClearAdvertisingSets()) == .success)
        #expect(try await h.status(of: data(0, 3)) == .unknownAdvertisingIdentifier)
    }

    /// An extended scanner gets a set's 600 octets in three reports (229 + 229 + 142,
    /// "more to come" on the first two) and a legacy set's PDU with its fixed event
    /// type; a legacy scanner hears the legacy set only.
    @Test func scannersHearWhatTheirKindOfScanningReceives() async throws {
        let radio = VirtualRadio()
        let (adv, _) = try await Self.host(radio, Self.a)
        let (ext, _) = try await Self.host(radio, Self.b)
        let (old, _) = try await Self.host(radio, Self.c, extended: false)
        let long = (0..<600).map { UInt8($0 & 0xFF) }
        try await adv.send(Self.parameters(0, 0x00, sid: 5))
        try await adv.send(LESetExtendedAdvertisingData(advertisingHandle: 0, operation: 1, data: Array(long[0..<251])))
        try await adv.send(LESetExtendedAdvertisingData(advertisingHandle: 0, operation: 0, data: Array(long[251..<502])))
        try await adv.send(LESetExtendedAdvertisingData(advertisingHandle: 0, operation: 2, data: Array(long[502...])))
        try await adv.send(Self.parameters(1, 0x13))
        try await adv.send(LESetExtendedAdvertisingData(advertisingHandle: 1, data: [2, 1, 6]))
        try await adv.send(LESetExtendedScanResponseData(advertisingHandle: 1, data: [3, 9, 0x41, 0x42]))
        try await adv.send(Self.enable(0, 1))

        let extended = Mutex<[LEExtendedAdvertisingReport.Report]>([]), legacy = Mutex<[LEAdvertisingReport.Report]>([])
        await ext.setInboundSink { if case let .event(.le(.extendedAdvertisingReport(r))) = $0 { extended.withLock { $0 += r.reports } } }
        await old.setInboundSink { if case let .event(.le(.advertisingReport(r))) = $0 { legacy.withLock { $0 += r.reports } } }
        try await ext.send(LESetExtendedScanParameters(phys: [LEExtendedScanPHYParameters(scanType: 1)]))
        try await ext.send(LESetExtendedScanEnable(enable: true, filterDuplicates: 1))
        try await old.send(LESetScanParameters(scanType: 1))
        try await old.send(LESetScanEnable(scanEnable: true, filterDuplicates: true))
        try await ext.send(ReadBDADDR())  // a round trip: the reports have come
        try await old.send(ReadBDADDR())

        let got = extended.withLock { $0 }
        let fromSet0 = got.filter { $0.advertisingSID == 5 }
        #expect(fromSet0.map(\.data.count) == [229, 229, 142])
        #expect(fromSet0.map(\.eventType) == [0x20, 0x20, 0x00])
        #expect(fromSet0.flatMap(\.data) == long)
        #expect(fromSet0.allSatisfy { $0.secondaryPHY == 1 && $0.address == Self.a })
        let fromSet1 = got.filter { $0.advertisingSID == 0xFF }
        #expect(fromSet1.map(\.eventType) == [0x13, 0x1B])  // ADV_IND, then SCAN_RSP to it
        #expect(fromSet1.map(\.data) == [[2, 1, 6], [3, 9, 0x41, 0x42]])
        #expect(fromSet1.allSatisfy { $0.secondaryPHY == 0 })
        let heard = legacy.withLock { $0 }
        #expect(heard.map(\.eventType) == [0, 4])
        #expect(heard.map(\.data) == [[2, 1, 6], [3, 9, 0x41, 0x42]])
        // Duplicates filtered: another round of advertising adds nothing.
        await radio.tick()
        try await ext.send(ReadBDADDR())
        #expect(extended.withLock { $0.count } == got.count)
    }

    /// A connection to a set: LE Enhanced Connection Complete on both sides (the host
    /// unmasked it), then LE Advertising Set Terminated naming the set and the
    /// connection; the set stops. A legacy initiator cannot reach extended PDUs.
    @Test func aConnectionEndsTheSetItCameThrough() async throws {
        let radio = VirtualRadio()
        let (p, _) = try await Self.host(radio, Self.a)
        let (central, _) = try await Self.host(radio, Self.b)
        let (old, _) = try await Self.host(radio, Self.c, extended: false)
        let pEvents = await p.events(), cEvents = await central.events(), oldEvents = await old.events()
        try await p.send(Self.parameters(2, 0x01))
        try await p.send(LESetExtendedAdvertisingData(advertisingHandle: 2, data: [UInt8](repeating: 1, count: 200)))
        try await p.send(Self.enable(2))
        // LE Create Connection sees legacy PDUs only: it waits (and is cancelled).
        try await old.send(LECreateConnection(peerAddressType: .public, peerAddress: Self.a))
        try await old.send(ReadBDADDR())
        try await old.send(LECreateConnectionCancel())
        var oldEnd: LEConnectionComplete?
        for await e in oldEvents { if case let .le(.connectionComplete(c)) = e { oldEnd = c; break } }
        #expect(oldEnd?.status == .unknownConnectionIdentifier)

        try await central.send(LEExtendedCreateConnection(peerAddressType: .public, peerAddress: Self.a))
        var centralSide: LEEnhancedConnectionComplete?
        for await e in cEvents { if case let .le(.enhancedConnectionComplete(c)) = e { centralSide = c; break } }
        #expect(centralSide?.status == .success && centralSide?.role == .central && centralSide?.peerAddress == Self.a)
        var peripheralSide: [LEMetaEvent] = []
        for await e in pEvents {
            if case let .le(m) = e { peripheralSide.append(m) }
            if peripheralSide.count == 2 { break }
        }
        guard peripheralSide.count == 2, case let .enhancedConnectionComplete(pc) = peripheralSide[0],
              case let .advertisingSetTerminated(t) = peripheralSide[1] else { Issue.record("\(peripheralSide)"); return }
        #expect(pc.role == .peripheral && pc.peerAddress == Self.b)
        #expect(t.status == .success && t.advertisingHandle == 2 && t.connectionHandle == pc.connectionHandle)
        // The set stopped: removable now.
        #expect(try await p.status(of: LERemoveAdvertisingSet(advertisingHandle: 2)) == .success)
    }
}
