// The virtual radio's Bluetooth 5 controller against Rootcanal's: the same script of
// extended advertising commands, with the host's mistakes among them, gets the same
// status from both, command by command.

import BLETesting
import HCI
import Testing
import Transports

@Suite(.serialized, .liveTimeLimit) struct VirtualAgainstRootcanalTests {
    /// One command of the script: its name (for the failure message) and how to send it.
    struct Step: Sendable {
        var name: String
        var send: @Sendable (HCIController) async throws -> HCIStatus
        init<C: HCICommand>(_ name: String, _ command: C) {
            self.name = name
            send = { try await $0.status(of: command) }
        }
    }

    static func parameters(_ handle: UInt8, _ properties: UInt16, own: AddressType = .public) -> LESetExtendedAdvertisingParameters {
        LESetExtendedAdvertisingParameters(advertisingHandle: handle, advertisingEventProperties: properties,
                                           primaryAdvertisingIntervalMin: 0xA0, primaryAdvertisingIntervalMax: 0xA0, ownAddressType: own)
    }
    static func data(_ handle: UInt8, _ n: Int, operation: UInt8 = 3) -> LESetExtendedAdvertisingData {
        LESetExtendedAdvertisingData(advertisingHandle: handle, operation: operation, data: [UInt8](repeating: 0x5A, count: n))
    }
    static func enable(_ handle: UInt8, _ on: Bool = true) -> LESetExtendedAdvertisingEnable {
        LESetExtendedAdvertisingEnable(enable: on, sets: [.init(advertisingHandle: handle)])
    }

    static let script: [Step] = [
        Step("data for a set not made", data(1, 3)),
        Step("enable a set not made", enable(1)),
        Step("connectable and scannable extended", parameters(1, 0x03)),
        Step("legacy ADV_IND set", parameters(1, 0x13)),
        Step("legacy data of 32", data(1, 32)),
        Step("legacy data in a fragment", data(1, 20, operation: 1)),
        Step("legacy data of 31", data(1, 31)),
        Step("enable the legacy set", enable(1)),
        Step("parameters while enabled", parameters(1, 0x13)),
        Step("remove while enabled", LERemoveAdvertisingSet(advertisingHandle: 1)),
        Step("disable", enable(1, false)),
        Step("connectable extended set", parameters(2, 0x01)),
        Step("connectable data of 247", data(2, 247)),
        Step("enable with 247", enable(2)),
        Step("connectable data of 246", data(2, 246)),
        Step("enable with 246", enable(2)),
        Step("a fragment while enabled", data(2, 10, operation: 1)),
        Step("disable it", enable(2, false)),
        Step("non-connectable extended set", parameters(3, 0x00)),
        Step("first fragment", data(3, 251, operation: 1)),
        Step("enable with a fragment pending", enable(3)),
        Step("an empty intermediate fragment", data(3, 0, operation: 0)),
        Step("last fragment", data(3, 100, operation: 2)),
        Step("enable with 351", enable(3)),
        Step("scannable extended set, random address", parameters(4, 0x02, own: .random)),
        Step("advertising data on a scannable set", data(4, 10)),
        Step("enable without a scan response", enable(4)),
        Step("scan response", LESetExtendedScanResponseData(advertisingHandle: 4, data: [2, 1, 6])),
        Step("enable without the set's random address", enable(4)),
        Step("the set's random address", LESetAdvertisingSetRandomAddress(advertisingHandle: 4, randomAddress: BluetoothAddress("C0:00:00:00:0E:04")!)),
        Step("enable it", enable(4)),
        Step("disable all", LESetExtendedAdvertisingEnable(enable: false, sets: [])),
        Step("a legacy command after extended ones", LESetAdvertisingEnable(advertisingEnable: true)),
        Step("clear the sets", LEClearAdvertisingSets()),
        Step("remove a cleared set", LERemoveAdvertisingSet(advertisingHandle: 2)),
        Step("Reset", Reset()),
        Step("a legacy command first", LESetAdvertisingParameters()),
        Step("then an extended one", parameters(1, 0x13)),
    ]

