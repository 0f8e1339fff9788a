// Advertising that answers the accept list alone (`AdvertisingFilter`, the
// Advertising_Filter_Policy of §7.8.5 and §7.8.53): only the devices named with
// `setAcceptList` connect, or get the scan response. Scanning through it
// (`acceptListOnly`, the Scanning_Filter_Policy of §7.8.10 and §7.8.64): only they are
// reported. The controller's Filter Accept List holds that list while such advertising
// or scanning is on: `setAcceptList` and `connect(toAnyOf:)` may not change it
// meanwhile (the controller refuses, §7.8.15–§7.8.17). On the virtual radio, with both
// command sets, and on Rootcanal.

@testable import BLE
import BLETesting
import Foundation
import HCI
import Snoop
import Testing

extension BluetoothHost {
    /// Whether the controller scans through the accept list (Scanning_Filter_Policy 1);
    /// nil when it does not scan.
    func controllerScansThroughAcceptList() -> Bool? { centralState.scanning?.acceptListOnly }
}

@Suite(.serialized, .timeLimit(.minutes(3))) struct AcceptListTests {
    static let a = BluetoothAddress("C0:00:00:00:0A:11")!, b = BluetoothAddress("C0:00:00:00:0A:12")!
    static let p = BluetoothAddress("C0:00:00:00:0A:13")!
    static let s = BluetoothAddress("C0:00:00:00:0A:14")!

    /// Hosts at `a`, `b` and `p`; `watch[i]` sees the packets between host i and its controller.
    static func hosts(_ radio: VirtualRadio, extended: Bool, watch: [Int: @Sendable (TraceRecord) -> Void] = [:]) async throws
        -> (BluetoothHost, BluetoothHost, BluetoothHost) {
        var out: [BluetoothHost] = []
        for (i, address) in [a, b, p].enumerated() {
            let controller = await radio.makeController(address: address, extendedAdvertising: extended)
            let h = BluetoothHost(transport: watch[i].map { RecordingTransport(wrapping: controller, sink: $0) } ?? controller, logger: Bench.logger)
            try await h.start()
            out.append(h)
        }
        return (out[0], out[1], out[2])
    }

    static func inUse(_ e: any Error) -> Bool {
        if case BLEError.acceptListInUse = e { return true } else { return false }
    }

    @Test(arguments: [false, true])
    func onlyTheAcceptListConnects(extended: Bool) async throws {
        let radio = VirtualRadio()
        let (centralA, centralB, peripheral) = try await Self.hosts(radio, extended: extended)
        defer { Task { await centralA.close(); await centralB.close(); await peripheral.close() } }
        try await peripheral.setAcceptList([DeviceAddress(Self.a)])
        #expect(await peripheral.acceptList == [DeviceAddress(Self.a)])
        try await peripheral.peripheral.startAdvertising(AdvertisingSetsTests.named("only-a"), acceptListOnly: .connections)
        // B is not on the list: the advertiser does not take its connection request.
        await #expect(throws: BLEError.connectionTimeout(Self.p, within: .milliseconds(300))) {
            try await centralB.central.connect(to: Self.p, within: .milliseconds(300))
        }
        let remote = try await centralA.central.connect(to: Self.p, within: .seconds(5))
        // The controller's list is the advertisement's while it is on (or waits for A's link to end).
        await #expect { try await peripheral.setAcceptList([DeviceAddress(Self.b)]) } throws: { Self.inUse($0) }
        await #expect { try await peripheral.central.connect(toAnyOf: [DeviceAddress(Self.b), DeviceAddress(Self.a)], within: .seconds(1)) } throws: {
            Self.inUse($0)
        }
        try await peripheral.setAcceptList([DeviceAddress(Self.a)])
        _ = try await remote.disconnect()
        // Stopped, the list changes; started again, it is B's turn.
        try await peripheral.peripheral.stopAdvertising()
        try await peripheral.setAcceptList([DeviceAddress(Self.b)])
        try await peripheral.peripheral.startAdvertising(AdvertisingSetsTests.named("only-b"), acceptListOnly: .connections)
        await #expect(throws: BLEError.connectionTimeout(Self.p, within: .milliseconds(300))) {
            try await centralA.central.connect(to: Self.p, within: .milliseconds(300))
        }
        _ = try await centralB.central.connect(to: Self.p, within: .seconds(5))
        // More than the controller's list holds (16 here).
        await #expect(throws: BLEError.self) {
            try await centralA.setAcceptList((0..<17).map { DeviceAddress(BluetoothAddress(value: 0x0B00 + UInt64($0))) })
        }
        withExtendedLifetime(radio) {}
    }

    @Test(arguments: [false, true])
    func onlyTheAcceptListGetsTheScanResponse(extended: Bool) async throws {
        let radio = VirtualRadio()
        let (centralA, centralB, peripheral) = try await Self.hosts(radio, extended: extended)
        defer { Task { await centralA.close(); await centralB.close(); await peripheral.close() } }
        try await peripheral.setAcceptList([DeviceAddress(Self.a)])
        try await peripheral.peripheral.startAdvertising(AdvertisingSetsTests.named("beacon"), scanResponse: AdvertisingSetsTests.named("more"),
                                                         connectable: false, acceptListOnly: .scanRequests)
        #expect(try await AdvertisingSetsTests.heard(by: centralA)[Self.p] == ["beacon", "more"])
        #expect(try await AdvertisingSetsTests.heard(by: centralB)[Self.p] == ["beacon"])
        withExtendedLifetime(radio) {}
    }

    /// After a reset the controller's list is empty: advertising that resumes refills it.
    @Test func theListIsRefilledAfterAReset() async throws {
        let radio = VirtualRadio()
        let (centralA, centralB, peripheral) = try await Self.hosts(radio, extended: true)
        defer { Task { await centralA.close(); await centralB.close(); await peripheral.close() } }
        try await peripheral.setAcceptList([DeviceAddress(Self.a)])
        try await peripheral.peripheral.startAdvertising(AdvertisingSetsTests.named("only-a"), acceptListOnly: .connections)
        try await peripheral.reset()
        _ = try await centralA.central.connect(to: Self.p, within: .seconds(5))
        withExtendedLifetime(radio) {}
    }

    /// A scanner (address `s`, its scan parameters recorded in `policies`) and three
    /// advertisers, a, b and p, each advertising its name.
    static func scannerAndAdvertisers(_ radio: VirtualRadio, extended: Bool, policies: ScanCommandLog) async throws -> (BluetoothHost, [BluetoothHost]) {
        let scanner = BluetoothHost(transport: RecordingTransport(wrapping: await radio.makeController(address: s, extendedAdvertising: extended)) { policies.record($0) },
                                    logger: Bench.logger)
        try await scanner.start()
        let (ha, hb, hp) = try await hosts(radio, extended: extended)
        for (h, name) in [(ha, "a"), (hb, "b"), (hp, "p")] { try await h.peripheral.startAdvertising(AdvertisingSetsTests.named(name)) }
        return (scanner, [ha, hb, hp])
    }

    static func addresses(_ results: [ScanResult]) -> Set<BluetoothAddress> { Set(results.map(\.address)) }

    @Test(arguments: [false, true])
    func aScanThroughTheListReportsItsDevicesAlone(extended: Bool) async throws {
        let radio = VirtualRadio()
        let policies = ScanCommandLog()
        let (scanner, advertisers) = try await Self.scannerAndAdvertisers(radio, extended: extended, policies: policies)
        defer { Task { await scanner.close(); for h in advertisers { await h.close() } } }
        try await scanner.setAcceptList([DeviceAddress(Self.a), DeviceAddress(Self.p)])
        // The controller filters: the scan's parameters name the list.
        #expect(Self.addresses(try await scanner.central.scan(for: .milliseconds(200), acceptListOnly: true)) == [Self.a, Self.p])
        #expect(policies.parameters.map(\.filterPolicy) == [1])
        // While it scans through the list, the list stays as it is.
        let held = ScanReader(try await scanner.central.scan(acceptListOnly: true))
        await #expect { try await scanner.setAcceptList([DeviceAddress(Self.b)]) } throws: { Self.inUse($0) }
        await #expect { try await scanner.central.connect(toAnyOf: [DeviceAddress(Self.b), DeviceAddress(Self.a)], within: .seconds(1)) } throws: {
            Self.inUse($0)
        }
        #expect(await held.addresses(on: scanner) == [Self.a, Self.p])
        // A scan for all: the controller scans without the list meanwhile, the host
        // keeps the first scan to the list's devices, and the list comes back after.
        #expect(Self.addresses(try await scanner.central.scan(for: .milliseconds(200))) == [Self.a, Self.b, Self.p])
        #expect(policies.parameters.map(\.filterPolicy) == [1, 1, 0, 1])
        #expect(await held.addresses(on: scanner) == [Self.a, Self.p])
        await #expect { try await scanner.setAcceptList([DeviceAddress(Self.b)]) } throws: { Self.inUse($0) }
        // A reset: the scan goes on, through the list refilled.
        try await scanner.reset()
        #expect(policies.parameters.map(\.filterPolicy) == [1, 1, 0, 1, 1])
        #expect(await held.addresses(on: scanner) == [Self.a, Self.p])
        withExtendedLifetime(held) {}
        withExtendedLifetime(radio) {}
    }

    /// A scan for all goes on across a reset too (before, the controller stopped
    /// scanning at the reset and the scan's stream went quiet for good).
    @Test func aScanGoesOnAfterAReset() async throws {
        let radio = VirtualRadio()
        let policies = ScanCommandLog()
        let (scanner, advertisers) = try await Self.scannerAndAdvertisers(radio, extended: true, policies: policies)
        defer { Task { await scanner.close(); for h in advertisers { await h.close() } } }
        let results = ScanReader(try await scanner.central.scan())
        #expect(await results.addresses(on: scanner) == [Self.a, Self.b, Self.p])
        try await scanner.reset()
        #expect(await results.addresses(on: scanner) == [Self.a, Self.b, Self.p])
        #expect(policies.parameters.map(\.filterPolicy) == [0, 0])
        withExtendedLifetime(radio) {}
    }

    /// A reset while a connection attempt is under way ends the attempt
    /// (`BLEError.notReady`: the controller forgets it), and advertising through the
    /// accept list comes back with the list (before, the reset failed: the attempt
    /// held the connect slot the list needs). Scanning through the list cannot start
    /// while an attempt is under way.
    @Test func aResetEndsAConnectionAttemptAndAdvertisingThroughTheListComesBack() async throws {
        let radio = VirtualRadio()
        let (answeredB, answeredP) = (CommandAnswers(), CommandAnswers())
        let (centralA, centralB, peripheral) = try await Self.hosts(radio, extended: true, watch: [1: { answeredB.record($0) }, 2: { answeredP.record($0) }])
        defer { Task { await centralA.close(); await centralB.close(); await peripheral.close() } }
        try await peripheral.setAcceptList([DeviceAddress(Self.a)])
        try await peripheral.peripheral.startAdvertising(AdvertisingSetsTests.named("only-a"), acceptListOnly: .connections)
        // Nobody advertises at this address: the attempt waits.
        let nobody = BluetoothAddress("C0:00:00:00:0A:99")!
        let attempt = Task { try await peripheral.central.connect(to: nobody, within: .seconds(30)) }
        // B's list is not on its controller yet, and an attempt of B's is under way.
        try await centralB.setAcceptList([DeviceAddress(Self.p)])
        let other = Task { try await centralB.central.connect(to: nobody, within: .seconds(30)) }
        // Both attempts are on their controllers.
        #expect(await answeredP.wait(for: .leExtendedCreateConnection))
        #expect(await answeredB.wait(for: .leExtendedCreateConnection))
        await #expect { _ = try await centralB.central.scan(acceptListOnly: true) } throws: { Self.inUse($0) }
        try await peripheral.reset()
        await #expect(throws: BLEError.notReady(.resetting)) { _ = try await attempt.value }
        try await centralB.reset()
        await #expect(throws: BLEError.notReady(.resetting)) { _ = try await other.value }
        _ = try await centralA.central.connect(to: Self.p, within: .seconds(5))
        withExtendedLifetime(radio) {}
    }

    /// On Rootcanal, which checks the advertiser's filter policy as the spec does.
    @Test func onRootcanalOnlyTheAcceptListConnects() async throws {
        guard let rc = try await Bench.rootcanalHosts(3) else { return }
        defer { rc.stop() }
        let (peripheral, centralA, centralB) = (rc.hosts[0], rc.hosts[1], rc.hosts[2])
        let p = rc.addresses[0]
        try await peripheral.setAcceptList([DeviceAddress(rc.addresses[1])])
        try await peripheral.peripheral.startAdvertising(AdvertisingSetsTests.named("rc-only-a"), acceptListOnly: .connections)
        await #expect(throws: BLEError.connectionTimeout(p, within: .seconds(1))) { try await centralB.central.connect(to: p, within: .seconds(1)) }
        _ = try await centralA.central.connect(to: p, within: .seconds(10))
        await #expect { try await peripheral.setAcceptList([DeviceAddress(rc.addresses[2])]) } throws: { Self.inUse($0) }
    }

    /// On Rootcanal: scanning through the list reports its device alone, and holds
    /// the list.
    @Test func onRootcanalAScanThroughTheListReportsItsDevicesAlone() async throws {
        guard let rc = try await Bench.rootcanalHosts(3) else { return }
        defer { rc.stop() }
        let (scanner, listed, other) = (rc.hosts[0], rc.hosts[1], rc.hosts[2])
        try await listed.peripheral.startAdvertising(AdvertisingSetsTests.named("rc-listed"))
        try await other.peripheral.startAdvertising(AdvertisingSetsTests.named("rc-other"))
        try await scanner.setAcceptList([DeviceAddress(rc.addresses[1])])
        let held = ScanReader(try await scanner.central.scan(acceptListOnly: true))
        await #expect { try await scanner.setAcceptList([DeviceAddress(rc.addresses[2])]) } throws: { Self.inUse($0) }
        #expect(await held.addresses(after: .seconds(1), on: scanner) == [rc.addresses[1]])
        // Rootcanal hears both while it scans for all.
        #expect(Self.addresses(try await scanner.central.scan(for: .seconds(1))).isSuperset(of: [rc.addresses[1], rc.addresses[2]]))
        withExtendedLifetime(held) {}
    }

    /// A central recording its scan commands, a private peripheral advertising
    /// "private", and another device advertising "other", on the virtual radio.
    struct PrivateRig {
        let radio = VirtualRadio()
        let policies = ScanCommandLog()
        let central: BluetoothHost
        let peripheral: BluetoothHost
        let other: BluetoothHost

        init(seeds: (central: UInt64, peripheral: UInt64)) async throws {
            let policies = self.policies
            central = BluetoothHost(transport: RecordingTransport(wrapping: await radio.makeController(address: AcceptListTests.s)) { policies.record($0) },
                                    logger: Bench.logger, security: SecurityOptions(random: .seeded(seeds.central)))
            peripheral = BluetoothHost(transport: await radio.makeController(address: AcceptListTests.p), logger: Bench.logger,
                                       security: SecurityOptions(random: .seeded(seeds.peripheral), privacy: PrivacyOptions()))
            other = BluetoothHost(transport: await radio.makeController(address: AcceptListTests.a), logger: Bench.logger)
            for h in [central, peripheral, other] { try await h.start() }
            try await peripheral.peripheral.startAdvertising(AdvertisingSetsTests.named("private"))
            try await other.peripheral.startAdvertising(AdvertisingSetsTests.named("other"))
        }

        func close() async {
            await central.close()
            await peripheral.close()
            await other.close()
        }
    }

    /// A bonded device that advertises from resolvable private addresses, on the
    /// accept list by its identity: a controller that does not resolve them for the
    /// host (no resolving list: the virtual one, or a host without privacy) could not
    /// tell it, so the scan runs without the list (Scanning_Filter_Policy 0, as Linux
    /// falls back) and the host picks the device out with the bond's IRK. (Before, the
    /// controller filtered by the identity and the device was never heard.)
    @Test func aPrivateDeviceIsFoundByTheHostWhenTheControllerCannotResolveIt() async throws {
        let rig = try await PrivateRig(seeds: (61, 62))
        defer { Task { await rig.close() } }
        let (radio, policies, c, p) = (rig.radio, rig.policies, rig.central, rig.peripheral)
        let first = try #require(try await PrivacyTests.find(c, "private"))
        let remote = try await c.central.connect(to: first, within: .seconds(5))
        #expect(try await remote.secure().bonded)
        _ = try await remote.disconnect()
        await p.rotatePrivateAddress()
        let identity = try #require(await p.identity)
        try await c.setAcceptList([DeviceAddress(identity.address, type: identity.addressType)])
        let heard = try await c.central.scan(for: .milliseconds(300), acceptListOnly: true)
        #expect(Set(heard.compactMap(\.name)) == ["private"])
        #expect(heard.allSatisfy { $0.address != identity.address && $0.device.identity == identity.address })
        #expect(policies.parameters.map(\.filterPolicy).last == 0)
        withExtendedLifetime(radio) {}
    }

    /// The same device bonded while a scan through the accept list runs: the scan
    /// began with the controller filtering by the list (the device was not bonded, so
    /// nothing could tell its private addresses then), and the new bond makes it
    /// start again with the host's filter (the virtual controller resolves nothing),
    /// so the device is heard from its next private address. (Before, the controller
    /// went on filtering by the identity until the scan ended.)
    @Test func aDeviceBondedDuringAScanThroughTheListIsFound() async throws {
        let rig = try await PrivateRig(seeds: (65, 66))
        defer { Task { await rig.close() } }
        let (radio, policies, c, p) = (rig.radio, rig.policies, rig.central, rig.peripheral)
        let first = try #require(try await PrivacyTests.find(c, "private"))
        let identity = try #require(await p.identity)
        try await c.setAcceptList([DeviceAddress(identity.address, type: identity.addressType)])
        let held = ScanReader(try await c.central.scan(acceptListOnly: true))
        #expect(await held.take(after: .milliseconds(200), on: c).isEmpty, "not bonded yet: nothing tells its private address")
        #expect(policies.parameters.map(\.filterPolicy).last == 1)
        let remote = try await c.central.connect(to: first, within: .seconds(5))
        #expect(try await remote.secure().bonded)
        _ = try await remote.disconnect()
        await p.rotatePrivateAddress()
        _ = await held.take(after: .milliseconds(100), on: c)
        await radio.tick()
        let heard = await held.take(after: .milliseconds(300), on: c)
        #expect(Set(heard.compactMap(\.name)) == ["private"], "\(heard.map(\.address))")
        #expect(heard.allSatisfy { $0.address != identity.address && $0.address != first.address && $0.device.identity == identity.address })
        #expect(policies.parameters.map(\.filterPolicy).last == 0)
        withExtendedLifetime(held) {}
    }

    /// Rootcanal with a central and a peripheral under privacy, the peripheral
    /// advertising "rc-private", and a third host advertising "rc-other"; with the
    /// peripheral's private address as the central's scan found it. Nil without Rootcanal.
    static func rootcanalPrivateRig(seeds: (central: UInt64, peripheral: UInt64), centralStore: any BondStore = InMemoryBondStore())
        async throws -> (RootcanalHosts, ScanResult)?
    {
        guard let rc = try await Bench.rootcanalHosts(3, security: {
            [SecurityOptions(store: centralStore, random: .seeded(seeds.central), privacy: PrivacyOptions()),
             SecurityOptions(random: .seeded(seeds.peripheral), privacy: PrivacyOptions()), SecurityOptions()][$0]
        }) else { return nil }
        do {
            try await rc.hosts[1].peripheral.startAdvertising(AdvertisingSetsTests.named("rc-private"))
            try await rc.hosts[2].peripheral.startAdvertising(AdvertisingSetsTests.named("rc-other"))
            return (rc, try #require(try await PrivacyTests.find(rc.hosts[0], "rc-private", within: .seconds(10))))
        } catch {
            rc.stop()
            throw error
        }
    }

    /// The central of `rc` connects to `first` (the private peripheral), bonds and
    /// disconnects; returns the peripheral's identity.
    static func bondThenDisconnect(_ rc: RootcanalHosts, _ first: ScanResult) async throws -> IdentityKey {
        let remote = try await rc.hosts[0].central.connect(to: first, within: .seconds(10))
        #expect(try await remote.secure().bonded)
        _ = try await remote.disconnect()
        return try #require(await rc.hosts[1].identity)
    }

    /// On Rootcanal, whose controller resolves private addresses through the resolving
    /// list: a central under privacy bonds with a private peripheral, puts its identity
    /// on the accept list, and the controller itself reports it alone (the list is held
    /// meanwhile, which it is only while the controller scans through it).
    @Test func onRootcanalTheControllerFindsAPrivateDeviceThroughItsResolvingList() async throws {
        guard let (rc, first) = try await Self.rootcanalPrivateRig(seeds: (63, 64)) else { return }
        defer { rc.stop() }
        let c = rc.hosts[0]
        let identity = try await Self.bondThenDisconnect(rc, first)
        try await c.setAcceptList([DeviceAddress(identity.address, type: identity.addressType)])
        let held = ScanReader(try await c.central.scan(acceptListOnly: true))
        await #expect { try await c.setAcceptList([DeviceAddress(rc.addresses[2])]) } throws: { Self.inUse($0) }
        let heard = await held.take(after: .seconds(1), on: c)
        #expect(Set(heard.compactMap(\.name)) == ["rc-private"], "\(heard.map(\.address))")
        withExtendedLifetime(held) {}
    }

    /// On Rootcanal, the same bond made while the scan through the list runs: the scan
    /// stops, the resolving list takes the bond, and the scan starts again through the
    /// list, now that the controller can tell the device's private addresses itself.
    @Test func onRootcanalADeviceBondedDuringAScanThroughTheListIsFound() async throws {
        guard let (rc, first) = try await Self.rootcanalPrivateRig(seeds: (67, 68)) else { return }
        defer { rc.stop() }
        let (c, p) = (rc.hosts[0], rc.hosts[1])
        let identity = try #require(await p.identity)
        try await c.setAcceptList([DeviceAddress(identity.address, type: identity.addressType)])
        let held = ScanReader(try await c.central.scan(acceptListOnly: true))
        #expect(await held.take(after: .milliseconds(500), on: c).isEmpty, "not bonded yet: nothing tells its private address")
        let remote = try await c.central.connect(to: first, within: .seconds(10))
        #expect(try await remote.secure().bonded)
        _ = try await remote.disconnect()
        _ = await held.take(after: .milliseconds(100), on: c)
        let heard = await held.take(after: .seconds(1), on: c)
        #expect(Set(heard.compactMap(\.name)) == ["rc-private"], "\(heard.map(\.address))")
        // The controller itself told it: it scans through the list (Scanning_Filter_Policy 1).
        #expect(await c.controllerScansThroughAcceptList() == true)
        withExtendedLifetime(held) {}
    }

    /// On Rootcanal, a bond removed by another program from the central's bond file
    /// (`btctl bonds remove` beside a daemon): the host notices within a second
    /// (`SecurityEvent.bondsChangedElsewhere`), takes the peer's IRK off the
    /// controller's resolving list, and a scan through an accept list naming the
    /// peer's identity hears it no more. Before, the list kept the IRK, so the
    /// controller went on telling the private addresses of a peer no longer bonded.
    @Test func onRootcanalABondRemovedByAnotherProgramLeavesTheResolvingList() async throws {
        try await Self.bondedWithABondFile(seeds: (73, 74)) { rc, identity, path in
            let c = rc.hosts[0]
            await c.syncResolvingList()
            #expect(await c.own.resolvingList?.entries.map(\.address) == [identity.address])
            try await Self.removeElsewhere(identity, from: path, noticedBy: c)
            // (After the host's own sync, which the event started: the turnstile orders them.)
            await c.syncResolvingList()
            #expect(await c.own.resolvingList?.entries.isEmpty == true)
            try await c.setAcceptList([DeviceAddress(identity.address, type: identity.addressType)])
            let held = ScanReader(try await c.central.scan(acceptListOnly: true))
            let heard = await held.take(after: .seconds(1), on: c).map(\.address)
            #expect(heard.isEmpty)
            withExtendedLifetime(held) {}
        }
    }

    /// On Rootcanal, that bond removed by another program while a scan through the
    /// list hears the device: the host notices, the scan stops, the resolving list lets
    /// the peer's IRK go, the scan starts again through the list, and the device's
    /// private addresses are heard no more. (Before, the list kept the IRK until the
    /// scan ended, so the controller went on telling a device no longer bonded.)
    @Test func onRootcanalABondRemovedDuringAScanThroughTheListIsHeardNoMore() async throws {
        try await Self.bondedWithABondFile(seeds: (75, 76)) { rc, identity, path in
            let c = rc.hosts[0]
            try await c.setAcceptList([DeviceAddress(identity.address, type: identity.addressType)])
            let held = ScanReader(try await c.central.scan(acceptListOnly: true))
            let before = await held.take(after: .seconds(1), on: c)
            #expect(Set(before.compactMap(\.name)) == ["rc-private"], "\(before.map(\.address))")
            try await Self.removeElsewhere(identity, from: path, noticedBy: c)
            _ = await held.take(after: .milliseconds(300), on: c)  // (what the controller sent before the scan stopped)
            let after = await held.take(after: .seconds(1), on: c)
            #expect(after.isEmpty, "\(after.map(\.address))")
            #expect(await c.own.resolvingList?.entries.isEmpty == true)
            #expect(await c.controllerScansThroughAcceptList() == true)
            withExtendedLifetime(held) {}
        }
    }

    /// `rootcanalPrivateRig` with the central's bonds in a bond file of its own (gone
    /// afterwards), bonded with the private peripheral (`bondThenDisconnect`): `body`
    /// gets the rig, the peripheral's identity and the file's path. Skipped without
    /// Rootcanal.
    static func bondedWithABondFile(seeds: (central: UInt64, peripheral: UInt64),
                                    _ body: (RootcanalHosts, IdentityKey, String) async throws -> Void) async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("bonds-rl-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        guard let (rc, first) = try await rootcanalPrivateRig(seeds: seeds, centralStore: FileBondStore(path: path)) else { return }
        defer { rc.stop() }
        try await body(rc, try await bondThenDisconnect(rc, first), path)
    }

    /// Another program (a second store on the same file, as `btctl bonds remove`)
    /// removes `identity`'s bond; returns once `host` said it noticed
    /// (`SecurityEvent.bondsChangedElsewhere`, within 5 s).
    static func removeElsewhere(_ identity: IdentityKey, from path: String, noticedBy host: BluetoothHost) async throws {
        let events = await host.securityEvents()
        #expect(try FileBondStore(path: path).remove(address: identity.address, type: identity.addressType))
        let seen = await collect(events.filter { $0 == .bondsChangedElsewhere }, count: 1, within: .seconds(5))
        #expect(seen == [.bondsChangedElsewhere])
    }
}
