// Data signing against Bumble, both hosts on Rootcanal: our facade central pairs
// with Bumble's peripheral, both distributing CSRKs over SMP; on the next link, not
// encrypted, our Signed Write Commands verify with the CSRK Bumble received (checked
// by the peer script with bumble.crypto's AES-CMAC), and Bumble's, signed with the
// CSRK it distributed, are written by our server, while its replay and its forgery
// are not.

import BLE
import BLETesting
import Foundation
import Testing
import Transports

@Suite(.serialized, .liveTimeLimit) struct BumbleSigningTests {
    @Test func signedWritesBothWaysWithTheCSRKsBumbleExchanged() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        var pairing = PairingConfiguration()
        pairing.keys = [.encryptionKey, .identityKey, .signingKey]
        let transport = try StreamTransports.tcp(host: "127.0.0.1", port: rc.hciPort, logger: Interop.logger)
        let host = BluetoothHost(transport: transport, logger: Interop.logger, security: SecurityOptions(pairing: pairing, random: .seeded(61)))
        try await host.start()
        let ours = Characteristic(uuid: BluetoothUUID("3f3e0005-0000-1000-8000-00805f9b34fb")!, properties: [.authenticatedSignedWrites], value: [0])
        try await host.peripheral.add(Service(uuid: BluetoothUUID("3f3e0004-0000-1000-8000-00805f9b34fb")!, characteristics: [ours]))
        let written = host.peripheral.events()
        let peer = try BumbleSMPTests.launch(python, rc.hciPort, ["peripheral-sign", "1", "0", "none", "0"])
        defer { RootcanalProcess.kill(peer.process) }
        let signedUUID = BluetoothUUID("3f3e0003-0000-1000-8000-00805f9b34fb")!

        let first = try await host.central.connect(to: BumbleSMPTests.bumble, type: .random, within: .seconds(20))
        #expect(try await first.secure().bonded)
        // A round trip lets Bumble finish storing the keys before the link ends.
        _ = try await first.discoverServices()
        _ = try await first.disconnect()
        let bond = try #require(try await host.bonds().first)
        #expect(bond.keys.localCSRK != nil)
        #expect(bond.keys.peerCSRK == [UInt8](repeating: 0, count: 16))

        let second = try await host.central.connect(to: BumbleSMPTests.bumble, type: .random, within: .seconds(20))
        #expect(await !second.security.encrypted)
        let signed = try await second.characteristic(signedUUID)
        try await second.writeSigned([0xA0], to: signed)
        try await second.writeSigned([0xA1, 0xA2], to: signed)
        // Bumble's writes to our characteristic: B0 and B1, not the replay nor the forgery.
        let values = written.compactMap { e -> [UInt8]? in
            if case let .written(_, v, _) = e { return v }
            return nil
        }
        #expect(await collect(values, count: 2, within: .seconds(5)) == [[0xB0], [0xB1]])
        #expect(await collect(values, count: 1, within: .seconds(1)).isEmpty)
        #expect(try await host.bonds().first?.peerSignCounter == 1)
        #expect(try await host.bonds().first?.signCounter == 1)
        _ = try await second.disconnect()
        RootcanalProcess.kill(peer.process)
        let bumble = await peer.events()
        await host.close()
        let checks = BumbleSMPTests.named(bumble, "signed-write")
        #expect(checks.map { $0["value"] as? String } == ["a0", "a1a2"], "\(bumble)")
        #expect(checks.map { $0["counter"] as? Int } == [0, 1], "\(bumble)")
        #expect(checks.allSatisfy { $0["verified"] as? Bool == true && $0["encrypted"] as? Bool == false }, "\(bumble)")
        #expect(BumbleSMPTests.named(bumble, "sent-signed").count == 1, "\(bumble)")
    }
}