    static func periodicParameters(_ handle: UInt8, _ min: UInt16 = 0x50, _ max: UInt16 = 0x50) -> LESetPeriodicAdvertisingParameters {
        LESetPeriodicAdvertisingParameters(advertisingHandle: handle, periodicAdvertisingIntervalMin: min, periodicAdvertisingIntervalMax: max)
    }
    static func periodicData(_ handle: UInt8, _ n: Int, operation: UInt8 = 3) -> LESetPeriodicAdvertisingData {
        LESetPeriodicAdvertisingData(advertisingHandle: handle, operation: operation, data: [UInt8](repeating: 0x5A, count: n))
    }
    static func sync(options: UInt8 = 0, cte: UInt8 = 0) -> LEPeriodicAdvertisingCreateSync {
        LEPeriodicAdvertisingCreateSync(options: options, advertisingSID: 1, advertiserAddressType: .public, advertiserAddress: BluetoothAddress("00:00:00:00:0E:0E")!,
                                        syncTimeout: 100, syncCTEType: cte)
    }

    /// Periodic advertising (§7.8.61–§7.8.63) and synchronisation (§7.8.67–§7.8.69).
    static let periodicScript: [Step] = [
        Step("periodic parameters for a set not made", periodicParameters(1)),
        Step("non-connectable extended set", parameters(1, 0x00)),
        Step("periodic data before its parameters", periodicData(1, 10)),
        Step("periodic enable before its parameters", LESetPeriodicAdvertisingEnable(enable: true, advertisingHandle: 1)),
        Step("an interval of 5", periodicParameters(1, 5, 5)),
        Step("min above max", periodicParameters(1, 0x60, 0x50)),
        Step("connectable extended set", parameters(2, 0x01)),
        Step("periodic on a connectable set", periodicParameters(2)),
        Step("legacy set", parameters(3, 0x10)),
        Step("periodic on a legacy set", periodicParameters(3)),
        Step("periodic parameters", periodicParameters(1)),
        Step("periodic first fragment", periodicData(1, 252, operation: 1)),
        Step("periodic enable with a fragment pending", LESetPeriodicAdvertisingEnable(enable: true, advertisingHandle: 1)),
        Step("periodic last fragment", periodicData(1, 100, operation: 2)),
        Step("unchanged periodic data while off", periodicData(1, 0, operation: 4)),
        Step("periodic enable", LESetPeriodicAdvertisingEnable(enable: true, advertisingHandle: 1)),
        Step("periodic parameters while on", periodicParameters(1)),
        Step("a periodic fragment while on", periodicData(1, 10, operation: 1)),
        Step("whole periodic data while on", periodicData(1, 20)),
        Step("connectable parameters while periodic is on", parameters(1, 0x01)),
        // Removing or clearing a set whose periodic advertising is on: Command Disallowed
        // (§7.8.59, §7.8.60, and Rootcanal since); Rootcanal 1.10 still allows it.
        // PeriodicRadioTests checks the virtual controller's answer.
        Step("periodic disable", LESetPeriodicAdvertisingEnable(enable: false, advertisingHandle: 1)),
        Step("periodic disable again", LESetPeriodicAdvertisingEnable(enable: false, advertisingHandle: 1)),
        Step("remove it", LERemoveAdvertisingSet(advertisingHandle: 1)),
        Step("create sync refusing every CTE type", sync(cte: 0x1F)),
        Step("create sync", sync()),
        Step("create sync while one is pending", sync()),
        Step("create sync cancel", LEPeriodicAdvertisingCreateSyncCancel()),
        Step("create sync cancel with none pending", LEPeriodicAdvertisingCreateSyncCancel()),
        Step("terminate an unknown sync", LEPeriodicAdvertisingTerminateSync(syncHandle: 5)),
        // The Periodic Advertiser List (§7.8.70–§7.8.73).
        Step("read the periodic advertiser list size", LEReadPeriodicAdvertiserListSize()),
        Step("add to the periodic advertiser list", listed(add: true, 0x0E, sid: 1)),
        Step("add the same entry again", listed(add: true, 0x0E, sid: 1)),
        Step("add the same address with another SID", listed(add: true, 0x0E, sid: 2)),
        Step("remove an entry not on the list", listed(add: false, 0x0D, sid: 1)),
        Step("create sync with the list", sync(options: 0x01)),
        Step("add while a create sync is pending", listed(add: true, 0x0D, sid: 1)),
        Step("remove while a create sync is pending", listed(add: false, 0x0E, sid: 2)),
        Step("clear while a create sync is pending", LEClearPeriodicAdvertiserList()),
        Step("cancel the create sync with the list", LEPeriodicAdvertisingCreateSyncCancel()),
        Step("remove an entry", listed(add: false, 0x0E, sid: 2)),
        Step("remove it again", listed(add: false, 0x0E, sid: 2)),
        Step("clear the list", LEClearPeriodicAdvertiserList()),
        Step("remove after the clear", listed(add: false, 0x0E, sid: 1)),
    ] + (0..<8).map { Step("fill the list, entry \($0 + 1)", listed(add: true, UInt8($0), sid: 3)) } + [
        Step("add to a full list", listed(add: true, 0x0E, sid: 3)),
        Step("clear the full list", LEClearPeriodicAdvertiserList()),
    ]

