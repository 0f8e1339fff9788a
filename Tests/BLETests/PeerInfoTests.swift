// What a link's peer says of itself: `remoteFeatures` (LE Read Remote Features) and
// `remoteVersion` (Read Remote Version Information), asked once per link and kept,
// on the virtual radio and on Rootcanal (whose controllers answer with the peer
// controller's own features and version). The link's end ending the wait:
// LinkProcedureEndTests.

import BLE
import BLETesting
import HCI
import Synchronization
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct PeerInfoTests {
    @Test func aCentralLearnsWhatItsPeerHas() async throws {
        let radio = VirtualRadio()
        let commands = Mutex<[HCIOpcode]>([])
        let central = BluetoothHost(transport: DroppingTransport(wrapping: await radio.makeController(address: BluetoothAddress("C0:00:00:00:0D:01")!),
                                                                 dropping: { _ in false }, sent: { p in
            if case let .command(op, _) = p { commands.withLock { $0.append(op) } }
        }), logger: Bench.logger)
        let peripheralAddress = BluetoothAddress("C0:00:00:00:0D:02")!
        let peripheral = BluetoothHost(transport: await radio.makeController(address: peripheralAddress, extendedAdvertising: true), logger: Bench.logger)
        try await central.start()
        let theirs = try await peripheral.start()
        defer { Task { await central.close(); await peripheral.close() } }
        try await peripheral.peripheral.startAdvertising(AdvertisingSetsTests.named("info"))
        let remote = try await central.central.connect(to: peripheralAddress, within: .seconds(5))
        // The peer is a Bluetooth 5 controller (LE 2M, extended advertising); we are not.
        let features = try #require(try await remote.remoteFeatures())
        #expect(features == theirs.leFeatures && features.contains(bit: LEFeatures.le2MPHY)
                && features.contains(bit: LEFeatures.dataPacketLengthExtension), "\(features)")
        let version = try #require(try await remote.remoteVersion())
        #expect(version == RemoteVersion(version: 13, companyIdentifier: 0xFFFF, subversion: 0))
        // The link's parameters: LE Connection Complete's (the host's default interval,
        // 50 ms), then each update's, on both sides.
        let link0 = try #require(await peripheral.connections.first)
        #expect(try await remote.parameters() == ConnectionParameters(interval: 40, latency: 0, supervisionTimeout: 500))
        #expect(try await peripheral.parameters(of: link0) == remote.parameters())
        _ = try await remote.updateParameters(intervalMin: 0x10, intervalMax: 0x18, latency: 1, supervisionTimeout: 0x100)
        #expect(try await remote.parameters() == ConnectionParameters(interval: 0x18, latency: 1, supervisionTimeout: 0x100))
        #expect(version.description.hasPrefix("Bluetooth 5.4 (0x0d)"), "\(version)")
        // Asked once per link: the second calls send nothing.
        let asked = commands.withLock { $0 }
        #expect(asked.filter { $0 == .leReadRemoteFeatures }.count == 1 && asked.filter { $0 == .readRemoteVersionInformation }.count == 1)
        let (again, againVersion) = (try await remote.remoteFeatures(), try await remote.remoteVersion())
        #expect(again == features && againVersion == version)
        #expect(commands.withLock { $0 }.count == asked.count)
        // The peripheral asks too, of a central without LE 2M.
        let link = try #require(await peripheral.connections.first)
        let ours = try #require(try await peripheral.remoteFeatures(of: link))
        #expect(!ours.contains(bit: LEFeatures.le2MPHY) && ours.contains(bit: LEFeatures.encryption))
        _ = try await remote.disconnect()
        await #expect(throws: BLEError.self) { try await remote.remoteFeatures() }
        await #expect(throws: BLEError.self) { try await remote.parameters() }
        withExtendedLifetime(radio) {}
    }

    /// On Rootcanal: each side reads the other's controller.
    @Test func onRootcanalEachSideLearnsTheOthersController() async throws {
        guard let rc = try await Bench.rootcanalHosts(2) else { return }
        defer { rc.stop() }
        let (p, c) = (rc.hosts[0], rc.hosts[1])
        try await p.peripheral.startAdvertising(AdvertisingSetsTests.named("rc-info"))
        let remote = try await c.central.connect(to: rc.addresses[0], within: .seconds(10))
        let pInfo = try #require(await p.info)
        let features = try #require(try await remote.remoteFeatures())
        #expect(features.contains(bit: LEFeatures.encryption) && features.contains(bit: LEFeatures.le2MPHY), "\(features) vs \(pInfo.leFeatures)")
        let version = try #require(try await remote.remoteVersion())
        #expect(version.version == pInfo.version.lmpVersion && version.companyIdentifier == pInfo.version.companyIdentifier, "\(version)")
        let link = try #require(await p.connections.first)
        #expect(try await p.remoteVersion(of: link) != nil)
        // Both sides know the link's parameters from LE Connection Complete.
        let parameters = try await remote.parameters()
        #expect(try await p.parameters(of: link) == parameters && parameters.interval >= 6, "\(parameters)")
    }
}
