// `btctl pair`, `btctl bonds` and `btctl gatt`'s pairing on demand as a user runs
// them: a real btctl process on Rootcanal pairs with Bumble's peripheral (Secure
// Connections, Bumble displays the passkey, btctl types it from --passkey), stores
// the bond in a 0600 file, lists it (no keys printed) and removes it; `btctl gatt
// read` of a characteristic Bumble protects pairs when refused, and the next run
// encrypts from the bond; `btctl gatt write --signed` signs with the CSRK it gave.

import BLETesting
import Foundation
import HCI
import SMP
import Testing

@Suite(.serialized, .liveTimeLimit) struct BtctlPairTests {
    /// btctl with `args`, `input` on its standard input (then its end).
    static func run(_ args: [String], input: [UInt8] = []) async throws -> (status: Int32, out: String, err: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: BtctlGATTTests.btctl)
        p.arguments = args
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        if input.isEmpty {
            p.standardInput = FileHandle.nullDevice
        } else {
            // Within the pipe's buffer: written whole before btctl reads it.
            precondition(input.count <= 4096)
            let pipe = Pipe()
            p.standardInput = pipe
            pipe.fileHandleForWriting.write(Data(input))
            try pipe.fileHandleForWriting.close()
        }
        try p.run()
        async let o = Interop.readAll(out), e = Interop.readAll(err)
        let status = await Interop.exit(of: p)
        return (status, String(decoding: await o, as: UTF8.self), String(decoding: await e, as: UTF8.self))
    }

    /// What each test here starts with: Rootcanal, Python with Bumble, and a bond file
    /// that goes with `end()`. Nil (the test is skipped) when Rootcanal, Bumble or
    /// btctl is missing.
    struct Rig {
        let rc: RootcanalProcess
        let python: String
        let file: String
        /// bumble_smp_peer.py with `args`, on the rig's Rootcanal.
        func bumble(_ args: [String]) throws -> BumbleSMPTests.Peer { try BumbleSMPTests.launch(python, rc.hciPort, args) }
        func end() {
            rc.stop()
            try? FileManager.default.removeItem(atPath: file)
        }
        /// `btctl pair --json` with the rig's bond file to Bumble's peripheral
        /// (F1:F2:F3:F4:F5:F6, displaying 123456), typing its passkey, with `extra`.
        func pairTypingBumblesPasskey(_ extra: [String] = []) async throws -> (status: Int32, out: String, err: String) {
            try await BtctlPairTests.run(["pair", "F1:F2:F3:F4:F5:F6/random", "--io-capability", "keyboard-only", "--mitm", "--passkey", "123456"]
                                         + extra + ["--bonds", file, "--json", "-t", rc.transportSpec])
        }
    }

    /// The first bond's `address` in `bonds list --json` output.
    static func firstAddress(_ listed: String) -> String? {
        listed.split(separator: "\"").drop { $0 != "address" }.dropFirst(2).first.map(String.init)
    }

    static func rig(_ name: String) async throws -> Rig? {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python(), BtctlGATTTests.isBuilt() else { return nil }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("btctl-bonds-\(name)-\(getpid()).json").path
        return Rig(rc: try await RootcanalProcess.launch(binary: binary), python: python, file: file)
    }

    @Test func pairStoresABondThatBondsListsAndRemoves() async throws {
        guard let rig = try await Self.rig("pair") else { return }
        defer { rig.end() }
        let file = rig.file
        let peer = try rig.bumble(["peripheral", "1", "1", "display", "123456"])
        defer { RootcanalProcess.kill(peer.process) }

        let paired = try await rig.pairTypingBumblesPasskey()
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

        let identity = try #require(Self.firstAddress(listed.out), "\(listed.out)")
        let removed = try await Self.run(["bonds", "remove", identity, "--bonds", file])
        #expect(removed.status == 0, "\(removed.err)")
        #expect(try await Self.run(["bonds", "list", "--bonds", file, "--json"]).out.isEmpty)
        let again = try await Self.run(["bonds", "remove", identity, "--bonds", file])
        #expect(again.status != 0 && again.err.contains("no bond"), "\(again.err)")

        // --bond-limit 0: the pairing encrypts, the bond is not stored and the event says why.
        let unbonded = try await rig.pairTypingBumblesPasskey(["--bond-limit", "0"])
        #expect(unbonded.status == 0, "\(unbonded.err)")
        #expect(unbonded.out.contains("\"bonded\":false") && unbonded.out.contains("\"bond_not_stored\":\"the bond store holds its limit of 0 bonds"), "\(unbonded.out)")
        #expect(try await Self.run(["bonds", "list", "--bonds", file, "--json"]).out.isEmpty)
        #expect(try await Self.run(["pair", "F1:F2:F3:F4:F5:F6/random", "--bond-limit=-1"]).err.contains("--bond-limit must be 0 or more"))
    }

    /// `btctl pair --bond-limit 1 --replace-oldest-bond` with another peer's bond in the
    /// file: that bond goes to make room, and the paired event names it
    /// (`bonds_evicted`), as the file then holds Bumble's bond alone.
    @Test func pairAtTheBondLimitNamesTheBondItRemoved() async throws {
        guard let rig = try await Self.rig("pair-evict") else { return }
        defer { rig.end() }
        let file = rig.file
        let peer = try rig.bumble(["peripheral", "1", "1", "display", "123456"])
        defer { RootcanalProcess.kill(peer.process) }
        let other = Bond(address: BluetoothAddress("00:00:00:00:10:01")!, addressType: .public,
                         keys: PairingKeys(peerLTK: LongTermKey(key: Array(repeating: 1, count: 16), authenticated: false, secureConnections: true)))
        try FileBondStore(path: file).save(other)
        let replacing = try await rig.pairTypingBumblesPasskey(["--bond-limit", "1", "--replace-oldest-bond"])
        #expect(replacing.status == 0, "\(replacing.err)")
        let event = try #require(BtctlServeTests.events(replacing.out).first { $0["event"] as? String == "paired" }, "\(replacing.out)")
        let evicted = event["bonds_evicted"] as? [[String: Any]]
        #expect(evicted?.count == 1 && evicted?.first?["address"] as? String == "00:00:00:00:10:01" && event["bonded"] as? Bool == true, "\(event)")
        _ = try JSONSchemaTests.check(replacing.out, against: "pair")
        let left = try FileBondStore(path: file).bonds()
        #expect(left.count == 1 && left.first?.address != other.address, "\(left)")
    }

    /// With --json the prompt is an event a program reads through a pipe and answers on
    /// stdin: it must reach the pipe while btctl waits (stdout is block-buffered there).
    /// Another program removes a bond from the file while the prompt waits: `pair`
    /// says `bonds_changed` then, while the prompt still waits, and before its result.
    @Test func pairPromptsThroughAPipeAndTakesTheAnswerFromStdin() async throws {
        guard let rig = try await Self.rig("prompt") else { return }
        defer { rig.end() }
        let (rc, file) = (rig.rc, rig.file)
        let other = FileBondStore(path: file), stranger = BluetoothAddress("00:00:00:00:10:01")!
        try other.save(Bond(address: stranger, addressType: .public,
                            keys: PairingKeys(peerLTK: LongTermKey(key: Array(repeating: 1, count: 16), authenticated: false, secureConnections: true))))
        let peer = try rig.bumble(["peripheral", "1", "1", "display", "123456"])
        defer { RootcanalProcess.kill(peer.process) }
        let pair = try LiveProcess(BtctlGATTTests.btctl, ["pair", "F1:F2:F3:F4:F5:F6/random", "--io-capability", "keyboard-only", "--mitm",
                                                          "--bonds", file, "--json", "-t", rc.transportSpec])
        #expect(await pair.waitForOutput(within: .seconds(20)) { $0.contains("\"event\":\"enter_passkey\"") }, "\(pair.output)")
        #expect(try other.remove(address: stranger, type: .public))
        // The host looks at the file once a second, and `pair` says what it found while
        // the pairing waits for the passkey (Bumble's SMP timeout is 30 s).
        #expect(await pair.waitForOutput(within: .seconds(10)) { $0.contains("\"event\":\"bonds_changed\"") }, "\(pair.output)")
        pair.send("123456")
        #expect(await pair.exit(timeout: 30) == 0, "\(pair.output)")
        let lines = try JSONSchemaTests.check(pair.output, against: "pair")
        #expect(lines.map { $0["event"] as? String } == ["enter_passkey", "bonds_changed", "paired"], "\(lines)")
        #expect(lines.first?["peer"] as? String == "F1:F2:F3:F4:F5:F6" && lines.last?["method"] as? String == "Passkey Entry", "\(lines)")
    }

    @Test func gattReadPairsOnDemandThenEncryptsFromTheBond() async throws {
        guard let rig = try await Self.rig("gatt") else { return }
        defer { rig.end() }
        let (rc, file) = (rig.rc, rig.file)
        let peer = try rig.bumble(["peripheral", "1", "0", "none", "0"])
        defer { RootcanalProcess.kill(peer.process) }
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
        // The secured and paired events are in gatt read's schema. The pairing the read
        // set off is reported as `btctl pair` reports one (method, bond), before the
        // link's state and the value; the second run pairs not, and says no `paired`.
        let firstLines = try JSONSchemaTests.check(first.out, against: "gatt-read")
        #expect(firstLines.compactMap { $0["event"] as? String } == ["paired", "secured", "value"], "\(firstLines)")
        let paired = try #require(firstLines.first)
        #expect(paired["method"] as? String == "Just Works" && paired["bonded"] as? Bool == true && paired["peer"] as? String == "F1:F2:F3:F4:F5:F6", "\(paired)")
        let secondLines = try JSONSchemaTests.check(second.out, against: "gatt-read")
        #expect(secondLines.compactMap { $0["event"] as? String } == ["secured", "value"], "\(secondLines)")
        let bumble = await peer.events()
        #expect(BumbleSMPTests.named(bumble, "paired").count == 1, "\(bumble)")
        #expect(BumbleSMPTests.named(bumble, "encryption").count == 2, "\(bumble)")
    }

    /// A pairing the peer starts while `gatt subscribe` waits for values (Bumble's
    /// Security Request, 1 s after the link, with no request of ours refused) is shown
    /// as it ends, between the values, and goes into the bond file. Before, it was
    /// never shown: only the security a command's own requests set off was reported.
    @Test func gattSubscribeShowsAPairingThePeerStarts() async throws {
        guard let rig = try await Self.rig("subscribe") else { return }
        defer { rig.end() }
        let peer = try rig.bumble(["peripheral-request", "1", "0", "none", "0"])
        defer { RootcanalProcess.kill(peer.process) }
        let subscribe = try LiveProcess(BtctlGATTTests.btctl, ["gatt", "subscribe", "F1:F2:F3:F4:F5:F6/random", "--uuid", "2A05", "--indicate",
                                                               "--bonds", rig.file, "--json", "-t", rig.rc.transportSpec])
        #expect(await BtctlShellTests.waitFor(subscribe, "paired", within: .seconds(45)), "\(subscribe.output)")
        #expect(await subscribe.stop(signal: SIGINT) == 130, "\(subscribe.output)")
        let lines = try JSONSchemaTests.check(subscribe.output, against: "gatt-subscribe")
        #expect(lines.compactMap { $0["event"] as? String } == ["subscribed", "paired", "summary"], "\(lines)")
        let paired = try #require(lines.first { $0["event"] as? String == "paired" })
        #expect(paired["method"] as? String == "Just Works" && paired["bonded"] as? Bool == true && paired["peer"] as? String == "F1:F2:F3:F4:F5:F6", "\(paired)")
        #expect(try await Self.run(["bonds", "list", "--bonds", rig.file, "--json"]).out.split(separator: "\n").count == 1)
    }

    @Test func gattWriteSignedUsesTheCSRKGivenWhenPairing() async throws {
        guard let rig = try await Self.rig("sign") else { return }
        defer { rig.end() }
        let (rc, file) = (rig.rc, rig.file)
        let peer = try rig.bumble(["peripheral-sign", "1", "0", "none", "0"])
        defer { RootcanalProcess.kill(peer.process) }
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

    /// `btctl gatt serve` as the peripheral a central pairs with: Bumble connects as
    /// central and pairs (Secure Connections with MITM, Bumble displays the passkey);
    /// btctl's `enter_passkey` prompt is answered by a line on its console, the bond goes
    /// to the bond file, and when Bumble connects again and encrypts from its keys btctl
    /// finds the LTK in that file. `bonds remove` beside it then gets a `bonds_changed`
    /// event. Every line matches the gatt-serve schema.
    @Test func gattServeAnswersACentralsPairingOnItsConsoleAndEncryptsFromTheBond() async throws {
        guard let rig = try await Self.rig("serve") else { return }
        defer { rig.end() }
        let (rc, file) = (rig.rc, rig.file)
        let server = try LiveProcess(BtctlGATTTests.btctl, ["gatt", "serve", Interop.root + "/docs/examples/battery.json", "-t", rc.transportSpec, "--json",
                                                            "--io-capability", "keyboard-only", "--bonds", file])
        #expect(await server.waitForOutput { $0.contains("\"event\":\"advertising\"") }, "\(server.output)")
        let advertising = try #require(BtctlServeTests.events(server.output).first { $0["event"] as? String == "advertising" })
        let address = try #require(advertising["address"] as? String, "\(advertising)")

        let peer = try rig.bumble(["central", "1", "1", "display", "123456", address])
        defer { RootcanalProcess.kill(peer.process) }
        #expect(await server.waitForOutput(within: .seconds(45)) { $0.contains("\"event\":\"enter_passkey\"") }, "\(server.output)")
        server.send("123456")
        let done = await server.waitForOutput(within: .seconds(45)) { out in
            Self.named(out, "secured").count == 2 && Self.named(out, "disconnected").count == 2
        }
        #expect(done, "\(server.output)")
        let listed = try await Self.run(["bonds", "list", "--bonds", file, "--json"])
        #expect(listed.out.split(separator: "\n").count == 1, "\(listed.out)")
        // `bonds remove` beside the running server: it sees the file changed at its next
        // look (once a second) and says so.
        let identity = try #require(Self.firstAddress(listed.out), "\(listed.out)")
        let removed = try await Self.run(["bonds", "remove", identity, "--bonds", file])
        #expect(removed.status == 0, "\(removed.err)")
        #expect(await server.waitForOutput(within: .seconds(10)) { !Self.named($0, "bonds_changed").isEmpty }, "\(server.output)")
        server.send("quit")
        #expect(await server.exit(timeout: 20) == 0)
        let bumble = await peer.events()
        #expect(BumbleSMPTests.named(bumble, "secured").compactMap { $0["encrypted"] as? Bool } == [true, true], "\(bumble)")
        #expect(BumbleSMPTests.named(bumble, "error").isEmpty, "\(bumble)")

        let lines = try JSONSchemaTests.check(server.output, against: "gatt-serve")
        let paired = lines.filter { $0["event"] as? String == "paired" }
        #expect(paired.count == 1 && paired.first?["method"] as? String == "Passkey Entry" && paired.first?["level"] as? String == "secure-connections"
                    && paired.first?["bonded"] as? Bool == true, "\(paired)")
        let prompt = try #require(lines.first { $0["event"] as? String == "enter_passkey" })
        #expect(prompt["peer"] as? String != nil)
        // The first link is encrypted by the pairing, the second from the bond file.
        let secured = lines.filter { $0["event"] as? String == "secured" }
        #expect(secured.last?["bonded"] as? Bool == true && secured.allSatisfy { $0["level"] as? String == "secure-connections" }, "\(secured)")
        #expect(!lines.contains { $0["event"] as? String == "error" || $0["event"] as? String == "pairing_failed" }, "\(lines)")
        #expect(lines.filter { $0["event"] as? String == "bonds_changed" }.count == 1, "\(lines)")
        // The summary counts the one pairing (the second link only encrypted).
        let summary = try #require(lines.last, "\(lines)")
        #expect(summary["event"] as? String == "summary" && summary["connections"] as? Int == 2 && summary["pairings"] as? Int == 1, "\(summary)")
    }

    /// `l2cap listen --security authenticated`: Bumble's central asks for the channel
    /// unencrypted and is refused "insufficient authentication"; it pairs (Passkey
    /// Entry: Bumble displays, btctl types --passkey, its standard input being the
    /// channel's), asks again and gets the channel. btctl reports the pairing and the
    /// encryption, every line matching the l2cap schema.
    @Test func l2capListenRefusesAnUnpairedCentralThenOpensOnceItPairs() async throws {
        guard let rig = try await Self.rig("l2cap") else { return }
        defer { rig.end() }
        let (rc, file) = (rig.rc, rig.file)
        let listener = try LiveProcess(BtctlGATTTests.btctl, ["l2cap", "listen", "0x85", "--security", "authenticated", "--json", "--wait", "1", "--duration", "60",
                                                              "--io-capability", "keyboard-only", "--passkey", "123456", "--bonds", file, "-t", rc.transportSpec])
        #expect(await listener.waitForOutput { $0.contains("\"event\":\"listening\"") }, "\(listener.output)")
        let listening = try #require(BtctlServeTests.events(listener.output).first { $0["event"] as? String == "listening" })
        let address = try #require(listening["address"] as? String, "\(listening)")
        let peer = try rig.bumble(["central-channel", "1", "1", "display", "123456", address, "1"])
        defer { RootcanalProcess.kill(peer.process) }
        let bumble = await peer.events()
        listener.closeInput()
        #expect(await listener.exit(timeout: 30) == 0, "\(listener.output)")
        let refused = BumbleSMPTests.named(bumble, "refused")
        #expect(refused.count == 1 && refused.first?["name"] as? String == "CONNECTION_REFUSED_INSUFFICIENT_AUTHENTICATION", "\(bumble)")
        #expect(BumbleSMPTests.named(bumble, "channel").first?["when"] as? String == "encrypted", "\(bumble)")
        #expect(BumbleSMPTests.named(bumble, "error").isEmpty, "\(bumble)")
        let lines = try JSONSchemaTests.check(listener.output, against: "l2cap")
        let paired = lines.filter { $0["event"] as? String == "paired" }
        #expect(paired.count == 1 && paired.first?["method"] as? String == "Passkey Entry" && paired.first?["level"] as? String == "secure-connections", "\(lines)")
        #expect(lines.contains { $0["event"] as? String == "secured" } && lines.contains { $0["event"] as? String == "open" }, "\(lines)")
    }

    /// `l2cap connect` to Bumble's peripheral, whose SPSM 0x0085 needs an encrypted
    /// link (bumble_smp_peer.py peripheral-channel), three times with one bond file:
    /// refused "insufficient authentication", btctl pairs (Passkey Entry: Bumble
    /// displays, btctl types --passkey, its standard input being the channel's) and
    /// asks again; refused "insufficient encryption", btctl encrypts from the bond, no
    /// pairing; with `--security authenticated` btctl encrypts before it asks and is
    /// not refused. Each time Bumble's echo brings the bytes back and btctl reports
    /// the link's security, every line matching the l2cap schema. Last, with no bond
    /// and no way to type a passkey (no-input-no-output), `--security authenticated`
    /// cannot be met: btctl exits with status 1 and never asks for the channel.
    @Test func l2capConnectPairsWhenRefusedThenEncryptsFromTheBond() async throws {
        guard let rig = try await Self.rig("l2cap-connect") else { return }
        defer { rig.end() }
        let peer = try rig.bumble(["peripheral-channel", "1", "1", "display", "123456"])
        defer { RootcanalProcess.kill(peer.process) }
        let input = (0..<300).map { UInt8(($0 * 5) & 0xFF) }
        for extra in [[], [], ["--security", "authenticated"]] {
            let run = try await Self.run(["l2cap", "connect", "F1:F2:F3:F4:F5:F6/random", "--spsm", "0x85", "--io-capability", "keyboard-only",
                                          "--passkey", "123456", "--bonds", rig.file, "--json", "--wait", "1", "-t", rig.rc.transportSpec] + extra, input: input)
            #expect(run.status == 0, "\(extra): \(run.err)")
            let lines = try JSONSchemaTests.check(run.out, against: "l2cap")
            let secured = lines.filter { $0["event"] as? String == "secured" }
            #expect(secured.count == 1 && secured.first?["level"] as? String == "secure-connections" && secured.first?["bonded"] as? Bool == true,
                    "\(extra): \(lines)")
            let echoed = lines.filter { $0["event"] as? String == "sdu" }.compactMap { $0["value"] as? String }.joined()
            #expect(echoed == input.map { String(format: "%02x", $0) }.joined(), "\(extra): \(lines)")
        }
        let unmet = try await Self.run(["l2cap", "connect", "F1:F2:F3:F4:F5:F6/random", "--spsm", "0x85", "--io-capability", "no-input-no-output",
                                        "--security", "authenticated", "--bonds", rig.file + ".none", "--json", "-t", rig.rc.transportSpec], input: input)
        defer { try? FileManager.default.removeItem(atPath: rig.file + ".none") }
        #expect(unmet.status == 1 && unmet.err.contains("cannot secure the link to authenticated"), "\(unmet)")
        #expect(!unmet.out.contains("\"open\""), "\(unmet.out)")
        // Bumble's side, link by link: what it refused, whether it paired, and that
        // each channel opened on an encrypted link.
        var links: [[[String: Any]]] = []
        for e in await peer.events() {
            if e["event"] as? String == "connected" { links.append([]) }
            if !links.isEmpty { links[links.count - 1].append(e) }
        }
        #expect(links.count == 4, "\(links)")
        let refused = links.map { BumbleSMPTests.named($0, "refusing").compactMap { $0["result"] as? Int } }
        #expect(refused == [[0x05], [0x08], [], []], "\(links)")
        let paired = links.map { BumbleSMPTests.named($0, "paired").count }
        #expect(paired == [1, 0, 0, 0], "\(links)")
        let channels = links.map { BumbleSMPTests.named($0, "channel").map { $0["encrypted"] as? Bool } }
        #expect(channels == [[true], [true], [true], []], "\(links)")
    }

    /// A prompt shown while a console command runs is answered by the next line:
    /// Bumble subscribes to indications, and when btctl's `indicate` reaches it, pairs
    /// before it confirms (bumble_smp_peer.py central-indicate-pair), so the command
    /// waits on the numeric comparison btctl's user must confirm. The console reads
    /// on while the command runs: the `y` typed answers the prompt, the pairing
    /// completes, Bumble confirms, and btctl reports the indication confirmed.
    @Test func gattServeAnswersAPromptWhileAnIndicationWaitsOnIt() async throws {
        guard let rig = try await Self.rig("serve-indicate") else { return }
        defer { rig.end() }
        let server = try LiveProcess(BtctlGATTTests.btctl, ["gatt", "serve", Interop.root + "/docs/examples/battery.json", "-t", rig.rc.transportSpec, "--json",
                                                            "--io-capability", "display-yes-no", "--bonds", rig.file])
        #expect(await server.waitForOutput { $0.contains("\"event\":\"advertising\"") }, "\(server.output)")
        let advertising = try #require(BtctlServeTests.events(server.output).first { $0["event"] as? String == "advertising" })
        let peer = try rig.bumble(["central-indicate-pair", "1", "1", "display-yes-no", "0", try #require(advertising["address"] as? String)])
        defer { RootcanalProcess.kill(peer.process) }
        let subscribed = await server.waitForOutput(within: .seconds(45)) { out in
            Self.named(out, "subscription").contains { $0["indicate"] as? Bool == true }
        }
        #expect(subscribed, "\(server.output)")
        server.send("indicate 6E400003-B5A3-F393-E0A9-E50E24DCCA9E")
        #expect(await server.waitForOutput(within: .seconds(20)) { !Self.named($0, "confirm_number").isEmpty }, "\(server.output)")
        server.send("y")
        #expect(await server.waitForOutput(within: .seconds(20)) { !Self.named($0, "indicated").isEmpty }, "\(server.output)")
        server.send("quit")
        #expect(await server.exit(timeout: 20) == 0, "\(server.output)")
        let lines = try JSONSchemaTests.check(server.output, against: "gatt-serve")
        let indicated = try #require(lines.first { $0["event"] as? String == "indicated" }, "\(lines)")
        let link = try #require(lines.first { $0["event"] as? String == "connected" }?["handle"] as? Int, "\(lines)")
        #expect(indicated["confirmed"] as? [Int] == [link], "\(indicated)")
        let paired = lines.filter { $0["event"] as? String == "paired" }
        #expect(paired.count == 1 && paired.first?["method"] as? String == "Numeric Comparison", "\(lines)")
        #expect(!lines.contains { $0["event"] as? String == "error" }, "\(lines)")
        let bumble = await peer.events()
        #expect(bumble.compactMap { $0["event"] as? String }.filter { ["indication", "secured", "confirmed"].contains($0) } == ["indication", "secured", "confirmed"],
                "\(bumble)")
        #expect(BumbleSMPTests.named(bumble, "secured").first?["encrypted"] as? Bool == true, "\(bumble)")
    }

    /// With its standard input at an end, `gatt serve` has nobody to answer a prompt:
    /// a numeric comparison is refused at once (Pairing Failed, Numeric Comparison
    /// Failed), not left for the SMP timeout, and serving goes on.
    @Test func gattServeRefusesAPromptWhenItsInputHasEnded() async throws {
        guard let rig = try await Self.rig("serve-closed") else { return }
        defer { rig.end() }
        let server = try LiveProcess(BtctlGATTTests.btctl, ["gatt", "serve", Interop.root + "/docs/examples/battery.json", "-t", rig.rc.transportSpec, "--json",
                                                            "--io-capability", "display-yes-no", "--bonds", rig.file])
        server.closeInput()
        #expect(await server.waitForOutput { $0.contains("\"event\":\"advertising\"") }, "\(server.output)")
        let advertising = try #require(BtctlServeTests.events(server.output).first { $0["event"] as? String == "advertising" })
        let peer = try rig.bumble(["central", "1", "1", "display-yes-no", "0", try #require(advertising["address"] as? String)])
        defer { RootcanalProcess.kill(peer.process) }
        #expect(await server.waitForOutput(within: .seconds(20)) { !Self.named($0, "pairing_failed").isEmpty }, "\(server.output)")
        let lines = try JSONSchemaTests.check(server.output, against: "gatt-serve")
        #expect(lines.contains { $0["event"] as? String == "confirm_number" }, "\(lines)")
        let failed = try #require(lines.first { $0["event"] as? String == "pairing_failed" })
        #expect(failed["reason"] as? String == "pairing failed here: numeric comparison failed", "\(failed)")
        #expect(!lines.contains { $0["event"] as? String == "paired" }, "\(lines)")
        #expect(server.process.isRunning)
    }

    static func named(_ out: String, _ event: String) -> [[String: Any]] {
        BtctlServeTests.events(out).filter { $0["event"] as? String == event }
    }
}