    /// Adds (or removes) the set `sid` of 00:00:00:00:0E:`last` to the Periodic Advertiser List.
    static func listed(add: Bool, _ last: UInt8, sid: UInt8) -> any HCICommand {
        let a = BluetoothAddress(value: 0x0E00 | UInt64(last))
        return add ? LEAddDeviceToPeriodicAdvertiserList(advertiserAddressType: .public, advertiserAddress: a, advertisingSID: sid)
            : LERemoveDeviceFromPeriodicAdvertiserList(advertiserAddressType: .public, advertiserAddress: a, advertisingSID: sid)
    }

    /// PHY preferences and updates without a link (§7.8.47–§7.8.49).
    static let phyScript: [Step] = [
        Step("default PHYs 1M and 2M", LESetDefaultPHY(txPHYs: 0x03, rxPHYs: 0x03)),
        Step("default PHYs: no TX bit", LESetDefaultPHY(txPHYs: 0x00, rxPHYs: 0x01)),
        Step("default PHYs: no RX bit", LESetDefaultPHY(txPHYs: 0x01, rxPHYs: 0x00)),
        Step("default PHYs: no preference either way", LESetDefaultPHY(allPHYs: 0x03, txPHYs: 0x00, rxPHYs: 0x00)),
        // A reserved bit: Unsupported Feature or Parameter Value (§7.8.48, and Rootcanal
        // since); Rootcanal 1.10 accepts it. The virtual controller follows the spec.
        Step("set PHY on no link", LESetPHY(connectionHandle: 0x0123)),
        Step("read PHY on no link", LEReadPHY(connectionHandle: 0x0123)),
    ]

