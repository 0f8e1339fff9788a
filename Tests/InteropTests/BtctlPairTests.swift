// `btctl pair`, `btctl bonds` and `btctl gatt`'s pairing on demand as a user runs
// them: a real btctl process on Rootcanal pairs with Bumble's peripheral (Secure
// Connections, Bumble displays the passkey, btctl types it from --passkey), stores
// the bond in a 0600 file, lists it (no keys printed) and removes it; `btctl gatt
// read` of a characteristic Bumble protects pairs when refused, and the next run
// encrypts from the bond; `btctl gatt write --signed` signs with the CSRK it gave.

import BLETesting
import Foundation
import Testing

@Suite(.serialized) struct BtctlPairTests {
    static func run(_ args: [String]) async throws -> (status: Int32, out: String, err: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: BtctlGATTTests.btctl)
        p.arguments = args
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        p.standardInput = FileHandle.nullDevice
        try p.run()
        async let o = Interop.readAll(out), e = Interop.readAll(err)
        let status = await Interop.exit(of: p)
        return (status, String(decoding: await o, as: UTF8.self), String(decoding: await e, as: UTF8.self))
    }

    @Test func pairStoresABondThatBondsListsAndRemoves() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        guard BtctlGATTTests.isBuilt() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let peer = try BumbleSMPTests.launch(python, rc.hciPort, ["peripheral", "1", "1", "display", "123456"])
        defer { RootcanalProcess.kill(peer.process) }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("btctl-bonds-\(getpid()).json").path
        defer { try? FileManager.default.removeItem(atPath: file) }

        let paired = try await Self.run(["pair", "F1:F2:F3:F4:F5:F6/random", "--io-capability", "keyboard-only", "--mitm", "--passkey", "123456",
                                   "--bonds", file, "--json", "-t", rc.transportSpec])
        #expect(paired.status == 0, "\(paired.err)")
        #expect(paired.out.contains("\"event\":\"paired\"") && paired.out.contains("\"method\":\"Passkey Entry\"") && paired.out.contains("\"level\":\"secure-connections\""), "\(paired.out)")
        let attributes = try FileManager.default.attributesOfItem(atPath: file)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)

        let listed = try await Self.run(["bonds", "list", "--bonds", file, "--json"])
        #expect(listed.status == 0, "\(listed.err)")
        #expect(listed.out.split(separator: "\n").count == 1 && listed.out.contains("\"irk\":true"), "\(listed.out)")
        // Keys are never printed.
        let text = try await Self.run(["bonds", "--bonds", file])
        let stored = try String(contentsOfFile: file, encoding: .utf8)
        #expect(text.out.contains("secure-connections") && !text.out.contains("key\":"), "\(text.out)")
        #expect(stored.contains("\"key\""))  // (they are in the file, which only we can read)

        let identity = try #require(listed.out.split(separator: "\"").drop { $0 != "address" }.dropFirst(2).first.map(String.init))
        let removed = try await Self.run(["bonds", "remove", identity, "--bonds", file])
        #expect(removed.status == 0, "\(removed.err)")
        #expect(try await Self.run(["bonds", "list", "--bonds", file, "--json"]).out.isEmpty)
        let again = try await Self.run(["bonds", "remove", identity, "--bonds", file])
        #expect(again.status != 0 && again.err.contains("no bond"), "\(again.err)")
    }

    @Test func gattReadPairsOnDemandThenEncryptsFromTheBond() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        guard BtctlGATTTests.isBuilt() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let peer = try BumbleSMPTests.launch(python, rc.hciPort, ["peripheral", "1", "0", "none", "0"])
        defer { RootcanalProcess.kill(peer.process) }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("btctl-bonds-gatt-\(getpid()).json").path
        defer { try? FileManager.default.removeItem(atPath: file) }
        let read = ["gatt", "read", "F1:F2:F3:F4:F5:F6/random", "--uuid", "3f3e0002-0000-1000-8000-00805f9b34fb", "--yes", "--bonds", file, "--json", "-t", rc.transportSpec]

        // Bumble answers Insufficient Authentication; btctl pairs (Just Works), bonds, reads.
        let first = try await Self.run(read)
        #expect(first.status == 0, "\(first.err)")
        #expect(first.out.contains("\"event\":\"secured\"") && first.out.contains("\"value\":\"4243\""), "\(first.out)")
        #expect(try await Self.run(["bonds", "list", "--bonds", file, "--json"]).out.split(separator: "\n").count == 1)
        // The next run encrypts from the bond: no second pairing on Bumble's side.
        let second = try await Self.run(read)
        #expect(second.status == 0, "\(second.err)")
        #expect(second.out.contains("\"bonded\":true") && second.out.contains("\"value\":\"4243\""), "\(second.out)")
        let bumble = await peer.events()
        #expect(BumbleSMPTests.named(bumble, "paired").count == 1, "\(bumble)")
        #expect(BumbleSMPTests.named(bumble, "encryption").count == 2, "\(bumble)")
    }

    @Test func gattWriteSignedUsesTheCSRKGivenWhenPairing() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        guard BtctlGATTTests.isBuilt() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let peer = try BumbleSMPTests.launch(python, rc.hciPort, ["peripheral-sign", "1", "0", "none", "0"])
        defer { RootcanalProcess.kill(peer.process) }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("btctl-bonds-sign-\(getpid()).json").path
        defer { try? FileManager.default.removeItem(atPath: file) }
        let paired = try await Self.run(["pair", "F1:F2:F3:F4:F5:F6/random", "--signing-keys", "--yes", "--bonds", file, "--json", "-t", rc.transportSpec])
        #expect(paired.status == 0, "\(paired.err)")
        let written = try await Self.run(["gatt", "write", "F1:F2:F3:F4:F5:F6/random", "--uuid", "3f3e0003-0000-1000-8000-00805f9b34fb",
                                          "--value", "a5a6", "--signed", "--bonds", file, "--json", "-t", rc.transportSpec])
        #expect(written.status == 0, "\(written.err)")
        let bumble = await peer.events()
        let checks = BumbleSMPTests.named(bumble, "signed-write")
        #expect(checks.count == 1 && checks.first?["value"] as? String == "a5a6" && checks.first?["verified"] as? Bool == true, "\(bumble)")
        #expect(checks.first?["counter"] as? Int == 0, "\(bumble)")
    }
}
