// Enhanced ATT bearers from btctl, against Bumble's EATT implementation on Rootcanal:
// `btctl gatt subscribe --eatt 2` to Bumble's EATT server, which notifies on each
// enhanced bearer of the link (the values must come on both); `--eatt` to a server
// without EATT, which keeps the one bearer and still reads; `btctl gatt serve --eatt`
// to Bumble's EATT client, which is refused on the unencrypted link, pairs, and
// reads and discovers on the two bearers it opens.

import BLETesting
import Foundation
import Testing

@Suite(.serialized, .liveTimeLimit) struct BtctlEATTTests {
    /// Bumble's EATT server: btctl pairs (the channel shall be encrypted, and Bumble's
    /// server does not ask), opens two enhanced bearers, subscribes, and prints the
    /// notification Bumble sends on each of them.
    @Test func subscribeOverTwoEnhancedBearersOfBumblesServer() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        guard BtctlGATTTests.isBuilt() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let (bumble, pipe) = try Interop.launchBumble(python, "bumble_eatt_peripheral.py", port: rc.hciPort, [])
        defer { RootcanalProcess.kill(bumble) }
        let bonds = FileManager.default.temporaryDirectory.appendingPathComponent("btctl-bonds-eatt-subscribe-\(getpid()).json").path
        defer { try? FileManager.default.removeItem(atPath: bonds) }
        let run = try await JSONSchemaTests.run(["gatt", "subscribe", "--eatt", "2", "--uuid", "EA02", "--count", "2", "--yes", "--bonds", bonds,
                                                 "F1:F2:F3:F4:F5:F6/random", "-t", rc.transportSpec, "--json", "--connect-timeout", "20"])
        #expect(run.status == 0, "\(run.out)")
        let lines = try JSONSchemaTests.check(run.out, against: "gatt-subscribe")
        func named(_ e: String) -> [[String: Any]] { lines.filter { $0["event"] as? String == e } }
        // Paired and encrypted first, then the bearers, then the subscription: in that order.
        #expect(lines.compactMap { $0["event"] as? String }.prefix(4) == ["paired", "secured", "eatt", "subscribed"], "\(run.out)")
        #expect(named("eatt").first?["bearers"] as? Int == 2, "\(run.out)")
        #expect(Set(named("notification").compactMap { $0["value"] as? String }) == ["e0", "e1"], "\(run.out)")
        let events = await BumbleL2CAPTests.lines(pipe)
        #expect(BumbleSMPTests.named(events, "notified").first?["bearers"] as? Int == 2, "\(events)")
    }

    /// `--eatt` to a server whose Server Supported Features has no EATT bit (`btctl
    /// gatt serve` without `--eatt`): the one ATT bearer carries the read, and the
    /// event says why no enhanced bearer opened; nothing was paired for it.
    @Test func aServerWithoutEATTKeepsTheOneBearer() async throws {
        guard let binary = try Interop.rootcanal() else { return }
        guard BtctlGATTTests.isBuilt() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let server = try LiveProcess(BtctlGATTTests.btctl, ["gatt", "serve", Interop.root + "/docs/examples/battery.json", "-t", rc.transportSpec, "--json"])
        #expect(await server.waitForOutput { $0.contains("\"event\":\"advertising\"") }, "\(server.output)")
        let run = try await JSONSchemaTests.run(["gatt", "read", "--eatt", "3", "--name", "btctl-battery", "--uuid", "6E400003-B5A3-F393-E0A9-E50E24DCCA9E",
                                                 "-t", rc.transportSpec, "--json"])
        #expect(run.status == 0, "\(run.out)")
        let lines = try JSONSchemaTests.check(run.out, against: "gatt-read")
        let eatt = lines.first { $0["event"] as? String == "eatt" }
        #expect(eatt?["bearers"] as? Int == 0 && (eatt?["error"] as? String)?.contains("Server Supported Features") == true, "\(run.out)")
        #expect(!lines.contains { $0["event"] as? String == "secured" }, "\(run.out)")
        #expect(lines.last?["text"] as? String == "hello from btctl", "\(run.out)")
        server.send("quit")
        #expect(await server.exit(timeout: 20) == 0)
    }

    /// `btctl gatt serve --eatt` under Bumble's EATT client: Server Supported Features
    /// says EATT; the request on the unencrypted link is refused "insufficient
    /// authentication" (Vol 3 Part G §5.3.2); Bumble pairs (Just Works, `--yes`),
    /// opens two bearers with one request, reads EA01 on both at once, discovers on
    /// the second, and Exchange MTU on an enhanced bearer is refused. btctl reports
    /// each bearer.
    @Test func serveTakesBumblesEnhancedBearers() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        guard BtctlGATTTests.isBuilt() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("btctl-eatt-\(getpid()).json").path
        try #"{"name": "btctl-eatt", "services": [{"uuid": "EA00", "characteristics": [{"uuid": "EA01", "properties": ["read"], "value": "0e0a77"}]}]}"#
            .write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        // A bond file of its own: with a bond for Bumble's address, the refusal would say "insufficient encryption".
        let bonds = FileManager.default.temporaryDirectory.appendingPathComponent("btctl-bonds-eatt-serve-\(getpid()).json").path
        defer { try? FileManager.default.removeItem(atPath: bonds) }
        let server = try LiveProcess(BtctlGATTTests.btctl, ["gatt", "serve", file, "--eatt", "--yes", "--bonds", bonds, "-t", rc.transportSpec, "--json"])
        #expect(await server.waitForOutput { $0.contains("\"event\":\"advertising\"") }, "\(server.output)")
        let advertising = server.output.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            .first { $0["event"] as? String == "advertising" }
        let address = try #require(advertising?["address"] as? String)
        try await BumbleFacadeTests.runBumblesEATTCentral(python, port: rc.hciPort, against: address)
        server.send("quit")
        #expect(await server.exit(timeout: 20) == 0)
        let served = try JSONSchemaTests.check(server.output, against: "gatt-serve")
        // Each bearer Bumble opened is reported, after the pairing that allowed it.
        let bearers = served.filter { $0["event"] as? String == "eatt" }
        #expect(bearers.count == 2 && bearers.allSatisfy { ($0["mtu"] as? Int ?? 0) >= 64 }, "\(server.output)")
        let order = served.compactMap { $0["event"] as? String }
        #expect((order.firstIndex(of: "secured") ?? .max) < (order.firstIndex(of: "eatt") ?? -1), "\(server.output)")
        #expect(server.output.contains("\"event\":\"paired\""), "\(server.output)")
    }
}