    /// Long range (§7.8.53, §7.8.64, §7.8.66): advertising, scanning and initiating on
    /// LE Coded, and what neither takes.
    static func phys(_ handle: UInt8, _ properties: UInt16, primary: UInt8, secondary: UInt8) -> LESetExtendedAdvertisingParameters {
        var c = parameters(handle, properties)
        (c.primaryAdvertisingPHY, c.secondaryAdvertisingPHY) = (primary, secondary)
        return c
    }
    static let scanEach = LEExtendedScanPHYParameters(scanType: 0, scanInterval: 0x60, scanWindow: 0x30)
    static let longRangeScript: [Step] = [
        Step("scan LE Coded", LESetExtendedScanParameters(scanningPHYs: 0x04, phys: [scanEach])),
        Step("scan LE 1M and LE Coded", LESetExtendedScanParameters(scanningPHYs: 0x05, phys: [scanEach, scanEach])),
        Step("scan no PHY", LESetExtendedScanParameters(scanningPHYs: 0x00, phys: [])),
        Step("scan a reserved PHY bit", LESetExtendedScanParameters(scanningPHYs: 0x08, phys: [scanEach])),
        Step("advertise on LE Coded", phys(1, 0x00, primary: 3, secondary: 3)),
        Step("advertise on LE 1M, data on LE 2M", phys(2, 0x00, primary: 1, secondary: 2)),
        Step("legacy PDUs on LE Coded", phys(3, 0x10, primary: 3, secondary: 1)),
        Step("initiate on LE Coded", LEExtendedCreateConnection(peerAddressType: .public, peerAddress: BluetoothAddress(value: 0x0E09), initiatingPHYs: 0x04,
                                                                phys: [.init()])),
        Step("cancel it", LECreateConnectionCancel()),
        Step("initiate on no PHY", LEExtendedCreateConnection(peerAddressType: .public, peerAddress: BluetoothAddress(value: 0x0E09), initiatingPHYs: 0x00,
                                                              phys: [])),
    ]

    /// LE Create Connection's parameters (§7.8.12) and LE Extended Create Connection's
    /// (§7.8.66), each out of its range (Unsupported Feature or Parameter Value) and
    /// disagreeing (Invalid HCI Command Parameters), then ones that are right.
    static let wrongConnectionParameters: [(String, LEConnectionParameters, scan: (interval: UInt16, window: UInt16))] = [
        ("an interval below 7.5 ms", LEConnectionParameters(connectionIntervalMin: 5, connectionIntervalMax: 24), (0x60, 0x60)),
        ("an interval above 4 s", LEConnectionParameters(connectionIntervalMin: 16, connectionIntervalMax: 0x0C81), (0x60, 0x60)),
        ("the minimum interval above the maximum", LEConnectionParameters(connectionIntervalMin: 24, connectionIntervalMax: 16), (0x60, 0x60)),
        ("a latency of 500", LEConnectionParameters(maxLatency: 0x01F4), (0x60, 0x60)),
        ("a timeout below 100 ms", LEConnectionParameters(supervisionTimeout: 9), (0x60, 0x60)),
        ("a timeout above 32 s", LEConnectionParameters(supervisionTimeout: 0x0C81), (0x60, 0x60)),
        // 300 ms, not longer than (1 + 1) × 100 ms × 2. (At exactly 400 ms, which the
        // specification refuses too, Rootcanal 1.10 takes it, as BlueZ's check does.)
        ("a timeout too short for the interval and latency", LEConnectionParameters(connectionIntervalMin: 80, connectionIntervalMax: 80, maxLatency: 1,
                                                                                     supervisionTimeout: 30), (0x60, 0x60)),
        ("a scan interval below 2.5 ms", LEConnectionParameters(), (3, 3)),
        ("a scan window above the interval", LEConnectionParameters(), (0x30, 0x60)),
    ]
    static let peer = BluetoothAddress(value: 0x0E09)
    static let legacyInitiatingScript: [Step] = wrongConnectionParameters.map { name, c, scan in
        Step("connect with \(name)", LECreateConnection(scanInterval: scan.interval, scanWindow: scan.window, peerAddressType: .public, peerAddress: peer,
                                                       connection: c))
    } + [
        Step("connect within the bounds", LECreateConnection(peerAddressType: .public, peerAddress: peer, connection: LEConnectionParameters(
            connectionIntervalMin: 6, connectionIntervalMax: 0x0C80, maxLatency: 0, supervisionTimeout: 0x0C80))),
        Step("cancel it", LECreateConnectionCancel()),
    ]
    static let extendedInitiatingScript: [Step] = wrongConnectionParameters.map { name, c, scan in
        Step("connect with \(name)", LEExtendedCreateConnection(peerAddressType: .public, peerAddress: peer, phys: [
            .init(scanInterval: scan.interval, scanWindow: scan.window, connection: c)]))
    } + [
        Step("connect on both PHYs, LE Coded's wrong", LEExtendedCreateConnection(peerAddressType: .public, peerAddress: peer, initiatingPHYs: 0x05, phys: [
            .init(), .init(connection: LEConnectionParameters(maxLatency: 0x01F4))])),
        Step("connect within the bounds", LEExtendedCreateConnection(peerAddressType: .public, peerAddress: peer, phys: [.init(connection: LEConnectionParameters(
            connectionIntervalMin: 6, connectionIntervalMax: 0x0C80, maxLatency: 0, supervisionTimeout: 0x0C80))])),
        Step("cancel it", LECreateConnectionCancel()),
    ]

