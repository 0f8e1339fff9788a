// Robust caching against Bumble's GATT server (its Generic Attribute service has a
// Database Hash): our facade central bonds with Bumble's peripheral and discovers;
// on the next link one read of Bumble's Database Hash replaces the discovery, and
// the cached handles reach Bumble's protected characteristic once the link is
// encrypted from the bond.

import BLE
import BLETesting
import Foundation
import Snoop
import Synchronization
import Testing
import Transports

@Suite(.serialized, .liveTimeLimit) struct BumbleGATTCacheTests {
    @Test func bumblesLayoutComesFromTheBondWhileItsHashHolds() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        // The ATT opcodes our central sends.
        let sent = Mutex<[UInt8]>([])
        let transport = RecordingTransport(wrapping: try StreamTransports.tcp(host: "127.0.0.1", port: rc.hciPort, logger: Interop.logger)) { r in
            if r.direction == .hostToController, case let .packet(.acl(a)) = r.content, a.data.count > 4, a.data[2] == 4, a.data[3] == 0 {
                sent.withLock { $0.append(a.data[4]) }
            }
        }
        let host = BluetoothHost(transport: transport, logger: Interop.logger, security: SecurityOptions(random: .seeded(31)))
        try await host.start()
        let peer = try BumbleSMPTests.launch(python, rc.hciPort, ["peripheral", "1", "0", "none", "0"])
        defer { RootcanalProcess.kill(peer.process) }
        let protected = BluetoothUUID("3f3e0002-0000-1000-8000-00805f9b34fb")!

        let first = try await host.central.connect(to: BumbleSMPTests.bumble, type: .random, within: .seconds(20))
        #expect(try await first.secure().bonded)
        let services = try await first.discoverServices()
        #expect(sent.withLock { $0.contains(0x10) })  // Read By Group Type: a discovery
        #expect(try await first.read(try await first.characteristic(protected)) == [0x42, 0x43])
        let cache = try #require(try await host.bonds().first?.database, "no layout stored with the bond")
        #expect(cache.hash.count == 16 && cache.services.count == services.count)
        _ = try await first.disconnect()

        let second = try await host.central.connect(to: BumbleSMPTests.bumble, type: .random, within: .seconds(20))
        sent.withLock { $0.removeAll() }
        #expect(try await second.discoverServices() == services)
        // Bumble answered one Read By Type of its Database Hash with the stored hash.
        #expect(sent.withLock { $0 } == [0x08], "\(sent.withLock { $0 })")
        #expect(try await second.secure().bonded)
        #expect(try await second.read(try await second.characteristic(protected)) == [0x42, 0x43])
        _ = try await second.disconnect()
        RootcanalProcess.kill(peer.process)
        let bumble = await peer.events()
        await host.close()
        #expect(BumbleSMPTests.named(bumble, "paired").count == 1, "\(bumble)")
        #expect(BumbleSMPTests.named(bumble, "encryption").count == 2, "\(bumble)")
    }
}