    /// The suggested default data length (§7.8.34, §7.8.35): 27 to 251 octets, 328 to
    /// 17040 µs. (LE Set Data Length, §7.8.33, is an Unknown HCI Command to Rootcanal 1.10.)
    static let dataLengthScript: [Step] = [
        Step("read the suggested data length", LEReadSuggestedDefaultDataLength()),
        Step("suggest 251 octets in 2120 µs", LEWriteSuggestedDefaultDataLength(suggestedMaxTxOctets: 251, suggestedMaxTxTime: 2120)),
        Step("suggest 26 octets", LEWriteSuggestedDefaultDataLength(suggestedMaxTxOctets: 26, suggestedMaxTxTime: 2120)),
        Step("suggest 252 octets", LEWriteSuggestedDefaultDataLength(suggestedMaxTxOctets: 252, suggestedMaxTxTime: 2120)),
        Step("suggest 327 µs", LEWriteSuggestedDefaultDataLength(suggestedMaxTxOctets: 27, suggestedMaxTxTime: 327)),
        Step("suggest 17041 µs", LEWriteSuggestedDefaultDataLength(suggestedMaxTxOctets: 27, suggestedMaxTxTime: 17041)),
        Step("suggest the least", LEWriteSuggestedDefaultDataLength(suggestedMaxTxOctets: 27, suggestedMaxTxTime: 328)),
        Step("suggest the most time", LEWriteSuggestedDefaultDataLength(suggestedMaxTxOctets: 251, suggestedMaxTxTime: 17040)),
        Step("read the maximum data length", LEReadMaximumDataLength()),
    ]

    /// The Filter Accept List (§7.8.14–§7.8.17) and a connection attempt through it.
    static let acceptListScript: [Step] = [
        Step("read the filter accept list size", LEReadFilterAcceptListSize()),
        Step("clear the filter accept list", LEClearFilterAcceptList()),
        Step("add a device", LEAddDeviceToFilterAcceptList(addressType: .public, address: BluetoothAddress(value: 0x0E01))),
        Step("remove a device not on the list", LERemoveDeviceFromFilterAcceptList(addressType: .random, address: BluetoothAddress(value: 0x0E02))),
        Step("connect through the list", LECreateConnection(initiatorFilterPolicy: 1, peerAddressType: .public, peerAddress: .zero)),
        Step("add while connecting through the list", LEAddDeviceToFilterAcceptList(addressType: .public, address: BluetoothAddress(value: 0x0E03))),
        Step("remove while connecting through the list", LERemoveDeviceFromFilterAcceptList(addressType: .public, address: BluetoothAddress(value: 0x0E01))),
        Step("clear while connecting through the list", LEClearFilterAcceptList()),
        Step("cancel the connection attempt", LECreateConnectionCancel()),
        Step("remove the device", LERemoveDeviceFromFilterAcceptList(addressType: .public, address: BluetoothAddress(value: 0x0E01))),
    ] + (0..<16).map { Step("fill the list, entry \($0 + 1)", LEAddDeviceToFilterAcceptList(addressType: .public, address: BluetoothAddress(value: 0x0F00 + UInt64($0)))) } + [
        Step("add to a full list", LEAddDeviceToFilterAcceptList(addressType: .public, address: BluetoothAddress(value: 0x0E0F))),
        Step("clear the full list", LEClearFilterAcceptList()),
        // Advertising that takes connections from the list alone holds it (§7.8.15–§7.8.17).
        // (A reserved Advertising_Filter_Policy, 4: Rootcanal 1.10 takes it; the virtual
        // controller refuses it with Invalid HCI Command Parameters, as §7.8.5 reserves it.)
        Step("advertise to the list's devices alone", LESetAdvertisingParameters(advertisingFilterPolicy: 2)),
        Step("start advertising", LESetAdvertisingEnable(advertisingEnable: true)),
        Step("add while advertising through the list", LEAddDeviceToFilterAcceptList(addressType: .public, address: BluetoothAddress(value: 0x0E01))),
        Step("remove while advertising through the list", LERemoveDeviceFromFilterAcceptList(addressType: .public, address: BluetoothAddress(value: 0x0E01))),
        Step("clear while advertising through the list", LEClearFilterAcceptList()),
        Step("stop advertising", LESetAdvertisingEnable(advertisingEnable: false)),
        Step("add once advertising stopped", LEAddDeviceToFilterAcceptList(addressType: .public, address: BluetoothAddress(value: 0x0E01))),
        Step("advertise to all", LESetAdvertisingParameters(advertisingFilterPolicy: 0)),
        Step("advertise again", LESetAdvertisingEnable(advertisingEnable: true)),
        Step("add while advertising to all", LEAddDeviceToFilterAcceptList(addressType: .public, address: BluetoothAddress(value: 0x0E02))),
        Step("stop advertising to all", LESetAdvertisingEnable(advertisingEnable: false)),
        // Scanning through the list holds it too; scanning for all does not. (A reserved
        // Scanning_Filter_Policy, 4: Rootcanal 1.10 takes it as it takes the reserved
        // Advertising_Filter_Policy; the virtual controller refuses it, §7.8.10.)
        Step("scan through the list", LESetScanParameters(scanningFilterPolicy: 1)),
        Step("start scanning through the list", LESetScanEnable(scanEnable: true)),
        Step("add while scanning through the list", LEAddDeviceToFilterAcceptList(addressType: .public, address: BluetoothAddress(value: 0x0E03))),
        Step("clear while scanning through the list", LEClearFilterAcceptList()),
        Step("scan parameters while scanning", LESetScanParameters(scanningFilterPolicy: 0)),
        Step("stop scanning through the list", LESetScanEnable(scanEnable: false)),
        Step("scan for all", LESetScanParameters(scanningFilterPolicy: 0)),
        Step("start scanning for all", LESetScanEnable(scanEnable: true)),
        Step("add while scanning for all", LEAddDeviceToFilterAcceptList(addressType: .public, address: BluetoothAddress(value: 0x0E04))),
        Step("stop scanning for all", LESetScanEnable(scanEnable: false)),
    ]

    /// Runs `script` on a Rootcanal of its own and on a virtual controller (a Bluetooth
    /// 5 one unless `bluetooth5` is false), both initialised with the legacy commands,
    /// and expects the same status at every step; `check` then looks at both
    /// (Rootcanal's first: each controller with what initialisation learned) before
    /// they close.
    static func compare(_ script: [Step], bluetooth5: Bool = true, sourceLocation: SourceLocation = #_sourceLocation,
                        check: (_ theirs: (HCIController, ControllerInfo), _ ours: (HCIController, ControllerInfo)) async throws -> Void = { _, _ in })
        async throws {
        guard let binary = try Interop.rootcanal() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let theirs = HCIController(transport: try StreamTransports.tcp(host: "127.0.0.1", port: rc.hciPort, logger: Interop.logger), logger: Interop.logger)
        let info = try await theirs.initialize(extendedAdvertising: false)
        let radio = VirtualRadio()
        let ours = HCIController(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:0E:0F")!, extendedAdvertising: bluetooth5),
                                 logger: Interop.logger)
        let mine = try await ours.initialize(extendedAdvertising: false)
        let (r, v) = (try await run(theirs, script), try await run(ours, script))
        #expect(r.count == script.count, sourceLocation: sourceLocation)
        for (a, b) in zip(r, v) { #expect(a == b, "Rootcanal: \(a); virtual: \(b)", sourceLocation: sourceLocation) }
        try await check((theirs, info), (ours, mine))
        await theirs.close()
        await ours.close()
    }

    static func run(_ h: HCIController, _ script: [Step] = script) async throws -> [String] {
        var out: [String] = []
        for s in script { out.append("\(s.name): \(try await s.send(h))") }
        return out
    }

    @Test func acceptListStatusesAreRootcanals() async throws {
        try await Self.compare(Self.acceptListScript, bluetooth5: false) { theirs, ours in
            let (a, b) = (try await theirs.0.send(LEReadFilterAcceptListSize()).value, try await ours.0.send(LEReadFilterAcceptListSize()).value)
            #expect(a == b)
        }
    }

    @Test func connectionParameterStatusesAreRootcanals() async throws {
        try await Self.compare(Self.legacyInitiatingScript, bluetooth5: false)
        try await Self.compare(Self.extendedInitiatingScript)
    }

    @Test func longRangeStatusesAreRootcanals() async throws {
        try await Self.compare(Self.longRangeScript) { theirs, ours in
            #expect(theirs.1.leFeatures.contains(bit: LEFeatures.leCodedPHY))
            #expect(ours.1.leFeatures.contains(bit: LEFeatures.leCodedPHY))
        }
    }

    @Test func phyStatusesAreRootcanals() async throws {
        try await Self.compare(Self.phyScript) { theirs, ours in
            #expect(theirs.1.leFeatures.contains(bit: LEFeatures.le2MPHY))
            #expect(ours.1.leFeatures.contains(bit: LEFeatures.le2MPHY) && ours.1.supports(.leSetPHY) && ours.1.supports(.leReadPHY))
        }
    }

    @Test func dataLengthStatusesAreRootcanals() async throws {
        try await Self.compare(Self.dataLengthScript, bluetooth5: false) { theirs, ours in
            #expect(theirs.1.supports(.leWriteSuggestedDefaultDataLength) && theirs.1.supports(.leReadSuggestedDefaultDataLength))
            #expect(ours.1.leFeatures.contains(bit: LEFeatures.dataPacketLengthExtension))
            // What the last accepted write said is what both read back.
            let (x, y) = (try await theirs.0.send(LEReadSuggestedDefaultDataLength()), try await ours.0.send(LEReadSuggestedDefaultDataLength()))
            #expect([x.suggestedMaxTxOctets, x.suggestedMaxTxTime] == [251, 17040] && [y.suggestedMaxTxOctets, y.suggestedMaxTxTime] == [251, 17040])
        }
    }

    @Test func periodicAdvertisingStatusesAreRootcanals() async throws {
        try await Self.compare(Self.periodicScript) { theirs, ours in
            #expect(theirs.1.leFeatures.contains(bit: LEFeatures.periodicAdvertising) && ours.1.leFeatures.contains(bit: LEFeatures.periodicAdvertising))
        }
    }

    @Test func extendedAdvertisingStatusesAreRootcanals() async throws {
        try await Self.compare(Self.script) { theirs, _ in
            #expect(theirs.1.supportsExtendedAdvertising)
        }
    }
}
